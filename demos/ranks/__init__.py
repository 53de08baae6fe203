"""Launching and watching ranks on one host over torch.distributed (docs/distributed.md).

``launcher`` starts and watches the ranks and reports failures; ``rank`` is one rank's view
(``RankInfo``, process groups, the torchrun entry); ``faults`` injects failures for tests.
Nothing here knows the model.
"""

