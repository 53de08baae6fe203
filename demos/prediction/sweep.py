"""The sweep behind ``python -m demos.predict``: every point (tokens per GPU x mode x ubatches x comm
SMs) of a real model on a cluster, each with and without DBO on the virtual backend.

``Sweep`` is the plan (pure data, checked up front); ``run_sweep(sweep, progress=)`` measures every point
(``demos.zoo.report.measure_point``) and returns ``PointResult`` records in the plan's order. The
``what_if`` knobs change one figure of the hardware or the workload (``WHAT_IF``), so that a user can
see which one decides the answer; the unchanged run is what the report calls the baseline.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

from dbo.costs import HostCosts
from demos.errors import ConfigError, field_ref
from demos.vocabulary import KernelSource, Mode, Overlap, Phase, Schedule
from demos.zoo.fused_moe import fused_moe_refusal
from demos.zoo.hardware import ClusterSpec
from demos.zoo.kernel_times import KERNEL_SOURCES, KernelTimes, kernel_times
from demos.zoo.overlap_costs import MECHANISMS, step_profile
from demos.zoo.profile import EAGER_HOST
from demos.zoo.report import Point, measure_point
from demos.zoo.run import MODES
from demos.zoo.workload import Workload

__all__ = [
    "DEFAULT_TOKENS",
    "OVERLAPS",
    "WHAT_IF",
    "PointResult",
    "Sweep",
    "default_mode",
    "run_sweep",
    "sweep_kernels",
    "what_if_workload",
]

DEFAULT_TOKENS = {
    Phase.DECODE: (8, 16, 32, 64, 128, 256, 512, 1024),
    Phase.PREFILL: (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384),
}
"""The default sweep of tokens per GPU per phase: decode batches, prefill chunks."""

WHAT_IF = {
    "link": "both links' bandwidth (NVLink and the NIC)",
    "rdma": "the NIC's bandwidth",
    "nvlink": "NVLink's bandwidth",
    "gemm": "every math rate (GEMM and attention efficiency)",
    "hbm": "the HBM bandwidth",
    "host": "every host cost of an eager step",
    **{k: f"{v} (0: off)" for k, v in MECHANISMS.items()},
}
"""``--what-if KEY=FACTOR``: what each knob multiplies (``--imbalance`` sets the imbalance itself). The
overlap mechanisms' knobs (``demos.zoo.overlap_costs.MECHANISMS``) take 0, which turns one off."""


OVERLAPS = tuple(Overlap)
"""The overlap strategies a sweep compares (``--overlap``): none (the plain step), DBO (two-batch overlap,
the swept ubatches), single-batch overlap (the shared expert beside the dispatch in flight, the combine
beside the down GEMM: SGLang's with DeepEP's low-latency kernels) and DeepGEMM's fused MoE kernel (the
dispatch, the experts and the combine in one kernel: ``demos.zoo.fused_moe``)."""


def applicable_overlaps(w: Workload) -> tuple[str, ...]:
    """The strategies that apply to ``w``: none always; DBO and SBO with an all-to-all (``Workload.alltoall``:
    EP > 1 and attention TP below it); SBO on the low-latency schedule only (it rides DeepEP's receive hook
    and the masked GEMM's block signals); the fused MoE kernel where ``fused_moe_refusal`` has no objection
    (an EP group in one NVLink domain, experts in a dtype its kernels take)."""
    if not w.alltoall:
        return (Overlap.NONE,)
    out = [Overlap.NONE, Overlap.DBO] + ([Overlap.SBO] if w.schedule == Schedule.LL else [])
    return tuple(out + ([Overlap.FUSED] if fused_moe_refusal(w) is None else []))


def default_mode(phase: str) -> Mode:
    """Decode runs DBO in CUDA graphs in vLLM (it requires full graphs there); prefill runs eager."""
    return Mode.GRAPH if phase == Phase.DECODE else Mode.EAGER


