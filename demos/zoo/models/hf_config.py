"""Read a HuggingFace ``config.json`` into a ``ModelSpec``: ``load_config(path)``, ``spec_from_config(dict)``.

Supported ``model_type`` values (the field names are those of the published configs, docs/models.md):

* ``deepseek_v3``, ``deepseek_v2``, ``kimi_k2`` (Kimi K2 reuses DeepSeek-V3's architecture and fields):
  MLA attention, ``first_k_dense_replace`` dense layers, routed + shared experts, grouped routing;
* ``glm4_moe`` (GLM-4.5, GLM-4.5-Air, GLM-4.6): GQA with q/k/v biases and optional q/k norms over
  DeepSeek-V3's MoE layout (dense first layers, routed + shared experts, sigmoid routing, MTP);
* ``qwen3_moe``: GQA with per-head q/k norms, routed experts only;
* ``mixtral``: GQA, routed experts of ``intermediate_size``, every layer MoE;
* ``gpt_oss``: GQA with biases and attention sinks, ``layer_types`` alternating sliding and full attention,
  biased router and experts, MXFP4 experts;
* ``kimi_k25`` (Kimi-K2.5, and NVIDIA's NVFP4 copies of K2.5 to K2.7): Kimi K2's text model nested in
  ``text_config`` (its fields are named ``text_config.field``), the vision tower not modelled;
* ``minimax_m2`` (MiniMax-M2.5, M2.7): GQA with q/k norms, 256 routed experts, sigmoid routing with the
  correction bias, no shared expert.

``NOT_EXPRESSIBLE`` names the MoE families the loader knows and refuses (DeepSeek-V4 and -V3.2, GLM-5,
Qwen3.5 and Qwen3-Next, MiniMax-M3 and -Text-01, Kimi-K3 and Kimi Linear), each refused in one line saying
what the spec cannot express of it.

Contract: anything wrong with the file is one ``ModelConfigError`` whose one-line message names the file
(or the ``source`` given to ``spec_from_config``) and the field, e.g. ``config.json: missing field
'num_experts_per_tok' (model_type qwen3_moe)``: an unreadable file, text that is not JSON, a top level that
is not an object, an unknown ``model_type``, a missing or wrongly typed field, a value the spec rejects
(``top_k`` above the expert count...) and a layout this spec cannot express (``moe_layer_freq`` != 1,
Qwen's ``mlp_only_layers``...). Fields the simulator does not need (rope scaling, token ids...) are not read.

Precision: config.json gives the weight dtypes (``torch_dtype``, or transformers 5's ``dtype``, bfloat16 when
neither is there; and ``quantization_config``: ``fp8`` (``fmt`` e4m3, e5m2, or as torch spells them),
``mxfp4``, ``compressed-tensors`` INT4 in groups of 32 (W4A16, Kimi-K2.5's experts: ``int4_g32``) or
``modelopt`` NVFP4 (NVIDIA's checkpoints: ``nvfp4``); the 4-bit formats cover the routed experts only) but no
communication or cache dtypes, so those follow one rule unless ``precision`` is passed (a modelopt config's
``kv_cache_scheme`` is not read): dispatch is FP8 when the expert weights are FP8
(FP8 expert GEMMs take FP8 inputs, as DeepSeek-V3 deploys, tech report §3.3.3), else the activation dtype;
combine and the KV cache use the activation dtype.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from demos.zoo.models.spec import (
    SCORING_FUNCS,
    GQAAttention,
    MLAAttention,
    ModelSpec,
    ModelSpecError,
    MoESpec,
    Precision,
)

__all__ = ["NOT_EXPRESSIBLE", "SUPPORTED_MODEL_TYPES", "ModelConfigError", "load_config", "spec_from_config"]


class ModelConfigError(ValueError):
    """A config.json that cannot become a ModelSpec; the message is one line naming the file and the field."""


_ACTIVATION_DTYPES = ("bfloat16", "float16", "float32")
_DEFAULT_DTYPE = "bfloat16"  # when config.json has neither torch_dtype nor dtype (gpt-oss-120b)
_MISSING = object()


def _is_one(value: Any) -> bool:
    return type(value) is int and value == 1


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class _Fields:
    """Typed reads of one config dict; every failure is a ModelConfigError naming source and field.

    ``prefix`` qualifies the fields of a nested object (``quantization_config.``) in messages.
    """

    def __init__(self, config: Mapping[str, Any], source: str, model_type: str, prefix: str = "") -> None:
        self.config, self.source, self.model_type, self.prefix = config, source, model_type, prefix

    def fail(self, field: str, reason: str) -> ModelConfigError:
        where = f"{self.prefix}{field}"
        return ModelConfigError(f"{self.source}: field '{where}' {reason} (model_type {self.model_type})")

    def has(self, field: str) -> bool:
        return field in self.config

    def _get(self, field: str, default: Any) -> Any:
        value = self.config.get(field, _MISSING)
        if value is _MISSING:
            if default is _MISSING:
                where = f"{self.prefix}{field}"
                raise ModelConfigError(f"{self.source}: missing field '{where}' (model_type {self.model_type})")
            return default
        return value

    def get_int(self, field: str, default: Any = _MISSING, *, nullable: bool = False) -> Any:
        value = self._get(field, default)
        if value is None and nullable:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            what = "an integer or null" if nullable else "an integer"
            raise self.fail(field, f"must be {what}, got {type(value).__name__} {_show(value)}")
        return value

    def get_float(self, field: str, default: Any = _MISSING) -> float:
        value = self._get(field, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(field, f"must be a number, got {type(value).__name__} {_show(value)}")
        return float(value)

    def get_bool(self, field: str, default: Any = _MISSING) -> bool:
        value = self._get(field, default)
        if not isinstance(value, bool):
            raise self.fail(field, f"must be true or false, got {type(value).__name__} {_show(value)}")
        return value

    def get_choice(self, field: str, choices: tuple[str, ...], default: Any = _MISSING) -> str:
        value = self._get(field, default)
        if not isinstance(value, str):
            raise self.fail(field, f"must be a string, got {type(value).__name__} {_show(value)}")
        if value not in choices:
            raise self.fail(field, f"is {value!r}, not one of {', '.join(choices)}")
        return value

    def get_object(self, field: str, default: Any = _MISSING) -> Mapping[str, Any] | None:
        """A nested object (``text_config``, ``quantization_config``); None where ``default`` is None and the
        field is absent or null."""
        value = self._get(field, default)
        if value is None and default is None:
            return None
        if not isinstance(value, Mapping):
            what = "an object or null" if default is None else "an object"
            raise self.fail(field, f"must be {what}, got {type(value).__name__} {_show(value)}")
        return value

    def nested(self, field: str, config: Mapping[str, Any]) -> _Fields:
        """The fields of the object ``config`` read from ``field``, named ``field.name`` in messages."""
        return _Fields(config, self.source, self.model_type, prefix=f"{self.prefix}{field}.")

    def get_str_list(self, field: str) -> tuple[str, ...]:
        value = self._get(field, _MISSING)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(field, f"must be a list of strings, got {type(value).__name__} {_show(value)}")
        return tuple(value)

    def unsupported_unless(self, field: str, default: Any, ok: Callable[[Any], bool], what: str) -> None:
        """Fail when ``field`` (``default`` when absent) holds a layout the spec cannot express."""
        value = self.config.get(field, default)
        if not ok(value):
            raise self.fail(field, f"is {_show(value)}: {what} is not supported")

    def precision(self, *, expert_only_quant: bool, quant: _Fields | None = None) -> Precision:
        """Weight dtypes from torch_dtype (or dtype, default bfloat16) and quantization_config; the rest by rule.

        ``expert_only_quant``: an ``fp8`` quantization covers the routed experts only (gpt-oss keeps attention,
        router, embeddings and head in the activation dtype); the 4-bit formats always do. ``quant``: the
        fields holding ``quantization_config`` when they are not these (Kimi-K2.5's NVFP4 configs hold it at
        the top level, beside ``text_config``).
        """
        field = "dtype" if self.has("dtype") and not self.has("torch_dtype") else "torch_dtype"
        act = self.get_choice(field, _ACTIVATION_DTYPES, _DEFAULT_DTYPE)
        weights = experts = act
        where = self if quant is None else quant
        config = where.get_object("quantization_config", None)
        if config is not None:
            q = where.nested("quantization_config", config)
            method = q.get_choice("quant_method", _QUANT_METHODS)
            if method == "fp8":
                experts = _FP8_FORMATS[q.get_choice("fmt", tuple(_FP8_FORMATS), "e4m3")]
                weights = act if expert_only_quant else experts
            elif method == "mxfp4":
                experts = "mxfp4"
            elif method == "compressed-tensors":
                experts = _compressed_tensors(q)
            else:
                q.unsupported_unless(
                    "quant_algo", None, lambda v: v == "NVFP4", "a modelopt algorithm other than NVFP4"
                )
                experts = "nvfp4"
        dispatch = experts if experts.startswith("fp8") else act
        return Precision(weights=weights, experts=experts, dispatch=dispatch, combine=act, kv_cache=act)


_QUANT_METHODS = ("fp8", "mxfp4", "compressed-tensors", "modelopt")
_FP8_FORMATS = {"e4m3": "fp8_e4m3", "e5m2": "fp8_e5m2", "float8_e4m3fn": "fp8_e4m3", "float8_e5m2": "fp8_e5m2"}
"""``quantization_config.fmt`` -> the storage dtype (MiniMax spells the E4M3 format as torch names it)."""


def _compressed_tensors(q: _Fields) -> str:
    """The expert dtype of a compressed-tensors ``quantization_config``: one config group of symmetric INT4
    weights in groups of 32 with BF16 activations (W4A16, Kimi-K2.5's ``pack-quantized`` experts), or the
    field that holds anything else, named."""
    q.unsupported_unless(
        "format", None, lambda v: v == "pack-quantized", "a compressed-tensors format other than pack-quantized"
    )
    groups = q.get_object("config_groups")
    if len(groups) != 1:
        raise q.fail("config_groups", f"has {len(groups)} groups: only one (the routed experts) is supported")
    ((name, group),) = groups.items()
    g = q.nested(f"config_groups.{name}", group) if isinstance(group, Mapping) else None
    if g is None:
        raise q.fail(f"config_groups.{name}", f"must be an object, got {type(group).__name__} {_show(group)}")
    g.unsupported_unless("input_activations", None, lambda v: v is None, "quantized activations")
    w = g.nested("weights", g.get_object("weights"))
    w.unsupported_unless("num_bits", None, lambda v: type(v) is int and v == 4, "a bit width other than 4")
    w.unsupported_unless("type", None, lambda v: v == "int", "a weight type other than int")
    w.unsupported_unless("strategy", None, lambda v: v == "group", "a strategy other than group")
    w.unsupported_unless("group_size", None, lambda v: type(v) is int and v == 32, "a group size other than 32")
    w.unsupported_unless("symmetric", True, lambda v: v is True, "asymmetric INT4 (a zero point per group)")
    return "int4_g32"


def _routed_and_shared(f: _Fields, scoring: str, correction_bias: bool) -> MoESpec:
    """DeepSeek's MoE fields (deepseek_v2/v3, kimi_k2, glm4_moe): routed + shared experts, grouped routing."""
    return MoESpec(
        routed_experts=f.get_int("n_routed_experts"),
        top_k=f.get_int("num_experts_per_tok"),
        intermediate_size=f.get_int("moe_intermediate_size"),
        shared_experts=f.get_int("n_shared_experts"),
        scoring=scoring,
        norm_topk_prob=f.get_bool("norm_topk_prob"),
        routed_scaling_factor=f.get_float("routed_scaling_factor"),
        n_group=f.get_int("n_group"),
        topk_group=f.get_int("topk_group"),
        score_correction_bias=correction_bias,
    )


def _spec(
    f: _Fields,
    name: str,
    source: str,
    attention: Any,
    moe: MoESpec,
    *,
    dense_first: bool,
    precision: Precision | None = None,
) -> ModelSpec:
    """The trunk around ``attention`` and ``moe``: every layer an MoE layer, or (``dense_first``) DeepSeek's
    ``first_k_dense_replace`` dense layers of ``intermediate_size`` first and its MTP modules beside. An
    ``fp8`` quantization covers every weight but gpt-oss's, which covers its experts only; ``precision``
    replaces what ``f`` gives (Kimi-K2.5's, read beside its ``text_config``)."""
    first_k = f.get_int("first_k_dense_replace") if dense_first else 0
    return ModelSpec(
        name=name,
        source=source,
        model_type=f.model_type,
        hidden_size=f.get_int("hidden_size"),
        num_layers=f.get_int("num_hidden_layers"),
        vocab_size=f.get_int("vocab_size"),
        first_k_dense=first_k,
        dense_intermediate_size=f.get_int("intermediate_size") if first_k else None,
        attention=attention,
        moe=moe,
        tie_embeddings=f.get_bool("tie_word_embeddings", False),
        precision=precision or f.precision(expert_only_quant=f.model_type == "gpt_oss"),
        mtp_layers=f.get_int("num_nextn_predict_layers", 0) if dense_first else 0,
    )


def _deepseek(f: _Fields, name: str, source: str, precision: Precision | None = None) -> ModelSpec:
    """deepseek_v2 / deepseek_v3 / kimi_k2: the fields of DeepSeek's configuration_deepseek.py."""
    f.unsupported_unless("moe_layer_freq", 1, _is_one, "an MoE layer other than every layer")
    f.unsupported_unless("attention_bias", False, lambda v: v is False, "MLA with projection biases")
    topk_method = f.get_choice("topk_method", ("greedy", "group_limited_greedy", "noaux_tc"))
    moe = _routed_and_shared(f, f.get_choice("scoring_func", ("softmax", "sigmoid")), topk_method == "noaux_tc")
    attention = MLAAttention(
        heads=f.get_int("num_attention_heads"),
        q_lora_rank=f.get_int("q_lora_rank", nullable=True),
        kv_lora_rank=f.get_int("kv_lora_rank"),
        qk_nope_head_dim=f.get_int("qk_nope_head_dim"),
        qk_rope_head_dim=f.get_int("qk_rope_head_dim"),
        v_head_dim=f.get_int("v_head_dim"),
    )
    return _spec(f, name, source, attention, moe, dense_first=True, precision=precision)


def _kimi_k25(f: _Fields, name: str, source: str) -> ModelSpec:
    """kimi_k25 (Kimi-K2.5, and NVIDIA's NVFP4 copies of K2.5 to K2.7): a vision tower (not modelled) before
    Kimi K2's text model, whose DeepSeek-V3 fields are nested in ``text_config`` (``model_type`` kimi_k2 or
    deepseek_v3); ``quantization_config`` is read in ``text_config`` (Moonshot's INT4 experts) or, where the
    text model has none, at the top level (NVIDIA's NVFP4)."""
    text = f.nested("text_config", f.get_object("text_config"))
    text.get_choice("model_type", _KIMI_TEXT_TYPES)  # Kimi K2's text model, as Moonshot and NVIDIA name it
    quant = text if text.get_object("quantization_config", None) is not None else f
    return _deepseek(text, name, source, text.precision(expert_only_quant=False, quant=quant))


_KIMI_TEXT_TYPES = ("kimi_k2", "deepseek_v3")


def _glm4_moe(f: _Fields, name: str, source: str) -> ModelSpec:
    """glm4_moe (GLM-4.5, -Air, -4.6): GQA over DeepSeek-V3's MoE layout; sigmoid routing with the correction
    bias is fixed by transformers' Glm4MoeMoE (the published configs mostly omit those two fields). Its
    attention has q/k/v biases but no o_proj bias, which the spec's ``bias`` counts (hidden_size a layer)."""
    f.unsupported_unless("topk_method", "noaux_tc", lambda v: v == "noaux_tc", "glm4_moe routing other than noaux_tc")
    f.unsupported_unless("scoring_func", "sigmoid", lambda v: v == "sigmoid", "glm4_moe scoring other than sigmoid")
    attention = GQAAttention(
        heads=f.get_int("num_attention_heads"),
        kv_heads=f.get_int("num_key_value_heads"),
        head_dim=f.get_int("head_dim"),
        bias=f.get_bool("attention_bias", False),
        qk_norm=f.get_bool("use_qk_norm", False),
    )
    return _spec(f, name, source, attention, _routed_and_shared(f, "sigmoid", True), dense_first=True)


def _qwen3_moe(f: _Fields, name: str, source: str) -> ModelSpec:
    """qwen3_moe: every layer MoE (mlp_only_layers empty, decoder_sparse_step 1), GQA with q/k norms."""
    f.unsupported_unless("mlp_only_layers", [], lambda v: v == [], "dense layers between MoE layers")
    f.unsupported_unless("decoder_sparse_step", 1, _is_one, "an MoE layer other than every layer")
    f.unsupported_unless("use_sliding_window", False, lambda v: v is False, "Qwen sliding-window layers")
    attention = GQAAttention(
        heads=f.get_int("num_attention_heads"),
        kv_heads=f.get_int("num_key_value_heads"),
        head_dim=f.get_int("head_dim"),
        bias=f.get_bool("attention_bias", False),
        qk_norm=True,
    )
    moe = MoESpec(
        routed_experts=f.get_int("num_experts"),
        top_k=f.get_int("num_experts_per_tok"),
        intermediate_size=f.get_int("moe_intermediate_size"),
        norm_topk_prob=f.get_bool("norm_topk_prob"),
    )
    return _spec(f, name, source, attention, moe, dense_first=False)


def _mixtral(f: _Fields, name: str, source: str) -> ModelSpec:
    """mixtral: every layer MoE with experts of intermediate_size; head_dim defaults to hidden / heads."""
    hidden, heads = f.get_int("hidden_size"), f.get_int("num_attention_heads")
    if f.config.get("head_dim") is not None:
        head_dim = f.get_int("head_dim")
    elif hidden < 1:
        raise f.fail("hidden_size", f"is invalid: must be >= 1, got {hidden}")
    elif heads < 1 or hidden % heads:
        raise f.fail("num_attention_heads", f"must divide hidden_size ({hidden}) when head_dim is absent, got {heads}")
    else:
        head_dim = hidden // heads
    attention = GQAAttention(
        heads=heads,
        kv_heads=f.get_int("num_key_value_heads"),
        head_dim=head_dim,
        sliding_window=f.get_int("sliding_window", None, nullable=True),
    )
    moe = MoESpec(
        routed_experts=f.get_int("num_local_experts"),
        top_k=f.get_int("num_experts_per_tok"),
        intermediate_size=f.get_int("intermediate_size"),
    )
    return _spec(f, name, source, attention, moe, dense_first=False)


def _minimax_m2(f: _Fields, name: str, source: str) -> ModelSpec:
    """minimax_m2 (MiniMax-M2 to M2.7): softmax GQA in every layer (``attn_type_list`` all 1, where given),
    q and k RMS-normed over all their heads, 256 experts of ``intermediate_size`` routed by sigmoid with the
    selection-only correction bias (``use_routing_bias``) and renormalized (vLLM's and SGLang's MiniMaxM2MoE
    do), no shared expert. Not read: ``rotary_dim`` (partial RoPE: no shape or cost) and the MTP modules
    (``num_mtp_modules``: the engines skip them; the published total leaves them out)."""
    f.unsupported_unless(
        "attn_type_list", [], lambda v: isinstance(v, list) and all(t == 1 for t in v), "lightning (linear) attention"
    )
    f.unsupported_unless("shared_intermediate_size", 0, lambda v: v == 0, "a shared expert")
    qk_norm = f.get_bool("use_qk_norm", False)
    if qk_norm:
        f.unsupported_unless("qk_norm_type", "per_layer", lambda v: v == "per_layer", "a q/k norm other than per_layer")
    attention = GQAAttention(
        heads=f.get_int("num_attention_heads"),
        kv_heads=f.get_int("num_key_value_heads"),
        head_dim=f.get_int("head_dim"),
        bias=f.get_bool("attention_bias", False),
        qk_norm=qk_norm,
    )
    moe = MoESpec(
        routed_experts=f.get_int("num_local_experts"),
        top_k=f.get_int("num_experts_per_tok"),
        intermediate_size=f.get_int("intermediate_size"),
        scoring=f.get_choice("scoring_func", SCORING_FUNCS),
        score_correction_bias=f.get_bool("use_routing_bias", False),
    )
    return _spec(f, name, source, attention, moe, dense_first=False)


def _gpt_oss(f: _Fields, name: str, source: str) -> ModelSpec:
    """gpt_oss: biased GQA with sinks over layer_types, biased router and experts, MXFP4 experts only."""
    attention = GQAAttention(
        heads=f.get_int("num_attention_heads"),
        kv_heads=f.get_int("num_key_value_heads"),
        head_dim=f.get_int("head_dim"),
        bias=f.get_bool("attention_bias", True),
        sinks=True,
        sliding_window=f.get_int("sliding_window"),
        layer_types=f.get_str_list("layer_types"),
    )
    moe = MoESpec(
        routed_experts=f.get_int("num_local_experts"),
        top_k=f.get_int("num_experts_per_tok"),
        intermediate_size=f.get_int("intermediate_size"),
        router_bias=True,
        expert_bias=True,
    )
    return _spec(f, name, source, attention, moe, dense_first=False)


_FAMILIES: dict[str, Callable[[_Fields, str, str], ModelSpec]] = {
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
    "kimi_k2": _deepseek,
    "kimi_k25": _kimi_k25,
    "glm4_moe": _glm4_moe,
    "qwen3_moe": _qwen3_moe,
    "mixtral": _mixtral,
    "gpt_oss": _gpt_oss,
    "minimax_m2": _minimax_m2,
}
SUPPORTED_MODEL_TYPES = tuple(sorted(_FAMILIES))

_DSA = "DeepSeek sparse attention (a lightning indexer of index_n_heads keeping the top index_topk cached tokens)"
_V4 = (
    "compressed sparse attention (compress_ratios 4 and 128, a lightning indexer keeping the top index_topk), its "
    "sliding-window branch, the 4x-wide residual (hc_mult: manifold hyper-connections), the grouped output "
    "projection (o_groups) and hash-routed MoE layers (num_hash_layers)"
)
_GDN = "Gated DeltaNet linear attention in three of every four layers (layer_types linear_attention)"
_M3 = "block-sparse attention (sparse_attention_config: the top sparse_topk_blocks blocks of sparse_block_size)"
_KDA = "KDA linear attention beside MLA (linear_attn_config)"
NOT_EXPRESSIBLE: dict[str, tuple[str, str]] = {
    "deepseek_v4": ("DeepSeek-V4", _V4),
    "deepseek_ref": ("DeepSeek-V4, SGLang's reference copy", _V4),
    "deepseek_v32": ("DeepSeek-V3.2", _DSA),
    "glm_moe_dsa": ("GLM-5", _DSA),
    "qwen3_5_moe": ("Qwen3.5 MoE", _GDN),
    "qwen3_next": ("Qwen3-Next", _GDN),
    "minimax_m3": ("MiniMax-M3", _M3),
    "minimax_m3_vl": ("MiniMax-M3", _M3),
    "minimax": ("MiniMax-Text-01 and -M1", "lightning (linear) attention in seven of every eight layers"),
    "kimi_k3": ("Kimi-K3", _KDA + " and experts computed at a projected width (a latent MoE)"),
    "kimi_linear": ("Kimi Linear", _KDA),
}
"""MoE families whose ``model_type`` the loader knows and refuses: the model, and what the spec cannot express
of it (docs/models.md, "Families"); any other unknown ``model_type`` is refused listing the supported ones."""

_COMMON_NAMES = {
    "ModelSpec.hidden_size": "hidden_size",
    "ModelSpec.num_layers": "num_hidden_layers",
    "ModelSpec.vocab_size": "vocab_size",
    "MoESpec.top_k": "num_experts_per_tok",
    "MoESpec.intermediate_size": "moe_intermediate_size",
}
_DEEPSEEK_MOE_NAMES = {
    **_COMMON_NAMES,
    "MoESpec.routed_experts": "n_routed_experts",
    "MoESpec.shared_experts": "n_shared_experts",
    "MoESpec.routed_scaling_factor": "routed_scaling_factor",
    "MoESpec.n_group": "n_group",
    "MoESpec.topk_group": "topk_group",
    "ModelSpec.first_k_dense": "first_k_dense_replace",
    "ModelSpec.dense_intermediate_size": "intermediate_size",
    "ModelSpec.mtp_layers": "num_nextn_predict_layers",
}
_MLA_NAMES = {
    "MLAAttention.heads": "num_attention_heads",
    "MLAAttention.q_lora_rank": "q_lora_rank",
    "MLAAttention.kv_lora_rank": "kv_lora_rank",
    "MLAAttention.qk_nope_head_dim": "qk_nope_head_dim",
    "MLAAttention.qk_rope_head_dim": "qk_rope_head_dim",
    "MLAAttention.v_head_dim": "v_head_dim",
}
_GQA_NAMES = {
    "GQAAttention.heads": "num_attention_heads",
    "GQAAttention.kv_heads": "num_key_value_heads",
    "GQAAttention.head_dim": "head_dim",
    "GQAAttention.sliding_window": "sliding_window",
    "GQAAttention.layer_types": "layer_types",
}
_LOCAL_EXPERTS = {"MoESpec.routed_experts": "num_local_experts", "MoESpec.intermediate_size": "intermediate_size"}
_KIMI_K25_NAMES = {k: f"text_config.{v}" for k, v in {**_DEEPSEEK_MOE_NAMES, **_MLA_NAMES}.items()}
_FIELD_NAMES: dict[str, dict[str, str]] = {
    "deepseek_v2": {**_DEEPSEEK_MOE_NAMES, **_MLA_NAMES},
    "deepseek_v3": {**_DEEPSEEK_MOE_NAMES, **_MLA_NAMES},
    "kimi_k2": {**_DEEPSEEK_MOE_NAMES, **_MLA_NAMES},
    "glm4_moe": {**_DEEPSEEK_MOE_NAMES, **_GQA_NAMES},
    "qwen3_moe": {**_COMMON_NAMES, **_GQA_NAMES, "MoESpec.routed_experts": "num_experts"},
    "mixtral": {**_COMMON_NAMES, **_GQA_NAMES, **_LOCAL_EXPERTS},
    "gpt_oss": {**_COMMON_NAMES, **_GQA_NAMES, **_LOCAL_EXPERTS},
    "kimi_k25": _KIMI_K25_NAMES,
    "minimax_m2": {**_COMMON_NAMES, **_GQA_NAMES, **_LOCAL_EXPERTS},
}
"""Spec field -> config.json field per family, so that a value the spec rejects is named as in the file."""


def spec_from_config(
    config: Mapping[str, Any], *, source: str, name: str | None = None, precision: Precision | None = None
) -> ModelSpec:
    """The ``ModelSpec`` of one parsed config.json object (module docstring for the contract).

    ``source`` names the file in errors and becomes ``spec.source``; ``name`` defaults to the model_type;
    ``precision`` replaces the derived dtypes.
    """
    if not isinstance(config, Mapping):
        raise ModelConfigError(f"{source}: top level must be a JSON object, got {type(config).__name__}")
    if "model_type" not in config:
        raise ModelConfigError(f"{source}: missing field 'model_type'")
    model_type = config["model_type"]
    if isinstance(model_type, str) and model_type in NOT_EXPRESSIBLE:
        model, missing = NOT_EXPRESSIBLE[model_type]
        raise ModelConfigError(
            f"{source}: model_type {model_type!r} ({model}) is not supported: the spec cannot express its {missing}"
        )
    if not isinstance(model_type, str) or model_type not in _FAMILIES:
        raise ModelConfigError(
            f"{source}: field 'model_type' is {_show(model_type)}, not one of {', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    if precision is not None and not isinstance(precision, Precision):
        raise ModelConfigError(f"{source}: precision must be a Precision, got {type(precision).__name__}")
    fields = _Fields(config, source, model_type)
    try:
        spec = _FAMILIES[model_type](fields, name or model_type, source)
    except ModelSpecError as e:
        raise fields.fail(_FIELD_NAMES[model_type].get(e.field, e.field), f"is invalid: {e.reason}") from None
    return spec if precision is None else replace(spec, precision=precision)


def load_config(path: str | Path, *, name: str | None = None, precision: Precision | None = None) -> ModelSpec:
    """The ``ModelSpec`` of the config.json at ``path`` (module docstring for the contract).

    The file is named in errors as ``path`` was given; ``name`` and ``precision`` as in ``spec_from_config``.
    """
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else type(e).__name__
        raise ModelConfigError(f"{source}: cannot read the file: {reason}") from None
    try:
        config = json.loads(text)
    except json.JSONDecodeError as e:
        raise ModelConfigError(f"{source}: not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    return spec_from_config(config, source=source, name=name, precision=precision)
