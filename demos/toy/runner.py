"""One process's part of an overlap run: the model, its transport, the workspace, two orchestrators.

``Runner.step`` times one step with or without DBO; ``Runner.calibrate`` rescales the modelled link;
``measure`` does the whole sequence (warm up, lock, calibrate, timed steps) and returns a
``Measurement``.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

import dbo
import workspace
from dbo.trace import KernelRecord, Tracer, engine_sums, fmt_seconds, overlap_seconds
from demos.engine_times import EngineTimes
from demos.toy.comm import ModelledLinkTransport
from demos.toy.config import ConfigError, OverlapConfig, Resolved, field_ref
from demos.toy.model import ToyMoE
from demos.toy.ops import TRANSFER_OPS
from demos.toy.results import Calibration

__all__ = ["Runner", "Measurement", "GraphTimes", "measure", "measure_graph", "engine_times"]


class Runner:
    """The model, its transport, the workspace and the two orchestrators of one process.

    ``transport``: the all-to-all (default: the modelled link of ``res.link``); ``rows``: the rows
    of the batch this process runs (default: all of them; a rank of a distributed run passes its
    shard); ``before_step``: called before each step's clock starts (ranks meet at a barrier);
    ``on_dbo_step``: called in the last ubatch's thread at the start of each DBO step (a fault seam);
    ``on_layer``: the model's heartbeat (``ToyMoE.on_layer``).
    """

    def __init__(
        self,
        cfg: OverlapConfig,
        res: Resolved,
        *,
        transport: Any = None,
        rows: range | None = None,
        before_step: Callable[[], Any] | None = None,
        on_dbo_step: Callable[[], Any] | None = None,
        on_layer: Callable[[int, int], Any] | None = None,
    ):
        self.cfg, self.res = cfg, res
        self.tracer = Tracer(enabled=True)
        self.orchestrators: list = []
        self.before_step = before_step
        self.on_dbo_step = on_dbo_step
        self.rows = rows if rows is not None else range(0, cfg.tokens)
        self.last_host: dict[bool, tuple[list, list]] = {}
        """The host spans and handoffs of the last traced step, without (False) and with DBO (True)."""
        # the threads backend gives its engines CPUs of their own, as a GPU's engines have, unless
        # asked not to or when ranks run side by side on the same CPUs (ThreadsBackend, pin_engines)
        pin = {"pin_engines": cfg.pin_engines and not res.distributed} if res.backend == "threads" else {}
        self.backend = dbo.get_backend(res.backend, profile=res.profile, link=res.link, tracer=None, **pin)
        try:
            self.transport = transport if transport is not None else ModelledLinkTransport(res.link)
            self.manager = workspace.init_workspace_manager(res.model.device, num_ubatches=cfg.ubatches)
            self.model = ToyMoE(res.model, self.transport, num_ubatches=cfg.ubatches, schedule=cfg.schedule)
            self.model.on_layer = on_layer
            # the DBO orchestrator first, so that with shared streams its streams get the plain names
            # ("compute", "comm"); per-ubatch they are "compute0", "comm0", ..., and the no-DBO ones
            # get the plain names
            self.orch_n = dbo.UBatchOrchestrator(cfg.ubatches, backend=self.backend, stream_layout=cfg.stream_layout)
            self.orchestrators.append(self.orch_n)
            self.orch1 = dbo.UBatchOrchestrator(1, backend=self.backend, stream_layout=cfg.stream_layout)
            self.orchestrators.append(self.orch1)
        except BaseException:
            self.close()
            raise
        start = self.rows.start
        self.full = [self.rows]
        self.split = [range(start + r.start, start + r.stop) for r in dbo.split_tokens(len(self.rows), cfg.ubatches)]
        self._dbo_forward = self.model.forward if on_dbo_step is None else self._forward_with_seam
        self._entered: float | None = None  # when the DBO step's first ubatch entered the forward
        self.last_start_phase: float | None = None
        """Seconds from the last DBO step's start until its first ubatch entered the forward: the
        ubatch threads' start as the model's steps pay it (calibration fits thread_start to it)."""

    def _forward_with_seam(self, rows: range) -> Any:
        if dbo.dbo_current_ubatch_id() == self.cfg.ubatches - 1:
            self.on_dbo_step()  # type: ignore[misc]
        return self.model.forward(rows)

    def _dbo_entry(self, rows: range) -> Any:
        if self._entered is None:  # the first ubatch to run (it holds the turn first)
            self._entered = self.backend.now()
        return self._dbo_forward(rows)

    def output(self) -> torch.Tensor:
        """This process's rows of the final hidden states (a CPU copy)."""
        return self.model.hidden[self.rows.start : self.rows.stop].detach().to("cpu", copy=True)

    def close(self) -> None:
        for o in self.orchestrators:
            o.close()
        self.backend.close()

    def step(self, dbo_on: bool, traced: bool) -> tuple[float, list[KernelRecord]]:
        """One step; returns (seconds on the backend clock, its kernel records if traced)."""
        orch, inputs = (self.orch_n, self.split) if dbo_on else (self.orch1, self.full)
        fn = self._dbo_entry if dbo_on else self.model.forward
        self._entered = None
        self.backend.tracer = self.tracer if traced else None
        first = len(self.tracer.records)
        first_span, first_handoff = len(self.tracer.spans), len(self.tracer.handoffs)
        if self.before_step is not None:
            self.before_step()
        t0 = self.backend.now()
        orch.run(fn, inputs)
        t1 = self.backend.now()
        self.backend.tracer = None
        if dbo_on and self._entered is not None:
            self.last_start_phase = self._entered - t0
        if traced:
            self.last_host[dbo_on] = (self.tracer.spans[first_span:], self.tracer.handoffs[first_handoff:])
        return t1 - t0, (self.tracer.records[first:] if traced else [])

    def run_split_sequentially(self) -> None:
        """The DBO step's ubatch split, run one ubatch after another as one-ubatch steps on the
        no-DBO orchestrator (one stream in ll, no interleaving, no handoffs): the reference the DBO
        step must equal bitwise, since each ubatch runs the same kernels on the same shapes."""
        self.backend.tracer = None
        for rows in self.split:
            if self.before_step is not None:
                self.before_step()
            self.orch1.run(self.model.forward, [rows])

    def replay(self, captured: Any) -> float:
        """One replay of a captured step; returns its seconds on the backend clock."""
        self.backend.tracer = None
        if self.before_step is not None:
            self.before_step()
        t0 = self.backend.now()
        captured.replay()
        return self.backend.now() - t0

    def calibrate(self, ratio: float) -> Calibration:
        """Scale the link bandwidth so that the no-DBO step's comm time is ``ratio`` x its compute.

        Measures a no-DBO step's compute C, its transfers (modelled part and measured overhead:
        copies, sleep slack) and its other comm kernels; then picks the bandwidth that makes the
        comm total ``ratio * C``. Off virtual, a second round with the new link (median of 3
        steps) corrects for overheads that depend on the transfer times.
        """
        tr = self.transport
        rounds = [1] if self.res.backend == "virtual" else [1, 3]
        for steps in rounds:
            samples = []
            for _ in range(steps):
                tr.log.clear()
                tr.logging = True
                _, recs = self.step(False, traced=True)
                tr.logging = False
                samples.append(
                    (
                        sum(r.duration for r in recs if r.kind == "compute"),
                        sum(r.duration for r in recs if r.kind == "comm" and r.op in TRANSFER_OPS),
                        sum(r.duration for r in recs if r.kind == "comm" and r.op not in TRANSFER_OPS),
                    )
                )
            compute, transfers, other_comm = (statistics.median(x[i] for x in samples) for i in range(3))
            nbytes = sum(b for _, b, _ in tr.log)
            modelled = sum(s for _, _, s in tr.log)
            overhead = max(0.0, transfers - modelled)
            fixed = len(tr.log) * tr.link.latency  # modelled: the same on every run
            budget = ratio * compute - other_comm - overhead - fixed
            if nbytes == 0:
                raise ConfigError(f"{field_ref('comm_ratio')}: the model made no transfers to calibrate")
            if budget <= 0 and ratio * compute - fixed > 0:
                # measured overheads (copies, sleep slack) ate the budget: on a loaded machine they
                # are noise, not a property of the link; keep a tenth of the target for the bytes
                budget = 0.1 * (ratio * compute - fixed)
            if budget <= 0:
                raise ConfigError(
                    f"{field_ref('comm_ratio')} {ratio:g} is too small: the link's latency and fixed costs alone "
                    f"exceed {ratio:g} x the compute time ({fmt_seconds(compute)} per step)"
                )
            tr.scale_bandwidth(nbytes / budget / tr.base_link.bandwidth)
        if self.res.backend == "virtual":
            self._settle_on_virtual(ratio)
        self.tracer.clear()
        return Calibration(ratio, tr.link.bandwidth / tr.base_link.bandwidth, sum(rounds))

    def _comm_over_compute(self) -> float:
        """comm / compute of one traced no-DBO step over the transport's current link (every comm kernel,
        as the report counts them)."""
        _, recs = self.step(False, traced=True)
        compute = sum(r.duration for r in recs if r.kind == "compute")
        comm = sum(r.duration for r in recs if r.kind == "comm")
        return comm / compute if compute > 0 else math.inf

    def _settle_on_virtual(self, ratio: float) -> None:
        """Make the rescale exact on virtual: where the host keeps the device waiting (a host-bound
        profile such as h200), the compute kernels' times depend on the link (a long transfer lets the
        host run ahead), so one round lands off the ratio (1.71x instead of 1x on h200). The step is
        deterministic and cheap there, so search the bandwidth factor until comm / compute is within
        0.5% of ``ratio``: secant steps in log-log space (comm is about inversely proportional to the
        bandwidth), kept inside a bracket that always holds the answer (comm falls as bandwidth grows)."""
        tr = self.transport
        f = tr.link.bandwidth / tr.base_link.bandwidth

        def err(factor: float) -> float:
            tr.scale_bandwidth(factor)
            r = self._comm_over_compute()
            return math.log(r / ratio) if 0 < r < math.inf else 0.0

        x0 = math.log(f)
        x, e = x0, err(f)
        best = (abs(e), x)
        lo = hi = None  # log factors where the error is > 0 (too much comm) and < 0
        prev = None
        for _ in range(30):
            if abs(e) <= math.log(1.005):
                return
            if e > 0:
                lo = x if lo is None or x > lo else lo
            else:
                hi = x if hi is None or x < hi else hi
            if prev is not None and prev[1] != e:
                nxt = x - e * (x - prev[0]) / (e - prev[1])
            else:
                nxt = x + e  # comm ~ 1 / bandwidth: a log error e is about a log factor e
            nxt = min(max(nxt, x - 3.0), x + 3.0)  # at most 20x per step
            if lo is not None and hi is not None and not (min(lo, hi) < nxt < max(lo, hi)):
                nxt = (lo + hi) / 2
            if abs(nxt - x0) > 14:  # a million-fold: the ratio does not move with the link; keep the best
                break
            prev, x = (x, e), nxt
            e = err(math.exp(x))
            best = min(best, (abs(e), x))
        tr.scale_bandwidth(math.exp(best[1]))


