"""The generic transformer's cost model: what each kernel of one layer does for a ubatch of ``t`` tokens.

``layer_costs(workload, t, layer, profile, kernels)`` returns a ``LayerCosts``: the ``dbo.costs.Work`` of every
compute op of a dense and of an MoE layer, and the seconds of the all-to-all kernels from DeepEP's
model (``demos.zoo.hardware.deepep_low_latency`` / ``deepep_normal``). Each part of an op is timed by
``kernels`` (``demos.zoo.kernel_times``: the GPU family's curves fitted to measured tables, or the
tables themselves) and the parts are folded into one Work of seconds (``demos.zoo.fold``) the virtual
backend charges on the GPU's profile (``demos.zoo.profile``). Everything is counted from first
principles (docs/models.md, "What a step costs"; the flops and bytes formulas are ``demos.zoo.work``):

* GEMMs: ``2 M N K`` flops; the weight bytes once per kernel (a decode GEMM reads all its weights
  whatever its rows) plus the activations in and out; each storage dtype's bytes and math rate are
  ``demos.zoo.models.dtypes``'s (FP8 weights multiply in FP8 with FP8 activations; MXFP4 at the BF16
  rate: a modelling choice).
* Attention, by kind (``demos.zoo.attention``: MLA absorbed in decode and expanded in prefill, GQA with
  its sliding windows), each core timed on its family's attention curve.
* Routed experts: the busiest rank receives ``t x top_k x imbalance`` token copies for its
  ``experts / ep`` experts; every expert that receives a token reads its weights once. The expected
  number of active local experts follows from uniform routing. The grouped GEMM's efficiency is taken
  at the rows per active expert; the normal (ht) schedule pads each expert's rows to a multiple of 128,
  as DeepGEMM's contiguous layout needs, and permutes the received tokens into that layout and back
  (two memory passes over the copies; the low-latency kernels deliver the per-expert layout directly);
  the low-latency (ll) schedule's masked layout computes each expert's rows in whole row blocks
  (``demos.zoo.overlap_costs.masked_rows``); without an all-to-all (EP 1, or attention TP = EP) the
  engine's local fused MoE pads them to a tile sized to the rows (``local_rows``) and, where the family has
  its curve (``FamilyFit.local_curve`` of the experts' storage, fitted to SGLang's local kernels), moves
  their bytes at that kernel's share of bandwidth and adds its fixed time (``local_experts_op``). That
  kernel reads the tokens in place through its sorted indices and sums each token's top-k itself, as the
  engines' fused MoE calls the tables time do: no receive copies are launched around it (without the
  curve the two copies stand for the permute and the sum, as before).
* Low-latency all-to-all (ll): each kernel's SM-held send half (``dispatch_send``, ``combine_send``,
  seconds on the compute stream, ``demos.zoo.overlap_costs.ll_send_seconds``), its flight on the link
  (``dispatch``, ``combine``: DeepEP's modelled time less the send half) and its receive half
  (``dispatch_recv``, ``combine_recv``).
* DeepGEMM's fused MoE kernel (``LayerCosts.fused``, where ``demos.zoo.fused_moe.fused_moe_refusal`` has
  no objection): the routed experts' grouped GEMMs in whole row blocks, timed alone, and the single-node
  low-latency transfers, overlapped in one kernel (``fused_moe_seconds``).
* Single-batch overlap (``experts_split``, ll with an all-to-all; None otherwise): the routed experts as two
  kernels' Works, the up GEMM with the activation and the down GEMM alone, each paying its own floor.
* A wide residual (``hc_mult`` > 1, DeepSeek-V4's hyper-connections): a pre and a post kernel around the
  attention and around the MLP (``LayerCosts.mhc``), each timed on the family's fitted mHC curve
  (``KernelTimes.mhc``, its work ``demos.zoo.work.mhc_work``) over the sub-layer's tokens.
* A latent MoE (``MoESpec.latent_size``, Kimi-K3): the routed experts, the all-to-all and the receive
  halves at the latent width (``ModelSpec.routed_width``), and two ops of its own (``LayerCosts.latent``):
  ``latent_down`` (the normed input projected down, before the dispatch) and ``latent_up`` (the combined
  output normed and projected back, before the finalize), replicated GEMMs at the weights' dtype.
* Block attention residuals (``ModelSpec.attn_res_block``, Kimi-K3): each sub-layer's input mixes the
  block representations before it (``attn_res_sources``) with the partial sum: one read of each per token
  and one write, a memory pass folded into the sub-layer's first op (the attention's projections, the
  router or the dense MLP), taken to be fused with its norm (no kernel of its own: a guess).
* Norms, residual adds, activations, quantization: memory passes folded into the op that carries them
  (their kernel counts, which set the per-kernel floor, are in ``demos.zoo.ops``).
* Attention TP (``attention_tp`` > 1, docs/clusters.md): attention runs the group's ``t`` tokens with
  ``heads / attention_tp`` heads per rank (the down-projections replicated). With an all-to-all
  (``Workload.alltoall``: more than one attention group in the EP group) the MoE block runs its share,
  ``ceil(t / attention_tp)``, and the collectives (``LayerCosts.tp_*``, seconds,
  ``demos.zoo.hardware.collectives``) reduce-scatter o_proj's sums and all-gather the MoE's output;
  without one (attention TP = EP) the MoE block runs all ``t``, its experts the copies routed to this
  rank (``Workload.routed_tokens``), its shared experts TP-sharded, and both o_proj's and the MoE's
  sums are all-reduced, as in a dense layer. Under MoE tensor parallelism (``Workload.moe_tp``) its
  experts are every routed expert at ``1 / moe_tp`` of their width (``expert_intermediate``), taking every
  copy of the group's tokens, with no rank busier than another.

Which of these ops a step launches, in which schedule, is the step's plan (``demos.zoo.plan``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from dbo.costs import DeviceProfile, Work
from demos.vocabulary import Schedule
from demos.zoo.attention import layer_attention
from demos.zoo.attention_base import module_costs
from demos.zoo.fold import Folder, gemm
from demos.zoo.fold import memory_pass as _pass
from demos.zoo.fused_moe import fused_moe_math, fused_moe_refusal, fused_moe_seconds
from demos.zoo.hardware import deepep_low_latency, deepep_normal
from demos.zoo.hardware.collectives import tp_collective
from demos.zoo.kernel_times import KernelTimes, local_experts_op
from demos.zoo.models.dtypes import ACT_BYTES, dtype
from demos.zoo.overlap_costs import ll_node_seconds, ll_send_seconds, local_rows, masked_rows
from demos.zoo.profile import MIN_KERNEL
from demos.zoo.work import distinct_experts, mhc_work
from demos.zoo.workload import Workload

__all__ = ["LayerCosts", "active_experts", "attn_res_sources", "layer_costs"]

_ACT = ACT_BYTES  # bytes of a BF16 activation
_PAD = 128  # DeepGEMM contiguous layout: each expert's rows padded to a multiple of 128


def active_experts(w: Workload, t: float) -> float:
    """Expected local experts of the busiest rank that receive at least one token copy, for ``t`` routed
    tokens per rank (``Workload.routed_tokens``): its ``t x top_k x imbalance`` copies spread uniformly
    over its expert slots. The busiest rank's copies, not the mean rank's: the step waits for the rank
    with the most to do, and at a few copies per rank that is also the one reading the most weights."""
    return distinct_experts(w.experts_per_rank, t * w.spec.moe.top_k * w.imbalance_at(t))


@dataclass(frozen=True)
class LayerCosts:
    """The modelled cost of each kernel of one layer for a ubatch of ``t`` tokens (module docstring).

    Compute kernels hold a ``Work``; ``dispatch`` / ``combine`` hold seconds (the all-to-all's modelled
    time on the busiest rank, None without an all-to-all: EP 1, or attention TP = EP); ``layer`` is the layer
    index the attention cost was taken for (sliding windows differ per layer); ``attention_ops``: every
    attention op with its cost in launch order (``demos.zoo.attention.AttentionCosts.ops``: ``attn_proj``,
    ``attn_core`` and ``attn_out`` are its three). Under attention TP,
    ``tp_attn_reduce``, ``tp_moe_gather`` and ``tp_mlp_reduce`` hold the seconds of its collectives (None
    where a layer has none, and without it; ``tp_mlp_reduce`` is the MLP's all-reduce, dense or, without
    an all-to-all, MoE) and ``moe_t`` the tokens of this rank's MLP (its share in an MoE layer with an
    all-to-all, all ``t`` otherwise)."""

    t: int
    attn_proj: Work
    attn_core: Work
    attn_out: Work
    router: Work
    dense_mlp: Work | None
    experts: Work | None
    shared: Work | None
    dispatch: float | None
    combine: float | None
    dispatch_recv: Work | None
    combine_recv: Work | None
    finalize: Work
    dispatch_bytes: float = 0.0
    combine_bytes: float = 0.0
    tp_attn_reduce: float | None = None
    tp_moe_gather: float | None = None
    tp_mlp_reduce: float | None = None
    moe_t: int | None = None
    dispatch_send: float | None = None
    combine_send: float | None = None
    experts_split: tuple[Work, Work] | None = None
    attention_ops: tuple[tuple[str, Work], ...] = ()
    mhc: tuple[Work, Work, Work, Work] | None = None
    latent: tuple[Work, Work] | None = None
    fused: Work | None = None


def _recv_seconds(kt: KernelTimes, w: Work) -> float:
    """Device seconds of one receive half (a memory pass, one kernel)."""
    return max(MIN_KERNEL, kt.memory(w.bytes, w.flops))


def _ll_kernel(w: Workload, kind: str, modelled: float, t: int, imbalance: float, recv_s: float, fp8: bool):
    """(flight, SM-held send half) seconds of one low-latency ``kind`` kernel of ``t`` tokens per rank whose
    receive half takes ``recv_s``. Beyond one node the kernel takes DeepEP's ``modelled`` time and its
    flight is that less the send half (``ll_send_seconds``). Within one node the SMs' own NVLink stores
    move every message: the whole kernel is the family's single-node time (``FamilyFit.ll_sm``, measured
    on one node) of the busiest rank's ``t x imbalance`` tokens, and its flight only what the ``ll_sm``
    factor takes off the send half (docs/clusters.md, "Low-latency kernels on one node")."""
    g, H, k, factor = w.gpu, w.spec.routed_width, w.spec.moe.top_k, w.mechanisms.ll_sm
    peers = min(w.cluster.ep, w.cluster.gpus_per_node) - 1  # the node's other ranks of the EP group
    send = ll_send_seconds(g, kind, t, H, k, peers, recv_s, factor, fp8=fp8)
    if w.cluster.ep <= w.cluster.gpus_per_node:
        modelled = max(0.0, ll_node_seconds(g, kind, t * imbalance, H, k, peers, fp8=fp8) - recv_s)
    return max(0.0, modelled - send), send


def _mhc(w: Workload, kt: KernelTimes, t_attn: int, t_mlp: int) -> tuple[Work, Work, Work, Work] | None:
    """A wide residual's pre and post kernels around the attention (``t_attn`` tokens) and the MLP (``t_mlp``),
    each timed on the family's mHC curve of its site; None with a plain residual (``hc_mult`` 1)."""
    hc, H = w.spec.hc_mult, w.spec.hidden_size
    if hc == 1:
        return None

    def one(site: str, t: int) -> Work:
        flops, nbytes = mhc_work(site, t, H, hc)
        return Work(seconds=kt.mhc(site, flops, nbytes), bytes=nbytes, dtype="bfloat16")

    return one("pre", t_attn), one("post", t_attn), one("pre", t_mlp), one("post", t_mlp)


