"""``python -m demos.validate serving``'s one library call (``serving_check``) and its typed result
(``ServingResult``), beside the other checks' (``demos.fidelity.checks`` re-exports both)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["ServingResult", "serving_check"]

Progress = Callable[[str], None]


def _quiet(text: str) -> None:
    pass


@dataclass
class ServingResult:
    """Measured serving runs simulated (``ServingCheck`` rows), their summaries per GPU, engine and mode (and
    per model, ``by_model``, and per engine, mode and kind of build, ``by_release``: a numbered release, a
    nightly image, or none recorded),
    ``{reason: rows}`` not simulated, and with the peer asked for, aiconfigurator's estimate of the same
    rows side by side (``side_by_side``: per GPU, engine and mode, both median |errors| on the rows both
    estimated)."""

    rows: list[Any]
    summary: list[dict[str, Any]]
    skipped: dict[str, int]
    side_by_side: list[dict[str, Any]] | None = None
    seconds: float = 0.0
    by_model: list[dict[str, Any]] | None = None
    by_release: list[dict[str, Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {"rows": [c.to_dict() for c in self.rows], "summary": self.summary, "skipped": self.skipped}
        if self.by_model is not None:
            out["summary_by_model"] = self.by_model
        if self.by_release is not None:
            out["summary_by_release"] = self.by_release
        out["seconds"] = self.seconds
        if self.side_by_side is not None:
            out["side_by_side"] = self.side_by_side
        return out

    def text(self) -> str:
        from demos.fidelity.serving import format_grouped, format_serving, format_side_by_side

        out = format_serving(self.summary, self.skipped)
        if self.by_model:
            out += format_grouped(self.by_model)
        if self.by_release:
            out += format_grouped(self.by_release, "per engine build:", ("engine", "mode", "release_kind"))
        if self.side_by_side is not None:
            out += format_side_by_side(self.side_by_side)
        return out + f"({len(self.rows)} rows simulated in {self.seconds:.0f} s)\n"


def serving_check(
    *,
    quick: bool = False,
    full: bool = False,
    peer: bool = False,
    progress: Progress | None = None,
    imbalance: str = "auto",
) -> ServingResult:
    """Every expressible measured serving run simulated as its benchmark ran (``demos.fidelity.serving``);
    ``quick``: one row per deployment and lengths; ``full``: aiperf's request counts; ``peer``:
    aiconfigurator's estimate of the same rows beside ours (needs the peer extra); ``imbalance``: the routing
    model every step takes ("auto" or "power-law", ``demos.zoo.workload.IMBALANCE_MODELS``). Raises
    ``MeasuredTablesError`` without the measured extra, ``PeerError`` without the peer one."""
    import time

    from demos.fidelity import serving

    progress = progress or _quiet
    start = time.perf_counter()
    if peer:
        from demos.fidelity.peer import load_peer

        load_peer()  # refuse before any run when the extra is missing
    rows, skipped = serving.serving_rows(
        lambda d, n, what: progress(f"serving: {d}/{n} {what}"), quick=quick, full=full, imbalance=imbalance
    )
    side = serving.side_by_side(rows, lambda d, n, what: progress(f"peer: {d}/{n} {what}")) if peer else None
    summary, by_model = serving.serving_summaries(rows), serving.serving_summaries(rows, ("model",))
    by_release = serving.serving_summaries(rows, ("engine", "mode", "release_kind"))
    return ServingResult(rows, summary, skipped, side, time.perf_counter() - start, by_model, by_release)
