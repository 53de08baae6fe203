"""The bench's ``host`` section: host µs per kernel with and without DBO, eager and replayed.

Two workloads, each run on the backend at hand (``--backend``; auto: cuda with a GPU, else threads):

* ``synthetic``: a step of tiny kernels (``add_`` on 256 floats) shaped like a DBO layer: per
  layer, ``COMPUTE_PER_LAYER`` compute kernels, a yield-and-switch to the comm stream,
  ``COMM_PER_LAYER`` comm kernels, a yield-and-switch back. Without DBO the same function runs
  as one ubatch (the ``dbo_*`` calls are no-ops), so a DBO step has twice the kernels.
* ``demo ll``: the demo's MoE model (``schedule="ll"``) at tiny shapes (``DEMO_SHAPES``), so its
  kernels are short and the step is host-bound; the link is the unscaled modelled one.

Per workload: the wall time of a step divided by its kernels, for the eager step (``run``: threads,
handoffs, model Python, final synchronize) and for its replay (``capture`` once, then
``CapturedStep.replay()``, which synchronizes). A step the capture refuses (a host sync in it) is
reported as not capturable, with the first line of the refusal.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import torch

import dbo
from dbo.errors import CaptureError
from demos.bench._core import Config, Timing, progress, timing_record, value_record
from demos.bench._report import Record

LAYERS = 8
COMPUTE_PER_LAYER = 6
COMM_PER_LAYER = 2
DEMO_SHAPES = dict(layers=8, tokens=64, hidden=64, experts=8, topk=2)
EAGER_TARGET = "<= 1.15"  # eager DBO vs eager no DBO, per kernel, on cuda


def resolve_backend(name: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "threads"
    return name


# ---------------------------------------------------------------------- the synthetic step


def _synthetic_step(u: dict[str, torch.Tensor]) -> torch.Tensor:
    x = u["x"]
    for _ in range(LAYERS):
        for _ in range(COMPUTE_PER_LAYER):
            dbo.launch(torch.Tensor.add_, x, 1.0, name="add")
        dbo.dbo_yield_and_switch_from_compute_to_comm()
        for _ in range(COMM_PER_LAYER):
            dbo.launch(torch.Tensor.mul_, x, 0.5, name="xfer", kind="comm")
        dbo.dbo_yield_and_switch_from_comm_to_compute()
    return x


def _synthetic(backend_name: str, device: str) -> tuple[dict, dict, Callable[[], None]]:
    """(steps, kernel counts, close) of the synthetic workload: steps maps "DBO?" to (orch, fn, inputs)."""
    backend = dbo.get_backend(backend_name, timeout=120)
    orch2 = dbo.UBatchOrchestrator(2, backend=backend)
    orch1 = dbo.UBatchOrchestrator(1, backend=backend)
    full = [{"x": torch.zeros(256, device=device)}]
    split = [{"x": torch.zeros(256, device=device)} for _ in range(2)]
    per_ubatch = LAYERS * (COMPUTE_PER_LAYER + COMM_PER_LAYER)
    steps = {False: (orch1, _synthetic_step, full), True: (orch2, _synthetic_step, split)}
    kernels = {False: per_ubatch, True: 2 * per_ubatch}

    def close() -> None:
        orch1.close()
        orch2.close()
        backend.close()

    return steps, kernels, close


# ---------------------------------------------------------------------- the demo model


def _demo(backend_name: str) -> tuple[dict, dict, Callable[[], None]]:
    import workspace
    from demos.toy.config import OverlapConfig, resolve
    from demos.toy.runner import Runner

    oc = OverlapConfig(backend=backend_name, schedule="ll", link="nvlink", steps=1, **DEMO_SHAPES)
    res = resolve(oc)
    if res.torch_threads is not None:
        torch.set_num_threads(res.torch_threads)  # as a demo run does (the caller restores it)
    runner = Runner(oc, res)
    try:
        for _ in range(2):  # the workspace grows to its largest request, then is locked
            runner.step(False, False)
            runner.step(True, False)
        runner.manager.lock()
        kernels = {d: len(runner.step(d, True)[1]) for d in (False, True)}
    except BaseException:
        runner.close()
        workspace.reset_workspace_manager()
        raise
    steps = {
        False: (runner.orch1, runner.model.forward, runner.full),
        True: (runner.orch_n, runner.model.forward, runner.split),
    }

    def close() -> None:
        runner.close()
        workspace.reset_workspace_manager()

    return steps, kernels, close


# ---------------------------------------------------------------------- timing


def _with_context_per_launch(run: Callable, fn: Callable, inputs: Any) -> Any:
    """``run(fn, inputs)`` with the cuda backend's launch path as it was before: every launch under
    ``with torch.cuda.stream(s)``, also on the thread's current stream (for an A/B on the same run)."""
    from dbo.streams import cuda as cuda_streams

    saved = cuda_streams._is_torch_current
    cuda_streams._is_torch_current = lambda device_index, raw: False
    try:
        return run(fn, inputs)
    finally:
        cuda_streams._is_torch_current = saved


