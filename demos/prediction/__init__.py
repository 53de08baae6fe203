"""What ``python -m demos.predict`` computes: ``sweep`` (the points, run on virtual), ``answer`` (the
crossover, the best settings, the vLLM and SGLang flags and their reasons), ``outputs`` (the records,
text, CSV and plot), ``trace`` (one point's Perfetto trace) and ``toy`` (the toy swept with a calibrated
profile). docs/predict.md describes them.
"""
