"""The EP all-to-all as DeepEP's kernels run it: dispatch (tokens to their experts) and combine
(expert outputs back to their tokens), per rank, per MoE layer, on a ``ClusterSpec``.

Two kernel families (deepseek-ai/DeepEP):

* ``deepep_low_latency`` (decode): one message per routed copy (token x expert), written straight into
  the destination rank's fixed-size receive buffer (``ll_buffer_bytes``): over NVLink to ranks of
  the same NVLink domain, over RDMA to other domains (``nvlink=False``: everything off the rank
  over RDMA, as before DeepEP's 2025-06-05 change). Dispatch sends FP8 (hidden bytes + one float32
  scale per 128 channels + a 16-byte header), combine sends BF16. It holds 0 SMs while in flight
  (the receive hook runs later).
* ``deepep_normal`` (prefill, high throughput): each token goes once to each destination rank (not once per
  expert); across domains once per destination domain over RDMA, to the rank with the same local
  index, which forwards it over NVLink to the ranks of its domain that need it. It takes
  ``comm_sms`` SMs from compute while it runs. Its forwarding stage handles each token once per
  destination domain, its own domain's included (a token bound for the rank's own domain lands in the
  same receive buffers the network fills), at most at ``pair_bandwidth`` bytes a second where that is set.

Time model, both families: ``latency + max(rdma_bytes / (rdma_efficiency x nic_bandwidth),
nvlink_bytes / (nvlink_efficiency x scale-up bandwidth))`` (a normal kernel's forwarded bytes over
``pair_bandwidth`` a third term, where set), with the busiest rank's bytes (the
routing's imbalance times the mean) and the links of ``cluster.gpu`` (a full mesh's scale-up bandwidth: the
links to the EP ranks of the node, ``GpuSpec.scaleup_bandwidth``); a kernel that crosses the network pays
``rdma_latency`` once a round trip (a low-latency kernel one, its data into fixed slots; a normal kernel two:
the count exchange that sizes its receive buffers, then the data) and ``rdma_peer_latency`` per remote rank
more, a combine that crosses it ``combine_rdma_latency`` more; a normal dispatch's scale-up term
``dispatch_copy_latency`` per (token, destination rank) copy, serial rather than spread over the links; and a
combine whose input is not already in the library's registered buffer (``zero_copy=False``, the engines'
default) first copies it there, its (token, rank) rows at ``combine_copy_bandwidth`` (``DeepEPParams``; the
last three MoRI's only). The parameters are the
cluster's (``comm_params``): DeepEP's on NVIDIA GPUs over InfiniBand/RoCE, MoRI's on AMD, the fitted EFA ones
on AWS EFA. Copies to the rank itself
are local memory traffic and cross no link. The four parameters (``DeepEPParams``) are fitted to
DeepEP's published H800 tables (demos/fidelity/deepep.py; the fit and its residuals are in
docs/clusters.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from demos.zoo.hardware.cluster import ClusterSpec, Routing, Traffic

__all__ = [
    "DEEPEP_H800",
    "EFA_GDA",
    "EFA_PROXY",
    "MORI",
    "NETWORK_PARAMS",
    "comm_params",
    "DEFAULT_COMM_SMS",
    "ALLTOALL_KERNELS",
    "AllToAll",
    "DeepEPParams",
    "ll_buffer_bytes",
    "ll_bytes",
    "deepep_low_latency",
    "message_bytes",
    "deepep_normal",
    "token_bytes",
]

ALLTOALL_KERNELS = ("dispatch", "combine")
DEFAULT_COMM_SMS = 20
_SCALE_BLOCK = 128  # FP8 dispatch: one float32 scale per 128 hidden channels
_LL_HEADER = 16  # low-latency dispatch message: one int4 of source info ahead of the payload
_UNITS = {"latency": "seconds", "bandwidth": "bytes/s"}  # DeepEPParams' non-negative fields, by name ending
_NORMAL_ROUNDS = 2  # a normal kernel crossing the network: the count exchange, then the data (module docstring)


def _number(what: str, v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"{what} must be a number, got {type(v).__name__}: {v!r}")
    if not math.isfinite(v):
        raise ValueError(f"{what} must be finite, got {v!r}")
    return float(v)


def _int(what: str, v: object, low: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise ValueError(f"{what} must be an int >= {low}, got {v!r}")
    return v


@dataclass(frozen=True)
class DeepEPParams:
    """The all-to-all model's parameters: ``rdma_efficiency`` and ``nvlink_efficiency``, the share of
    the NIC's and of NVLink's per-direction bandwidth the kernels achieve (in (0, 1]);
    ``ll_latency`` and ``normal_latency``, the fixed seconds of one low-latency and one normal
    kernel call (launch, count exchange, signalling round trips, the final wait and copy-out);
    ``rdma_latency``, the fixed seconds more a kernel pays when it crosses the network (the NIC's round trips; 0
    in DeepEP's fit, whose rows cannot tell it from the rest), and ``rdma_peer_latency``, the seconds per remote
    rank a kernel that crosses the network pays (a CPU proxy serving each peer's queue in turn on EFA; 0 where
    the GPU initiates RDMA); ``ll_two_level``: the low-latency kernel crosses the network as the normal one does,
    each token once per remote node and forwarded inside it over the scale-up links (MoRI's InterNodeV1LL,
    whose tuning tables measure both legs), instead of once per routed copy (DeepEP's); ``pair_bandwidth``, the
    bytes a second a normal kernel's forwarding stage moves, each token counted once per destination NVLink
    domain, the rank's own included (0: no such limit; fitted where the tables show one: UCCL-EP over EFA,
    whose time grows with the domains a token touches, its own included, not with the remote ones);
    ``dispatch_copy_latency``, the seconds a normal dispatch spends on each (token, destination rank) copy it
    sends over the scale-up links on top of its bytes, serial in the kernel rather than spread over the links
    (0: none; fitted where the tables show dispatch slowing against combine as the links grow: MoRI's, docs/
    clusters.md, "AMD Instinct"); ``combine_rdma_latency``, the fixed seconds more a combine pays when it crosses
    the network (0: none; MoRI's, whose combine reduces inside the node before it sends); and
    ``combine_copy_bandwidth``, the bytes a second at which a combine copies its input rows into the library's
    registered buffer before it sends them, where the caller's input is not already there (0: no such stage;
    MoRI's, whose tables measure the combine both ways: ``zero_copy``)."""

    rdma_efficiency: float
    nvlink_efficiency: float
    ll_latency: float
    normal_latency: float
    rdma_latency: float = 0.0
    rdma_peer_latency: float = 0.0
    ll_two_level: bool = False
    pair_bandwidth: float = 0.0
    dispatch_copy_latency: float = 0.0
    combine_rdma_latency: float = 0.0
    combine_copy_bandwidth: float = 0.0

    def __post_init__(self) -> None:
        for name in ("rdma_efficiency", "nvlink_efficiency"):
            v = _number(f"DeepEPParams.{name}", getattr(self, name))
            if not 0 < v <= 1:
                raise ValueError(f"DeepEPParams.{name} must be in (0, 1], got {v!r}")
        if not isinstance(self.ll_two_level, bool):
            raise TypeError(f"DeepEPParams.ll_two_level must be a bool, got {self.ll_two_level!r}")
        for name, unit in _UNITS.items():  # every latency and bandwidth field, by its name's ending
            for f in fields(self):
                if f.name.endswith(name) and _number(f"DeepEPParams.{f.name}", getattr(self, f.name)) < 0:
                    raise ValueError(f"DeepEPParams.{f.name} must be >= 0 {unit}, got {getattr(self, f.name)!r}")


DEEPEP_H800 = DeepEPParams(rdma_efficiency=0.87, nvlink_efficiency=0.66, ll_latency=25e-6, normal_latency=12e-6)
"""Fitted to DeepEP's H800 tables (2025-06-05 README; docs/clusters.md, "Fitted parameters")."""

MORI = DeepEPParams(
    rdma_efficiency=0.845,
    nvlink_efficiency=0.727,
    ll_latency=22.2e-6,
    normal_latency=19.9e-6,
    rdma_latency=43.6e-6,
    ll_two_level=True,
    dispatch_copy_latency=7.59e-9,
    combine_rdma_latency=13.5e-6,
    combine_copy_bandwidth=2453.6e9,
)
"""AMD's MoRI kernels (IntraNode, InterNodeV1, InterNodeV1LL) over Infinity Fabric and RDMA: fitted to MoRI's
measured MI355X tuning tables (``demos.fidelity.ep_published``; docs/clusters.md, "AMD Instinct")."""

EFA_PROXY = DeepEPParams(
    rdma_efficiency=0.968,
    nvlink_efficiency=0.66,
    ll_latency=36.5e-6,
    normal_latency=54.3e-6,
    rdma_latency=7.8e-6,
    rdma_peer_latency=14.9e-6,
    pair_bandwidth=65.3e9,
)
"""DeepEP-style kernels over AWS EFA through CPU proxy threads (UCCL-EP): fitted to UCCL-EP's p6-b200 (B200)
tables, held out on p5en (H200); NVLink's share is DeepEP's (``demos.fidelity.ep_published``; docs/clusters.md,
"Networks")."""

EFA_GDA = DeepEPParams(rdma_efficiency=0.887, nvlink_efficiency=0.66, ll_latency=91.2e-6, normal_latency=210.1e-6)
"""DeepEP V2 over NCCL GIN on EFA, RDMA the GPU initiates: fitted to AWS's p6-b200 EP16 rows; NVLink's share is
DeepEP's (``demos.fidelity.ep_published``)."""

NETWORK_PARAMS = {"efa": EFA_PROXY, "efa-gda": EFA_GDA}
"""The all-to-all's parameters on a network other than InfiniBand/RoCE (``ClusterSpec.network``)."""


def comm_params(cluster: ClusterSpec) -> DeepEPParams:
    """The all-to-all model's parameters for ``cluster``: its network's (``NETWORK_PARAMS``: EFA with a proxy or
    GPU-initiated), else its vendor's library over InfiniBand/RoCE (DeepEP on NVIDIA, MoRI on AMD)."""
    if cluster.network in NETWORK_PARAMS:
        return NETWORK_PARAMS[cluster.network]
    return MORI if cluster.gpu.vendor == "amd" else DEEPEP_H800


@dataclass(frozen=True)
class AllToAll:
    """One modelled dispatch or combine on the busiest rank: ``seconds``; the bytes it moves over the
    NIC (``rdma_bytes``) and over NVLink (``nvlink_bytes``); ``bottleneck`` ("rdma", "nvlink", "forwarding"
    (a normal kernel held to ``DeepEPParams.pair_bandwidth``), or "latency" when nothing crosses a link);
    ``sms``, the SMs it holds while in flight."""

    kernel: str
    mode: str
    seconds: float
    rdma_bytes: float
    nvlink_bytes: float
    bottleneck: str
    sms: int


def _kernel(kernel: str) -> str:
    if kernel not in ALLTOALL_KERNELS:
        raise ValueError(f"kernel must be one of {', '.join(ALLTOALL_KERNELS)}, got {kernel!r}")
    return kernel


def token_bytes(hidden: int, fp8: bool) -> int:
    """Bytes of one token's hidden state: FP8 (``hidden`` bytes plus one float32 scale per 128
    channels; ``hidden`` must be a multiple of 128) or BF16 (2 bytes per channel)."""
    _int("hidden", hidden, 1)
    if not fp8:
        return 2 * hidden
    if hidden % _SCALE_BLOCK:
        raise ValueError(f"FP8 tokens need hidden to be a multiple of {_SCALE_BLOCK}, got {hidden}")
    return hidden + hidden // _SCALE_BLOCK * 4


def message_bytes(kernel: str, hidden: int, fp8: bool = True, *, low_latency: bool = False) -> int:
    """Bytes one token carries in ``kernel``: dispatch sends ``token_bytes(hidden, fp8)`` (plus the
    16-byte header of a low-latency message), combine sends BF16 whatever ``fp8`` says."""
    if _kernel(kernel) == "combine":
        return token_bytes(hidden, False)
    return token_bytes(hidden, fp8) + (_LL_HEADER if low_latency else 0)


def ll_bytes(kernel: str, tokens: float, hidden: int, top_k: int, fp8: bool = True) -> float:
    """Bytes one rank's low-latency ``kernel`` messages carry: ``tokens x top_k`` messages, FP8 for a
    dispatch (``fp8``; the engines' default, and the measured tables'), BF16 for a combine
    (``message_bytes``)."""
    return tokens * top_k * message_bytes(kernel, hidden, fp8, low_latency=True)


def _check(cluster: ClusterSpec, routing: Routing, tokens: int, params: DeepEPParams | None) -> Traffic:
    if not isinstance(cluster, ClusterSpec):
        raise TypeError(f"cluster must be a ClusterSpec, got {type(cluster).__name__}")
    if params is not None and not isinstance(params, DeepEPParams):
        raise TypeError(f"params must be DeepEPParams, got {type(params).__name__}")
    _int("tokens", tokens, 0)
    return cluster.traffic(routing)


def _two_level(cluster: ClusterSpec, traffic: Traffic, per_token: float) -> tuple[float, float]:
    """(RDMA bytes, scale-up bytes) of a kernel that sends each token once per remote NVLink domain over RDMA
    and forwards it inside: ``per_token`` bytes (the busiest rank's tokens included) times the remote domains,
    and times the destination ranks other than the forwarding one (``ranks x (d-1)/d``)."""
    d = cluster.ranks_per_domain
    return traffic.remote_domains * per_token, traffic.ranks * (d - 1) / d * per_token


def _timed(
    kernel: str,
    mode: str,
    cluster: ClusterSpec,
    rdma: float,
    nvl: float,
    latency: float,
    params: DeepEPParams,
    sms: int,
    forwarded: float = 0.0,
    serial_nvl: float = 0.0,
    staged: float = 0.0,
) -> AllToAll:
    g = cluster.gpu
    t_rdma = rdma / (params.rdma_efficiency * g.nic_bandwidth)
    t_nvl = nvl / (params.nvlink_efficiency * cluster.scaleup_bandwidth) + serial_nvl
    bottleneck = "latency" if t_rdma == t_nvl == 0 else ("rdma" if t_rdma >= t_nvl else "nvlink")
    t_fwd = forwarded / params.pair_bandwidth if params.pair_bandwidth > 0 and rdma > 0 else 0.0
    if t_fwd > max(t_rdma, t_nvl):
        bottleneck = "forwarding"
    if rdma > 0:  # the network's own fixed costs (module docstring)
        rounds = _NORMAL_ROUNDS if mode == "normal" else 1
        latency += params.rdma_latency * rounds + params.rdma_peer_latency * (cluster.ep - cluster.ranks_per_domain)
        if kernel == "combine":
            latency += params.combine_rdma_latency
    if kernel == "combine" and params.combine_copy_bandwidth > 0:
        latency += staged / params.combine_copy_bandwidth
    return AllToAll(kernel, mode, latency + max(t_rdma, t_nvl, t_fwd), rdma, nvl, bottleneck, sms)


def deepep_low_latency(
    cluster: ClusterSpec,
    routing: Routing,
    tokens: int,
    hidden: int,
    kernel: str = "dispatch",
    *,
    fp8: bool = True,
    nvlink: bool = True,
    params: DeepEPParams | None = None,
    zero_copy: bool = False,
) -> AllToAll:
    """A low-latency dispatch or combine of ``tokens`` tokens per rank (``hidden`` channels each):
    ``tokens x top_k`` messages of ``message_bytes(kernel, hidden, fp8, low_latency=True)``. With
    ``nvlink`` (DeepEP since 2025-06-05) copies within the NVLink domain go over NVLink, else over
    RDMA too. 0 SMs while in flight. ``params``: None takes the cluster's (``comm_params``). ``zero_copy``: the
    combine's input is already in the library's buffer (no copy stage; ``DeepEPParams.combine_copy_bandwidth``)."""
    traffic = _check(cluster, routing, tokens, params)
    params = params or comm_params(cluster)
    msg = message_bytes(kernel, hidden, fp8, low_latency=True) * tokens * traffic.imbalance
    if params.ll_two_level and cluster.domains > 1:  # once per remote node, forwarded inside it (DeepEPParams)
        rdma, nvl = _two_level(cluster, traffic, msg)
    elif nvlink:
        rdma, nvl = traffic.copies_rdma * msg, traffic.copies_nvlink * msg
    else:
        rdma, nvl = (traffic.copies_rdma + traffic.copies_nvlink) * msg, 0.0
    staged = 0.0 if zero_copy else traffic.ranks * msg  # the combine's input, one row a (token, rank)
    return _timed(kernel, "low-latency", cluster, rdma, nvl, params.ll_latency, params, 0, staged=staged)


def deepep_normal(
    cluster: ClusterSpec,
    routing: Routing,
    tokens: int,
    hidden: int,
    kernel: str = "dispatch",
    *,
    fp8: bool = True,
    comm_sms: int = DEFAULT_COMM_SMS,
    params: DeepEPParams | None = None,
    zero_copy: bool = False,
) -> AllToAll:
    """A normal (high-throughput) dispatch or combine of ``tokens`` tokens per rank: each token once
    per remote NVLink domain over RDMA, and once per destination rank other than the forwarding
    one over NVLink (``tokens x ranks x (d-1)/d``; within one domain that is every other rank it
    touches). Holds ``comm_sms`` SMs (an int in [1, sm_count)) while it runs; the achieved
    bandwidth is the fitted one at DeepEP's 24 SMs whatever ``comm_sms`` is (not modelled). ``zero_copy`` as
    ``deepep_low_latency``'s."""
    traffic = _check(cluster, routing, tokens, params)
    params = params or comm_params(cluster)
    g = cluster.gpu
    if isinstance(comm_sms, bool) or not isinstance(comm_sms, int) or not 1 <= comm_sms < g.sm_count:
        raise ValueError(f"comm_sms must be an int in [1, {g.sm_count}) for {g.name}, got {comm_sms!r}")
    msg = message_bytes(kernel, hidden, fp8)
    per_token = msg * tokens * traffic.imbalance
    rdma, nvl = _two_level(cluster, traffic, per_token)
    forwarded = traffic.domains * per_token  # once per destination domain, its own included
    copies = nvl / msg  # (token, scale-up destination) pairs
    serial = copies * params.dispatch_copy_latency if kernel == "dispatch" else 0.0
    staged = 0.0 if zero_copy else traffic.ranks * per_token  # the combine's input, one row a (token, rank)
    return _timed(
        kernel, "normal", cluster, rdma, nvl, params.normal_latency, params, comm_sms, forwarded, serial, staged
    )


def ll_buffer_bytes(max_tokens: int, hidden: int, experts: int) -> int:
    """Bytes of the RDMA buffer a low-latency run needs per rank, as DeepEP lays it out (csrc/config.hpp
    ``LowLatencyLayout``): two (odd/even) sets of a send buffer, a receive buffer of ``experts x
    max_tokens`` message slots and a signalling buffer, rounded up to 128 bytes. It is sized for
    ``max_tokens`` per rank, not for the tokens actually sent."""
    _int("max_tokens", max_tokens, 1)
    _int("experts", experts, 1)
    fp8 = token_bytes(hidden, True) if hidden % _SCALE_BLOCK == 0 else 0  # FP8 needs whole 128-channel blocks
    dispatch_msg = _LL_HEADER + max(2 * hidden, fp8)
    combine_msg = token_bytes(hidden, False)
    send = max(max_tokens * dispatch_msg, experts * max_tokens * combine_msg)
    recv = experts * max_tokens * max(dispatch_msg, combine_msg)
    signal = experts * 4
    total = 2 * (send + recv + signal)
    return (total + 128) // 128 * 128
