"""Which measured serving rows SemiAnalysis' InferenceX ran with speculative decoding, and the launch flags its
scripts and recipes set.

``inferencex_speculative.csv`` beside this module lists the rows of the measured extra's
``silicon_sample.csv`` that InferenceX exported and that its published benchmark configs say decoded with
MTP (``mtp``), or that configs with and without MTP both match (``unknown``: InferenceX ran that layout
both ways then, and the row does not say which it is). Every other row is taken as non-speculative. The
table is written by ``scripts/extract_inferencex_speculative.py`` from a pinned commit of InferenceX
(``README-inferencex.md`` beside this module: source, licence and the matching rule). ``RADIX_CACHE_OFF`` and
``KV_CACHE_FP8`` list the single-node launch scripts that pass ``--disable-radix-cache`` (SGLang's) and set an
FP8 KV cache (SGLang's, vLLM's and TensorRT-LLM's, per engine); ``DISAGG_KV_CACHE_FP8`` the disaggregated
deployments whose recipes (NVIDIA's ``srt-slurm``, which InferenceX's configs name) set an FP8 KV cache;
``radix_cache_off`` and ``kv_cache_fp8`` read a row's flags from them (``SiliconRow.radix_cache``,
``SiliconRow.kv_cache``); ``DISAGG_REDUNDANT_SLOTS`` the disaggregated SGLang deployments whose decode recipes
deploy redundant expert slots without EPLB, which ``redundant_slots`` reads (``SiliconRow.redundant_slots``).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Mapping
from functools import lru_cache
from importlib.resources import files
from types import MappingProxyType

__all__ = [
    "DISAGG_KV_CACHE_FP8",
    "DISAGG_REDUNDANT_SLOTS",
    "KV_CACHE_FP8",
    "RADIX_CACHE_OFF",
    "RECIPES",
    "SOURCE",
    "SPECULATIVE",
    "exported",
    "kv_cache_fp8",
    "measured_day",
    "radix_cache_off",
    "redundant_slots",
    "speculative_rows",
]

SOURCE = (
    "SemiAnalysisAI/InferenceX @ 843c6254ff69 (its benchmark configs, .github/configs/nvidia-master.yaml, "
    "every version on that commit's history), Apache-2.0"
)

_DSR1 = ("deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-V3")  # DeepSeek-R1's exported rows name both
_QWEN35 = ("Qwen/Qwen3.5-397B-A17B",)
_GLM5 = ("zhipuai/GLM-5",)
_KIMI25 = ("moonshotai/Kimi-K2.5",)
_MINIMAX25 = ("MiniMaxAI/MiniMax-M2.5",)

RADIX_CACHE_OFF = (
    (_QWEN35, ("b200_sxm", "h200_sxm"), ("bf16", "fp8", "fp4"), "2026-02-19"),
    (_QWEN35, ("b300_sxm",), ("bf16", "fp8", "fp4"), "2026-04-17"),
    (_DSR1, ("b200_sxm",), ("fp8",), "2025-09-12"),
    (_DSR1, ("b200_sxm",), ("fp4",), "2025-09-21"),
    (_DSR1, ("h200_sxm",), ("fp8",), "2025-08-25"),
    (_DSR1, ("b300_sxm",), ("fp8", "fp4"), "2026-04-17"),
    (_GLM5, ("b200_sxm",), ("fp8",), "2026-03-20"),
    (_GLM5, ("b200_sxm",), ("fp4",), "2026-04-09"),
    (_GLM5, ("b300_sxm",), ("fp8",), "2026-04-17"),
)
"""The single-node SGLang launch scripts of InferenceX that pass ``--disable-radix-cache``: (the model names the
measured rows give, systems, precisions, the day from which every version of the script does; the
dates and files: README-inferencex.md, "Launch flags"). A row measured before its script's day, or in a
disaggregated run (other files, not read), keeps the default."""

KV_CACHE_FP8 = {
    "sglang": (
        (_QWEN35, ("b200_sxm",), ("fp8",), "2026-03-03"),
        (_QWEN35, ("b200_sxm",), ("fp4",), "2026-04-08"),
        (_QWEN35, ("h200_sxm",), ("fp8",), "2026-03-04"),
        (_QWEN35, ("b300_sxm",), ("fp8", "fp4"), "2026-04-17"),
        (_DSR1, ("b200_sxm",), ("fp8",), "2025-09-23"),
        (_DSR1, ("b200_sxm",), ("fp4",), "2025-09-21"),
        (_DSR1, ("b300_sxm",), ("fp8", "fp4"), "2026-04-17"),
        (_GLM5, ("b200_sxm",), ("fp8",), "2026-03-20"),
        (_GLM5, ("b200_sxm",), ("fp4",), "2026-04-09"),
        (_GLM5, ("b300_sxm",), ("fp8",), "2026-04-17"),
    ),
    "trtllm": (
        (_DSR1, ("b200_sxm",), ("fp8",), "2025-09-12"),
        (_DSR1, ("b200_sxm",), ("fp4",), "2025-09-15"),
        (_DSR1, ("h200_sxm",), ("fp8",), "2025-09-18"),
    ),
    "vllm": (
        (_MINIMAX25, ("b200_sxm",), ("fp8",), "2026-03-27"),
        (_MINIMAX25, ("b200_sxm",), ("fp4",), "2026-04-07"),
        (_MINIMAX25, ("b300_sxm",), ("fp8", "fp4"), "2026-04-17"),
        (_KIMI25, ("b200_sxm",), ("fp4",), "2026-04-16"),
    ),
}
"""The single-node launch scripts that set an FP8 KV cache, per engine, in the same form: SGLang's pass
``--kv-cache-dtype fp8_e4m3``, vLLM's ``--kv-cache-dtype fp8``, TensorRT-LLM's write ``kv_cache_config: dtype: fp8``
into the server's YAML."""

