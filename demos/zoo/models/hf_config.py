"""Read a HuggingFace ``config.json`` into a ``ModelSpec``: ``load_config(path)``, ``spec_from_config(dict)``.

Supported ``model_type`` values (the field names are those of the published configs, docs/models.md):

* ``deepseek_v3``, ``deepseek_v2``, ``kimi_k2`` (Kimi K2 reuses DeepSeek-V3's architecture and fields):
  MLA attention, ``first_k_dense_replace`` dense layers, routed + shared experts, grouped routing;
* ``glm4_moe`` (GLM-4.5, GLM-4.5-Air, GLM-4.6): GQA with q/k/v biases and optional q/k norms over
  DeepSeek-V3's MoE layout (dense first layers, routed + shared experts, sigmoid routing, MTP);
* ``qwen3_moe``: GQA with per-head q/k norms, routed experts only;
* ``mixtral``: GQA, routed experts of ``intermediate_size``, every layer MoE;
* ``gpt_oss``: GQA with biases and attention sinks, ``layer_types`` alternating sliding and full attention,
  biased router and experts, MXFP4 experts.

Contract: anything wrong with the file is one ``ModelConfigError`` whose one-line message names the file
(or the ``source`` given to ``spec_from_config``) and the field, e.g. ``config.json: missing field
'num_experts_per_tok' (model_type qwen3_moe)``: an unreadable file, text that is not JSON, a top level that
is not an object, an unknown ``model_type``, a missing or wrongly typed field, a value the spec rejects
(``top_k`` above the expert count...) and a layout this spec cannot express (``moe_layer_freq`` != 1,
Qwen's ``mlp_only_layers``...). Fields the simulator does not need (rope scaling, token ids...) are not read.

Precision: config.json gives the weight dtypes (``torch_dtype``, or transformers 5's ``dtype``, bfloat16 when
neither is there; and ``quantization_config``: ``fp8`` or ``mxfp4``) but no communication or cache dtypes,
so those follow one rule unless ``precision`` is passed: dispatch is FP8 when the expert weights are FP8
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
    GQAAttention,
    MLAAttention,
    ModelSpec,
    ModelSpecError,
    MoESpec,
    Precision,
)

__all__ = ["SUPPORTED_MODEL_TYPES", "ModelConfigError", "load_config", "spec_from_config"]


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

    def precision(self, *, expert_only_quant: bool) -> Precision:
        """Weight dtypes from torch_dtype (or dtype, default bfloat16) and quantization_config; the rest by rule.

        ``expert_only_quant``: the quantization covers the routed experts only (gpt-oss keeps attention,
        router, embeddings and head in the activation dtype).
        """
        field = "dtype" if self.has("dtype") and not self.has("torch_dtype") else "torch_dtype"
        act = self.get_choice(field, _ACTIVATION_DTYPES, _DEFAULT_DTYPE)
        weights = experts = act
        quant = self._get("quantization_config", None)
        if quant is not None:
            if not isinstance(quant, Mapping):
                raise self.fail("quantization_config", f"must be an object or null, got {type(quant).__name__}")
            q = _Fields(quant, self.source, self.model_type, prefix="quantization_config.")
            if q.get_choice("quant_method", ("fp8", "mxfp4")) == "fp8":
                experts = "fp8_" + q.get_choice("fmt", ("e4m3", "e5m2"), "e4m3")
                weights = act if expert_only_quant else experts
            else:
                experts = "mxfp4"
        dispatch = experts if experts.startswith("fp8") else act
        return Precision(weights=weights, experts=experts, dispatch=dispatch, combine=act, kv_cache=act)


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


def _spec(f: _Fields, name: str, source: str, attention: Any, moe: MoESpec, *, dense_first: bool) -> ModelSpec:
    """The trunk around ``attention`` and ``moe``: every layer an MoE layer, or (``dense_first``) DeepSeek's
    ``first_k_dense_replace`` dense layers of ``intermediate_size`` first and its MTP modules beside. The
    quantization covers every weight but gpt-oss's, which covers its experts only."""
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
        precision=f.precision(expert_only_quant=f.model_type == "gpt_oss"),
        mtp_layers=f.get_int("num_nextn_predict_layers", 0) if dense_first else 0,
    )


def _deepseek(f: _Fields, name: str, source: str) -> ModelSpec:
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
    return _spec(f, name, source, attention, moe, dense_first=True)


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
    "glm4_moe": _glm4_moe,
    "qwen3_moe": _qwen3_moe,
    "mixtral": _mixtral,
    "gpt_oss": _gpt_oss,
}
SUPPORTED_MODEL_TYPES = tuple(sorted(_FAMILIES))

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
_FIELD_NAMES: dict[str, dict[str, str]] = {
    "deepseek_v2": {**_DEEPSEEK_MOE_NAMES, **_MLA_NAMES},
    "deepseek_v3": {**_DEEPSEEK_MOE_NAMES, **_MLA_NAMES},
    "kimi_k2": {**_DEEPSEEK_MOE_NAMES, **_MLA_NAMES},
    "glm4_moe": {**_DEEPSEEK_MOE_NAMES, **_GQA_NAMES},
    "qwen3_moe": {**_COMMON_NAMES, **_GQA_NAMES, "MoESpec.routed_experts": "num_experts"},
    "mixtral": {**_COMMON_NAMES, **_GQA_NAMES, **_LOCAL_EXPERTS},
    "gpt_oss": {**_COMMON_NAMES, **_GQA_NAMES, **_LOCAL_EXPERTS},
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
