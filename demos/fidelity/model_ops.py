"""The model's own ops measured in real steps, for the per-op fits of a calibration.

``declared_costs`` reads what each kernel of the toy model declares (its kind, cost, dtype and op)
from a shape-only run on a recording virtual backend; ``measure_ops`` runs the model for real over
the plan's sweep and pairs each timed kernel with its declaration (``OpRecord``), and keeps each
run's step figures (``StepSample``); ``op_samples`` turns the records into the samples of
``dbo.costs.fit_threaded_ops``. ``demos.fidelity.calibration`` re-exports these names.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import Any, Callable

from dbo.costs import DeviceProfile, LinkProfile, Transfer, get_link, iter_tensors, memory_seconds, seconds_for
from dbo.streams.base import KernelSpec
from dbo.streams.virtual import VirtualBackend, VirtualStream
from demos.fidelity.calls import one_step_each
from demos.fidelity.machine import CpuTimes, Reruns, run_undisturbed
from demos.fidelity.plan import Plan
from demos.fidelity.steps import StepSample, engine_gaps, turnarounds
from demos.toy.config import ConfigError, OverlapConfig
from demos.toy.run import run

__all__ = ["declared_costs", "OpRecord", "measure_ops", "op_samples"]

Progress = Callable[[str], None]


class _RecordingStream(VirtualStream):
    def _launch(self, fn: Any, args: tuple, spec: KernelSpec) -> None:
        dtype = next((t.dtype for t in iter_tensors(args) if t.is_floating_point()), None)
        self.backend.log[spec.name] = (spec.kind, spec.cost, dtype, spec.op)  # kind resolved: the stream's role
        super()._launch(fn, args, spec)


class _RecordingBackend(VirtualBackend):
    """A virtual backend that notes each launch's (kind, declared cost, dtype, declared op) by kernel name."""

    def __init__(self, **options: Any):
        super().__init__(**options)
        self.log: dict[str, tuple] = {}

    def _make_stream(self, name: str) -> VirtualStream:
        return _RecordingStream(self, name)


def declared_costs(cfg: OverlapConfig) -> tuple[dict[str, tuple], dict[str, tuple]]:
    """(no-DBO step, DBO step): kernel name -> (kind, the cost the model declares, dtype, the op it
    declares), read from a shape-only (meta) run of ``cfg``'s model on the virtual backend."""
    no: dict[str, tuple] = {}

    def keep_no_dbo(b: Any) -> None:
        no.update(b.log)
        b.log = {}

    b, link_name = one_step_each(
        cfg, lambda link: _RecordingBackend(profile="cpu", link=link), meta=True, between=keep_no_dbo
    )
    dbo_ = b.log
    link = get_link(link_name)
    for table in (no, dbo_):  # the transport passes seconds over its base link: keep the bytes
        for name, (kind, cost, dt, op) in table.items():
            if kind == "comm" and isinstance(cost, float) and cost >= link.latency:
                table[name] = (kind, Transfer((cost - link.latency) * link.bandwidth), dt, op)
    return no, dbo_


@dataclass
class OpRecord:
    """One measured kernel of the model: its declared op, declared cost, dtype, the run's link, seconds."""

    op: str
    kind: str
    cost: Any
    dtype: Any
    link: LinkProfile
    seconds: float
    threaded: bool = False  # measured in a DBO step (ubatch threads running)


def measure_ops(
    backend: str,
    p: Plan,
    progress: Progress | None = None,
    *,
    truth: Any = None,
    machine: Callable[[], CpuTimes | None] | None = None,
    reruns: Reruns | None = None,
) -> tuple[list[OpRecord], list[StepSample]]:
    """Run the model for real over the plan's sweep: every kernel of every timed no-DBO and DBO
    step, and each run's step times. ``truth``: the profile of a virtual "machine" (``backend="virtual"``:
    tests of the fit). ``machine``: a reader of the machine's CPU times; with it a run during which
    the machine was disturbed is run once more (``run_undisturbed``, counted in ``reruns``)."""
    reruns = reruns if reruns is not None else Reruns()
    out: list[OpRecord] = []
    steps: list[StepSample] = []
    for i, kw in enumerate(p.op_runs):
        if progress:
            progress(
                f"model ops: run {i + 1}/{len(p.op_runs)} ({kw['schedule']}, {kw['tokens']} tokens, "
                f"hidden {kw['hidden']})"
            )
        cfg = OverlapConfig(backend=backend, steps=p.op_steps, warmup=1, comm_ratio=1.0, profile=truth, **kw)
        no, dbo_ = declared_costs(cfg)
        res = None
        for ratio in (1.0, 2.0, 4.0):  # tiny steps: the link's fixed costs may exceed 1 x compute
            try:
                res = run_undisturbed(lambda: run(replace(cfg, comm_ratio=ratio)), machine, reruns)
                break
            except ConfigError:
                continue
        if res is None:
            continue
        link = LinkProfile("calibrated", res.link["latency_s"], res.link["bandwidth_Bps"])
        start = statistics.median(res.start_phases_dbo_s) if res.start_phases_dbo_s else None
        steps.append(
            StepSample(
                res.config,
                link,
                res.time_no_dbo_s,
                res.time_dbo_s,
                start,
                engine_gaps(res.step_records_no_dbo),
                turnarounds(res.step_records_no_dbo),
                turnarounds(res.step_records_dbo),
            )
        )
        every = ((res.step_records_no_dbo, no, False), (res.step_records_dbo, dbo_, True))
        for steps_recs, table, threaded in every:  # every timed step: the fit takes each shape's median
            for r in (r for recs in steps_recs for r in recs):
                d = table.get(r.name)  # the declaration of the same kernel in the meta run
                if d is None or r.op is None or r.duration <= 0:
                    continue
                out.append(OpRecord(r.op, d[0], d[1], d[2], link, r.duration, threaded))
    return out, steps


def op_samples(
    records: list[OpRecord], profile: DeviceProfile, kernels: dict[str, int] | None = None
) -> list[tuple[str, float, float, bool, float]]:
    """``(op, model seconds under profile, measured seconds, measured in a DBO step, memory
    seconds)`` for ``dbo.costs.fit_threaded_ops``, one per record, keyed by its declared op; the
    model time as the virtual backend computes it (``kernels``: device kernels per op, default 1),
    the memory time its memory part."""
    k = kernels or {}
    out = []
    for r in records:
        m = seconds_for(r.kind, r.cost, (), profile, r.link, dtype=r.dtype, kernels=k.get(r.op, 1))
        b = memory_seconds(r.kind, r.cost, (), profile)
        out.append((r.op, m, r.seconds, r.threaded, b))
    return out