def attn_res_sources(layer: int, block: int) -> int:
    """The representations a sub-layer of ``layer`` mixes under block attention residuals of ``block`` layers a
    block: the token embedding, each block completed before the layer's, and the current block's partial sum
    (Kimi's Block AttnRes); 0 without (``block`` 0)."""
    return 2 + layer // block if block else 0


def _attn_res(w: Workload, t: int, layer: int) -> Work | None:
    """One sub-layer's attention-residual mix for ``t`` tokens (``attn_res_sources``), None without: each
    source read once (BF16), the mixed input written, a dot product and a weighted sum per source."""
    n, H = attn_res_sources(layer, w.spec.attn_res_block), w.spec.hidden_size
    if not n:
        return None
    return Work(flops=4.0 * t * H * n, bytes=t * H * _ACT * (n + 1))


def _grouped_gemms(per: float, act: float, inter: int, width: int, store: str, math: str | None = None):
    """The routed experts' two grouped GEMMs (gate and up, then down) of ``act`` active experts of ``per`` rows
    each, at ``width`` (the hidden size, or a latent MoE's): their efficiency taken at the rows per active
    expert, their weights read once per active expert; ``math``: the rate they run at, where not their
    storage's (DeepGEMM's fused kernel)."""
    rows = (max(1, round(per)),)
    out = []
    for n, k in ((2 * inter, width), (width, inter)):
        g = gemm(per * act, n, k, store, weights=act)
        out.append(Work(flops=g.flops, bytes=g.bytes, dtype=math or g.dtype, shape=rows + g.shape[1:]))
    return tuple(out)


