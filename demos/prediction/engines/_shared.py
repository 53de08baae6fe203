"""What both engines' lines share: the placeholders the user fills in (``<MODEL>``, ``<HEAD_IP>``,
``<PORT>``, ``<START_RANK>``, ``<NODE_RANK>``), a count of GPUs in words, and the ``#`` line for an EP
that neither engine can express."""

from __future__ import annotations

MODEL = "<MODEL>"
HEAD_IP = "<HEAD_IP>"
PORT = "<PORT>"
START_RANK = "<START_RANK>"
NODE_RANK = "<NODE_RANK>"


def gpus(n: int) -> str:
    return f"{n} GPU" + ("s" if n != 1 else "")


def ep_below_world(engine: str, why: str, world: int, ep: int) -> str:
    """The ``#`` line for an EP smaller than the GPUs it serves, which ``engine`` cannot express: ``why``,
    and what the prediction is instead."""
    return (
        f"# not expressible in {engine}: {why}, not the predicted {ep}; the prediction is {world // ep} "
        f"separate deployments of {ep} GPUs each, behind your own load balancer"
    )


HW_QUEUES_ENV = "GPU_MAX_HW_QUEUES=5"
"""HIP maps a process's streams onto ``GPU_MAX_HW_QUEUES`` hardware queues (4 by default; ``GpuSpec.hw_queues``),
kernels of one queue in order: two micro-batches' compute and comm streams beside the default stream are five.
ATOM's benchmark configs set 5 for its two-batch overlap; the AMD lines with an overlap carry it."""


def hw_queues_note(engine: str) -> str:
    return (
        f"{engine}: {HW_QUEUES_ENV}: HIP maps streams onto 4 hardware queues by default and runs one queue's kernels "
        "in order, so the two micro-batches' compute and comm streams and the default stream (five) would share "
        "them; ATOM's benchmark configs set 5 for its two-batch overlap (a setting carried over, not measured here)"
    )


def efa_proxy_note(engine: str) -> str:
    """What ``engine``'s DeepEP backend needs on EFA through CPU proxies (``--network efa``)."""
    return (
        f"{engine} on EFA: DeepEP's kernels need a build that reaches EFA through CPU proxies (UCCL-EP, a drop-in "
        "for DeepEP's API, whose tables the prediction was fitted to; or NVSHMEM's host proxy)"
    )