def _time_steps(fns: dict[str, Callable[[], Any]], repeat: int, per_repeat: int) -> dict[str, Timing]:
    """Per-call seconds of each function: ``repeat`` rounds, round-robin, ``per_repeat`` calls each."""
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():  # warm
        fn()
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(per_repeat):
                fn()
            samples[name].append((time.perf_counter() - t0) / per_repeat)
    return {k: Timing(statistics.median(s), min(s), max(s)) for k, s in samples.items()}


def _per_kernel(t: Timing, kernels: int) -> Timing:
    return Timing(t.median / kernels, t.min / kernels, t.max / kernels)


def _workload_records(
    section: str, tag: str, backend_name: str, make: Callable[[], tuple], cfg: Config
) -> list[Record]:
    """Time one workload. ``make()`` builds a fresh instance ``(steps, kernels, close)``: one for the
    eager steps (timed round-robin), one per capture (a refused capture can leave a stream the step
    fetched by name failed, which would break whatever ran after it on that instance)."""
    repeat = 5 if cfg.quick else 11
    per_repeat = 3 if cfg.quick else 10
    t: dict[str, Timing] = {}
    refused: dict[bool, str] = {}
    steps, kernels, close = make()
    try:
        progress(f"host: {tag}, eager, {repeat} x {per_repeat} steps each")
        fns = {f"eager{int(d)}": (lambda o=o, f=f, i=i: o.run(f, i)) for d, (o, f, i) in steps.items()}
        if backend_name == "cuda":  # the launch path before: a stream context entered per launch
            o, f, i = steps[True]
            fns["eager1_ctx"] = lambda: _with_context_per_launch(o.run, f, i)
        t.update(_time_steps(fns, repeat, per_repeat))
    finally:
        close()
    for d in (False, True):
        steps, _, close = make()
        try:
            orch, fn, inputs = steps[d]
            try:
                cs = orch.capture(fn, inputs)
            except CaptureError as e:
                refused[d] = (str(e).splitlines() or ["?"])[0]
                continue
            try:
                progress(f"host: {tag}, replayed ({cs.num_kernels} kernels)")
                if cs.num_kernels != kernels[d]:
                    raise RuntimeError(
                        f"{tag}: the capture holds {cs.num_kernels} kernels, the eager step {kernels[d]}"
                    )
                t.update(_time_steps({f"replay{int(d)}": cs.replay}, repeat, per_repeat))
            finally:
                cs.close()
        finally:
            close()
    recs: list[Record] = []
    unit = "us/kernel"
    name = {False: "no DBO", True: "DBO"}
    eager = {d: (f"{tag}: eager, {name[d]}", _per_kernel(t[f"eager{int(d)}"], kernels[d])) for d in (False, True)}
    target = EAGER_TARGET if backend_name == "cuda" else None
    recs.append({**timing_record(section, eager[False][0], eager[False][1]), "unit": unit})
    recs.append({**timing_record(section, eager[True][0], eager[True][1], eager[False], target), "unit": unit})
    if "eager1_ctx" in t:
        before = _per_kernel(t["eager1_ctx"], kernels[True])
        rec = timing_record(section, f"{tag}: eager, DBO, stream context per launch", before, eager[True])
        recs.append({**rec, "unit": unit})
    for d in (False, True):
        label = f"{tag}: replayed, {name[d]}"
        if d in refused:
            rec = value_record(section, label, None, "not capturable")  # type: ignore[arg-type]
            rec["baseline"] = refused[d]
            recs.append(rec)
            continue
        replayed = _per_kernel(t[f"replay{int(d)}"], kernels[d])
        recs.append({**timing_record(section, label, replayed, eager[d]), "unit": unit})
    for d in (False, True):
        recs.append(value_record(section, f"{tag}: kernels per step, {name[d]}", kernels[d], "count"))
    return recs


def host_records(cfg: Config) -> list[Record]:
    """The host section's records (see the module docstring)."""
    section = "host"
    backend_name = resolve_backend(cfg.backend)
    device = "cuda" if backend_name == "cuda" else "cpu"
    records = _workload_records(
        section, f"synthetic [{backend_name}]", backend_name, lambda: _synthetic(backend_name, device), cfg
    )
    old_threads = torch.get_num_threads()
    try:
        records += _workload_records(
            section, f"demo ll [{backend_name}]", backend_name, lambda: _demo(backend_name), cfg
        )
    finally:
        torch.set_num_threads(old_threads)
    return records