RECIPES = "NVIDIA/srt-slurm @ c88ef731 (recipes/, every version of each file before 2026-04-20), Apache-2.0"
"""Where ``DISAGG_KV_CACHE_FP8`` was read (README-inferencex.md, "Launch flags")."""

DISAGG_KV_CACHE_FP8 = {
    "trtllm": (
        (_DSR1, ("b200_sxm", "b300_sxm", "gb200", "h200_sxm"), ("fp8", "fp4"), "2026-01-27"),
        (_DSR1, ("gb300",), ("fp8", "fp4"), "2026-02-02"),
        (_DSR1, ("h100_sxm",), ("fp8",), "2026-02-05"),
        (_KIMI25, ("gb200",), ("fp4",), "2026-04-13"),
    ),
    "sglang": (
        (_DSR1, ("gb200",), ("fp4",), "2026-01-28"),
        (_DSR1, ("gb200",), ("fp8",), "2026-02-04"),
        (_DSR1, ("gb300",), ("fp8", "fp4"), "2026-02-02"),
        (_DSR1, ("b200_sxm",), ("fp8", "fp4"), "2026-03-03"),
    ),
    "vllm": ((_KIMI25, ("gb200",), ("fp4",), "2026-04-06"),),
}
"""The disaggregated deployments InferenceX ran from ``srt-slurm`` recipes that set an FP8 KV cache (TensorRT-LLM's
``kv_cache_config.dtype: fp8``, SGLang's ``kv-cache-dtype: fp8_e4m3``, vLLM's ``kv-cache-dtype: fp8``, on both
sides), per engine in the single-node tables' form: (the model names the rows give, systems, precisions, the day from
which InferenceX's config names those recipes and every version of them sets it). SGLang's Hopper recipes keep its
default (BF16); rows measured before the day (GB200's of December 2025) keep the engine's default: their configs were
not read."""

