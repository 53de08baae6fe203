"""The toy MoE model as a library: its shapes and the model (``model``), its kernels (``kernels``),
what each kernel is (``ops``) and costs (``cost_model``), its per-ubatch state (``state``,
``routing``), its transports (the ``transport`` interface; ``comm``: the modelled link;
``dist_comm``: torch.distributed; ``ll_layout``: the low-latency layout) and the config of one
overlap run (``config``).
"""
