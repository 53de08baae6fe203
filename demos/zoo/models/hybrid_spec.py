"""``HybridMLAAttention``: MLA in some layers, Kimi Delta Attention in the others (Kimi-K3), as pure data.

Kimi-K3 (``kimi_k3``; its text model ``kimi_linear``) runs multi-head latent attention in every fourth layer
and KDA linear attention (``demos.zoo.models.linear_spec.KimiDeltaAttention``) in the other three, as its
``linear_attn_config`` lists them. Its MLA layers are DeepSeek's (``MLAAttention``'s fields) with two changes
that cost: no rotary embedding (``mla_use_nope``: the 64 decoupled dims are still projected and cached; the
rotation is not run, which costs nothing the step model counts) and an output gate (``output_gate``: a
full-rank ``g_proj`` from the hidden state to ``heads x v_head_dim``, its sigmoid multiplied into the
attention's output before ``o_proj``).
"""

from __future__ import annotations

from dataclasses import dataclass

from demos.zoo.models._checks import ModelSpecError, check_bool
from demos.zoo.models.linear_spec import KimiDeltaAttention
from demos.zoo.models.spec import MLAAttention

__all__ = ["HYBRID_LAYER_TYPES", "HybridMLAAttention"]

HYBRID_LAYER_TYPES = ("full_attention", "linear_attention")


@dataclass(frozen=True)
class HybridMLAAttention(MLAAttention):
    """MLA layers beside KDA layers (module docstring): ``layer_types`` one entry a layer,
    ``"full_attention"`` (this MLA) or ``"linear_attention"`` (``linear``)."""

    layer_types: tuple[str, ...] = ()
    linear: KimiDeltaAttention | None = None
    output_gate: bool = False

    kind = "hybrid_mla"

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.layer_types, tuple) or not self.layer_types:
            raise ModelSpecError(
                "HybridMLAAttention.layer_types", f"must be a non-empty tuple, got {self.layer_types!r}"
            )
        for i, t in enumerate(self.layer_types):
            if t not in HYBRID_LAYER_TYPES:
                raise ModelSpecError(
                    "HybridMLAAttention.layer_types",
                    f"entry {i} must be one of {', '.join(HYBRID_LAYER_TYPES)}, got {t!r}",
                )
        if not isinstance(self.linear, KimiDeltaAttention):
            raise ModelSpecError(
                "HybridMLAAttention.linear", f"must be a KimiDeltaAttention, got {type(self.linear).__name__}"
            )
        check_bool("HybridMLAAttention", "output_gate", self.output_gate)

    def is_linear(self, layer: int) -> bool:
        """Whether ``layer`` is a KDA layer (``linear``) rather than this MLA."""
        return self.layer_types[layer] == "linear_attention"
