"""Every op a step of the generic transformer can launch, in one table: ``OPS``.

An op is one launch through ``dbo`` (``launch(..., op=)``): what it issues on the device and where its
time is reported. Each entry (``Op``) says

* ``kernels``: the device kernels it issues, each paying the profile's per-kernel floor
  (``demos.zoo.profile.MIN_KERNEL``) and, eager, one host launch. The counts are read from vLLM's
  DeepSeek and Qwen layers (a guess, docs/models.md: the fused norms, quantizations and the gaps between
  them are where they are uncertain);
* ``stage``: the stage of DeepSeek's stage figures its time counts under (``demos.vocabulary.Stage``);
* ``stream``: the stream kind it runs on, "compute" (the SMs) or "comm" (a link kernel);
* ``group``: the key of the per-layer breakdown its seconds are summed into (``demos.zoo.breakdown``:
  ``MOE_GROUPS``, ``DENSE_GROUPS``, ``TP_GROUPS``, and ``embed`` / ``lm_head`` outside the layers).

``op(name)`` looks one up: an op missing from the table is an ``UnknownOpError``, never counted as a
kernel of stage "other". The step's plan (``demos.zoo.plan``) gives each op its cost, the model
(``demos.zoo.model``, ``demos.zoo.moe``) launches the plan's ops by name, the breakdown and the stage
figures read this table: one list of ops for all of them.

A new op is one entry here plus its cost in the plan; ``tests/zoo/test_plan.py`` fails when a step
launches an op the plan does not hold, or the plan holds one the step does not launch.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from demos.vocabulary import Stage

__all__ = [
    "DENSE_GROUPS",
    "MOE_GROUPS",
    "OPS",
    "TP_GROUPS",
    "Op",
    "UnknownOpError",
    "op",
    "stage_seconds",
]


@dataclass(frozen=True)
class Op:
    """One op of the table (module docstring)."""

    name: str
    kernels: int
    stage: Stage
    group: str
    stream: str = "compute"


_A, _D, _M, _C, _O = Stage.ATTENTION, Stage.DISPATCH, Stage.MLP, Stage.COMBINE, Stage.OTHER

OPS = MappingProxyType(
    {
        o.name: o
        for o in (
            Op("embed", 1, _O, "embed"),
            Op("tp_embed_reduce", 1, _O, "embed"),  # the vocab-parallel embedding's rows, all-reduced
            Op("attn_proj", 8, _A, "attention"),  # input norm, fused q_a/kv_a GEMM, two latent norms, q_b, RoPE,
            #                                       cache write, quant
            Op("attn_index", 5, _A, "attention"),  # sparse MLA's indexer: q/k/weights GEMMs, key cache, scores, top-k
            Op("attn_compress", 4, _A, "attention"),  # DeepSeek-V4's compressor: kv/gate GEMM, pooling, norm+RoPE,
            #                                           the entry's quantized cache write
            Op("attn_index_compress", 5, _A, "attention"),  # V4's indexer's own compressor: the same four with a
            #                                                 Hadamard rotation before its FP8 key cache write
            Op("attn_core", 3, _A, "attention"),  # metadata, attention, split-KV combine
            Op("attn_out", 3, _A, "attention"),  # value un-absorb, quant, o_proj
            Op("gdn_proj", 3, _A, "attention"),  # Gated DeltaNet: input norm, in_proj_qkvz and in_proj_ba GEMMs
            Op("gdn_conv", 2, _A, "attention"),  # the causal conv1d (its state updated), the decay/strength gating
            Op("gdn_recurrent", 1, _A, "attention"),  # decode: the fused recurrent delta rule
            Op("gdn_chunk", 6, _A, "attention"),  # prefill: the chunked delta rule's kernels
            Op("gdn_out", 2, _A, "attention"),  # the gated RMSNorm, out_proj
            Op("kda_proj", 6, _A, "attention"),  # KDA: input norm, q/k/v/gate GEMM, f_a and f_b, b_proj GEMMs
            Op("kda_conv", 2, _A, "attention"),  # the three causal conv1d (fused), the decay/strength gating
            Op("kda_recurrent", 1, _A, "attention"),  # decode: the fused recurrent KDA rule
            Op("kda_chunk", 6, _A, "attention"),  # prefill: the chunked KDA kernels
            Op("kda_out", 2, _A, "attention"),  # the gated RMSNorm, o_proj
            Op("mhc_attn_pre", 1, _A, "attention"),  # a wide residual's rows combined into the attention's input
            Op("mhc_attn_post", 1, _A, "attention"),  # the attention's output mixed back into the rows
            Op("mhc_mlp_pre", 1, _M, "router"),  # the same around the MLP (MoE: before the router)
            Op("mhc_mlp_post", 1, _M, "finalize"),  # (MoE: after the finalize, the MLP's output complete)
            Op("tp_attn_reduce", 1, _A, "tp_attn_reduce"),  # o_proj's partial sums (all-reduce or reduce-scatter)
            Op("router", 3, _A, "router"),  # fused add+norm, gate GEMM, top-k
            Op("latent_down", 1, _M, "router"),  # a latent MoE: the normed input projected to the experts' width
            Op("latent_up", 2, _M, "finalize"),  # its combined output normed and projected back to the hidden size
            Op("dense_mlp", 4, _M, "mlp"),  # gate/up GEMM, activation+quant, down GEMM, add
            Op("dispatch", 2, _D, "dispatch", "comm"),  # DeepEP's normal dispatch (ht)
            Op("dispatch_send", 1, _D, "dispatch"),  # a low-latency kernel's SM-held send half
            Op("dispatch_ll", 1, _D, "dispatch", "comm"),  # its flight on the link
            Op("dispatch_recv", 1, _D, "dispatch_recv"),  # its receive half (ll), or the local copy (EP 1)
            Op("experts", 5, _M, "experts"),  # permute, two grouped GEMMs, activation+quant, un-permute
            Op("experts_ll", 3, _M, "experts"),  # two masked grouped GEMMs, activation+quant
            Op("experts_up", 2, _M, "experts"),  # single-batch overlap: the up GEMM and activation+quant, then
            Op("experts_down", 1, _M, "experts"),  # the down GEMM apart, the combine streaming its blocks out
            Op("fused_moe", 1, _M, "experts"),  # DeepGEMM's fused MoE: dispatch, both GEMMs, combine in one kernel
            Op("combine", 1, _C, "combine", "comm"),
            Op("combine_send", 1, _C, "combine"),
            Op("combine_ll", 1, _C, "combine", "comm"),
            Op("combine_recv", 1, _C, "combine_recv"),
            Op("moe_copy", 1, _C, "combine_recv", "comm"),  # ht: the copy out of the combine's landing buffer
            Op("shared", 3, _M, "shared"),
            Op("shared_side", 3, _M, "shared"),  # the shared experts on a side stream, beside the router and
            #                                    routed experts (demos.zoo.side_streams)
            Op("finalize", 1, _O, "finalize"),  # the routed and shared outputs added into the residual
            Op("tp_moe_gather", 1, _C, "tp_moe_gather"),  # the MoE output all-gathered back over the group
            Op("tp_mlp_reduce", 1, _M, "tp_mlp_reduce"),  # the TP-sharded MLP's all-reduce
            Op("lm_head", 1, _O, "lm_head"),  # the logits, after the forward (outside its ubatches and graph)
            Op("tp_lm_head_gather", 1, _O, "lm_head"),  # the vocab-parallel logits, all-gathered
        )
    }
)
"""Every op a step can launch, by name (module docstring)."""

MOE_GROUPS = (
    "attention",
    "router",
    "dispatch",
    "dispatch_recv",
    "experts",
    "combine",
    "combine_recv",
    "shared",
    "finalize",
)
"""The keys of an MoE layer's breakdown (``moe_layer_s``), in order; a group no op of the layer fills is 0."""

