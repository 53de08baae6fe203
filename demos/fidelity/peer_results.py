"""What a pass of aiconfigurator's estimates found (``demos.fidelity.peer`` asks for them): one row's estimate
(``PeerEstimate``) and the measured row beside it (``PeerCheck``, its errors estimate / measured - 1), their
summary per GPU, engine, mode and phase (``peer_summary``), the reasons rows got no estimate
(``no_estimate_reasons``, folded by ``reason_kind``) and the table of both (``format_peer``). Nothing here
imports ``aiconfigurator``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from demos.fidelity.stats import error_stats


class PeerEstimate(NamedTuple):
    """aiconfigurator's estimate of one row: ``ttft_s`` and ``tpot_s`` in seconds, or both None with
    ``reason`` ("no estimate: ..."); ``backend_version`` the database version it used."""

    ttft_s: float | None
    tpot_s: float | None
    reason: str | None = None
    backend_version: str | None = None

    @property
    def estimated(self) -> bool:
        return self.ttft_s is not None and self.tpot_s is not None


class PeerCheck(NamedTuple):
    """One measured row with aiconfigurator's estimate; errors are estimate / measured - 1 (None without
    an estimate or a measured value). ``measured_version`` is the engine version the row was measured on."""

    id: str
    gpu: str
    engine: str
    mode: str
    model: str
    isl: int
    osl: int
    batch: int
    measured_ttft_s: float | None
    measured_tpot_s: float | None
    estimate: PeerEstimate
    measured_version: str | None = None

    @property
    def ttft_error(self) -> float | None:
        return _error(self.estimate.ttft_s, self.measured_ttft_s)

    @property
    def tpot_error(self) -> float | None:
        return _error(self.estimate.tpot_s, self.measured_tpot_s)

    def to_dict(self) -> dict:
        d = self._asdict()
        d.update(
            estimate_ttft_s=self.estimate.ttft_s,
            estimate_tpot_s=self.estimate.tpot_s,
            reason=self.estimate.reason,
            backend_version=self.estimate.backend_version,
            ttft_error=self.ttft_error,
            tpot_error=self.tpot_error,
        )
        del d["estimate"]
        return d


def _error(estimate: float | None, measured: float | None) -> float | None:
    if estimate is None or not measured:
        return None
    return estimate / measured - 1.0


class _Phase(NamedTuple):
    id: str
    error: float


def peer_summary(checks: Iterable[PeerCheck]) -> list[dict]:
    """Per (gpu, engine, mode, phase "ttft" then "tpot"): ``rows`` (measured in that phase), ``estimated``
    (with an estimate), and of the estimated ones the signed median error, the median |error| and the
    signed error of the largest (``demos.fidelity.stats.error_stats``; None when none was estimated)."""
    groups: dict[tuple[str, str, str, str], tuple[list, list]] = {}
    for c in checks:
        for phase, measured_s, err in (
            ("ttft", c.measured_ttft_s, c.ttft_error),
            ("tpot", c.measured_tpot_s, c.tpot_error),
        ):
            if measured_s is None:
                continue
            rows, errs = groups.setdefault((c.gpu, c.engine, c.mode, phase), ([], []))
            rows.append(c)
            if err is not None:
                errs.append(_Phase(c.id, err))
    out = []
    for (gpu, engine, mode, phase), (rows, errs) in sorted(
        groups.items(), key=lambda kv: (*kv[0][:3], kv[0][3] != "ttft")
    ):
        stats = {"median_error": None, "median_abs_error": None, "max_error": None, "worst": None}
        if errs:
            s, worst = error_stats(errs)
            stats = {k: s[k] for k in ("median_error", "median_abs_error", "max_error")} | {"worst": worst.id}
        out.append(
            {"gpu": gpu, "engine": engine, "mode": mode, "phase": phase, "rows": len(rows), "estimated": len(errs)}
            | stats
        )
    return out


def no_estimate_reasons(checks: Iterable[PeerCheck]) -> dict[str, int]:
    """``{reason: rows}`` of the rows without an estimate, most first."""
    counts: dict[str, int] = {}
    for c in checks:
        if not c.estimate.estimated:
            counts[c.estimate.reason] = counts.get(c.estimate.reason, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


_DETAIL = (
    (re.compile(r"\{[^{}]*\}"), "{...}"),  # a table key's fields
    (re.compile(r" at \S*aiconfigurator_core/systems/\S*"), ""),  # the table's folder
    (re.compile(r"<urlopen error [^>]*>"), "offline"),
)


def reason_kind(reason: str, width: int = 110) -> str:
    """``reason`` without its "no estimate: " and with its row-specific details folded (a table key's
    fields, the table's folder, the download error), cut to ``width``: rows missing the same kind of
    data count as one line."""
    reason = reason.removeprefix("no estimate: ")
    for pattern, repl in _DETAIL:
        reason = pattern.sub(repl, reason)
    return reason if len(reason) <= width else reason[: width - 3] + "..."


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1%}"


def format_peer(summaries: list[dict], reasons: Mapping[str, int] | None = None, top: int = 10) -> str:
    """The summary as a table (one line per gpu, engine, mode and phase) and the ``top`` most common
    reasons rows got no estimate (``no_estimate_reasons``, folded by ``reason_kind``)."""
    lines = [
        "aiconfigurator's own estimate against the measured deployments (error: estimate / measured - 1)",
        f"{'gpu':6} {'engine':7} {'mode':6} {'phase':5} {'rows':>5} {'est':>5} "
        f"{'median':>8} {'|median|':>9} {'max':>9}",
    ]
    for s in summaries:
        size = "-" if s["median_abs_error"] is None else f"{s['median_abs_error']:.1%}"
        lines.append(
            f"{s['gpu']:6} {s['engine']:7} {s['mode']:6} {s['phase']:5} {s['rows']:5d} {s['estimated']:5d} "
            f"{_pct(s['median_error']):>8} {size:>9} {_pct(s['max_error']):>9}"
        )
    if reasons:
        kinds: dict[str, int] = {}
        for reason, n in reasons.items():
            kinds[reason_kind(reason)] = kinds.get(reason_kind(reason), 0) + n
        ranked = sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))
        lines.append(f"no estimate for {sum(reasons.values())} rows; the most common reasons (no estimate: ...):")
        for reason, n in ranked[:top]:
            lines.append(f"  {n:5d}  {reason}")
        if len(ranked) > top:
            lines.append(f"  {sum(n for _, n in ranked[top:]):5d}  {len(ranked) - top} other reasons")
    return "\n".join(lines)
