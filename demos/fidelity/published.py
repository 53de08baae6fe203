"""Published whole-deployment results of micro-batch overlap against the predictor (``validate --published``).

Each ``Case`` is one published deployment: the ``demos.predict`` arguments that express it and the
published quantities, each with its source. ``compare(cases)`` predicts every case (one sweep per
case, at the token counts its quantities name) and returns one record per quantity: ``case``,
``quantity``, ``predicted``, ``published`` (a number, or a ``[low, high]`` range for a break-even the
source only brackets), ``within`` (whether the prediction is within the quantity's target) and
``source``. No case here is used to set any figure of the model (docs/fidelity.md, "Published cases").

The cases: LMSYS's DeepSeek-V3 decode on 9 x 8 H100 (EP 72, DeepEP low-latency, CUDA graphs, 2,000-token
inputs), two-batch overlap on against off (LMSYS blog, 2025-05-05, "Deploying DeepSeek with PD Disaggregation
and Large-scale Expert Parallelism on 96 H100 GPUs"); ATOM's GPT-OSS-120B on 2 MI355X, its two-batch overlap in
decode against prefill only (ROCm/ATOM recipes/TBO.md, v0.1.5). No EFA case with overlap on and off was found.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CASES", "Case", "Quantity", "ablation", "compare", "format_ablation", "format_table"]


@dataclass(frozen=True)
class Quantity:
    """One published figure: ``kind`` "speedup" (DBO on / off step throughput at ``tokens`` per GPU),
    "tok_s_gpu" (tokens/s per GPU with DBO at ``tokens``) or "break_even" (tokens per GPU, a range);
    ``target``: the accepted prediction, a relative error (a number) or a band (low, high); a break-even
    must fall in its published range."""

    kind: str
    published: float | tuple[float, float]
    tokens: int | None = None
    target: float | tuple[float, float] | None = None

    @property
    def name(self) -> str:
        return self.kind if self.tokens is None else f"{self.kind} @{self.tokens}"


@dataclass(frozen=True)
class Case:
    name: str
    source: str
    args: dict[str, Any]
    quantities: tuple[Quantity, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)


_LMSYS = (
    "LMSYS blog 2025-05-05, Deploying DeepSeek with PD Disaggregation and Large-scale Expert Parallelism "
    "on 96 H100 GPUs (lm-sys/lm-sys.github.io blog/2025-05-05-large-scale-ep.md)"
)

_ATOM = (
    "ROCm/ATOM recipes/TBO.md at v0.1.5 (b0071c5): GPT-OSS-120B on 2 x MI355X, ISL 1024, OSL 1024, -tp 2 with "
    "data-parallel attention and MoRI expert parallelism"
)

CASES: tuple[Case, ...] = (
    Case(
        name="lmsys-dsv3-decode-h100-ep72",
        source=_LMSYS,
        args=dict(
            model="deepseek-v3",
            gpu="h100",
            nodes=9,
            ep=72,
            context=2000,
            mode="graph",
            tokens=[16, 32, 64, 128, 256],
        ),
        quantities=(
            Quantity("speedup", 0.73, tokens=32, target=(0.65, 0.85)),
            Quantity("break_even", (64.0, 128.0)),
            Quantity("speedup", 1.255, tokens=256, target=(1.15, 1.35)),
            Quantity("tok_s_gpu", 22310 / 8, tokens=256, target=0.20),
        ),
        notes=(
            "x0.73 is the post's -27% at 32 tokens per GPU; 2,789 tok/s per GPU is its 22,310 tok/s per node of 8",
            "the post gives no NIC speed: one 400 Gb/s CX7 per GPU, the usual H100 build, is assumed",
        ),
    ),
    Case(
        name="atom-gptoss-decode-mi355x",
        source=_ATOM,
        args=dict(
            model="gpt-oss-120b",
            gpu="mi355x",
            nodes=1,
            gpus_per_node=2,
            ep=2,
            context=1536,
            mode="graph",
            tokens=[128, 256],
        ),
        quantities=(
            Quantity("speedup", 21376 / 28411, tokens=128, target=0.15),
            Quantity("speedup", 28219 / 36134, tokens=256, target=0.15),
        ),
        notes=(
            "the published throughput of --enable-tbo all over --enable-tbo (prefill only) at 256 and 512 concurrent "
            "requests (x0.752, x0.781): the two runs differ in decode's overlap only, and decode holds most of "
            "each 1024-in 1024-out request's time, so the ratio stands for the decode step's speedup (a proxy)",
            "256 and 512 requests on 2 GPUs: 128 and 256 decode tokens per GPU; context the mean of a decode "
            "request's, 1024 + 512",
        ),
    ),
)


def _predicted(pred: Any, q: Quantity) -> float | None:
    if q.kind == "break_even":
        c = pred.crossovers["graph"]
        return None if c.tokens is None else float(c.tokens)
    point = next(p for p in pred.points if p.tokens == q.tokens)
    return point.speedup if q.kind == "speedup" else point.tokens_per_s_gpu_dbo


def _band(q: Quantity) -> tuple[float, float]:
    """The accepted predictions of ``q``: its published range, its target band, or the published figure
    within its relative target."""
    if isinstance(q.published, tuple):
        return q.published
    if isinstance(q.target, tuple):
        return q.target
    return q.published * (1 - q.target), q.published * (1 + q.target)


def _within(q: Quantity, value: float | None) -> bool:
    low, high = _band(q)
    return value is not None and low <= value <= high


def _predict(case: Case, what_if: dict[str, float] | None = None) -> Any:
    from demos.prediction import predict

    args = dict(case.args)
    return predict(args.pop("model"), what_if=what_if or None, **args)


def compare(cases: Sequence[Case] = CASES, progress: Callable[[str], None] | None = None) -> list[dict]:
    """One record per published quantity of ``cases`` (module docstring)."""
    rows = []
    for case in cases:
        if progress is not None:
            progress(f"published: {case.name}")
        pred = _predict(case)
        for q in case.quantities:
            value = _predicted(pred, q)
            published = list(q.published) if isinstance(q.published, tuple) else q.published
            error = None
            if value is not None and not isinstance(q.published, tuple):
                error = value / q.published - 1.0
            rows.append(
                {
                    "case": case.name,
                    "quantity": q.name,
                    "predicted": value,
                    "published": published,
                    "error": error,
                    "target": list(_band(q)),
                    "within": _within(q, value),
                    "source": case.source,
                }
            )
    return rows


def ablation(cases: Sequence[Case] = CASES, progress: Callable[[str], None] | None = None) -> list[dict]:
    """What each overlap mechanism (``demos.zoo.overlap_costs.MECHANISMS``) moves: per case, the
    predicted quantities with every mechanism on ("all"), with each one off (its ``--what-if`` knob at 0),
    and with all of them off ("none"); the split, balanced by default, is not varied (decode ubatches
    are equal whatever the engine)."""
    from demos.zoo.overlap_costs import MECHANISMS, OFF_BY_DEFAULT

    on = [k for k in MECHANISMS if k not in OFF_BY_DEFAULT]
    variants = [("all", {})] + [(f"without {k}", {k: 0.0}) for k in on]
    variants.append(("none", dict.fromkeys(on, 0.0)))
    rows = []
    for case in cases:
        for label, what_if in variants:
            if progress is not None:
                progress(f"ablation: {case.name}, {label}")
            pred = _predict(case, what_if)
            values = {q.name: _predicted(pred, q) for q in case.quantities}
            rows.append({"case": case.name, "mechanisms": label, "what_if": what_if, "quantities": values})
    return rows


def format_ablation(rows: Sequence[dict]) -> str:
    """The ablation records as one text table per case: a row per variant, a column per quantity."""
    lines = []
    for case in dict.fromkeys(r["case"] for r in rows):
        mine = [r for r in rows if r["case"] == case]
        names = list(mine[0]["quantities"])
        lines.append(f"{case}: each overlap mechanism turned off in turn (--what-if KNOB=0)")
        lines.append(f"{'mechanisms':<22}" + "".join(f"{n:>16}" for n in names))
        for r in mine:
            lines.append(f"{r['mechanisms']:<22}" + "".join(f"{_fmt(r['quantities'][n]):>16}" for n in names))
    return "\n".join(lines)


def _fmt(v: Any) -> str:
    if v is None:
        return "none"
    if isinstance(v, list):
        return f"{_fmt(v[0])}-{_fmt(v[1])}"
    return f"{v:,.3f}" if abs(v) < 10 else (f"{v:,.1f}" if abs(v) < 1000 else f"{v:,.0f}")


def format_table(rows: Sequence[dict]) -> str:
    """The records as a text table, then each case's source."""
    lines = [
        "Published overlap results against the predictor (no case sets any figure of the model)",
        f"{'case':<30}{'quantity':<16}{'predicted':>10}{'published':>11}{'error':>9}  within target",
    ]
    for r in rows:
        err = "" if r["error"] is None else f"{r['error'] * 100:+.1f}%"
        tgt = f"in {_fmt(r['target'])}"
        lines.append(
            f"{r['case']:<30}{r['quantity']:<16}{_fmt(r['predicted']):>10}{_fmt(r['published']):>11}{err:>9}  "
            f"{'yes' if r['within'] else 'NO'} ({tgt})"
        )
    for case in dict.fromkeys(r["case"] for r in rows):
        src = next(r["source"] for r in rows if r["case"] == case)
        lines.append(f"{case}: {src}")
    met = sum(r["within"] for r in rows)
    lines.append(f"{met} of {len(rows)} quantities within their targets")
    return "\n".join(lines)


def _check() -> None:
    """Every quantity is of a known kind and names a swept token count (checked at import)."""
    for case in CASES:
        for q in case.quantities:
            if q.kind not in ("speedup", "tok_s_gpu", "break_even") or (q.kind != "break_even" and q.tokens is None):
                raise ValueError(f"bad quantity {q!r} in {case.name}")
            if q.tokens is not None and q.tokens not in case.args["tokens"]:
                raise ValueError(f"{case.name}: {q.name} needs {q.tokens} among the swept tokens")


_check()