def _all_reduced(w: Workload, kt: KernelTimes, c: LayerCosts, t: int) -> LayerCosts:
    """``c`` of a layer whose MLP runs all ``t`` tokens of the attention TP group on every rank (a dense
    layer, or an MoE layer without an all-to-all): o_proj's and the MLP's partial sums each all-reduced
    (``KernelTimes.all_reduce``: the engines' own kernel or NCCL's ring)."""
    reduce = kt.all_reduce(t * w.spec.hidden_size * _ACT, w.attention_tp)
    return replace(c, tp_attn_reduce=reduce, tp_mlp_reduce=reduce, moe_t=t)


def layer_costs(
    w: Workload,
    t: int,
    layer: int,
    profile: DeviceProfile,
    kernels: KernelTimes | None = None,
) -> LayerCosts:
    """The ``LayerCosts`` of layer ``layer`` for a ubatch of ``t`` >= 1 tokens of workload ``w``, each
    kernel timed by ``kernels`` (None: the roofline of ``w``'s GPU, ``demos.zoo.kernel_times``) and
    folded for ``profile`` (``Folder``)."""
    spec, H = w.spec, w.spec.hidden_size
    kt = KernelTimes(w.gpu, profile) if kernels is None else kernels
    _sum = Folder(profile, kt)
    store = spec.precision.weights
    kind, a = layer_attention(spec.attention, layer)
    attn = kind.costs(w, a, t, layer, _sum)
    res = _attn_res(w, t, layer)
    if res is not None:
        attn = replace(attn, proj=_sum.named(attn.names[0])(attn.proj, res))
    attn = module_costs(kind, w, a, t, layer, _sum, attn)
    proj, core, out = attn.proj, attn.core, attn.out
    finalize = _pass(t, H, 1)
    moe = spec.moe
    dense = None
    tp = w.attention_tp
    if not spec.is_moe_layer(layer):
        inter = -(-spec.dense_intermediate_size // tp)  # attention TP: the dense MLP is TP-sharded too
        mstore = spec.precision.store("mlp")
        parts = (gemm(t, 2 * inter, H, mstore), gemm(t, H, inter, mstore), _pass(t, H, 2), _pass(t, inter, 1))
        dense = _sum.named("dense_mlp")(*parts, *(() if res is None else (res,)))
        c = LayerCosts(t, proj, core, out, _pass(t, H, 1), dense, None, None, None, None, None, None, finalize)
        c = replace(c, attention_ops=attn.ops, mhc=_mhc(w, kt, t, t))
        if tp == 1:
            return c
        return _all_reduced(w, kt, c, t)
    # attention TP with an all-to-all: o_proj's partial sums are reduce-scattered over the group, the MoE
    # block runs this rank's slice of the tokens, and an all-gather brings the layer's output back; without
    # one (TP = EP) every rank runs the group's tokens and the output is all-reduced (docs/clusters.md)
    t_attn, t, rt = t, w.moe_tokens(t), w.routed_tokens(t)
    finalize = _pass(t, H, 1)
    E, k, inter = moe.routed_experts, moe.top_k, w.expert_intermediate  # MoE TP: a slice of each expert
    estore = spec.precision.experts
    res = _attn_res(w, t, layer)
    router = _sum.named("router")(
        gemm(t, E, H, "bfloat16"), _pass(t, H, 2), _pass(t, E, 4), *(() if res is None else (res,))
    )
    Hr = spec.routed_width  # the experts' and the all-to-all's rows: H, or a latent MoE's width
    latent = None
    if Hr != H:
        latent = (
            _sum.named("latent_down")(gemm(t, Hr, H, store)),
            _sum.named("latent_up")(_pass(t, Hr, 1), gemm(t, H, Hr, store)),
        )
    imb = w.imbalance_at(rt)
    rows = rt * k * imb  # copies the busiest rank's experts receive
    act = max(1.0, active_experts(w, rt))
    per = rows / act
    if w.schedule == Schedule.HT:
        per = math.ceil(per / _PAD) * _PAD
    elif w.alltoall:
        per = masked_rows(per, w.gpu.family, w.mechanisms.tile)
    else:  # no all-to-all: the engine's local fused MoE, its tile sized to the rows per expert
        per = local_rows(per, w.mechanisms.tile)
    computed = per * act
    # no all-to-all: the engine's local fused MoE, its grouped GEMMs at that kernel's share of bandwidth and
    # its fixed time (the kernels around them: sorting, quantization, the sum over top-k), where the family
    # has the curve (FamilyFit.local_curve of the experts' storage)
    local = None if w.alltoall or w.schedule == Schedule.HT else kt.fit.local_curve(estore, kt.engine, kt.gpu.has_fp4)
    fixed = Work() if local is None else Work(seconds=local.latency)
    up_w, down_w = _grouped_gemms(per, act, inter, Hr, estore)
    fp8 = spec.precision.dispatch.startswith("fp8") and Hr % 128 == 0
    msg = (Hr + Hr // 128 * 4) if fp8 else 2 * Hr
    # ht: the normal dispatch delivers tokens per source rank, not per expert, so the grouped GEMM's
    # contiguous layout needs a permute in (read and write each received copy) and an un-permute out
    # (read each expert output, write the combine's input); the low-latency kernels deliver the
    # masked per-expert layout directly
    permute = Work(bytes=rows * 2 * msg + rows * 2 * Hr * _ACT) if w.schedule == Schedule.HT else Work()
    experts = _sum.named("experts" if local is None else local_experts_op(estore))(
        up_w, down_w, _pass(computed, inter, 1.5), permute, fixed
    )
    # DeepGEMM's fused MoE kernel where it can run: its grouped GEMMs in whole row blocks, the transfers
    # overlapped inside (demos.zoo.fused_moe)
    fused = None
    if fused_moe_refusal(w) is None:
        per_f = masked_rows(rows / act, w.gpu.family, w.mechanisms.tile)
        gemms = _grouped_gemms(per_f, act, inter, Hr, estore, fused_moe_math(w, dtype(estore).math))
        ex = _sum.named("fused_moe")(*gemms, _pass(per_f * act, inter, 1.5))
        fused = Work(seconds=fused_moe_seconds(w, t, ex.seconds), bytes=ex.bytes, dtype=ex.dtype)
    # single-batch overlap (ll with an all-to-all only) runs the down GEMM apart: the combine streams its
    # blocks out as they finish
    split = None
    if w.schedule == Schedule.LL and w.alltoall:
        split = (_sum.named("experts")(up_w, _pass(computed, inter, 1.5), permute), _sum.named("experts")(down_w))
    shared = None
    if moe.shared_experts:
        Is = inter * moe.shared_experts
        if w.moe_replicated:  # the replicated tokens' shared experts are TP-sharded, as the dense MLP
            Is = -(-Is // tp)
        # stored as the dense MLPs, as the checkpoint quantizes them (Precision.mlp; the memory model counts
        # them so): INT4 and MXFP4 checkpoints quantize the routed experts only, some NVFP4 ones these too
        sstore = spec.precision.store("mlp")
        shared = _sum.named("shared")(gemm(t, 2 * Is, H, sstore), gemm(t, H, Is, sstore), _pass(t, Is, 1))
    dispatch = combine = send_d = send_c = None
    d_bytes = c_bytes = 0.0
    recv_d = Work(flops=rows * Hr, bytes=rows * (msg + Hr * _ACT))
    recv_c = Work(flops=2.0 * rows * Hr, bytes=(rows + t) * Hr * _ACT)
    if local is not None:  # the local fused MoE gathers and sums inside its own call (module docstring)
        recv_d = recv_c = None
    if w.alltoall:
        routing = w.routing(t)
        if w.schedule == Schedule.LL:
            dsp = deepep_low_latency(w.cluster, routing, t, Hr, "dispatch", fp8=fp8)
            cmb = deepep_low_latency(w.cluster, routing, t, Hr, "combine", fp8=fp8)
            (dispatch, send_d), (combine, send_c) = (
                _ll_kernel(w, kind, a2a.seconds, t, routing.imbalance, _recv_seconds(kt, rw), fp8)
                for kind, a2a, rw in (("dispatch", dsp, recv_d), ("combine", cmb, recv_c))
            )
        else:
            dsp = deepep_normal(w.cluster, routing, t, Hr, "dispatch", fp8=fp8, comm_sms=w.comm_sms)
            cmb = deepep_normal(w.cluster, routing, t, Hr, "combine", fp8=fp8, comm_sms=w.comm_sms)
            dispatch, combine = dsp.seconds, cmb.seconds
        d_bytes, c_bytes = dsp.rdma_bytes + dsp.nvlink_bytes, cmb.rdma_bytes + cmb.nvlink_bytes
    c = LayerCosts(
        t, proj, core, out, router, None, experts, shared, dispatch, combine, recv_d, recv_c, finalize, d_bytes, c_bytes
    )
    c = replace(c, dispatch_send=send_d, combine_send=send_c, experts_split=split, attention_ops=attn.ops)
    c = replace(c, mhc=_mhc(w, kt, t_attn, t), latent=latent, fused=fused)
    if tp == 1:
        return c
    if w.moe_replicated:
        return _all_reduced(w, kt, c, t)
    nbytes = t * tp * H * _ACT  # the group's tokens, padded to a multiple of the group
    return replace(
        c,
        t=t_attn,
        tp_attn_reduce=tp_collective(w.gpu, "reduce_scatter", nbytes, tp),
        tp_moe_gather=tp_collective(w.gpu, "all_gather", nbytes, tp),
        moe_t=t,
    )
