"""The predictor: does DBO pay for a real MoE model on a GPU cluster, from which tokens per GPU, and
what to pass to vLLM and SGLang (docs/predict.md; from Python: docs/python.md, "Predicting from
Python").

``predict(model, ...)`` is the typed entry point ``python -m demos.predict`` calls: its keyword
arguments are the command's flags, it returns a ``Prediction`` (``points``: ``SweptPoint`` records,
``setup``: a ``ClusterSetup`` for a real model or a ``ToySetup`` for the toy, ``crossovers``: a
``Crossover`` per mode, ``recommendation``: a ``Recommendation``, ``best``: a ``Setting`` per mode,
``to_dict()``, ``text()``), and a bad argument raises ``ConfigError``. ``Deployment`` is what the
engine lines are written for (``engines``).

Its parts: ``api`` (``predict`` and the checks of its arguments), ``result`` (``Prediction`` and its
records), ``sweep`` (the points, run on virtual), ``answer`` (the crossover, the best settings, the
vLLM and SGLang flags and their reasons), ``engines`` (the serve lines of a ``Deployment``),
``outputs`` (the records, text, CSV and plot), ``trace``
(one point's Perfetto trace) and ``toy`` (the toy swept with a calibrated profile).
"""

from demos.errors import ConfigError
from demos.prediction.answer import Crossover, Recommendation
from demos.prediction.api import predict
from demos.prediction.engines import Deployment
from demos.prediction.result import ClusterSetup, Prediction, Setting, SweptPoint, ToySetup

__all__ = [
    "ClusterSetup",
    "ConfigError",
    "Crossover",
    "Deployment",
    "Prediction",
    "Recommendation",
    "Setting",
    "SweptPoint",
    "ToySetup",
    "predict",
]
