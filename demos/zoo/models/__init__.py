"""A zoo of real MoE models as pure data and arithmetic (docs/models.md).

``spec`` (``ModelSpec`` and its parts), ``hf_config`` (``load_config``: a HuggingFace config.json -> spec),
``presets`` (``get_preset``: DeepSeek-V3/R1, Kimi K2 and K2.5, DeepSeek-V2-Lite, Qwen3 30B/235B, Mixtral 8x7B,
gpt-oss-120b and -20b, GLM-4.5/4.6, GLM-4.5-Air, GLM-5, DeepSeek-V3.2, DeepSeek-V4-Flash and -Pro,
MiniMax-M2.5/M2.7, MiniMax-M3, Qwen3.5-397B-A17B), ``params`` (``count_params``: total and active parameters),
``precision`` (``with_precision``: the same model at other weight and KV-cache dtypes), ``shrink`` (a small
spec of the same architecture for real-math runs). Nothing here imports torch or the runtime.
"""

from demos.zoo.models.hf_config import SUPPORTED_MODEL_TYPES, ModelConfigError, load_config, spec_from_config
from demos.zoo.models.hybrid_spec import HybridMLAAttention
from demos.zoo.models.linear_spec import KimiDeltaAttention
from demos.zoo.models.params import ParamCount, count_params
from demos.zoo.models.precision import kv_cache_name, weights_name, with_precision
from demos.zoo.models.presets import ALIASES, CHECKPOINTS, PRESET_NAMES, UnknownPresetError, checkpoints, get_preset
from demos.zoo.models.shrink import shrink
from demos.zoo.models.spec import (
    BlockSparse,
    CompressedAttention,
    GatedDeltaNet,
    GQAAttention,
    MLAAttention,
    ModelSpec,
    ModelSpecError,
    MoESpec,
    Precision,
    SparseMLAAttention,
)

__all__ = [
    "ALIASES",
    "CHECKPOINTS",
    "PRESET_NAMES",
    "SUPPORTED_MODEL_TYPES",
    "BlockSparse",
    "CompressedAttention",
    "GQAAttention",
    "GatedDeltaNet",
    "HybridMLAAttention",
    "KimiDeltaAttention",
    "MLAAttention",
    "MoESpec",
    "ModelConfigError",
    "ModelSpec",
    "ModelSpecError",
    "ParamCount",
    "Precision",
    "SparseMLAAttention",
    "UnknownPresetError",
    "checkpoints",
    "count_params",
    "get_preset",
    "kv_cache_name",
    "load_config",
    "shrink",
    "spec_from_config",
    "weights_name",
    "with_precision",
]