@dataclass
class Measurement:
    """The raw figures of one process: every timed step, its records, outputs and workspace stats."""

    warm: dict
    allocations_at_lock: int
    calibration: Calibration | None
    t_no: list[float]
    recs_no: list[list[KernelRecord]]
    t_dbo: list[float]
    recs_dbo: list[list[KernelRecord]]
    ref: torch.Tensor | None  # the no-DBO output
    out: torch.Tensor | None  # the DBO output
    stats: dict
    slot_sizes: list[int]
    bytes_to_peers_per_step: float
    torch_threads: int
    engine_cpus: dict[str, list[int]] = field(default_factory=dict)  # pinned engines' CPUs (threads)
    split_ref: torch.Tensor | None = None  # the DBO split run one ubatch after another
    graph: "GraphTimes | None" = None
    start_dbo: list[float] = field(default_factory=list)  # each timed DBO step's start phase (Runner.last_start_phase)

    @property
    def allocations_after_lock(self) -> int:
        return self.stats["allocations"] - self.allocations_at_lock


def measure(r: Runner, cfg: OverlapConfig, res: Resolved) -> Measurement:
    """Warm up, lock the workspace, calibrate the link, time the steps."""
    m = r.manager
    # 1. warmup: the workspace grows to the largest request (no DBO: all tokens in slot 0)
    for _ in range(cfg.warmup):
        r.step(False, traced=False)
        r.step(True, traced=False)
    warm = m.stats()
    m.lock()
    allocations_at_lock = m.stats()["allocations"]
    # 2. calibrate the link
    calibration = r.calibrate(res.comm_ratio) if res.comm_ratio is not None else None
    # 3. timed steps, without and with DBO in turn: a drift of the machine (another process, a
    # clock change) then shifts both alike instead of biasing their ratio
    sent = 0
    t_no, recs_no, t_dbo, recs_dbo = [], [], [], []
    start_dbo: list[float] = []
    ref = out = None
    for i in range(cfg.steps):
        sent0 = getattr(r.transport, "bytes_to_peers", 0)
        s, recs = r.step(False, traced=True)
        sent += getattr(r.transport, "bytes_to_peers", 0) - sent0
        t_no.append(s)
        recs_no.append(recs)
        if i == cfg.steps - 1 and not res.meta:
            ref = r.output()
        s, recs = r.step(True, traced=True)
        t_dbo.append(s)
        recs_dbo.append(recs)
        if r.last_start_phase is not None:
            start_dbo.append(r.last_start_phase)
    if not res.meta:
        out = r.output()
    # 4. the exactness reference: the same split, one ubatch after another
    r.run_split_sequentially()
    split_ref = None if res.meta else r.output()
    # 5. with --graph: capture both steps, time the replays
    graph = measure_graph(r, cfg, res) if cfg.graph else None
    return Measurement(
        warm=warm,
        allocations_at_lock=allocations_at_lock,
        calibration=calibration,
        t_no=t_no,
        recs_no=recs_no,
        t_dbo=t_dbo,
        recs_dbo=recs_dbo,
        ref=ref,
        out=out,
        stats=m.stats(),
        slot_sizes=m.slot_sizes(),
        bytes_to_peers_per_step=sent / max(1, cfg.steps),
        torch_threads=torch.get_num_threads(),
        engine_cpus=getattr(r.backend, "pinned_cpus", dict)(),
        split_ref=split_ref,
        graph=graph,
        start_dbo=start_dbo,
    )


