"""How far the virtual backend's predictions can be trusted (docs/fidelity.md).

``calibration`` measures this machine and fits a profile (with ``plan`` for what to measure,
``model_ops`` for the model's ops in real steps, ``host``, ``steps`` and ``calls`` for the host
micro-benchmarks, the figures taken from whole steps, and each kernel's torch calls);
``validation`` runs a grid real against virtual, and ``comparison`` compares and reports it
(``h200``: the toy's fitted h200 profile against the H200 measurements); ``checks`` is each check of
``python -m demos.validate`` as one call returning a typed result (``to_dict()``, ``text()``).
"""
