"""``GatedDeltaNet``: the linear-attention layers of a hybrid model (Qwen3-Next, Qwen3.5), as pure data.

A Gated DeltaNet layer (Yang, Kautz and Hatamizadeh, "Gated Delta Networks", 2024; Qwen3-Next's and
Qwen3.5's ``linear_attention`` layers) keeps no KV cache: each value head carries a fixed-size recurrent
state of ``key_head_dim x value_head_dim`` (FP32 in the engines, ``mamba_ssm_dtype``), updated once per
token by a gated delta rule, and a short causal convolution over the last ``conv_kernel`` tokens of its
query, key and value channels (its conv state: ``conv_kernel - 1`` tokens of them). ``key_heads`` query and
key heads of ``key_head_dim``, ``value_heads`` value heads of ``value_head_dim`` (a multiple of the key
heads: value heads share a key head, as GQA's query heads share a KV head).

The per-layer layout is the model's attention's ``layer_types`` (``GQAAttention``: ``linear_attention``
layers use this spec, the others full attention), as the config.json files give it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from demos.zoo.models._checks import ModelSpecError, check_int

__all__ = ["GatedDeltaNet", "KimiDeltaAttention", "linear_of"]

STATE_BYTES = 4
"""Bytes of one recurrent-state value: FP32, as both engines keep it (Qwen3.5's ``mamba_ssm_dtype``)."""


@dataclass(frozen=True)
class GatedDeltaNet:
    """A Gated DeltaNet linear-attention layer (module docstring)."""

    key_heads: int
    value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int = 4

    kind = "gated_deltanet"

    def __post_init__(self) -> None:
        for name in ("key_heads", "value_heads", "key_head_dim", "value_head_dim"):
            check_int("GatedDeltaNet", name, getattr(self, name), minimum=1)
        if self.value_heads % self.key_heads:
            raise ModelSpecError(
                "GatedDeltaNet.value_heads",
                f"must be a multiple of key_heads ({self.key_heads}), got {self.value_heads}",
            )
        check_int("GatedDeltaNet", "conv_kernel", self.conv_kernel, minimum=1)

    @property
    def key_dim(self) -> int:
        """Query (and key) channels: ``key_heads x key_head_dim``."""
        return self.key_heads * self.key_head_dim

    @property
    def value_dim(self) -> int:
        """Value (and output gate) channels: ``value_heads x value_head_dim``."""
        return self.value_heads * self.value_head_dim

    @property
    def conv_dim(self) -> int:
        """Channels the causal convolution runs over: query, key and value."""
        return 2 * self.key_dim + self.value_dim

    def state_bytes(self, value_heads: int | None = None, conv_bytes: float = 2.0) -> float:
        """Bytes one request holds in one layer for ``value_heads`` of its heads (default all): the
        recurrent states (FP32) and the conv state (``conv_kernel - 1`` tokens of the conv channels, in
        ``conv_bytes`` per value), the query/key channels split as the value heads are."""
        nv = self.value_heads if value_heads is None else value_heads
        share = nv / self.value_heads
        recurrent = nv * self.key_head_dim * self.value_head_dim * STATE_BYTES
        return recurrent + share * self.conv_dim * (self.conv_kernel - 1) * conv_bytes


@dataclass(frozen=True)
class KimiDeltaAttention:
    """A Kimi Delta Attention (KDA) linear-attention layer (Kimi Linear, Kimi-K3's ``linear_attn_config``).

    KDA is a gated delta rule whose decay is per key channel rather than per head: ``heads`` heads, each
    with a ``head_dim x head_dim`` FP32 recurrent state, a short causal convolution of ``conv_kernel`` over
    the query, key and value channels (each ``heads x head_dim``). Its projections (Moonshot's layer, as the
    published checkpoints name the weights): ``q_proj``, ``k_proj``, ``v_proj`` (hidden -> ``heads x
    head_dim`` each), the decay gate through a rank-``head_dim`` pair (``f_a_proj``, ``f_b_proj``), the
    write strength ``b_proj`` (hidden -> ``heads``), the output gate full rank (``g_proj``, hidden -> ``heads x
    head_dim``) when ``full_rank_gate`` (Kimi-K3) else through a rank-``head_dim`` pair (Kimi Linear), a gated
    RMSNorm and ``o_proj`` back to hidden. The same layout as ``GatedDeltaNet`` with as many key heads as
    value heads, so the memory and work formulas are shared (``key_heads``, ``value_heads``...).
    """

    heads: int
    head_dim: int
    conv_kernel: int = 4
    full_rank_gate: bool = True

    kind = "kda"

    def __post_init__(self) -> None:
        for name in ("heads", "head_dim", "conv_kernel"):
            check_int("KimiDeltaAttention", name, getattr(self, name), minimum=1)
        if not isinstance(self.full_rank_gate, bool):
            raise ModelSpecError(
                "KimiDeltaAttention.full_rank_gate", f"must be a bool, got {type(self.full_rank_gate).__name__}"
            )

    @property
    def key_heads(self) -> int:
        return self.heads

    @property
    def value_heads(self) -> int:
        return self.heads

    @property
    def key_head_dim(self) -> int:
        return self.head_dim

    @property
    def value_head_dim(self) -> int:
        return self.head_dim

    @property
    def key_dim(self) -> int:
        """Query (and key, and value) channels: ``heads x head_dim``."""
        return self.heads * self.head_dim

    value_dim = key_dim

    @property
    def conv_dim(self) -> int:
        """Channels the causal convolution runs over: query, key and value."""
        return 3 * self.key_dim

    state_bytes = GatedDeltaNet.state_bytes


def linear_of(attention: Any, layer: int) -> GatedDeltaNet | KimiDeltaAttention | None:
    """The linear-attention spec of layer ``layer`` of a model whose attention spec is ``attention``: its
    ``linear`` where its ``layer_types`` mark the layer ``linear_attention`` (a hybrid model: Qwen3.5's
    ``GQAAttention``, Kimi-K3's ``HybridMLAAttention``), None for any other layer or model. Everything that
    tells a linear layer from the others (its kind, its parameters, its cache) asks this."""
    linear = getattr(attention, "linear", None)
    return linear if linear is not None and attention.is_linear(layer) else None