@dataclass
class GraphTimes:
    """Replays of the captured no-DBO and DBO steps: seconds of each, the DBO replay's output."""

    t_no: list[float]
    t_dbo: list[float]
    out: torch.Tensor | None
    kernels_no: int
    kernels_dbo: int


def measure_graph(r: Runner, cfg: OverlapConfig, res: Resolved) -> GraphTimes:
    """Capture the no-DBO step and the DBO step once each (the workspace is warm and locked), then
    time ``cfg.steps`` replays of each, taking turns as the eager steps do."""
    captured = []
    try:
        cap_no = r.orch1.capture(r.model.forward, r.full)
        captured.append(cap_no)
        cap_dbo = r.orch_n.capture(r._dbo_forward, r.split)
        captured.append(cap_dbo)
        t_no, t_dbo = [], []
        for _ in range(cfg.steps):  # in turn, as in eager
            t_no.append(r.replay(cap_no))
            t_dbo.append(r.replay(cap_dbo))
        out = None if res.meta else r.output()
        return GraphTimes(t_no, t_dbo, out, cap_no.num_kernels, cap_dbo.num_kernels)
    finally:
        for c in captured:
            c.close()


def engine_times(meas: Measurement) -> EngineTimes:
    """C, M, O of the no-DBO steps (medians) and the last DBO step's C, M, O."""
    sums = [engine_sums(x) for x in meas.recs_no]
    last = engine_sums(meas.recs_dbo[-1])
    return EngineTimes(
        compute_s=statistics.median(s["compute"] for s in sums),
        comm_s=statistics.median(s["comm"] for s in sums),
        overlapped_s=statistics.median(overlap_seconds(x) for x in meas.recs_no),
        dbo_compute_s=last["compute"],
        dbo_comm_s=last["comm"],
        dbo_overlapped_s=overlap_seconds(meas.recs_dbo[-1]),
    )
