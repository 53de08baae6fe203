"""Precision as a choice: ``with_precision(spec, weights=, kv_cache=)`` -> the same model at other dtypes.

A config.json fixes the dtypes a checkpoint ships (``demos.zoo.models.hf_config``); a deployment may run it
otherwise (DeepSeek-V3 in BF16, GLM-4.5 from its FP8 repo, a model quantized to 4 bits). The two names:

* ``weights`` (``WEIGHT_DTYPES``): ``bf16``: every weight BF16; ``fp8``: every weight FP8 E4M3 (the
  non-expert ones too, as DeepSeek-V3's block-FP8 checkpoint); ``fp4``: the routed experts in NVFP4
  (``demos.zoo.models.dtypes``: 18/32 bytes per value, an FP8 scale per 16 included; the format of every
  published FP4 checkpoint ``--weights fp4`` names, NVIDIA's ``-NVFP4`` copies; gpt-oss's own MXFP4 experts
  are its preset's precision, without ``--weights``), and the parts NVIDIA's NVFP4 checkpoint of the model's
  family quantizes beside them (``NVFP4_SCOPE``: the dense MLPs and shared experts, attention's output
  projection), every other weight in the activation dtype. The dispatch payload follows the loader's rule:
  FP8 when the experts are FP8, else the activation dtype; the activation dtype (``precision.combine``)
  stays. ``bf16`` and ``fp8`` clear those two parts' overrides (``Precision.mlp``, ``.attention_out``).
* ``kv_cache`` (``KV_CACHE_DTYPES``): ``bf16`` or ``fp8`` (E4M3, vLLM's ``--kv-cache-dtype fp8``).

``weights_name(precision)`` and ``kv_cache_name(precision)`` go back: the ``--weights`` and ``--kv-cache-dtype``
names of a precision by storage size (a routed expert below a byte per value is ``fp4``, one byte ``fp8``, more
``bf16``; a one-byte cache ``fp8``, else ``bf16``), what the engine lines serve (``demos.prediction.engines``).
One name is not a ``--weights`` choice: ``int4``, the INT4 experts a config ships (Kimi-K2.5's
compressed-tensors checkpoint), which names that checkpoint (``demos.zoo.models.CHECKPOINTS``); no engine
quantizes to INT4 as it loads, so the flag does not offer it.

None leaves a part as the spec has it. Contract: a pure function; the result is a new frozen spec (the same
one when nothing changes); a bad value is a ``ModelSpecError`` naming ``with_precision.weights`` or
``with_precision.kv_cache``, one line listing the choices.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from demos.zoo.models.dtypes import dtype
from demos.zoo.models.spec import ModelSpec, ModelSpecError, Precision, stored_apart

__all__ = [
    "INT_EXPERT_DTYPES",
    "KV_CACHE_DTYPES",
    "NVFP4_SCOPE",
    "WEIGHT_DTYPES",
    "kv_cache_name",
    "weights_name",
    "with_precision",
]

WEIGHT_DTYPES: dict[str, tuple[str | None, str]] = {
    "bf16": ("bfloat16", "bfloat16"),
    "fp8": ("fp8_e4m3", "fp8_e4m3"),
    "fp4": (None, "nvfp4"),
}
"""``--weights`` -> (non-expert weights, routed experts) as ``demos.zoo.models.dtypes.DTYPES`` names; None:
the activation dtype."""

NVFP4_SCOPE: dict[str, frozenset[str]] = {
    "deepseek_v3": frozenset({"mlp", "attention_out"}),
    "deepseek_v32": frozenset({"mlp", "attention_out"}),
    "glm_moe_dsa": frozenset({"mlp"}),
    "kimi_k25": frozenset({"mlp"}),
}
"""``model_type`` -> the ``Precision`` parts beyond the routed experts that NVIDIA's NVFP4 checkpoint of that
family stores in NVFP4 (``mlp``: the dense MLPs and shared experts; ``attention_out``: ``o_proj``); a family
not listed: the routed experts only. Read from the checkpoints' ignore lists (``hf_quant_config.json``'s
``exclude_modules``, or config.json's ``quantization_config.ignore``, as aiconfigurator-core 0.12.0 copies
them; ``demos.zoo.models.hf_config._quantization.modelopt_scope`` reads them): nvidia/DeepSeek-V3.1-NVFP4 and
-V3.2-NVFP4 leave out only the query and latent projections (and the indexer, the MTP layer, the LM head);
nvidia/GLM-5-NVFP4 all of attention; nvidia/Kimi-K2.5-NVFP4 attention and the LM head; nvidia/Qwen3.5-397B-A17B-NVFP4
attention, the linear-attention layers and the shared expert; nvidia/MiniMax-M2.5-NVFP4 attention and the
router. DeepSeek-R1's is an assumption: the serving runs use nvidia/DeepSeek-R1-0528-NVFP4-v2, whose ignore
list the extra does not copy; its model card says it quantizes the attention output (``wo``) beyond its first
version, whose dense MLPs are NVFP4 as well (its published weight listing), which is V3.1's list. Later checkpoints
of a family may differ (nvidia/Kimi-K2.6-NVFP4 and GLM-5.1/5.2-NVFP4 keep the shared experts and the first
dense layer in BF16): the table names the checkpoint of each family's preset."""

