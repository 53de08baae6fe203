"""Named real models: ``get_preset(name) -> ModelSpec`` over embedded copies of their public config.json.

Each preset is the subset of a published HuggingFace ``config.json`` that the loader reads (plus
``architectures`` and ``model_type``), kept in this package as a dict (``_mla``: DeepSeek's MLA family,
``_gqa``: the GQA families, ``_v4``: DeepSeek-V4) and turned into a spec by the same
``demos.zoo.models.hf_config.spec_from_config`` that reads files, so every preset exercises the loader. The
spec's ``source`` names the HuggingFace repository and file the values come from; docs/models.md says,
per preset, where the copy was read and what could not be checked.

Contract: ``get_preset`` returns a frozen ``ModelSpec``; an unknown name raises ``UnknownPresetError``, one
line listing the known names (aliases included). ``PRESET_NAMES`` lists canonical names, ``ALIASES`` maps
alias -> canonical name. ``preset_config(name)`` returns a copy of the embedded dict (to write a config.json).

``checkpoints(name)``: the published checkpoints of a preset or alias by weight precision ("bf16", "fp8",
"fp4": what ``--weights`` names; "int4": an INT4 checkpoint a config ships), each a Hugging Face repository id
(``CHECKPOINTS``, in ``_checkpoints``). An alias is a model
of its own (DeepSeek-R1 is not DeepSeek-V3's checkpoint) with its canonical preset's architecture; a name
no preset knows has none.
"""

from __future__ import annotations

import copy
from typing import Any

from demos.zoo.models.hf_config import spec_from_config
from demos.zoo.models.presets._checkpoints import CHECKPOINTS, KV_CACHE_FP8_CHECKPOINTS, checkpoints
from demos.zoo.models.presets._gqa import (
    GLM_4_5,
    GLM_4_5_AIR,
    GPT_OSS_20B,
    GPT_OSS_120B,
    MINIMAX_M2_5,
    MINIMAX_M3,
    MIXTRAL_8X7B,
    QWEN3_5_397B_A17B,
    QWEN3_30B_A3B,
    QWEN3_235B_A22B,
)
from demos.zoo.models.presets._kimi_linear import KIMI_K3
from demos.zoo.models.presets._mla import DEEPSEEK_V2_LITE, DEEPSEEK_V3, DEEPSEEK_V3_2, GLM_5, KIMI_K2, KIMI_K2_5
from demos.zoo.models.presets._v4 import DEEPSEEK_V4_FLASH, DEEPSEEK_V4_PRO
from demos.zoo.models.spec import ModelSpec

__all__ = [
    "ALIASES",
    "CHECKPOINTS",
    "KV_CACHE_FP8_CHECKPOINTS",
    "PRESET_NAMES",
    "UnknownPresetError",
    "checkpoints",
    "get_preset",
    "preset_config",
    "preset_source",
]


class UnknownPresetError(ValueError):
    """No preset has that name; the message lists the known ones."""


_PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    "deepseek-v3": ("huggingface.co/deepseek-ai/DeepSeek-V3 config.json", DEEPSEEK_V3),
    "kimi-k2": ("huggingface.co/moonshotai/Kimi-K2-Instruct config.json", KIMI_K2),
    "deepseek-v2-lite": ("huggingface.co/deepseek-ai/DeepSeek-V2-Lite config.json", DEEPSEEK_V2_LITE),
    "qwen3-30b-a3b": ("huggingface.co/Qwen/Qwen3-30B-A3B config.json", QWEN3_30B_A3B),
    "qwen3-235b-a22b": ("huggingface.co/Qwen/Qwen3-235B-A22B config.json", QWEN3_235B_A22B),
    "mixtral-8x7b": ("huggingface.co/mistralai/Mixtral-8x7B-v0.1 config.json", MIXTRAL_8X7B),
    "gpt-oss-120b": ("huggingface.co/openai/gpt-oss-120b config.json", GPT_OSS_120B),
    "glm-4.5": ("huggingface.co/zai-org/GLM-4.5 config.json", GLM_4_5),
    "glm-4.5-air": ("huggingface.co/zai-org/GLM-4.5-Air config.json", GLM_4_5_AIR),
    "kimi-k2.5": ("huggingface.co/moonshotai/Kimi-K2.5 config.json", KIMI_K2_5),
    "minimax-m2.5": ("huggingface.co/MiniMaxAI/MiniMax-M2.5 config.json", MINIMAX_M2_5),
    "gpt-oss-20b": ("huggingface.co/openai/gpt-oss-20b config.json", GPT_OSS_20B),
    "deepseek-v3.2": ("huggingface.co/deepseek-ai/DeepSeek-V3.2 config.json", DEEPSEEK_V3_2),
    "glm-5": ("huggingface.co/zai-org/GLM-5-FP8 config.json", GLM_5),
    "qwen3.5-397b-a17b": ("huggingface.co/Qwen/Qwen3.5-397B-A17B config.json", QWEN3_5_397B_A17B),
    "deepseek-v4-flash": ("huggingface.co/deepseek-ai/DeepSeek-V4-Flash config.json", DEEPSEEK_V4_FLASH),
    "deepseek-v4-pro": ("huggingface.co/deepseek-ai/DeepSeek-V4-Pro config.json", DEEPSEEK_V4_PRO),
    "minimax-m3": ("huggingface.co/MiniMaxAI/MiniMax-M3 config.json", MINIMAX_M3),
    "kimi-k3": ("huggingface.co/moonshotai/Kimi-K3 config.json", KIMI_K3),
}

PRESET_NAMES = tuple(_PRESETS)
ALIASES = {"deepseek-r1": "deepseek-v3", "glm-4.6": "glm-4.5", "minimax-m2.7": "minimax-m2.5"}
"""DeepSeek-R1 is post-trained from DeepSeek-V3-Base and keeps its architecture (same shapes, same spec);
GLM-4.6's config.json differs from GLM-4.5's only in fields the loader does not read (a 200K context);
MiniMax-M2.7's config.json differs from M2.5's in fields the loader does not read (a 200K context, an
explicit dtype bfloat16) and in ``attn_type_list``, all 1 (softmax attention in every layer, as M2.5's
implicitly). Kimi-K2.6 and K2.7-Code are no aliases: their text_config (in NVIDIA's NVFP4 copies) has
Kimi-K2.5's shapes, but an alias runs its canonical preset's weights (Kimi-K2.5's INT4 experts) and the
extra holds no INT4 checkpoint of them; their NVFP4 config.json loads as it is (``--model``)."""


def _canonical(name: Any) -> str:
    if isinstance(name, str):
        key = name.strip().lower()
        key = ALIASES.get(key, key)
        if key in _PRESETS:
            return key
    known = ", ".join(sorted((*PRESET_NAMES, *ALIASES)))
    raise UnknownPresetError(f"unknown model preset {name!r}; known: {known}")


def preset_config(name: str) -> dict[str, Any]:
    """A deep copy of the embedded config.json fields of preset ``name`` (alias accepted)."""
    return copy.deepcopy(_PRESETS[_canonical(name)][1])


def preset_source(name: str) -> str:
    """The HuggingFace repository and file preset ``name``'s fields come from."""
    return _PRESETS[_canonical(name)][0]


def get_preset(name: str) -> ModelSpec:
    """The ``ModelSpec`` of preset ``name`` (case-insensitive; aliases map to their canonical preset)."""
    key = _canonical(name)
    return spec_from_config(preset_config(key), source=preset_source(key), name=key)
