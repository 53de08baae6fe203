"""The published checkpoints of each preset or alias by weight precision (``demos.zoo.models.presets``):
``CHECKPOINTS`` and ``checkpoints(name)``.
"""

from __future__ import annotations

CHECKPOINTS: dict[str, dict[str, str]] = {
    "deepseek-v3": {"fp8": "deepseek-ai/DeepSeek-V3"},
    "deepseek-r1": {"fp8": "deepseek-ai/DeepSeek-R1", "fp4": "nvidia/DeepSeek-R1-0528-NVFP4-v2"},
    "kimi-k2": {"fp8": "moonshotai/Kimi-K2-Instruct"},
    "deepseek-v2-lite": {"bf16": "deepseek-ai/DeepSeek-V2-Lite"},
    "qwen3-30b-a3b": {"bf16": "Qwen/Qwen3-30B-A3B", "fp8": "Qwen/Qwen3-30B-A3B-FP8"},
    "qwen3-235b-a22b": {
        "bf16": "Qwen/Qwen3-235B-A22B",
        "fp8": "Qwen/Qwen3-235B-A22B-FP8",
        "fp4": "nvidia/Qwen3-235B-A22B-NVFP4",
    },
    "mixtral-8x7b": {"bf16": "mistralai/Mixtral-8x7B-v0.1"},
    "gpt-oss-120b": {"fp4": "openai/gpt-oss-120b"},
    "glm-4.5": {"bf16": "zai-org/GLM-4.5", "fp8": "zai-org/GLM-4.5-FP8"},
    "glm-4.5-air": {"bf16": "zai-org/GLM-4.5-Air", "fp8": "zai-org/GLM-4.5-Air-FP8"},
    "glm-4.6": {"bf16": "zai-org/GLM-4.6", "fp8": "zai-org/GLM-4.6-FP8"},
    "kimi-k2.5": {"int4": "moonshotai/Kimi-K2.5", "fp4": "nvidia/Kimi-K2.5-NVFP4"},
    "minimax-m2.5": {"fp8": "MiniMaxAI/MiniMax-M2.5", "fp4": "nvidia/MiniMax-M2.5-NVFP4"},
    "minimax-m2.7": {"fp8": "MiniMaxAI/MiniMax-M2.7", "fp4": "nvidia/MiniMax-M2.7-NVFP4"},
    "gpt-oss-20b": {"fp4": "openai/gpt-oss-20b"},
    "deepseek-v3.2": {"fp8": "deepseek-ai/DeepSeek-V3.2", "fp4": "nvidia/DeepSeek-V3.2-NVFP4"},
    "glm-5": {"bf16": "zai-org/GLM-5", "fp8": "zai-org/GLM-5-FP8", "fp4": "nvidia/GLM-5-NVFP4"},
    "minimax-m3": {"bf16": "MiniMaxAI/MiniMax-M3", "fp4": "nvidia/MiniMax-M3-NVFP4"},
    "kimi-k3": {"fp4": "moonshotai/Kimi-K3"},
    "deepseek-v4-flash": {
        "fp8": "sgl-project/DeepSeek-V4-Flash-FP8",
        "fp4": "deepseek-ai/DeepSeek-V4-Flash",
    },
    "deepseek-v4-pro": {
        "fp8": "sgl-project/DeepSeek-V4-Pro-FP8",
        "fp4": "deepseek-ai/DeepSeek-V4-Pro",
    },
    "qwen3.5-397b-a17b": {
        "bf16": "Qwen/Qwen3.5-397B-A17B",
        "fp8": "Qwen/Qwen3.5-397B-A17B-FP8",
        "fp4": "nvidia/Qwen3.5-397B-A17B-NVFP4",
    },
}
"""Published checkpoints per preset or alias and weight precision (module docstring). Sources: the config
each preset copies (its own repository: ``preset_source``); the FP8 and FP4 repositories as the measured
extra ships their configs or serving runs (aiconfigurator-core 0.12.0: ``model_configs/`` holds
Qwen3-235B-A22B-FP8, Qwen3-30B-A3B-FP8 and nvidia/Qwen3-235B-A22B-NVFP4; ``silicon_sample.csv`` serves
nvidia/DeepSeek-R1-NVFP4; DeepSeek-R1's FP4 is its second NVFP4 version,
nvidia/DeepSeek-R1-0528-NVFP4-v2, which InferenceX's launch configurations serve (as
nvidia/DeepSeek-R1-0528-FP4-V2 from 2025-10-24) and which quantizes the attention output as well,
``demos.zoo.models.precision.NVFP4_SCOPE``) or as the model's own README lists them (GLM-4.5: GLM-4.5-FP8,
GLM-4.5-Air-FP8; GLM-4.6-FP8 likewise). NVIDIA's FP4 checkpoints are NVFP4 (an FP8 scale per 16 values, 18/32 bytes per
weight, what the predictor charges for ``--weights fp4``; their own config.json, where it holds its
``quantization_config``, loads as ``nvfp4``). The 2026 families: the config copies of the measured
extra (``model_configs/``: moonshotai/Kimi-K2.5, nvidia/Kimi-K2.5-NVFP4, -K2.6-NVFP4 and -K2.7-Code-NVFP4,
MiniMaxAI/MiniMax-M2.5 and -M2.7 with their nvidia/...-NVFP4 copies, openai/gpt-oss-20b,
deepseek-ai/DeepSeek-V3.2 and nvidia/DeepSeek-V3.2-NVFP4, zai-org/GLM-5, -5-FP8 and nvidia/GLM-5-NVFP4,
Qwen/Qwen3.5-397B-A17B and nvidia/Qwen3.5-397B-A17B-NVFP4, deepseek-ai/DeepSeek-V4-Flash and -Pro with
their sgl-project/...-FP8 and nvidia/...-NVFP4 copies, MiniMaxAI/MiniMax-M3 and nvidia/MiniMax-M3-NVFP4), the
same repositories its ``silicon_sample.csv`` serves; Qwen3.5-397B-A17B-FP8 as SGLang's Qwen3.5 cookbook lists it
(docs.sglang.io). ``int4`` is Kimi-K2.5's own INT4 checkpoint (``demos.zoo.models.precision.weights_name``: not
a ``--weights`` choice). DeepSeek-V4's own checkpoints are its "fp4" (MXFP4 routed experts, FP8 elsewhere);
SGLang's FP8 copies keep every expert in FP8."""


