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
from functools import lru_cache
from importlib.resources import files
from types import MappingProxyType

__all__ = ["SOURCE", "SPECULATIVE", "speculative_rows"]

SOURCE = (
    "SemiAnalysisAI/InferenceX @ 843c6254ff69 (its benchmark configs, .github/configs/nvidia-master.yaml, "
    "every version on that commit's history), Apache-2.0"
)

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
