"""The toy MoE study: a small MoE transformer written against ``dbo`` and ``workspace``, and one overlap
experiment of it (docs/overlap.md).

The model: its shapes (``shapes``) and the model (``model``, with a layer's attention and router in
``attention``), its kernels (``kernels``), what each kernel is (``ops``) and costs (``cost_model``),
its per-ubatch state (``state``, ``routing``), its transports (the ``transport`` interface; ``comm``:
the modelled link; ``dist_comm``: torch.distributed, with its low-latency path in ``dist_ll`` and its
buffers in ``dist_buffers``; ``ll_layout``: the low-latency layout), the config of one overlap run
(``config``, ``footprint``) and its fitted H200 figures (``profiles``, from ``h200_profile.json``).

The experiment: ``run.run(config)`` returns typed results (``results``) and writes nothing;
``runner`` holds one process's model, workspace and orchestrators; ``report``, ``report_lines`` and
``plot`` render a result, and ``experiment.run_overlap`` runs one and writes the files its config names.

Importing the package registers the ``h200`` profile (``profiles``).
"""

from demos.toy import profiles as _profiles  # noqa: F401  (registers "h200" in dbo.costs)
