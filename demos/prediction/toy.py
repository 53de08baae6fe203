"""``demos.predict --model toy --profile PATH.json``: the toy MoE swept on virtual with a profile that
``demos.calibrate`` measured, on the grid ``demos.validate`` uses (its shapes, the link rescaled so that
comm = 1 x compute), so that the crossover it predicts is the one ``demos.validate`` measures for real.

``toy_sweep(profile, tokens, schedule, modes)`` returns ``ToyResult`` records with the fields the
answer reads (``tokens``, ``mode``, ``ubatches``, ``comm_sms`` and a ``point`` with ``speedup``,
``engine``, ``hidden_fraction``, ``no_dbo``/``dbo`` step times and stages); ``toy_prediction(...)``
sweeps and answers, as ``predict("toy", profile=...)`` returns it (its arguments already checked).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from demos.engine_times import EngineTimes
from demos.fidelity.validation import grid
from demos.prediction.answer import Recommendation, crossover, reason_of
from demos.prediction.outputs import point_record
from demos.prediction.result import Prediction, SweptPoint, ToySetup
from demos.toy.ops import stage_of
from demos.toy.run import run
from demos.zoo.ops import stage_seconds

__all__ = ["ToyResult", "toy_prediction", "toy_sweep"]


@dataclass
class _Step:
    seconds: float
    stages: dict[str, float] = field(default_factory=dict)
    kernels: int = 0


@dataclass
class _ToyPoint:
    no_dbo: _Step
    dbo: _Step
    engine: EngineTimes
    hidden_fraction: float | None
    tokens: int = 0
    memory: Any = None
    moe_layer_s: Any = None  # the toy's layers are not the zoo's: no per-op breakdown
    dense_layer_s: Any = None

    @property
    def speedup(self) -> float:
        return self.no_dbo.seconds / self.dbo.seconds

    def tokens_per_s(self, dbo_on: bool) -> float:
        return self.tokens / (self.dbo if dbo_on else self.no_dbo).seconds


@dataclass
class ToyResult:
    tokens: int
    mode: str
    ubatches: int
    comm_sms: int
    point: _ToyPoint


def toy_sweep(
    profile: Any,
    tokens: Sequence[int],
    schedule: str,
    modes: Sequence[str],
    progress: Callable[[int, int, str], None] | None = None,
) -> list[ToyResult]:
    """The toy on validate's grid at ``tokens`` (module docstring), each point with and without DBO."""
    points = grid(sizes=tuple(tokens), ratios=(1.0,), schedules=(schedule,), modes=tuple(modes))
    out = []
    for i, pt in enumerate(points):
        res = run(pt.config(backend="virtual", profile=profile, steps=1, warmup=1, meta=True, dtype="float32"))
        p = _ToyPoint(
            _Step(res.time_no_dbo_s, stage_seconds(res.records_no_dbo, stage_of), len(res.records_no_dbo)),
            _Step(res.time_dbo_s, stage_seconds(res.records_dbo, stage_of), len(res.records_dbo)),
            res.engine,
            res.hidden_fraction,
            tokens=pt.tokens,
        )
        out.append(ToyResult(pt.tokens, pt.mode, 2, 0, p))
        if progress is not None:
            progress(i + 1, len(points), f"toy {schedule} {pt.tokens} tokens, {pt.mode}")
    return out


_NO_FLAGS = "the toy runs on this machine's calibrated profile: no serving-engine flags follow from it"


def toy_prediction(
    profile: Any,
    named: str,
    tokens: Sequence[int],
    schedule: str,
    modes: Sequence[str],
    phase: str,
    progress: Callable[[int, int, str], None] | None = None,
) -> Prediction:
    """The toy swept on ``profile`` (``named``: as the caller gave it) and its answer: the crossover and
    reason per mode, no serving-engine flags (``Prediction``'s docstring says which fields are empty)."""
    results = toy_sweep(profile, tokens, schedule, modes, progress)
    cross = {m: crossover([r for r in results if r.mode == m]) for m in modes}
    reasons = {m: reason_of([r for r in results if r.mode == m], cross[m]) for m in modes}
    first = next(iter(modes))
    rec = Recommendation(phase, first, None, None, _NO_FLAGS, _NO_FLAGS, reasons[first], reasons)
    return Prediction(
        title=f"toy MoE ({schedule}, validate's grid shapes, comm = 1 x compute) on profile {profile.name}",
        model="toy",
        phase=phase,
        schedule=schedule,
        setup=ToySetup(profile.name),
        points=tuple(SweptPoint(**point_record(r, 1)) for r in results),
        crossovers=cross,
        recommendation=rec,
        best={},
        sources=(f"device and host: the profile {named} (python -m demos.calibrate)",),
        _results=tuple(results),
    )
