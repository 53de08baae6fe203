"""What an overlap run measures, as plain dataclasses (no printing, no files).

``demos.toy.run.run`` returns an ``OverlapResult``; ``demos.toy.report`` turns one into the text
report and the JSON dict. Every time is in seconds on the backend's clock (virtual: the cost
model's clock; threads and cuda: wall-clock time).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

import torch

from dbo.trace import HandoffRecord, KernelRecord, SpanRecord, Window, fmt_seconds
from demos.engine_times import EngineTimes, overlap_hidden_fraction
from demos.toy.config import OverlapConfig, Resolved
from demos.vocabulary import Schedule

__all__ = [
    "Calibration",
    "WorkspaceFigures",
    "OutputCheck",
    "ReferenceCheck",
    "RankResult",
    "OverlapResult",
    "host_bound_note",
    "past_ideal_note",
]


@dataclass
class Calibration:
    """How the modelled link was rescaled so that comm = ``target_ratio`` x compute."""

    target_ratio: float
    bandwidth_factor: float
    steps: int


@dataclass
class WorkspaceFigures:
    slot_sizes: list[int]
    grows: int
    grows_in_warmup: int
    allocations: int
    allocations_after_lock: int  # counted by the run: allocations since it locked the manager
    manager_allocations_after_lock: int  # the manager's own count
    locked: bool


@dataclass
class OutputCheck:
    """The outputs, judged against the right reference; None everywhere with meta tensors.

    ``max_abs_diff``: max |DBO - the same ubatch split run one ubatch after another| (eager DBO and,
    with ``--graph``, the DBO replay: the larger). Each ubatch runs the same kernels on the same
    shapes either way, so it must be 0: ``passed`` means bitwise equal (and ``graph_max_abs_diff``
    is the replay's part). ``max_abs_diff_whole_batch``: max |DBO - the whole batch at once (no
    DBO)|, numerics only: other row counts may take other GEMM kernels and roundings; expected up
    to about ``rtol`` x max(1, ``max_abs_ref``) (``atol``) for ``dtype``, never a failure."""

    max_abs_diff: float | None
    max_abs_ref: float | None
    passed: bool | None
    rtol: float
    dtype: str
    max_abs_diff_whole_batch: float | None = None
    graph_max_abs_diff: float | None = None

    @property
    def atol(self) -> float | None:
        return None if self.max_abs_ref is None else self.rtol * max(self.max_abs_ref, 1.0)

    @property
    def whole_batch_within(self) -> bool | None:
        """Whether the whole-batch difference is within its expectation (information, not a verdict)."""
        d, a = self.max_abs_diff_whole_batch, self.atol
        return None if d is None or a is None else d <= a


@dataclass
class ReferenceCheck:
    """The ranks' rows against one process running the whole batch without DBO (same seed)."""

    max_abs_diff_no_dbo: float | None
    max_abs_diff_dbo: float | None
    match: bool
    what: str = "one process, the whole batch, no DBO, modelled link, same seed"


@dataclass
class RankResult:
    rank: int
    rows: tuple[int, int]
    pid: int
    times_no_dbo_s: list[float]
    times_dbo_s: list[float]
    engine: EngineTimes
    allocations_after_lock: int
    bytes_to_peers_per_step: float