DENSE_GROUPS = ("attention", "mlp")
"""The keys of a dense layer's breakdown (``dense_layer_s``)."""

TP_GROUPS = ("tp_attn_reduce", "tp_moe_gather", "tp_mlp_reduce")
"""The attention-TP collectives' keys: each one a layer launches is one more key, after the others."""


class UnknownOpError(KeyError):
    """An op that is not in ``OPS`` (one line naming it and where the table is)."""

    def __str__(self) -> str:
        return str(self.args[0])


def op(name: str) -> Op:
    """The table's entry for ``name``; ``UnknownOpError`` for an op missing from it."""
    try:
        return OPS[name]
    except (KeyError, TypeError):
        raise UnknownOpError(
            f"op {name!r} is not in demos.zoo.ops.OPS: add it there with its kernels and stage"
        ) from None


def stage_seconds(records: Iterable[Any], stage_of=None) -> dict[str, float]:
    """Busy seconds per stage (every ``Stage``, in order) of kernel records, each record's stage its op's
    (``stage_of(op)``: default this table's; the toy passes its own, ``demos.toy.ops.stage_of``). A
    record whose op no table holds is an error."""
    find = stage_of or (lambda name: op(name).stage)
    out = dict.fromkeys((s.value for s in Stage), 0.0)
    for r in records:
        out[find(r.op)] += r.duration
    return out