DISAGG_REDUNDANT_SLOTS = (
    32,
    (
        (_DSR1, ("gb200",), ("fp4",), "2026-01-28"),
        (_DSR1, ("gb200",), ("fp8",), "2026-02-04"),
        (_DSR1, ("gb300",), ("fp8", "fp4"), "2026-02-02"),
    ),
)
"""(slots, deployments): the disaggregated SGLang deployments whose decode workers with data-parallel attention ran
``ep-num-redundant-experts: 32`` with ``ep-dispatch-algorithm: static`` and neither ``enable-eplb`` nor
``init-expert-location`` (SGLang's trivial placement: ``demos.zoo.expert_placement``), in every version before
2026-04-20 of every recipe of the directories ``DISAGG_KV_CACHE_FP8`` names for them (the data-parallel ones of
``recipes/gb200-{fp4,fp8}``, ``recipes/gb300-{fp4,fp8}`` without MTP; their low-latency recipes, attention TP
without DeepEP, set none, nor do ``recipes/b200-{fp4,fp8}``), from the same days."""

_EXPORT = re.compile(r"^(?:source_file=20\d\d-\d\d-\d\d\.csv|db-dump/)")
_MEASURED = re.compile(r"measured=(\d{4}-\d\d-\d\d)")


def exported(source) -> bool:
    """Whether a measured row's source field names one of InferenceX's exports (``source_file=YYYY-MM-DD.csv``
    or ``db-dump/...``), not another source (NVIDIA's own runs)."""
    return isinstance(source, str) and bool(_EXPORT.match(source))


def measured_day(source) -> str | None:
    """The ``YYYY-MM-DD`` of a source field's ``measured=``, None where it records none."""
    m = _MEASURED.search(source) if isinstance(source, str) else None
    return m.group(1) if m else None


def _listed(table: tuple, record: Mapping, mode: str) -> bool:
    """Whether a measured row (its ``silicon_sample.csv`` record: ``model_path``, ``system``, ``precision``, ``mode``,
    ``silicon_data_source``) is a run of ``mode`` ("agg" or "disagg") InferenceX exported from a script or recipe
    ``table`` lists, measured on or after its entry's day."""
    source = record["silicon_data_source"]
    day = measured_day(source)
    if record["mode"] != mode or day is None or not exported(source):
        return False
    model, system, precision = (str(record[k]) for k in ("model_path", "system", "precision"))
    return any(
        model in models and system in systems and precision in precisions and day >= since
        for models, systems, precisions, since in table
    )


def radix_cache_off(record: Mapping) -> bool:
    """Whether a measured row's SGLang server ran without its radix cache (``RADIX_CACHE_OFF``)."""
    return record["backend"] == "sglang" and _listed(RADIX_CACHE_OFF, record, "agg")


def kv_cache_fp8(record: Mapping) -> bool:
    """Whether a measured row's servers kept an FP8 KV cache: a co-located run's script (``KV_CACHE_FP8``) or a
    disaggregated run's recipe (``DISAGG_KV_CACHE_FP8``), of its engine."""
    engine = record["backend"]
    return _listed(KV_CACHE_FP8.get(engine, ()), record, "agg") or _listed(
        DISAGG_KV_CACHE_FP8.get(engine, ()), record, "disagg"
    )


def redundant_slots(record: Mapping) -> int:
    """The redundant expert slots a measured row's decode worker deployed without EPLB (``DISAGG_REDUNDANT_SLOTS``:
    its recipe's, where its decode attention is data-parallel), else 0."""
    slots, table = DISAGG_REDUNDANT_SLOTS
    dp = record.get("decode_attention_dp_size")
    if record["backend"] != "sglang" or not isinstance(dp, (int, float)) or not dp > 1:
        return 0
    return slots if _listed(table, record, "disagg") else 0


SPECULATIVE = ("mtp", "unknown")
"""The values a listed row takes (module docstring); a row not listed is ``"none"``."""


@lru_cache(maxsize=1)
def speculative_rows() -> MappingProxyType:
    """``{silicon row id: "mtp" | "unknown"}`` for the listed rows (module docstring)."""
    text = files(__package__).joinpath("inferencex_speculative.csv").read_text()
    out = {}
    for r in csv.DictReader(io.StringIO(text)):
        if r["speculative"] not in SPECULATIVE:
            raise ValueError(f"inferencex_speculative.csv: {r['id']}: unknown value {r['speculative']!r}")
        out[r["id"]] = r["speculative"]
    return MappingProxyType(out)
