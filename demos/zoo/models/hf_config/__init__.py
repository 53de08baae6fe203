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
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from demos.zoo.models.hf_config._families import FAMILIES, FIELD_NAMES, NOT_EXPRESSIBLE, SUPPORTED_MODEL_TYPES
from demos.zoo.models.hf_config._fields import Fields, ModelConfigError, show
from demos.zoo.models.spec import ModelSpec, ModelSpecError, Precision

__all__ = ["NOT_EXPRESSIBLE", "SUPPORTED_MODEL_TYPES", "ModelConfigError", "load_config", "spec_from_config"]


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
    if not isinstance(model_type, str) or model_type not in FAMILIES:
        raise ModelConfigError(
            f"{source}: field 'model_type' is {show(model_type)}, not one of {', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    if precision is not None and not isinstance(precision, Precision):
        raise ModelConfigError(f"{source}: precision must be a Precision, got {type(precision).__name__}")
    fields = Fields(config, source, model_type)
    try:
        spec = FAMILIES[model_type](fields, name or model_type, source)
    except ModelSpecError as e:
        raise fields.fail(FIELD_NAMES[model_type].get(e.field, e.field), f"is invalid: {e.reason}") from None
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
