"""The toy MoE model as a library: its shapes (``shapes``) and the model (``model``, with a layer's
attention and router in ``attention``), its kernels (``kernels``), what each kernel is (``ops``)
and costs (``cost_model``), its per-ubatch state (``state``, ``routing``), its transports (the
``transport`` interface; ``comm``: the modelled link; ``dist_comm``: torch.distributed, with its
low-latency path in ``dist_ll`` and its buffers in ``dist_buffers``; ``ll_layout``: the
low-latency layout) and the config of one overlap run (``config``).
"""
