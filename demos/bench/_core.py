"""What every bench section uses: the run's ``Config``, ``Timing`` and the timing loop
(``time_together``, ``samples_timing``), the record constructors and ``progress``. Imports only
``demos.bench._report`` from ``demos.bench`` (sections in other modules import from here)."""

from __future__ import annotations

import gc
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

from demos.bench._report import NOISY_SPREAD, Record, check_target


@dataclass(frozen=True)
class Config:
    quick: bool
    device: str
    backend: str = "auto"  # the host section's stream backend (auto: cuda with a GPU, else threads)
    azure_trace: str | None = None  # the serving section's full Azure conversation trace (None: the shipped head)

    @property
    def repeat(self) -> int:
        return 7 if self.quick else 21

    @property
    def min_time_s(self) -> float:
        """Each repeat runs enough calls to last at least this long."""
        return 0.01 if self.quick else 0.05


def progress(msg: str) -> None:
    """One progress line on stderr, written whole in one call: ``print`` writes the text and its newline
    apart, and a signal's one line that lands between the two would be glued to the progress text
    (``demos._guard``; the signal storm saw it once)."""
    sys.stderr.write(f"[bench] {msg}\n")
    sys.stderr.flush()


@dataclass(frozen=True)
class Timing:
    median: float  # seconds per call
    min: float
    max: float

    @property
    def noisy(self) -> bool:
        return self.min > 0 and self.max / self.min > NOISY_SPREAD


def samples_timing(samples: list[float]) -> Timing:
    """The median, min and max of per-call seconds."""
    return Timing(statistics.median(samples), min(samples), max(samples))


def _calibrate(fn: Callable[[], Any], min_time_s: float) -> int:
    number = 1
    while True:
        start = time.perf_counter()
        for _ in range(number):
            fn()
        if time.perf_counter() - start >= min_time_s / 4 or number >= 1 << 22:
            return max(1, number * 4)
        number *= 2


def time_together(fns: dict[str, Callable[[], Any]], cfg: Config) -> dict[str, Timing]:
    """Time several functions in one run, round-robin over repeats so drift hits them all alike."""
    numbers = {name: _calibrate(fn, cfg.min_time_s) for name, fn in fns.items()}
    samples: dict[str, list[float]] = {name: [] for name in fns}
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(cfg.repeat):
            for name, fn in fns.items():
                number = numbers[name]
                start = time.perf_counter()
                for _ in range(number):
                    fn()
                samples[name].append((time.perf_counter() - start) / number)
    finally:
        if gc_was_enabled:
            gc.enable()
    return {name: Timing(statistics.median(s), min(s), max(s)) for name, s in samples.items()}


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
        "ok": check_target(target, ratio),
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
        "ok": check_target(target, value),
    }
