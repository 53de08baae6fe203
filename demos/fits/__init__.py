"""The fitting: every figure the simulator reads from a data file, fitted here to measured tables.

The simulator (``demos.zoo``) reads its kernel-time curves from ``demos/zoo/rooflines.json`` and never
imports this package (tests/commands/test_layers.py holds that). This package writes that file and checks
it, with the extra ``measured`` (aiconfigurator-core's tables):

* ``rooflines``: the GEMM, MLA, routed-experts and DeepEP single-node curves of a GPU family, fitted to
  measured rows whose work is counted by the predictor's own formulas (``demos.zoo.work``);
* ``module``: the MLA decode module's fixed time, fitted on top of those curves to whole measured modules;
* ``compare``: two fits compared on a fixed grid of shapes within a stated tolerance (``FIT_TOLERANCE``);
* ``h800``: the legacy H800 fit to DeepGEMM's and FlashMLA's published figures (``h800_published.json``);
* ``ablation``: what each part of the GEMM curve's form buys.

The command is ``python -m demos.fits write|check|ablate`` (``demos.fits._command``; docs/kernels.md).
The checks of the fitted curves against the measured rows are ``demos.fidelity.kernels`` (``python -m
demos.validate``), which may import this package (its cross-validation refits); this package imports no
check.
"""
