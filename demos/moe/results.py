"""What an overlap run measures, as plain dataclasses (no printing, no files).

``demos.moe.run.run`` returns an ``OverlapResult``; ``demos.moe.report`` turns one into the text
report and the JSON dict. Every time is in seconds on the backend's clock (virtual: the cost
model's clock; threads and cuda: wall-clock time).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

import torch

from dbo.timeline import Window
from dbo.trace import HandoffRecord, KernelRecord, SpanRecord

from .config import OverlapConfig, Resolved

__all__ = [
    "Calibration",
    "WorkspaceFigures",
    "EngineTimes",
    "OutputCheck",
    "ReferenceCheck",
    "RankResult",
    "OverlapResult",
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
class EngineTimes:
    """Kernel seconds per engine: C, M and O are medians over the no-DBO steps (O: compute and
    comm kernels running at the same time); the ``dbo_*`` sums are those of the last DBO step."""

    compute_s: float
    comm_s: float
    overlapped_s: float
    dbo_compute_s: float
    dbo_comm_s: float

    @property
    def hideable_s(self) -> float:
        """Comm time DBO could hide: min(C, M) less what already overlapped without DBO."""
        return max(0.0, min(self.compute_s, self.comm_s) - self.overlapped_s)

    @property
    def comm_ratio(self) -> float | None:
        return self.comm_s / self.compute_s if self.compute_s > 0 else None


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
        """The best a perfect overlap could do: the no-DBO step less the hideable time."""
        return self.time_no_dbo_s - self.engine.hideable_s

    @property
    def hidden_fraction(self) -> float | None:
        h = self.engine.hideable_s
        return (self.time_no_dbo_s - self.time_dbo_s) / h if h > 0 else None
