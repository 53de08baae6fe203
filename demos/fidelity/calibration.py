"""Calibrate a ``DeviceProfile`` on the machine at hand: measure, then fit (``dbo.costs``).

``calibrate(backend, quick=...)`` measures, on the "threads" or "cuda" backend:

1. host constants (``demos.fidelity.host``): a launch, a stream switch, an event record or
   wait, a sync, a turn handoff, a ubatch thread's start and join, launches in a two-ubatch step,
   how long running host code keeps an idle device from starting;
2. the device: GEMMs over a sweep of (M, N, K) and each dtype the backend supports, and copies over
   a sweep of sizes; ``dbo.costs.fit_device`` fits the parametric device model to them;
3. the model's own ops (attention, router, experts, shared expert, copies, transfers): the toy
   MoE runs for real over a sweep of token counts and hidden sizes, each kernel's measured time
   is paired with the device model's time of the cost the model declares for it, and
   ``dbo.costs.fit_op_costs`` fits one correction per op (``OpCost.device + scale x model +
   memory_scale x memory``);
4. the model's host time per launch: the host's issue time of small steps against the virtual
   backend's prediction of the same steps (the difference per launch is ``HostCosts.launch``).
5. in context, from the runs of 3. (``demos.fidelity.steps``): the ubatch threads' start
   (``HostCosts.thread_start``, from the DBO steps' start phase), the engines' turnaround between
   kernels (``DeviceProfile.engine_gap`` and ``engine_gap_threaded``, from both kinds of step) and
   the idle wake-up across engines (``DeviceProfile.event_latency``, from the no-DBO steps' engine
   changes); on threads,
   each op's torch calls (``OpCost.gil_calls``, ``demos.fidelity.calls``);
6. the wake-up latency across engines while ubatch threads run
   (``DeviceProfile.event_latency_threaded``): the value with which the virtual backend reproduces
   the measured speedups of 3. best (``demos.fidelity.steps``).

Everything fitted is a formula, not a table: the profile predicts shapes it was not given.

Here: the device sweep, the report and ``calibrate()``, which runs the measurements and the fits.
What to measure is ``demos.fidelity.plan``; the model's ops measured in real steps are
``demos.fidelity.model_ops``; this module re-exports their names.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

import torch

from dbo.costs import (
    DeviceProfile,
    HostCosts,
    OpCost,
    fit_device,
    fit_dtype_rates,
    fit_threaded_ops,
    get_profile,
    predict,
)
from demos.fidelity.calls import count_gil_calls
from demos.fidelity.host import measure_host
from demos.fidelity.machine import CpuTimes, Reruns
from demos.fidelity.model_ops import declared_costs, measure_ops, op_samples
from demos.fidelity.plan import BACKENDS, CalibrationError, Plan, plan
from demos.fidelity.steps import (
    StepSample,
    fit_engine_gap,
    fit_event_latency,
    fit_launch,
    fit_thread_start,
    fit_wake_latency,
)
from demos.toy.config import OverlapConfig

__all__ = [
    "BACKENDS",
    "Plan",
    "plan",
    "calibrate",
    "CalibrationError",
    "declared_costs",
    "measure_device",
    "measure_ops",
    "op_samples",
    "fit_launch",
    "fit_thread_start",
    "fit_wake_latency",
    "fit_event_latency",
    "StepSample",
    "with_gil_calls",
]

Progress = Callable[[str], None]


# --- the device: GEMMs and copies -------------------------------------------------------------------


def _timer(backend: str) -> Callable[[Callable[[], Any], int], float]:
    """Seconds per call of ``fn`` over a few batches of ``n`` calls on the device (GPU: the median;
    CPU: the shortest batch)."""
    if backend == "cuda":

        def gpu(fn: Callable[[], Any], n: int) -> float:
            out = []
            for _ in range(3):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                for _ in range(n):
                    fn()
                b.record()
                b.synchronize()
                out.append(a.elapsed_time(b) * 1e-3 / n)
            return statistics.median(out)

        return gpu

    def cpu(fn: Callable[[], Any], n: int) -> float:
        # the shortest of a few batches: the device curve's shape with the least disturbance from
        # other work on the machine (the model's own ops, measured in real steps, carry the load)
        out = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            out.append((time.perf_counter() - t0) / n)
        return min(out)

    return cpu


def _reps(est_s: float, budget_s: float = 0.02) -> int:
    return max(1, min(200, int(budget_s / max(est_s, 1e-7))))


def measure_device(backend: str, p: Plan, progress: Progress | None = None) -> list[tuple]:
    """GEMM and copy samples ``(op_kind, shape, dtype, bytes, seconds)`` for ``dbo.costs.fit_device``."""
    dev = "cuda" if backend == "cuda" else "cpu"
    timer = _timer(backend)
    samples: list[tuple] = []
    jobs = [(dt, m, n, k) for dt in p.dtypes for m in p.gemm_m for n, k in p.gemm_nk]
    for i, (dt, m, n, k) in enumerate(jobs):
        if progress:
            progress(f"device: GEMM {i + 1}/{len(jobs)} ({m}x{n}x{k} {dt})")
        dtype = getattr(torch, dt)
        a = torch.randn(m, k, device=dev).to(dtype)
        b = torch.randn(k, n, device=dev).to(dtype)
        c = torch.empty(m, n, device=dev, dtype=dtype)
        torch.mm(a, b, out=c)  # warm
        est = timer(lambda: torch.mm(a, b, out=c), 1)
        t = timer(lambda: torch.mm(a, b, out=c), _reps(est))
        samples.append(("gemm", (m, n, k), dt, (m * k + k * n + m * n) * a.element_size(), t))
    for j, numel in enumerate(p.copy_elems):
        if progress:
            progress(f"device: copy {j + 1}/{len(p.copy_elems)} ({numel} elements)")
        x = torch.randn(numel, device=dev)
        y = torch.empty_like(x)
        y.copy_(x)
        est = timer(lambda: y.copy_(x), 1)
        t = timer(lambda: y.copy_(x), _reps(est))
        samples.append(("elementwise", None, "float32", 2 * numel * x.element_size(), t))
    return samples


@dataclass
class CalibrationReport:
    """What was measured and how well the fit reproduces it."""

    backend: str
    host: dict[str, float]
    device_samples: int
    op_samples: int
    device_rms_log_error: float  # over the first dtype's GEMMs and the copies
    op_errors: dict[str, float] = field(default_factory=dict)  # op -> median |relative error|
    seconds: float = 0.0
    reruns: Reruns = field(default_factory=Reruns)  # model runs run again on a disturbed machine


def with_gil_calls(ops: dict[str, OpCost], runs: Sequence[dict]) -> dict[str, OpCost]:
    """``ops`` with each op's ``gil_calls`` counted (``calibration_calls``) over ``runs`` at their
    smallest hidden size (the counts depend on the schedule and the routing, not on the width)."""
    small = min(kw["hidden"] for kw in runs) if runs else None
    calls = count_gil_calls(OverlapConfig(**kw) for kw in runs if kw["hidden"] == small)
    return {k: replace(v, gil_calls=calls.get(k, 0)) for k, v in ops.items()}


def calibrate(
    backend: str = "threads",
    *,
    quick: bool = False,
    name: str | None = None,
    progress: Progress | None = None,
    sweep: Plan | None = None,
    machine: Callable[[], CpuTimes | None] | None = None,
) -> tuple[DeviceProfile, CalibrationReport]:
    """Measure this machine on ``backend`` and fit a profile (see the module docstring);
    ``sweep`` replaces the plan (tests). ``machine``: a reader of the machine's CPU times
    (``demos.fidelity.machine.read_cpu_times``); with it a model run during which the machine was
    disturbed is run once more (``CalibrationReport.reruns``)."""
    reruns = Reruns()
    p = sweep if sweep is not None else plan(backend, quick)
    if backend == "cuda" and not torch.cuda.is_available():
        raise CalibrationError("backend cuda needs a CUDA GPU, and torch.cuda.is_available() is False here")
    t0 = time.perf_counter()
    old = torch.get_num_threads()
    if backend == "threads":
        torch.set_num_threads(1)  # as the demo runs on threads
    try:
        host = measure_host(backend, p.host_reps, progress)
        dev_samples = measure_device(backend, p, progress)
    finally:
        torch.set_num_threads(old)
    base = get_profile("h200") if backend == "cuda" else None
    hc = HostCosts(
        kernel=host["kernel"],
        stream_switch=host["stream_switch"],
        handoff=host["handoff"],
        thread_start=host["thread_start"],
        thread_join=host["thread_join"],
        sync=host["sync"],
        event=host["event"],
        threaded=host["threaded"],
        kernel_sync=backend == "cuda",
        idle_hold=host["idle_hold"],
        replay_op=host["replay_op"],
    )
    # the knees from the model's own dtype (and the copies); the other dtypes' rates on those knees
    first = [x for x in dev_samples if x[0] != "gemm" or x[2] == p.dtypes[0]]
    dev = fit_device(first, name=name or f"calibrated-{backend}", base=base)
    dev = fit_dtype_rates([x for x in dev_samples if x[0] == "gemm" and x[2] != p.dtypes[0]], dev)
    dev = replace(
        dev, comm_sm_share=base.comm_sm_share if base is not None else 0.0, host=hc, event_latency=host["event_latency"]
    )  # idle; the threaded part is fitted to DBO steps below
    records, steps = measure_ops(backend, p, progress, machine=machine, reruns=reruns)
    # on a GPU, keep the base profile's CUDA kernels per op (each costs the host a launch)
    counts = {k: v.kernels for k, v in base.host.ops.items()} if base is not None else None
    samples = op_samples(records, dev, counts)
    ops, fixed_threaded = fit_threaded_ops(samples, kernels=counts)
    if hc.idle_hold > 0:  # the host's Python keeps the device waiting: so it does each kernel's GIL returns
        ops = with_gil_calls(ops, p.op_runs)
    prof = replace(dev, host=replace(hc, ops=ops), fixed_threaded=fixed_threaded)
    launch = fit_launch(backend, p, prof, progress)
    prof = replace(prof, host=replace(prof.host, launch=launch))
    thread_start = fit_thread_start(steps, prof)
    prof = replace(prof, host=replace(prof.host, thread_start=thread_start))
    gap, gap_threaded = fit_engine_gap(steps, prof)
    prof = replace(prof, engine_gap=gap, engine_gap_threaded=gap_threaded)
    prof = replace(prof, event_latency=fit_wake_latency(steps, prof))
    prof = replace(prof, event_latency_threaded=fit_event_latency(steps, prof, progress=progress))
    dev_err = [math.log(predict(prof, op, sh, dt, b) / t) for op, sh, dt, b, t in first]  # the dtype the knees fit
    errs: dict[str, list[float]] = {}
    for op, m, t, threaded, b in op_samples(records, prof, counts):
        oc = prof.host.ops[op]
        errs.setdefault(op, []).append(abs(oc.seconds(m, b, prof.fixed_threaded if threaded else 1.0) - t) / t)
    report = CalibrationReport(
        backend=backend,
        host={**host, "launch": launch, "thread_start": thread_start},
        device_samples=len(dev_samples),
        op_samples=len(samples),
        device_rms_log_error=math.sqrt(statistics.fmean(e * e for e in dev_err)),
        op_errors={k: statistics.median(v) for k, v in sorted(errs.items())},
        seconds=time.perf_counter() - t0,
        reruns=reruns,
    )
    return prof, report
