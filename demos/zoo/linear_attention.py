"""Linear attention's kinds: the Gated DeltaNet layers of a hybrid model (Qwen3-Next, Qwen3.5), and the
Kimi Delta Attention layers of Kimi-K3 (``KimiDelta``, at the end: the same four steps with its own
projections, ops ``kda_*`` and curves ``KernelTimes.kda``).

``DeltaRule`` is the ``AttentionKind`` of a ``GatedDeltaNet`` spec (``demos.zoo.attention.ATTENTION_KINDS``;
``layer_attention`` picks it for a hybrid model's ``linear_attention`` layers). Its ops (``demos.zoo.ops``),
in launch order:

* ``gdn_proj``: the input norm and the two input projections (``in_proj_qkvz``: query, key, value and the
  output gate; ``in_proj_ba``: the delta rule's per-head write strength and decay);
* ``gdn_conv``: the short causal convolution over the query, key and value channels, reading and writing
  each request's conv state (``demos.zoo.work.conv_work``, timed on the family's fitted conv curve), and
  the decay/strength gating (a memory pass);
* ``gdn_recurrent`` (decode) or ``gdn_chunk`` (prefill): the gated delta rule itself, its work counted by
  ``demos.zoo.work.delta_rule_work`` and timed on the family's fitted curve (``KernelTimes.gdn``, fitted to
  SGLang's measured kernels): decode reads and writes each request's FP32 state per value head,
  a time that does not grow with the context; prefill runs the chunked form, at least a fitted time per
  chunk of a request's chain of chunks (``demos.zoo.rooflines.ChunkedCurve``);
* ``gdn_out``: the gated RMSNorm (the output gate applied) and ``out_proj`` back to the hidden size.

Attention TP splits the key and value heads (both engines shard a Gated DeltaNet layer by heads), so each
rank holds ``value_heads / attention_tp`` states per request. The layer keeps no KV cache: what it holds
per request is ``GatedDeltaNet.state_bytes`` (``demos.zoo.memory``).

Real math (threads, inline): each token applies one gated delta-rule update to a request state that
starts from the layer's random initial state (as the other kinds read a random cached context) and reads
its output from it; each token's update is its own, so a DBO split changes no value.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from types import SimpleNamespace

from dbo.costs import Work
from demos.vocabulary import Phase
from demos.zoo import kernels as K
from demos.zoo.attention_base import AttentionCosts, AttentionKind
from demos.zoo.fold import Folder, gemm, memory_pass
from demos.zoo.models import GatedDeltaNet, KimiDeltaAttention
from demos.zoo.work import conv_work, delta_rule_chunks, delta_rule_work
from demos.zoo.workload import Workload

__all__ = ["DeltaRule", "KimiDelta"]


class DeltaRule(AttentionKind):
    """A Gated DeltaNet layer (module docstring)."""

    spec_type = GatedDeltaNet
    label = "Gated DeltaNet"

    prefix = "gdn"
    """Its ops' prefix (``gdn_proj``...) and the ``KernelTimes`` method of its fitted curves."""

    def projections(self, a: GatedDeltaNet, t: int, H: int, store: str, nk: int, nv: int) -> tuple[Work, ...]:
        """The input projections of ``t`` tokens on a rank of ``nk`` key and ``nv`` value heads: ``in_proj_qkvz``
        and ``in_proj_ba``."""
        qkvz = 2 * nk * a.key_head_dim + 2 * nv * a.value_head_dim
        return gemm(t, qkvz, H, store), gemm(t, 2 * nv, H, store)

    def gating(self, a: GatedDeltaNet, nk: int, nv: int) -> int:
        """Values a token's decay and strength gating reads and writes: a decay and a strength a value head."""
        return 2 * nv

    def costs(self, w: Workload, a: GatedDeltaNet, t: int, layer: int, fold: Folder) -> AttentionCosts:
        H, store, tp = w.spec.hidden_size, w.spec.precision.weights, w.attention_tp
        nk, nv = max(1, a.key_heads // tp), max(1, a.value_heads // tp)
        dk, dv = a.key_head_dim, a.value_head_dim
        op, curve = self.prefix, getattr(fold.kernels, self.prefix)
        proj = fold.named(f"{op}_proj")(*self.projections(a, t, H, store, nk, nv), memory_pass(t, H, 2))
        channels = 2 * nk * dk + nv * dv  # the convolution's: query, key and value
        flops, nbytes = conv_work(w.phase, t, w.context, channels, a.conv_kernel)
        conv_s = curve("conv", w.phase, flops, nbytes)
        conv = fold.named(f"{op}_conv")(Work(seconds=conv_s, bytes=nbytes), memory_pass(t, self.gating(a, nk, nv), 1))
        flops, nbytes = delta_rule_work(w.phase, t, w.context, nv, dk, dv, key_heads=nk)
        chain = delta_rule_chunks(w.phase, t, w.context)
        core = Work(seconds=curve("delta_rule", w.phase, flops, nbytes, chain), bytes=nbytes, dtype="bfloat16")
        ostore = w.spec.precision.store("attention_out")
        out = fold.named(f"{op}_out")(memory_pass(t, nv * dv, 1.5), gemm(t, H, nv * dv, ostore))
        names = (f"{op}_proj", f"{op}_recurrent" if w.phase == Phase.DECODE else f"{op}_chunk", f"{op}_out")
        return AttentionCosts(proj, core, out, (flops, nbytes), extra=((f"{op}_conv", conv),), names=names)

    def cost_key(self, a: GatedDeltaNet, layer: int) -> Hashable:
        return "linear_attention"

    def weights(self, a: GatedDeltaNet, H: int, C: int, rand: Callable) -> SimpleNamespace:
        L = SimpleNamespace()
        dk, dv = a.key_head_dim, a.value_head_dim
        L.w_qkvz = rand((H, 2 * a.key_dim + 2 * a.value_dim), H**-0.5)
        L.w_ba = rand((H, 2 * a.value_heads), H**-0.5)
        L.w_conv = rand((a.conv_dim, a.conv_kernel), a.conv_kernel**-0.5)
        L.conv_state = rand((a.conv_dim, a.conv_kernel - 1), 1.0)
        L.state = rand((a.value_heads, dk, dv), dk**-0.5)
        L.w_o = rand((a.value_dim, H), a.value_dim**-0.5)
        return L

    def launch(self, run, a: GatedDeltaNet, L, h, t, costs, layer, ub, dt) -> None:
        qkvz, ba, o = run.workspace(
            ((t, 2 * a.key_dim + 2 * a.value_dim), dt), ((t, 2 * a.value_heads), dt), ((t, a.value_dim), dt)
        )
        w = (None, None) if L is None else (L.w_qkvz, L.w_ba)
        run(costs, "gdn_proj", K.gdn_proj_kernel, h, *w, qkvz, ba, layer=layer, ub=ub)
        w = (None, None) if L is None else (L.w_conv, L.conv_state)
        run(costs, "gdn_conv", K.gdn_conv_kernel, qkvz, *w, a.conv_dim, layer=layer, ub=ub)
        core = "gdn_recurrent" if "gdn_recurrent" in costs else "gdn_chunk"
        s0 = None if L is None else L.state
        run(costs, core, K.gdn_delta_kernel, qkvz, ba, s0, a.key_heads, o, layer=layer, ub=ub)
        run(costs, "gdn_out", K.gdn_out_kernel, o, qkvz, None if L is None else L.w_o, h, layer=layer, ub=ub)


class KimiDelta(DeltaRule):
    """A Kimi Delta Attention layer (``KimiDeltaAttention``; Kimi-K3's ``kda_layers``). Its ops, in launch order:

    * ``kda_proj``: the input norm, ``q_proj``/``k_proj``/``v_proj`` and the output gate (``g_proj``, full rank,
      or its rank-``head_dim`` pair), the decay gate's ``f_a_proj``/``f_b_proj`` and ``b_proj``;
    * ``kda_conv``: the three short convolutions (``KernelTimes.kda`` "conv", fitted to SGLang's
      ``causal_conv1d`` kernels of Kimi-K3) and the per-channel decay and strength gating (a memory pass);
    * ``kda_recurrent`` (decode) or ``kda_chunk`` (prefill): the delta rule with a decay per key channel,
      its work counted as a Gated DeltaNet layer's (``delta_rule_work``) and timed on the KDA curves;
    * ``kda_out``: the gated RMSNorm (sigmoid of the output gate) and ``o_proj``.

    Attention TP splits the heads (``heads / attention_tp`` states per request and rank); ``f_a_proj`` and the
    low-rank gate's first half are replicated. Real math as ``DeltaRule``'s: each token one update of the
    layer's random initial state, its decay per key channel."""

    spec_type = KimiDeltaAttention
    label = "KDA"

    prefix = "kda"

    def projections(self, a: KimiDeltaAttention, t: int, H: int, store: str, nk: int, nv: int) -> tuple[Work, ...]:
        """``q_proj``/``k_proj``/``v_proj``, the output gate (full rank or its rank-``head_dim`` pair), the decay
        gate's ``f_a_proj``/``f_b_proj`` and ``b_proj``, on a rank of ``nv`` heads."""
        d = a.head_dim
        p = nv * d
        gate = (gemm(t, p, H, store),) if a.full_rank_gate else (gemm(t, d, H, store), gemm(t, p, d, store))
        decay = (gemm(t, d, H, store), gemm(t, p, d, store), gemm(t, nv, H, store))
        return gemm(t, 3 * p, H, store), *gate, *decay

    def gating(self, a: KimiDeltaAttention, nk: int, nv: int) -> int:
        """A decay per key channel and a strength a head."""
        return nv * a.head_dim + nv

    def weights(self, a: KimiDeltaAttention, H: int, C: int, rand: Callable) -> SimpleNamespace:
        L = SimpleNamespace()
        p, d = a.key_dim, a.head_dim
        L.w_qkvg = rand((H, 4 * p), H**-0.5)  # q, k, v and the output gate (full rank, as Kimi-K3's)
        L.w_fa, L.w_fb = rand((H, d), H**-0.5), rand((d, p), d**-0.5)
        L.w_b = rand((H, a.heads), H**-0.5)
        L.w_conv = rand((a.conv_dim, a.conv_kernel), a.conv_kernel**-0.5)
        L.conv_state = rand((a.conv_dim, a.conv_kernel - 1), 1.0)
        L.state = rand((a.heads, d, d), d**-0.5)
        L.w_o = rand((p, H), p**-0.5)
        return L

    def launch(self, run, a: KimiDeltaAttention, L, h, t, costs, layer, ub, dt) -> None:
        p = a.key_dim
        qkvg, fb, o = run.workspace(((t, 4 * p), dt), ((t, p + a.heads), dt), ((t, p), dt))
        w = (None,) * 4 if L is None else (L.w_qkvg, L.w_fa, L.w_fb, L.w_b)
        run(costs, "kda_proj", K.kda_proj_kernel, h, *w, qkvg, fb, layer=layer, ub=ub)
        w = (None, None) if L is None else (L.w_conv, L.conv_state)
        run(costs, "kda_conv", K.gdn_conv_kernel, qkvg, *w, a.conv_dim, layer=layer, ub=ub)
        core = "kda_recurrent" if "kda_recurrent" in costs else "kda_chunk"
        run(costs, core, K.kda_delta_kernel, qkvg, fb, None if L is None else L.state, o, layer=layer, ub=ub)
        run(costs, "kda_out", K.kda_out_kernel, o, qkvg, None if L is None else L.w_o, h, layer=layer, ub=ub)
