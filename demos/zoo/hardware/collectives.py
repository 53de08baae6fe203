"""The tensor-parallel collectives of attention TP, within one NVLink domain: all-reduce, reduce-scatter
and all-gather of one tensor over a group of ``n`` GPUs (docs/clusters.md, "Attention tensor parallelism").

Time model: NCCL's own cost model of a ring (NVIDIA/nccl ``src/graph/tuning.cc``, ``ncclTopoTuneModel``):
a ring collective takes ``steps`` link steps, ``2 (n-1)`` for an all-reduce and ``n-1`` for a
reduce-scatter or an all-gather, and each GPU sends ``steps / n`` times the tensor's bytes (``2 (n-1) / n``
for an all-reduce). Per protocol,

    seconds = base + steps x per_step + steps / n x bytes / (share x bus)

with NCCL's default latencies for a ring on NVLink (``baseLatencies``, ``hwLatencies``: LL 6.6 us +
0.6 us per step, LL128 14.0 + 1.9, Simple 8.4 + 3.4) and its bandwidth share of each protocol (LL
half the bus bandwidth, LL128 0.92, Simple all of it); NCCL picks the fastest protocol for the size,
and so does the model. ``bus`` is the GPU's NVLink bandwidth per direction times the achieved share
DeepEP's kernels reach (``DEEPEP_H800.nvlink_efficiency``, 0.66: a guess carried over from DeepEP's fit;
NCCL's ring is not in that fit). Not modelled: NCCL's per-channel caps (LL's 141 GB/s on Hopper is
within 5% of half of H100's bus here), NVLS (NVLink SHARP) and tree algorithms. The engines'
own all-reduce kernels (one-shot / two-shot over shared buffers), faster than a ring for small tensors,
are the family's fitted line beside this model (``CUSTOM_AR_MAX_BYTES``).
"""

from __future__ import annotations

import math

from demos.zoo.hardware.alltoall import DEEPEP_H800
from demos.zoo.hardware.gpus import GpuSpec, get_gpu

__all__ = ["COLLECTIVES", "CUSTOM_AR_MAX_BYTES", "NCCL_RING_NVLINK", "ring_steps", "tp_collective"]

CUSTOM_AR_MAX_BYTES = 8 * 2**20
"""The largest tensor the engines all-reduce with their own kernels rather than NCCL's: vLLM's custom
all-reduce buffer (8 MiB by default), SGLang's the same; decode's tensors (up to 256 tokens of a 7,168-wide
BF16 row: 3.5 MiB) are all below it. Their time is the GPU family's fitted line
(``demos.zoo.rooflines.FamilyFit.custom_all_reduce``; ``KernelTimes.all_reduce``)."""

COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather")

NCCL_RING_NVLINK = {
    "LL": (6.6e-6, 0.6e-6, 0.5),
    "LL128": (14.0e-6, 1.9e-6, 0.92),
    "Simple": (8.4e-6, 3.4e-6, 1.0),
}
"""Per NCCL protocol on a ring over NVLink: (base seconds, seconds per step, share of the bus bandwidth),
NCCL's defaults (module docstring)."""


def ring_steps(kind: str, n: int) -> int:
    """Link steps of a ring ``kind`` over ``n`` GPUs: ``2 (n-1)`` for an all-reduce, else ``n-1``."""
    if kind not in COLLECTIVES:
        raise ValueError(f"kind must be one of {', '.join(COLLECTIVES)}, got {kind!r}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an int >= 1, got {n!r}")
    return 2 * (n - 1) if kind == "all_reduce" else n - 1


def tp_collective(
    gpu: str | GpuSpec, kind: str, nbytes: float, n: int, *, efficiency: float = DEEPEP_H800.nvlink_efficiency
) -> float:
    """Seconds of a ring ``kind`` of a tensor of ``nbytes`` (the whole tensor: the all-reduce's input, the
    reduce-scatter's input, the all-gather's output) over ``n`` GPUs of one NVLink domain of ``gpu``
    (module docstring); 0 for one GPU."""
    steps = ring_steps(kind, n)
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, float)) or not math.isfinite(nbytes) or nbytes < 0:
        raise ValueError(f"nbytes must be a finite number >= 0, got {nbytes!r}")
    if not 0 < efficiency <= 1:
        raise ValueError(f"efficiency must be in (0, 1], got {efficiency!r}")
    if steps == 0:
        return 0.0
    bus = efficiency * get_gpu(gpu).scaleup_bandwidth(n - 1)  # a mesh's rings use the links to its n - 1 peers
    sent = steps / n * nbytes
    return min(base + steps * hop + sent / (share * bus) for base, hop, share in NCCL_RING_NVLINK.values())