@dataclass(frozen=True)
class Sweep:
    """What ``run_sweep`` measures: ``base`` (the workload at its first token count; its tokens and
    ubatches are replaced per point), the ``tokens`` per GPU, the ``modes``, the DBO ``ubatches`` and
    the ``comm_sms`` values (None: the schedule's default), the ``what_if`` factors, the kernel source
    and the ``overlaps`` compared (``OVERLAPS``; None: every one that applies, ``applicable_overlaps``)."""

    base: Workload
    tokens: tuple[int, ...]
    modes: tuple[str, ...]
    ubatches: tuple[int, ...] = (2,)
    comm_sms: tuple[int | None, ...] = (None,)
    what_if: dict[str, float] = field(default_factory=dict)
    kernels: KernelSource = KernelSource.ROOFLINE
    overlaps: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        can = applicable_overlaps(self.base)
        if self.overlaps is None:
            object.__setattr__(self, "overlaps", can)
        for o in self.overlaps:
            if o not in OVERLAPS:
                raise ConfigError(f"{field_ref('overlap')} must be among {', '.join(OVERLAPS)}, got {o!r}")
            if o not in can:
                why = (
                    "it needs an all-to-all (EP > 1, and attention TP below EP: with one attention group the MoE "
                    "is all-reduced)"
                    if not self.base.alltoall
                    else fused_moe_refusal(self.base)
                    if o == Overlap.FUSED
                    else "it needs DeepEP's low-latency kernels (ll)"
                )
                raise ConfigError(f"{field_ref('overlap')} {o} does not apply here: {why}")
        if not self.overlaps:
            raise ConfigError(f"{field_ref('overlap')} needs at least one strategy")
        object.__setattr__(self, "overlaps", tuple(Overlap(o) for o in self.overlaps))
        if self.kernels not in KERNEL_SOURCES:
            raise ConfigError(
                f"{field_ref('kernels')} must be one of {', '.join(KERNEL_SOURCES)}, got {self.kernels!r}"
            )
        object.__setattr__(self, "kernels", KernelSource(self.kernels))
        if not self.tokens:
            raise ConfigError(f"{field_ref('tokens')} needs at least one token count")
        for m in self.modes:
            if m not in MODES:
                raise ConfigError(f"{field_ref('mode')} must be graph, eager or both, got {m!r}")
        object.__setattr__(self, "modes", tuple(Mode(m) for m in self.modes))
        for k, v in self.what_if.items():
            if k not in WHAT_IF:
                raise ConfigError(f"{field_ref('what_if')} {k}: unknown knob; known: {', '.join(WHAT_IF)}")
            zero_ok = k in MECHANISMS  # an overlap mechanism's knob at 0 turns it off
            number = isinstance(v, (int, float)) and not isinstance(v, bool)
            if not (number and (v >= 0 if zero_ok else v > 0)):
                need = ">= 0" if zero_ok else "> 0"
                raise ConfigError(f"{field_ref('what_if')} {k}={v!r}: the factor must be a number {need}")
        for t in self.tokens:
            for n in self.ubatches:
                for sms in self.comm_sms:
                    self.workload(t, n, sms)  # every point's workload is valid, before any work

    @property
    def points(self) -> list[tuple[int, str, int, int | None]]:
        """(tokens, mode, ubatches, comm_sms) of every point, in the order they run."""
        return [(t, m, n, s) for m in self.modes for n in self.ubatches for s in self.comm_sms for t in self.tokens]

    def workload(self, tokens: int, ubatches: int, comm_sms: int | None) -> Workload:
        return what_if_workload(self.base.with_(tokens=tokens, ubatches=ubatches, comm_sms=comm_sms), self.what_if)

    def profile(self, w: Workload) -> Any:
        host = EAGER_HOST
        f = self.what_if.get("host")
        if f is not None:
            host = _scaled_host(host, f)
        return step_profile(w, gemm_scale=self.what_if.get("gemm", 1.0), host=host)


def _scaled_host(h: HostCosts, f: float) -> HostCosts:
    names = ("launch", "kernel", "stream_switch", "handoff", "thread_start", "thread_join", "sync", "event")
    return replace(h, **{n: getattr(h, n) * f for n in names})


def what_if_workload(w: Workload, what_if: dict[str, float]) -> Workload:
    """``w`` on a GPU whose link or HBM figures are scaled by the ``what_if`` factors, with the overlap
    mechanisms' factors among them."""
    mech = {k: float(v) for k, v in what_if.items() if k in MECHANISMS}
    if mech:
        w = w.with_(mechanisms=replace(w.mechanisms, **mech))
    g = w.gpu
    changes = {}
    for key, attr in (("link", "nvlink_bandwidth"), ("nvlink", "nvlink_bandwidth")):
        if key in what_if:
            changes[attr] = changes.get(attr, getattr(g, attr)) * what_if[key]
    for key in ("link", "rdma"):
        if key in what_if:
            changes["nic_bandwidth"] = changes.get("nic_bandwidth", g.nic_bandwidth) * what_if[key]
    if "hbm" in what_if:
        changes["hbm_bandwidth"] = g.hbm_bandwidth * what_if["hbm"]
    if not changes:
        return w
    gpu = replace(g, name=f"{g.name}*", **changes)
    c = w.cluster
    cluster = ClusterSpec(c.nodes, c.gpus_per_node, c.ep, gpu, c.nvlink_domain, c.network)
    return w.with_(cluster=cluster)


@dataclass
class PointResult:
    """One swept point: its plan entry and what ``measure_point`` measured."""

    tokens: int
    mode: str
    ubatches: int
    comm_sms: int
    point: Point


def sweep_kernels(sweep: Sweep) -> KernelTimes:
    """The ``KernelTimes`` of ``sweep``'s kernel source on its GPU (one for every point: the GPU and the
    what-if factors are the sweep's); ``ConfigError`` when the measured source cannot be had."""
    w = sweep.workload(sweep.tokens[0], 1, sweep.comm_sms[0])
    return kernel_times(sweep.kernels, w.gpu, sweep.profile(w))


def run_sweep(
    sweep: Sweep, progress: Callable[[int, int, str], None] | None = None, kernels: KernelTimes | None = None
) -> list[PointResult]:
    """Measure every point of ``sweep`` with ``kernels`` (default ``sweep_kernels(sweep)``);
    ``progress(done, total, what)`` after each one."""
    plan = sweep.points
    kt = sweep_kernels(sweep) if kernels is None else kernels
    out = []
    for i, (t, mode, n, sms) in enumerate(plan):
        w = sweep.workload(t, n, sms)
        both = {"sbo": Overlap.SBO in sweep.overlaps, "fused": Overlap.FUSED in sweep.overlaps}
        p = measure_point(w, mode=mode, profile=sweep.profile(w), kernels=kt, **both)
        out.append(PointResult(t, mode, n, w.comm_sms, p))
        if progress is not None:
            progress(i + 1, len(plan), f"{t} tokens, {mode}, {n} ubatches")
    return out
