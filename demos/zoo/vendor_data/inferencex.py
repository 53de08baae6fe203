"""Which measured serving rows SemiAnalysis' InferenceX ran with speculative decoding.

``inferencex_speculative.csv`` beside this module lists the rows of the measured extra's
``silicon_sample.csv`` that InferenceX exported and that its published benchmark configs say decoded with
MTP (``mtp``), or that configs with and without MTP both match (``unknown``: InferenceX ran that layout
both ways then, and the row does not say which it is). Every other row is taken as non-speculative. The
table is written by ``scripts/extract_inferencex_speculative.py`` from a pinned commit of InferenceX
(``README-inferencex.md`` beside this module: source, licence and the matching rule).
"""

from __future__ import annotations

import csv
import io
import re
from functools import lru_cache
from importlib.resources import files
from types import MappingProxyType

__all__ = [
    "RADIX_CACHE_OFF",
    "SOURCE",
    "SPECULATIVE",
    "exported",
    "measured_day",
    "radix_cache_off",
    "speculative_rows",
]

SOURCE = (
    "SemiAnalysisAI/InferenceX @ 843c6254ff69 (its benchmark configs, .github/configs/nvidia-master.yaml, "
    "every version on that commit's history), Apache-2.0"
)

RADIX_CACHE_OFF = {"Qwen/Qwen3.5-397B-A17B": "2026-02-19"}
"""The models whose InferenceX SGLang launch scripts pass ``--disable-radix-cache``, by the name the measured
rows give, with the day from which every version of those scripts does
(``benchmarks/single_node/qwen3.5_{bf16,fp8,fp4}_{b200,b300,h200,h100}.sh`` and their ``_mtp`` twins; only
the B200 BF16 script's first versions, 2026-02-16 and the first of 2026-02-19, ran the default)."""

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


def radix_cache_off(model: str, source: str) -> bool:
    """Whether a measured row of ``model`` (its ``model_path``) with source field ``source`` is an InferenceX
    export whose SGLang server ran without its radix cache (``RADIX_CACHE_OFF``; a row measured on or after
    its day)."""
    since = RADIX_CACHE_OFF.get(model)
    day = measured_day(source)
    return since is not None and exported(source) and day is not None and day >= since


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