INT_EXPERT_DTYPES = frozenset({"int4_g32"})
"""The ``demos.zoo.models.dtypes.DTYPES`` names of integer expert weights: ``weights_name`` calls them ``int4``."""

KV_CACHE_DTYPES: dict[str, str] = {"bf16": "bfloat16", "fp8": "fp8_e4m3"}
"""``--kv-cache-dtype`` -> the ``demos.zoo.models.dtypes.DTYPES`` name of the KV cache."""


def _choice(name: str, value: Any, choices: dict) -> None:
    if not isinstance(value, str) or value not in choices:
        raise ModelSpecError(f"with_precision.{name}", f"must be one of {', '.join(choices)}; got {value!r}")


def with_precision(spec: ModelSpec, *, weights: str | None = None, kv_cache: str | None = None) -> ModelSpec:
    """``spec`` with its weights at ``weights`` and its KV cache at ``kv_cache`` (module docstring)."""
    if not isinstance(spec, ModelSpec):
        raise ModelSpecError("with_precision.spec", f"must be a ModelSpec, got {type(spec).__name__}")
    if weights is not None:
        _choice("weights", weights, WEIGHT_DTYPES)
    if kv_cache is not None:
        _choice("kv_cache", kv_cache, KV_CACHE_DTYPES)
    p = spec.precision
    act = p.combine
    new = p
    if weights is not None:
        dense, experts = WEIGHT_DTYPES[weights]
        dispatch = experts if experts.startswith("fp8") else act
        scope = NVFP4_SCOPE.get(spec.model_type, frozenset()) if experts == "nvfp4" else frozenset()
        new = replace(new, weights=dense or act, experts=experts, dispatch=dispatch, **stored_apart(scope, experts))
    if kv_cache is not None:
        new = replace(new, kv_cache=KV_CACHE_DTYPES[kv_cache])
    return spec if new == p else replace(spec, precision=new)


def weights_name(precision: Precision) -> str:
    """The ``WEIGHT_DTYPES`` name of ``precision``'s routed experts by their bytes per value, or ``int4`` for
    integer ones (module docstring)."""
    if precision.experts in INT_EXPERT_DTYPES:
        return "int4"
    size = dtype(precision.experts).bytes
    return "fp4" if size < 1 else "fp8" if size == 1 else "bf16"


def kv_cache_name(precision: Precision) -> str:
    """The ``KV_CACHE_DTYPES`` name of ``precision``'s KV cache by its bytes per value (module docstring)."""
    return "fp8" if dtype(precision.kv_cache).bytes == 1 else "bf16"
