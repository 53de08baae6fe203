"""The built-in ``h200`` profile against the measurements of one H200: ``compare_h200``, ``format_h200``.

``H200_MEASURED`` holds the measured configs; ``compare_h200`` predicts each on the virtual
backend and gives its errors against the measured runs, ``format_h200`` the lines that say so.
``demos.fidelity.validation`` re-exports these names.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from dbo.trace import fmt_seconds
from demos.toy.config import OverlapConfig
from demos.toy.run import run
from demos.vocabulary import Schedule

__all__ = ["H200_MEASURED", "compare_h200", "format_h200"]

# --- the H200 measurements ---------------------------------------------------------------------------
# One H200 SXM, eager, link calibrated so that comm = 1 x compute, two measurement runs per small
# config (median wall step times of 7 steps each); the low and high run are kept.
H200_MEASURED = (
    ("default ht", dict(schedule="ht"), (22.5e-3, 24.7e-3), (0.43, 0.50)),
    ("default ll", dict(schedule="ll"), (20.3e-3, 32.6e-3), (0.42, 0.66)),
    (
        "ll, 4 layers, 8192 tokens, hidden 4096, 16 experts, bf16",
        dict(schedule="ll", layers=4, tokens=8192, hidden=4096, experts=16, dtype="bfloat16"),
        (117.5e-3, 117.5e-3),
        (1.31, 1.31),
    ),
)


@contextlib.contextmanager
def _ll_experts_as_measured() -> Iterator[None]:
    """The ll experts kernel as the measured code ran it: reading the expert offsets on the host
    (one sync per layer) and computing only the routed rows. The current ll kernel is sync-free
    and multiplies the whole fixed-capacity layout; marking it for the comparison only."""
    from demos.toy.kernels import experts_ll_kernel as fn
    from demos.toy.model import ToyMoE

    synced = getattr(fn, "dbo_syncs_host", False)
    rows = ToyMoE.ll_rows
    if not synced:
        fn.dbo_syncs_host = True
    ToyMoE.ll_rows = "valid"
    try:
        yield
    finally:
        ToyMoE.ll_rows = rows
        if not synced:
            del fn.dbo_syncs_host


def compare_h200(profile: Any = "h200") -> list[dict[str, Any]]:
    """Predict the H200-measured configs with ``profile``; errors against the nearest measured run
    (and against both runs: ``*_range``). The ll configs are predicted as the measured code ran
    (its experts kernel synced the host once per layer and computed only the routed rows); ``now_*``:
    the current, sync-free ll over the padded layout."""
    out = []
    for label, kw, t_no, sp in H200_MEASURED:
        cfg = OverlapConfig(
            backend="virtual",
            profile=profile,
            comm_ratio=1.0,
            steps=1,
            warmup=1,
            meta=True,
            ep=1,  # one process ran every expert
            **{"dtype": "float32", **kw},
        )
        now = run(cfg)
        if kw.get("schedule") == Schedule.LL:
            with _ll_experts_as_measured():
                res = run(cfg)
        else:
            res = now
        errs = [res.time_no_dbo_s / t - 1 for t in t_no]
        serrs = [res.speedup - x for x in sp]
        out.append(
            dict(
                config=label,
                predicted_no_dbo_s=res.time_no_dbo_s,
                measured_no_dbo_s=list(t_no),
                err_no_dbo=min(errs, key=abs),
                err_no_dbo_range=[min(errs), max(errs)],
                predicted_speedup=res.speedup,
                measured_speedup=list(sp),
                err_speedup=min(serrs, key=abs),
                err_speedup_range=[min(serrs), max(serrs)],
                right_side_of_1=all((res.speedup > 1) == (x > 1) for x in sp),
                now_no_dbo_s=now.time_no_dbo_s,
                now_speedup=now.speedup,
            )
        )
    return out


def _span(best: float, rng: list[float], pct: bool) -> str:
    f = (lambda x: f"{x * 100:+.0f}%") if pct else (lambda x: f"{x:+.2f}")
    return f(best) if rng[0] == rng[1] else f"{f(best)}; {f(rng[0])} to {f(rng[1])}"


def format_h200(rows: list[dict[str, Any]], name: str = "h200") -> str:
    lines = [
        f"{name} profile vs the H200 measurements (virtual, comm ratio 1; error against the nearest of the two runs, "
        "and against both; ll as measured: its experts kernel then synced the host once per layer)"
    ]
    for r in rows:
        lo, hi = r["measured_no_dbo_s"]
        slo, shi = r["measured_speedup"]
        rng = fmt_seconds(lo) if lo == hi else f"{fmt_seconds(lo)}-{fmt_seconds(hi)}"
        srng = f"{slo:.2f}x" if slo == shi else f"{slo:.2f}-{shi:.2f}x"
        lines.append(
            f"{r['config']}: no DBO {fmt_seconds(r['predicted_no_dbo_s'])} predicted, {rng} measured "
            f"({_span(r['err_no_dbo'], r['err_no_dbo_range'], True)}); "
            f"speedup {r['predicted_speedup']:.2f}x predicted, "
            f"{srng} measured ({_span(r['err_speedup'], r['err_speedup_range'], False)}"
            f"{'' if r['right_side_of_1'] else ', WRONG side of 1'})"
            + (
                ""
                if r["now_no_dbo_s"] == r["predicted_no_dbo_s"]
                else f"; the current sync-free ll: {fmt_seconds(r['now_no_dbo_s'])}, {r['now_speedup']:.2f}x"
            )
        )
    return "\n".join(lines)
