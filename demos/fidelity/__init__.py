"""How far the virtual backend's predictions can be trusted (docs/fidelity.md).

``calibration`` measures this machine and fits a profile (with ``host``, ``steps`` and ``calls``
for the host micro-benchmarks, the figures taken from whole steps, and each kernel's torch
calls); ``validation`` runs a grid real against virtual and compares.
"""
