"""What overlapping costs: the mechanisms that make an overlapped step slower than its kernels alone.

DBO hides one ubatch's all-to-all behind the other's compute, but the kernels do not stay as fast as
they run alone. Each mechanism below is charged by the cost model from a measured component or a
stated mechanism, never fitted to a whole-step result (docs/predict.md, "What overlapping costs", has
the sources and an ablation). ``Mechanisms`` holds one factor per mechanism (1: as modelled, 0: off),
which ``--what-if`` sets:

* ``ll_sm``: DeepEP's low-latency kernels are not free of SMs. Called with a receive hook (as DBO and
  two-batch overlap call them), the send half runs on the compute stream until every message is handed
  to its link, and the receive half copies the arrived tokens out; only the flight between them holds no
  SM. The SM-held time of one dispatch or combine is the time the same kernel takes on one node, where
  every message moves by the SMs' own NVLink stores (``FamilyFit.ll_sm``, fitted to the measured
  single-node tables): an estimate that a multi-node send, which hands most messages to the NIC, spends
  as long on the SMs per message (DeepEP's own hooked test prints send halves of tens of microseconds
  for 128 tokens). The send half is what the SM-held time leaves after the receive half the model
  already charges; the flight is the kernel's modelled time less the send half.
* ``tile``: a grouped GEMM computes whole tiles. The masked layout the low-latency kernels feed
  (DeepGEMM's) computes each expert's rows in blocks of ``BLOCK_M`` rows, so a split batch with few rows
  per expert computes more padding (the contiguous layout of the normal kernels already pads to 128).
* ``contention``: an all-to-all in flight moves bytes through HBM (the NIC or NVLink reading the send
  buffer and writing the receive buffer), which compute running beside it does not get: its share of
  HBM, ``2 x link rate / HBM bandwidth``, is taken from the compute that overlaps it. The link rate is
  the one the all-to-all model reaches (``DEEPEP_H800``'s efficiency times NVLink's bandwidth when the
  EP group is one NVLink domain, else the NIC's). An upper bound twice over: the link busy for the
  whole kernel, and every overlapped kernel as starved as a memory-bound one.

* ``split``: how the batch is cut. Decode has one token per request, so both ubatches are equal; vLLM
  cuts a prefill batch at its token midpoint (a request may straddle the cut) and SGLang at a request
  boundary unless a ubatch would hold under 48% of the tokens (``--tbo-token-distribution-threshold``,
  0.48), so the default is balanced (0). A request-boundary split can leave one ubatch larger (AMD's
  DeepSeek-V4 post: 9,381 against 7,003 tokens, 0.34 larger): ``split=0.34`` makes the first ubatch
  ``1 + split`` times each other one (``ubatch_sizes``).

``overlap_share(cluster, sm_share, contention)`` is the share of the compute engine a comm kernel takes
while it runs (the SMs a normal kernel holds, plus the HBM its traffic takes);
``masked_rows(rows_per_expert, family, factor)`` the rows a masked grouped GEMM computes per expert;
``ll_node_seconds`` one low-latency kernel on one node, ``ll_send_seconds`` its SM-held send half;
``step_profile(workload)`` the GPU's device profile with that share (what every step of the zoo runs on).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

from dbo.costs import DeviceProfile, HostCosts
from dbo.split import split_tokens
from demos.errors import ConfigError, field_ref
from demos.zoo.hardware import ClusterSpec, get_gpu, ll_bytes
from demos.zoo.hardware.alltoall import comm_params
from demos.zoo.profile import EAGER_HOST, gpu_profile
from demos.zoo.rooflines import gpu_fit

__all__ = [
    "BLOCK_M",
    "LOCAL_TILE",
    "local_rows",
    "OFF_BY_DEFAULT",
    "ubatch_sizes",
    "MECHANISMS",
    "Mechanisms",
    "ll_node_seconds",
    "ll_send_seconds",
    "masked_rows",
    "overlap_share",
    "step_profile",
]

MECHANISMS = {
    "ll_sm": "the SM-held send and receive halves of DeepEP's low-latency kernels",
    "tile": "the masked grouped GEMM's row block (rows per expert computed in whole blocks)",
    "contention": "the HBM an all-to-all in flight takes from the compute beside it",
    "split": "how much larger the first ubatch is than the others (default 0: balanced, as vLLM and SGLang split)",
}
"""Each overlap mechanism's ``--what-if`` knob and what it scales (0 turns it off; ``split`` is off by
default, ``OFF_BY_DEFAULT``)."""

OFF_BY_DEFAULT = ("split",)
"""The mechanisms whose default is 0 (an ablation turns off only the others)."""

BLOCK_M = {"hopper": 64, "blackwell": 128, "cdna3": 32, "cdna4": 32}
"""Rows per block of the masked grouped GEMM per GPU family: Hopper's WGMMA kernels in DeepGEMM's masked
layout use block_m 64 (SGLang and Ant Group, DeepSeek-R1 on H20, LMSYS blog 2025-09-26); Blackwell's
128 is a guess from its 128-row UMMA tile (no published figure found). AMD's (aiter's fused MoE, which its
tuned tables run at ``block_m`` 16 to 128, the smaller at few tokens) 32: **a guess**."""


@dataclass(frozen=True)
class Mechanisms:
    """One factor per overlap mechanism (``MECHANISMS``): 1 as modelled, 0 off, other values scale it."""

    ll_sm: float = 1.0
    tile: float = 1.0
    contention: float = 1.0
    split: float = 0.0

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ConfigError(f"{field_ref('what_if')} {f.name}={v!r}: the factor must be a number >= 0")


LOCAL_TILE = (8, 128)
"""Smallest and largest row tile of a grouped GEMM that runs without DeepEP's masked layout (no all-to-all:
EP 1, or attention TP = EP): each expert's rows are padded to the next power of two within these bounds.
FlashInfer's TensorRT-LLM-generated fused MoE (vLLM's and TRT-LLM's Blackwell path) sizes its tile as the
next power of two of the rows per expert, clamped to 8-64 (``tile_tokens_dim``), and vLLM's Triton fused
MoE pads each expert's rows to its ``BLOCK_SIZE_M`` (16 for up to 32 tokens, rising to 128 past 512:
``get_default_config``, vLLM 0.34.0); one rule for both, with 128 where rows are plentiful (the padding is
then a small share)."""


def local_rows(rows_per_expert: float, factor: float = 1.0) -> float:
    """Rows a grouped GEMM without the masked layout computes for an expert that receives
    ``rows_per_expert`` rows: the next power of two within ``LOCAL_TILE``, capped at whole ``LOCAL_TILE[1]``
    blocks beyond (``factor`` 0: no padding, as ``masked_rows``)."""
    if factor <= 0 or rows_per_expert <= 0:
        return rows_per_expert
    lo, hi = LOCAL_TILE
    if rows_per_expert >= hi:
        return math.ceil(rows_per_expert / hi) * hi
    tile = max(lo, 1 << math.ceil(math.log2(rows_per_expert)))
    return float(tile)


def masked_rows(rows_per_expert: float, family: str, factor: float = 1.0) -> float:
    """Rows a masked grouped GEMM computes for an expert that receives ``rows_per_expert`` rows: whole
    blocks of ``BLOCK_M[family] x factor`` rows (``factor`` 0: no padding)."""
    block = BLOCK_M[family] * factor
    if block <= 1 or rows_per_expert <= 0:
        return rows_per_expert
    return math.ceil(rows_per_expert / block) * block


def ll_node_seconds(
    gpu: Any, kernel: str, tokens: float, hidden: int, top_k: int, peers: int, *, fp8: bool = True, fit: Any = None
) -> float:
    """One low-latency ``kernel`` ("dispatch" or "combine") of ``tokens`` tokens per rank on one node of
    ``gpu`` (a ``GpuSpec``), whole (its send and receive halves, an FP8 dispatch when ``fp8``), with
    ``peers`` other ranks: the line fitted to the measured single-node tables (``FamilyFit.ll_sm`` of
    ``fit``, default the GPU's, ``gpu_fit``), the per-byte term scaled by the fitted GPUs' NVLink bandwidth over
    ``gpu``'s (H800's 200 GB/s per direction takes 2.25 times Hopper's fitted 450)."""
    fit = fit or gpu_fit(gpu)
    line = fit.ll_sm[kernel]
    nbytes = ll_bytes(kernel, tokens, hidden, top_k, fp8) * get_gpu(fit.fitted_on[0]).nvlink_bandwidth
    return line.seconds(nbytes / gpu.scaleup_bandwidth(max(1, peers)), peers)


def ll_send_seconds(
    gpu: Any,
    kernel: str,
    tokens: float,
    hidden: int,
    top_k: int,
    peers: int,
    recv_s: float,
    factor: float = 1.0,
    *,
    fp8: bool = True,
) -> float:
    """The SM-held send half of one low-latency ``kernel`` ("dispatch" or "combine") of ``tokens``
    tokens on ``gpu`` (an FP8 dispatch when ``fp8``): the same kernel on one node of ``peers + 1`` ranks
    (``ll_node_seconds``), less the receive half ``recv_s`` the model charges already, times ``factor``;
    never negative."""
    return max(0.0, ll_node_seconds(gpu, kernel, tokens, hidden, top_k, peers, fp8=fp8) - recv_s) * factor


def overlap_share(cluster: ClusterSpec, sm_share: float, contention: float = 1.0) -> float:
    """The share of the compute engine a comm kernel takes while it runs: the SMs it holds
    (``sm_share``), plus, of the rest, the HBM its link traffic takes (module docstring) times
    ``contention``. Below 1."""
    g, p = cluster.gpu, comm_params(cluster)
    one_domain = cluster.ep <= cluster.nvlink_domain
    link = cluster.scaleup_bandwidth * p.nvlink_efficiency if one_domain else g.nic_bandwidth * p.rdma_efficiency
    hbm = min(1.0, 2.0 * link / g.hbm_bandwidth) * contention
    return min(0.95, sm_share + (1.0 - sm_share) * hbm)


def step_profile(w: Any, *, gemm_scale: float = 1.0, host: HostCosts = EAGER_HOST) -> DeviceProfile:
    """The device profile a step of workload ``w`` runs on: ``demos.zoo.profile.gpu_profile`` of its GPU
    and comm SMs, with the comm kernels' share of compute from ``overlap_share``."""
    p = gpu_profile(w.gpu, comm_sms=w.comm_sms, gemm_scale=gemm_scale, host=host)
    return replace(p, comm_sm_share=overlap_share(w.cluster, p.comm_sm_share, w.mechanisms.contention))


def ubatch_sizes(tokens: int, ubatches: int, split: float = 0.0) -> list[int]:
    """Tokens per ubatch: the first ``1 + split`` times each other one, the rest cut as ``dbo.split_tokens``
    cuts (``split`` 0: all of them so, the remainder in the last), every ubatch at least one."""
    if ubatches <= 1 or split <= 0:
        return [len(r) for r in split_tokens(tokens, ubatches)]
    first = round(tokens * (1.0 + split) / (ubatches + split))
    first = min(max(first, 1), tokens - (ubatches - 1))
    return [first, *(len(r) for r in split_tokens(tokens - first, ubatches - 1))]
