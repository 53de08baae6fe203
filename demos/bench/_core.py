"""What every bench section uses: the run's ``Config``, ``Timing``, the record constructors and
``progress``. Imports nothing from ``demos.bench`` (sections in other modules import from here)."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from demos.bench._report import NOISY_SPREAD, Record, _check

__all__ = ["Config", "Timing", "progress", "timing_record", "value_record"]


@dataclass(frozen=True)
class Config:
    quick: bool
    device: str
    backend: str = "auto"  # the host section's stream backend (auto: cuda with a GPU, else threads)

    @property
    def repeat(self) -> int:
        return 7 if self.quick else 21

    @property
    def min_time_s(self) -> float:
        """Each repeat runs enough calls to last at least this long."""
        return 0.01 if self.quick else 0.05


def progress(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Timing:
    median: float  # seconds per call
    min: float
    max: float

    @property
    def noisy(self) -> bool:
        return self.min > 0 and self.max / self.min > NOISY_SPREAD


def timing_record(
    section: str, name: str, t: Timing, baseline: tuple[str, Timing] | None = None, target: str | None = None
) -> Record:
    ratio = None if baseline is None else t.median / baseline[1].median
    return {
        "section": section,
        "name": name,
        "value": t.median * 1e6,
        "unit": "us/call",
        "min": t.min * 1e6,
        "max": t.max * 1e6,
        "noisy": t.noisy,
        "baseline": None if baseline is None else baseline[0],
        "ratio": ratio,
        "target": target,
        "ok": _check(target, ratio),
    }


def value_record(section: str, name: str, value: float, unit: str, target: str | None = None) -> Record:
    return {
        "section": section,
        "name": name,
        "value": value,
        "unit": unit,
        "baseline": None,
        "ratio": None,
        "target": target,
        "ok": _check(target, value),
    }
