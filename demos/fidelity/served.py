"""What a measured row ran, as the predictor expresses it: its preset, its weights and its KV cache
(``served_as``), one mapping for every check that reads ``silicon_sample.csv`` (``validate silicon``,
``validate serving``), so the two checks express the same rows the same way.

* **preset and weights** (``SERVED``): every published checkpoint of the presets
  (``demos.zoo.models.CHECKPOINTS``), each at the precision its repository ships, and the repository of a
  preset's own config at the other precisions (a row of ``deepseek-ai/DeepSeek-R1`` at ``fp4`` is the
  ``deepseek-r1`` preset with ``--weights fp4``); ``REPO_ALIASES`` names the repositories the rows spell
  otherwise.
* **KV cache** (``row_kv``): the launch script's where InferenceX's export records one
  (``SiliconRow.kv_cache``), else the engine's default for that checkpoint, model and GPU (``engine_kv``).
"""

from __future__ import annotations

from demos.zoo.hardware import get_gpu
from demos.zoo.models import CHECKPOINTS, checkpoints, get_preset, weights_name
from demos.zoo.models.presets import KV_CACHE_FP8_CHECKPOINTS

__all__ = ["REPO_ALIASES", "SERVED", "engine_kv", "row_kv", "served_as"]


REPO_ALIASES = {"zhipuai/GLM-5": "glm-5", "nvidia/DeepSeek-R1-NVFP4": "deepseek-r1"}
"""Repositories the measured rows name that no preset's checkpoint list does -> the preset: GLM-5's rows name
Zhipu AI's former organisation on the hub (its checkpoints are published as zai-org/GLM-5 and -FP8); six of
aiconfigurator's rows serve NVIDIA's first NVFP4 DeepSeek-R1, whose attention output stays BF16, predicted at
the preset's FP4 (its second version's, NVFP4 there too)."""


def _served() -> dict[tuple[str, str], tuple[str, str | None]]:
    out: dict[tuple[str, str], tuple[str, str | None]] = {}
    for name, by in CHECKPOINTS.items():
        native = weights_name(get_preset(name).precision)
        for precision, repo in by.items():
            out[(repo, precision)] = (name, None if precision == native else precision)
        for precision in ("bf16", "fp8", "fp4"):  # the native repository at another precision
            native_repo = by.get(native)
            if native_repo is not None and (native_repo, precision) not in out:
                out[(native_repo, precision)] = (name, None if precision == native else precision)
    for repo, name in REPO_ALIASES.items():  # every precision of a repository named otherwise
        native = weights_name(get_preset(name).precision)
        for precision in ("bf16", "fp8", "fp4"):
            out[(repo, precision)] = (name, None if precision == native else precision)
    return out


SERVED = _served()
"""(repository, precision) of a measured row -> (preset, ``--weights`` or None for the config's own)."""


def served_as(r) -> tuple[str, str | None] | str:
    """``(preset, weights)`` of measured row ``r`` (``SERVED``; weights None: the config's own), or why not."""
    served = SERVED.get((r.model, r.precision))
    return served if served is not None else f"no preset for {r.model} at {r.precision}"


def engine_kv(engine: str, model: str, gpu: str, weights: str | None = None) -> str | None:
    """The KV cache dtype a measured row of ``engine`` serving preset ``model`` at ``weights`` (a ``--weights`` name,
    None: the preset's own) on ``gpu`` ran at its default: TensorRT-LLM's and vLLM's, the checkpoint's own where its
    quantization config declares an FP8 cache (``KV_CACHE_FP8_CHECKPOINTS``: NVIDIA's NVFP4 checkpoints);
    SGLang's (``sglang_kv_default``: FP8 for DeepSeek-V4, and for DeepSeek sparse attention on Blackwell); else the
    model's own (None). An assumption, for the rows whose launch script is not known (the rows with one carry its
    flag: ``SiliconRow.kv_cache``, which ``row_kv`` takes first)."""
    if engine in ("trtllm", "vllm"):
        repo = checkpoints(model).get(weights or weights_name(get_preset(model).precision))
        return "fp8" if repo in KV_CACHE_FP8_CHECKPOINTS else None
    if engine != "sglang":
        return None
    from demos.prediction.engines import sglang_kv_default

    kv = sglang_kv_default(get_preset(model).model_type, get_gpu(gpu).family)
    return kv if kv == "fp8" else None


def row_kv(r, served: tuple[str, str | None], gpu: str) -> str | None:
    """The KV cache dtype measured row ``r``, served as ``served`` (``served_as``: the preset and its weights) on
    ``gpu``, ran at: its launch script's, else the engine's default (``engine_kv``); None: the model's own."""
    return r.kv_cache or engine_kv(r.engine, served[0], gpu, served[1])
