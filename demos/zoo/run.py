"""Run the generic transformer's step with and without DBO, and time it: ``ZooRun``.

``ZooRun(workload, backend=, mode=)`` builds one backend, the process-global workspace manager (one
slot per ubatch), the model and two orchestrators (one ubatch, and ``workload.ubatches``). ``measure()``
warms both steps up (the workspace grows to its largest request), locks the workspace, and times one
step of each: eager (``orchestrator.run``) or graph (captured once, then replayed). On ``virtual`` the
clock is the modelled device and host, so one step is the answer (it is deterministic).

The LM head runs after the ubatched forward on the whole batch in both steps (vLLM computes logits
outside the model's forward and its CUDA graph): its modelled time (the plan's head, ``demos.zoo.plan``:
one GEMM of the batch's logit rows through ``vocab x hidden``, vocab-parallel under attention TP with its
all-gather; plus one eager launch) is added to both step times as ``head_s``. A step's busy seconds per
stage come from its kernel records and the op table (``demos.zoo.ops.stage_seconds``), the head's under
"other".

``check_exact()`` (real math, ``threads``/``inline``) runs the DBO step, then the same split one ubatch
after another, and compares the hidden states bitwise.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from typing import Any

import torch

import dbo
import workspace
from dbo.costs import DeviceProfile
from dbo.trace import Tracer
from demos.vocabulary import Mode, Schedule
from demos.zoo.kernel_times import KernelTimes
from demos.zoo.model import ZooModel
from demos.zoo.ops import stage_seconds
from demos.zoo.overlap_costs import step_profile, ubatch_sizes
from demos.zoo.plan import launch_seconds
from demos.zoo.workload import Workload

__all__ = ["MODES", "StepTimes", "ZooRun", "merged_trace"]

MODES = Mode.choices()


def merged_trace(parts: Any) -> Tracer:
    """One Tracer of several steps' tracers: ``parts`` is ``(tracer, shift)`` pairs, each tracer's
    kernels, host spans and handoffs moved by ``shift`` seconds."""
    out = Tracer()
    for t, dt in parts:
        for k in t.records:
            out.kernel(k.stream, k.name, k.kind, k.ubatch, k.start + dt, k.end + dt, op=k.op, layer=k.layer)
        for sp in t.spans:
            out.span(sp.track, sp.name, sp.start + dt, sp.end + dt, **sp.args)
        for h in t.handoffs:
            out.handoff(h.src, h.dst, h.t_src + dt, h.t_dst + dt)
    return out


@dataclass
class StepTimes:
    """One step's figures: ``seconds`` (the ubatched forward plus the LM head), ``head_s``, the busy
    seconds per stage (``stages``, from the kernel records), the kernels it ran."""

    seconds: float
    head_s: float
    stages: dict[str, float] = field(default_factory=dict)
    kernels: int = 0
    records: list = field(default_factory=list, repr=False)
    tracer: Tracer | None = field(default=None, repr=False)


def _pin_to_one_cpu() -> set[int] | None:
    """Pin the calling thread to one of its CPUs and return its old mask (None where affinity is not
    supported). Threads it starts inherit the mask (Linux), so a virtual step's ubatch threads then
    share one CPU: only one of them runs at a time anyway (the turn), and a handoff then wakes a thread
    on the same CPU instead of another one (2-3x faster simulation on a 2-core VM; docs/performance.md)."""
    get = getattr(os, "sched_getaffinity", None)
    if get is None:
        return None
    try:
        old = get(0)
        os.sched_setaffinity(0, {min(old)})
    except OSError:
        return None
    return old


class ZooRun:
    """One backend, workspace and model for ``workload`` (module docstring). ``profile``: a
    ``DeviceProfile`` (default: ``demos.zoo.overlap_costs.step_profile`` of the workload)."""

    def __init__(
        self,
        workload: Workload,
        *,
        backend: str = "virtual",
        mode: Mode | str = Mode.EAGER,
        profile: DeviceProfile | None = None,
        kernels: KernelTimes | None = None,
        shrunk: bool | None = None,
        seed: int = 0,
    ):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        mode = Mode(mode)
        self.w, self.mode = workload, mode
        self.profile = profile if profile is not None else step_profile(workload)
        self.kernels = kernels if kernels is not None else KernelTimes(workload.gpu, self.profile)
        real = backend != "virtual" if shrunk is None else shrunk
        device = "cpu" if real else "meta"
        self._affinity = _pin_to_one_cpu() if backend == "virtual" else None
        self.closed = False
        try:
            self.backend = dbo.get_backend(backend, profile=self.profile)
        except BaseException:
            self._restore_affinity()
            raise
        try:
            n = workload.ubatches
            self.manager = workspace.init_workspace_manager(device, num_ubatches=n)
            self.model = ZooModel(
                workload,
                num_ubatches=n,
                device=device,
                profile=self.profile,
                seed=seed,
                kernels=self.kernels,
            )
            self.orch_n = dbo.UBatchOrchestrator(n, backend=self.backend)
            self.orch1 = dbo.UBatchOrchestrator(1, backend=self.backend)
        except BaseException:
            self.close()
            raise
        T = workload.tokens
        self.full = [range(0, T)]
        cuts = [0, *itertools.accumulate(ubatch_sizes(T, n, workload.mechanisms.split))]
        self.split = [range(a, b) for a, b in zip(cuts, cuts[1:])]
        self._captured: dict[tuple[bool, bool], Any] = {}
        self.warm = False

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for c in getattr(self, "_captured", {}).values():
            c.close()
        for name in ("orch_n", "orch1"):
            o = getattr(self, name, None)
            if o is not None:
                o.close()
        self.backend.close()
        workspace.reset_workspace_manager()
        self._restore_affinity()

    def _restore_affinity(self) -> None:
        old, self._affinity = self._affinity, None
        if old is not None:
            try:
                os.sched_setaffinity(0, old)
            except OSError:
                pass

    def __enter__(self) -> "ZooRun":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- steps --------------------------------------------------------------------------------------
    def head_seconds(self) -> float:
        """The LM head's modelled seconds (module docstring): its device ops from the plan
        (``demos.zoo.plan.StepPlan.head``: the GEMM, then under attention TP the logits' all-gather) and,
        eager, one host launch."""
        head = self.model.plan.head
        host = self.profile.host.kernel if self.mode == Mode.EAGER else 0.0
        seconds = launch_seconds("lm_head", head["lm_head"], self.profile) + host
        if "tp_lm_head_gather" in head:
            seconds += launch_seconds("tp_lm_head_gather", head["tp_lm_head_gather"], self.profile)
        return seconds

    def _inputs(self, dbo_on: bool) -> tuple[Any, list[range]]:
        return (self.orch_n, self.split) if dbo_on else (self.orch1, self.full)

    def warmup(self) -> None:
        """One step of each, then lock the workspace (its slots are at their largest)."""
        for dbo_on in (False, True):
            orch, inputs = self._inputs(dbo_on)
            orch.run(self.model.forward, inputs)
        self.manager.lock()
        self.warm = True

    def step(self, dbo_on: bool, *, sbo: bool = False, fused: bool = False, tracer: Tracer | None = None) -> StepTimes:
        """One timed step (eager run or graph replay) with or without DBO; ``sbo`` (without DBO, on the
        ll schedule): with single-batch overlap (``ZooModel._moe_sbo``); ``fused`` (without DBO): with
        DeepGEMM's fused MoE kernel (``demos.zoo.fused_moe``)."""
        if sbo and (dbo_on or self.w.schedule != Schedule.LL):
            raise ValueError("single-batch overlap is a step without DBO on the ll schedule")
        if fused and (dbo_on or sbo):
            raise ValueError("the fused MoE kernel is a step without DBO or single-batch overlap")
        if not self.warm:
            self.warmup()
        orch, inputs = self._inputs(dbo_on)
        rec = tracer if tracer is not None else Tracer(enabled=True)
        first = len(rec.records)
        self.model.sbo, self.model.fused = sbo, fused
        try:
            if self.mode == Mode.GRAPH:
                cap = self._captured.get((dbo_on, sbo, fused))
                if cap is None:
                    cap = self._captured[(dbo_on, sbo, fused)] = orch.capture(self.model.forward, inputs)
                self.backend.tracer = rec
                t0 = self.backend.now()
                cap.replay()
            else:
                self.backend.tracer = rec
                t0 = self.backend.now()
                orch.run(self.model.forward, inputs)
            t1 = self.backend.now()
        finally:
            self.model.sbo = self.model.fused = False
            self.backend.tracer = None
        records = rec.records[first:]
        stages = stage_seconds(records)
        head = self.head_seconds()
        stages["other"] += head
        return StepTimes(t1 - t0 + head, head, stages, len(records), records, rec)

    def slot_sizes(self) -> list[int]:
        return self.manager.slot_sizes()

    # -- exactness (real math) ----------------------------------------------------------------------
    def check_exact(self) -> tuple[bool, float]:
        """(bitwise equal, max abs difference) of the DBO step against its split run one ubatch after
        another (real math only)."""
        if self.model.meta:
            raise ValueError("check_exact needs real math (a shrunken model off virtual)")
        if not self.warm:
            self.warmup()
        self.orch_n.run(self.model.forward, self.split)
        out = self.model.hidden.clone()
        for rows in self.split:
            self.orch1.run(self.model.forward, [rows])
        ref = self.model.hidden.clone()
        same = bool(torch.equal(out, ref))
        return same, float((out - ref).abs().max()) if out.numel() else 0.0