@dataclass
class OverlapResult:
    """One run: the no-DBO and DBO step times, the engines' kernel times, the outputs and the rest.

    With several ranks, a step takes as long as its slowest rank (``times_*``), ``engine`` is the
    mean over the ranks, the outputs are all ranks' rows in order, and ``ranks`` holds each rank's
    own figures; the records and the window are rank 0's.
    """

    config: OverlapConfig
    resolved: Resolved
    times_no_dbo_s: list[float]
    times_dbo_s: list[float]
    engine: EngineTimes
    calibration: Calibration | None
    link: dict[str, Any]
    workspace: WorkspaceFigures
    outputs: OutputCheck
    output_no_dbo: torch.Tensor | None
    output_dbo: torch.Tensor | None
    records_no_dbo: list[KernelRecord]
    records_dbo: list[KernelRecord]
    window: Window
    torch_threads: int
    engine_cpus: dict[str, list[int]] = field(default_factory=dict)
    """threads backend: the CPUs the pinned executors kept to, by engine; empty when not pinned."""
    host_spans: list[SpanRecord] = field(default_factory=list)
    host_handoffs: list[HandoffRecord] = field(default_factory=list)
    ranks: list[RankResult] = field(default_factory=list)
    reference: ReferenceCheck | None = None
    output_reference: torch.Tensor | None = None
    wall_s: float = 0.0
    graph: bool = False
    """True: ``times_*`` are replays of the captured steps (``--graph``); the eager steps' times
    are then in ``eager_times_*`` and the records, engine times and timeline are the eager steps'."""
    eager_times_no_dbo_s: list[float] = field(default_factory=list)
    eager_times_dbo_s: list[float] = field(default_factory=list)
    graph_kernels: tuple[int, int] | None = None  # kernels in the captured no-DBO and DBO steps
    output_dbo_graph: torch.Tensor | None = None  # the DBO replay's final hidden states (--graph)
    output_split: torch.Tensor | None = None  # the same split run one ubatch after another (the exact reference)
    sanitizer_findings: list[Any] | None = None  # --sanitize: workspace findings, then stream races
    step_records_no_dbo: list[list[KernelRecord]] = field(default_factory=list)
    """Every timed eager step's kernel records (``records_*`` are the last step's)."""
    step_records_dbo: list[list[KernelRecord]] = field(default_factory=list)
    start_phases_dbo_s: list[float] = field(default_factory=list)
    """Each timed eager DBO step's start phase: seconds until its first ubatch entered the forward
    (the ubatch threads' start)."""

    @property
    def time_no_dbo_s(self) -> float:
        return statistics.median(self.times_no_dbo_s)

    @property
    def time_dbo_s(self) -> float:
        return statistics.median(self.times_dbo_s)

    @property
    def speedup(self) -> float | None:
        return self.time_no_dbo_s / self.time_dbo_s if self.time_dbo_s > 0 else None

    @property
    def bound_s(self) -> float:
        """The ideal DBO step: the DBO step with all of its hideable comm hidden, from its own
        kernels: DBO step - (min(C, M) - O) of the DBO step (max(C, M) on a step without gaps).
        Without the DBO step's overlap measured: the no-DBO step less its hideable time."""
        e = self.engine
        if e.dbo_overlapped_s is None:
            return self.time_no_dbo_s - e.hideable_s
        return self.time_dbo_s - max(0.0, min(e.dbo_compute_s, e.dbo_comm_s) - e.dbo_overlapped_s)

    @property
    def hidden_fraction(self) -> float | None:
        """Share of the DBO step's hideable comm that it hid, from EACH step's own kernels
        (docs/overlap.md): ``(r_dbo - r_no) / (1 - r_no)`` with ``r = O / min(C, M)`` of that
        step. At most 1, whatever the kernels of the two steps took; None when nothing is hideable."""
        return overlap_hidden_fraction(self.engine)

    @property
    def ideal_speedup(self) -> float | None:
        """The best speedup overlapping the no-DBO step's own kernels could give:
        no-DBO step / (no-DBO step - hideable). A measured speedup past it means the DBO step's
        kernels (or gaps) took less time than the no-DBO step's (``speedup_note``)."""
        b = self.time_no_dbo_s - self.engine.hideable_s
        return self.time_no_dbo_s / b if b > 0 else None

    @property
    def speedup_note(self) -> str | None:
        """One line when the speedup is past ``ideal_speedup``, saying why; or when eager DBO loses on a
        host-bound step (``host_bound_note``); else None."""
        return past_ideal_note(
            self.speedup, self.ideal_speedup, self.engine, self.time_no_dbo_s, self.time_dbo_s
        ) or host_bound_note(self)


def host_bound_note(result: "OverlapResult") -> str | None:
    """One line when an eager DBO step loses and is host-bound: the host work its launches cost on the
    run's profile (``HostCosts.launch_cost`` of each kernel's op, with ubatch threads ``threaded`` times
    slower) is at least 80% of the step, so the device waits for the host. Each ubatch launches every
    kernel of the step again; vLLM runs DBO decode in CUDA graphs, where the host launches nothing per
    kernel. None otherwise (graph steps, speedups >= 1, profiles without host costs)."""
    sp, t_dbo = result.speedup, result.time_dbo_s
    if sp is None or sp >= 1 or result.graph or t_dbo <= 0 or result.resolved.backend != "virtual":
        return None
    from dbo.costs import get_profile

    host = get_profile(result.resolved.profile).host
    launches = sum(host.launch_cost(r.op)[0] for r in result.records_dbo) * host.threaded
    if launches < 0.8 * t_dbo:
        return None
    how = "--graph" if result.config.schedule == Schedule.LL else "--schedule ll --graph"
    return (
        f"eager DBO loses here because the DBO step is host-bound: its launches cost the host about "
        f"{launches / t_dbo:.0%} of the step (each ubatch launches every kernel again); vLLM runs DBO decode in "
        f"CUDA graphs: {how} replays the captured steps without that host work"
    )


def past_ideal_note(
    speedup: float | None, ideal: float | None, e: EngineTimes, t_no: float, t_dbo: float
) -> str | None:
    """Why a speedup is past the ideal of the no-DBO step's kernels (None when it is not): the
    part of the step that shrank most with DBO (compute kernels, comm kernels, or idle gaps)."""
    if speedup is None or ideal is None or speedup <= ideal:
        return None
    o_dbo = e.dbo_overlapped_s if e.dbo_overlapped_s is not None else 0.0
    gap_no = max(0.0, t_no - (e.compute_s + e.comm_s - e.overlapped_s))
    gap_dbo = max(0.0, t_dbo - (e.dbo_compute_s + e.dbo_comm_s - o_dbo))
    parts = {
        "compute kernels": (e.compute_s, e.dbo_compute_s),
        "comm kernels": (e.comm_s, e.dbo_comm_s),
        "idle gaps": (gap_no, gap_dbo),
    }
    what, (a, b) = max(parts.items(), key=lambda kv: kv[1][0] - kv[1][1])
    return (
        f"speedup {speedup:.2f}x is past {ideal:.2f}x, the best overlap of the no-DBO step's own kernels: "
        f"the DBO step's {what} took {fmt_seconds(b)} against {fmt_seconds(a)} without DBO"
    )