KV_CACHE_FP8_CHECKPOINTS = frozenset(
    {
        "nvidia/DeepSeek-R1-0528-NVFP4-v2",
        "nvidia/DeepSeek-V3.2-NVFP4",
        "nvidia/GLM-5-NVFP4",
        "nvidia/Kimi-K2.5-NVFP4",
        "nvidia/MiniMax-M2.5-NVFP4",
        "nvidia/MiniMax-M2.7-NVFP4",
        "nvidia/Qwen3-235B-A22B-NVFP4",
        "nvidia/Qwen3.5-397B-A17B-NVFP4",
    }
)
"""The checkpoints of ``CHECKPOINTS`` whose quantization config declares an FP8 KV cache (ModelOpt's
``kv_cache_quant_algo: FP8`` in ``hf_quant_config.json``, or config.json's ``kv_cache_scheme`` of 8-bit floats), as
aiconfigurator-core 0.12.0's copies give them: every NVIDIA NVFP4 checkpoint of a preset but MiniMax-M3's (its
mixed-precision config declares none). DeepSeek-R1's is an assumption, its config not copied: NVIDIA's
DeepSeek-V3.1 and -V3.2 NVFP4 checkpoints, from the same tool, declare it. TensorRT-LLM and vLLM (since its pull
request 30785, December 2025) keep such a cache when the launch leaves the KV cache dtype unset
(``demos.fidelity.served.engine_kv``)."""


def checkpoints(name: str) -> dict[str, str]:
    """The published checkpoints of preset or alias ``name`` by weight precision (``CHECKPOINTS``); ``{}``
    for any other name (a config.json, a spec built in code)."""
    if not isinstance(name, str):
        return {}
    return dict(CHECKPOINTS.get(name.strip().lower(), {}))
