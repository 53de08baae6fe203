"""Launching and watching ranks on one host over torch.distributed (docs/distributed.md).

``launcher`` starts and watches the ranks and raises the first failure; ``errors`` is what a failing
rank reports and how the launcher picks the failure to name (``DistributedError``); ``rank`` is one
rank's view (``RankInfo``, process groups, the torchrun entry); ``faults`` injects failures for tests.
Nothing here knows the model.
"""
