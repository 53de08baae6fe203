"""The toy MoE demo as a library: config (``config``), the model (``model``), its transports
(``comm``, ``dist_comm``), runs on several ranks (``distributed``), one run returning typed
results (``run.run`` -> ``results.OverlapResult``) and the report (``report``).
"""
