"""``ZooModel``: one generic transformer for every architecture of the zoo, written against ``dbo`` and
``workspace`` as the toy MoE is.

Per layer: attention by kind (``demos.zoo.attention``: MLA absorbed, GQA/MHA), then a dense gated MLP
(the first ``first_k_dense`` layers) or the MoE block (``demos.zoo.moe``: router, dispatch, routed
experts, combine, shared experts, finalize, in the schedule that places its yields as vLLM's DBO does
with DeepEP). Dense layers never yield. Without DBO every ``dbo_*`` call is a no-op, so the same code is
the reference. Every op is launched by name with the cost the step's plan gives it (``demos.zoo.plan``),
and declares its op and layer (``demos.zoo.ops``).

Two ways to run (``device``):

* ``"meta"``, at full size on ``virtual``: no weights and nothing proportional to tokens is allocated;
  every kernel is the meta stand-in and carries its modelled cost. The workspace requests still have
  their real shapes (meta views), so the manager's slot sizes are the real ones.
* ``"cpu"``, real float32 math at a shrunken size (``demos.zoo.models.shrink``) on ``threads`` or
  ``inline`` (``demos.zoo.kernels``); a single process plays every expert's owner, so the all-to-all
  is a copy with the modelled time of the cluster's all-to-all.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

import dbo
from demos.zoo import compressed_kernels as CK
from demos.zoo import kernels as K
from demos.zoo.attention import layer_attention
from demos.zoo.kernel_times import KernelTimes
from demos.zoo.launch import Launcher
from demos.zoo.moe import MoEBlock
from demos.zoo.plan import LayerPlan, StepPlan, UbatchPlan
from demos.zoo.workload import Workload

__all__ = ["ZooModel"]


class ZooModel:
    """The generic transformer of ``workload`` (module docstring). ``forward(rows)`` is a ubatch's body;
    ``hidden`` holds the result. ``profile``: the DeviceProfile the ops are costed for, ``kernels``:
    where kernel times come from (``demos.zoo.plan.StepPlan``)."""

    def __init__(
        self,
        workload: Workload,
        *,
        num_ubatches: int,
        device: str = "meta",
        profile: Any,
        seed: int = 0,
        kernels: KernelTimes | None = None,
        real_context: int = 16,
    ):
        self.w = workload
        self.spec = s = workload.spec
        self.device = torch.device(device)
        self.meta = self.device.type == "meta"
        self.dtype = torch.bfloat16 if self.meta else torch.float32
        self.plan = StepPlan(workload, profile, kernels)
        self.attention = [layer_attention(s.attention, i) for i in range(s.num_layers)]  # (kind, spec) per layer
        self.run = Launcher(self.meta)
        T, H = workload.tokens, s.hidden_size
        self._gen = torch.Generator().manual_seed(seed)
        hc = s.hc_mult
        if self.meta:
            self.layers = [None] * s.num_layers
            self.x0 = self.hidden = torch.empty((T, H), dtype=self.dtype, device="meta")
            self.stream = torch.empty((T, hc, H), dtype=self.dtype, device="meta") if hc > 1 else None
        else:
            self.real_context = real_context
            self.layers = [self._make_layer(i) for i in range(s.num_layers)]
            self.x0 = self._rand((T, H), 1.0)
            self.hidden = torch.zeros((T, H), dtype=self.dtype)
            self.stream = torch.zeros((T, hc, H), dtype=self.dtype) if hc > 1 else None
        self.moe = MoEBlock(s, workload, self.run, self.layers, num_ubatches, self.meta)

    @property
    def sbo(self) -> bool:
        """Whether the MoE layers run single-batch overlap (``ZooRun`` sets it for that step)."""
        return self.moe.sbo

    @sbo.setter
    def sbo(self, on: bool) -> None:
        self.moe.sbo = on

    @property
    def fused(self) -> bool:
        """Whether the MoE layers run DeepGEMM's fused MoE kernel (``ZooRun`` sets it for that step)."""
        return self.moe.fused

    @fused.setter
    def fused(self, on: bool) -> None:
        self.moe.fused = on

    # -- construction -------------------------------------------------------------------------------
    def _rand(self, shape: tuple[int, ...], scale: float) -> torch.Tensor:
        return torch.randn(shape, generator=self._gen, dtype=torch.float32).mul_(scale)

    def _make_layer(self, i: int) -> SimpleNamespace:
        """Layer ``i``'s real-math weights: its attention kind's, then its MLP's."""
        s, H = self.spec, self.spec.hidden_size
        kind, a = self.attention[i]
        L = kind.weights(a, H, self.real_context, self._rand)
        if s.hc_mult > 1:  # the wide residual's mixing weights, per sub-layer: (pre, comb, post)
            hc = s.hc_mult
            L.hc = [(self._rand((hc,), 1.0), self._rand((hc, hc), 1.0), self._rand((hc,), 0.5)) for _ in range(2)]
        if not s.is_moe_layer(i):
            inter = s.dense_intermediate_size
            L.w1, L.w2 = self._rand((H, 2 * inter), H**-0.5), self._rand((inter, H), inter**-0.5)
            return L
        m = s.moe
        E, inter = m.routed_experts, m.intermediate_size
        L.w_gate = self._rand((H, E), H**-0.5)
        L.bias = self._rand((E,), 0.1) if m.score_correction_bias else None
        Hr = s.routed_width  # a latent MoE's experts run at its width, between two projections
        L.w1 = self._rand((E, Hr, 2 * inter), Hr**-0.5)
        L.w2 = self._rand((E, inter, Hr), inter**-0.5)
        if Hr != H:
            L.w_down, L.w_up = self._rand((H, Hr), H**-0.5), self._rand((Hr, H), Hr**-0.5)
        if m.shared_experts:
            si = inter * m.shared_experts
            L.ws1, L.ws2 = self._rand((H, 2 * si), H**-0.5), self._rand((si, H), si**-0.5)
        return L

    def ubatch_plan(self, t: int) -> UbatchPlan:
        """The plan of a ubatch of ``t`` tokens (built once per size)."""
        return self.plan.ubatch(t)

    # -- the ubatch body ----------------------------------------------------------------------------
    def forward(self, rows: range) -> torch.Tensor:
        """Every layer for the tokens ``rows`` of the batch; returns the ubatch's rows of ``hidden``."""
        ub = dbo.dbo_current_ubatch_id()
        t = len(rows)
        h = self.hidden[rows.start : rows.stop]
        wide = None if self.stream is None else self.stream[rows.start : rows.stop]
        plan = self.plan.ubatch(t)
        x0 = self.x0[rows.start : rows.stop]
        if wide is None:
            self.run(plan.embed, "embed", K.embed_kernel, x0, h, layer=0, ub=ub)
        else:
            self.run(plan.embed, "embed", CK.wide_embed_kernel, x0, h, wide, layer=0, ub=ub)
        self._collective(plan.embed, "tp_embed_reduce", 0, ub)
        for i, lp in enumerate(plan.layers):
            kind, a = self.attention[i]
            self._mhc(lp.plain, "mhc_attn_pre", i, 0, h, wide, ub)
            kind.launch(self.run, a, self.layers[i], h, t, lp.plain, i, ub, self.dtype)
            self._collective(lp.plain, "tp_attn_reduce", i, ub)
            self._mhc(lp.plain, "mhc_attn_post", i, 0, h, wide, ub)
            self._mhc(lp.plain, "mhc_mlp_pre", i, 1, h, wide, ub)
            if lp.moe:
                self.moe.forward(i, h, t, ub, lp)
                self._mhc(lp.plain, "mhc_mlp_post", i, 1, h, wide, ub)
                self._collective(lp.plain, "tp_moe_gather", i, ub)
            else:
                self._dense(i, h, t, ub, lp)
                self._mhc(lp.plain, "mhc_mlp_post", i, 1, h, wide, ub)
            self._collective(lp.plain, "tp_mlp_reduce", i, ub)
        return h

    def _mhc(self, costs: Any, name: str, i: int, site: int, h: torch.Tensor, wide: Any, ub: int) -> None:
        """A wide residual's pre or post kernel of sub-layer ``site`` (0 attention, 1 MLP) where the plan
        holds it (``demos.zoo.compressed_kernels``: ``h`` from the stream's rows, or back into them)."""
        if name not in costs:
            return
        L = self.layers[i]
        pre, comb, post = (None, None, None) if L is None else L.hc[site]
        if name.endswith("_pre"):
            self.run(costs, name, CK.mhc_pre_kernel, wide, pre, h, layer=i, ub=ub)
        else:
            self.run(costs, name, CK.mhc_post_kernel, h, comb, post, wide, layer=i, ub=ub)

    def _collective(self, costs: Any, name: str, i: int, ub: int) -> None:
        """An attention-TP collective the plan holds, on the compute stream (as vLLM runs it); moves nothing."""
        if name in costs:
            self.run(costs, name, K.meta_kernel, layer=i, ub=ub)

    def _dense(self, i: int, h: torch.Tensor, t: int, ub: int, lp: LayerPlan) -> None:
        inter, dt = self.spec.dense_intermediate_size, self.dtype
        hbuf, out = self.run.workspace(((t, 2 * inter), dt), ((t, self.spec.hidden_size), dt))
        L = self.layers[i]
        w = (None, None) if L is None else (L.w1, L.w2)
        self.run(lp.plain, "dense_mlp", K.dense_kernel, h, *w, hbuf, out, layer=i, ub=ub)
