"""The generic transformer: every architecture of the model zoo on a cluster, run by the real DBO protocol.

``workload`` (``Workload``: model, cluster, phase, tokens, context, imbalance), ``costs`` (what each kernel of
a layer costs, from first principles), ``rooflines`` (the kernel-time curves fitted per GPU family),
``profile`` (a device profile from a GPU's datasheet and those curves), ``memory`` (what a GPU holds),
``kernels`` and ``model`` (``ZooModel``: meta at full size, real math shrunk), ``run`` (``ZooRun``: one
step timed with and without DBO, eager or graph). docs/models.md and docs/clusters.md describe them.
"""
