"""The answer a sweep gives: the crossover per mode, the best ubatches and comm SMs, and what to pass to
vLLM and SGLang, each with its main reason in one line.

* ``crossover(points)``: the smallest swept token count from which DBO pays (speedup > 1 there and at
  every larger swept count), and where the speedup crosses 1 between that count and the one below it,
  interpolated linearly in log(tokens) and marked as such. None when DBO does not pay at the largest.
* ``recommend(deployment, ...) -> Recommendation``: the serve commands of the predicted deployment for vLLM and SGLang
  (``demos.prediction.engines``: one pinned release each, every flag one that release defines), with
  DBO on from the crossover's threshold where it pays (vLLM: ``num_tokens >= dbo_decode_token_threshold``
  per DP rank, and it needs data parallel > 1 with expert parallelism; SGLang's two-batch overlap has no
  threshold) and off, with why, where it does not.
* ``WorkloadVerdict``: what a serving run of vLLM's rule said of DBO for one workload
  (``demos.prediction.workload``); given to ``recommend``, the vLLM line takes that run's best threshold
  instead of the crossover (``threshold_basis`` "workload" where it is "one_step" without one).
* ``reason_of(...)``: why DBO loses below the crossover (or everywhere), from the stage figures of the
  point just below it: what DBO adds (each ubatch reads the weights and pays the kernel floor again;
  on eager, twice the launches) against what it can hide (the all-to-all, at most the shorter of
  compute and comm).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from demos.prediction.engines import Deployment, overlap_flags, serve_lines
from demos.prediction.sweep import PointResult
from demos.vocabulary import Mode, Overlap

__all__ = [
    "ONE_STEP",
    "WORKLOAD",
    "Crossover",
    "Recommendation",
    "WorkloadVerdict",
    "best_setting",
    "crossover",
    "memory_advice",
    "overlap_ranges",
    "reason_of",
    "recommend",
    "why",
]

ONE_STEP = "one_step"
"""``Recommendation.threshold_basis``: vLLM's answer is the crossover of one forward step's timing."""
WORKLOAD = "workload"
"""``Recommendation.threshold_basis``: vLLM's answer is a serving run's best threshold for a workload."""

MARGINAL = 1.05
"""A best DBO speedup within memory below this is called marginal (a stated choice: 5%, about the
spread between runs of a serving engine)."""


@dataclass(frozen=True)
class Crossover:
    """``tokens``: where DBO starts to pay (interpolated between ``below`` and ``at`` when
    ``interpolated``), None when it never does within the sweep; ``at``: the smallest swept count from
    which it pays; ``below``: the swept count under it (None when it pays from the smallest)."""

    tokens: float | None
    at: int | None
    below: int | None
    interpolated: bool

    def as_dict(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "at": self.at, "below": self.below, "interpolated": self.interpolated}

    @property
    def threshold(self) -> int | None:
        """The token threshold to pass on (the crossover rounded up), None when DBO never pays."""
        return None if self.tokens is None else math.ceil(self.tokens - 1e-9)


def crossover(points: Sequence[PointResult]) -> Crossover:
    """The crossover of one mode's points (one ubatches and comm-SMs setting; module docstring)."""
    pts = sorted((p.tokens, p.point.speedup) for p in points)
    if not pts:
        return Crossover(None, None, None, False)
    first = None
    for i in range(len(pts) - 1, -1, -1):
        if pts[i][1] <= 1.0:
            break
        first = i
    if first is None:
        return Crossover(None, None, None, False)
    t_at, s_at = pts[first]
    if first == 0:
        return Crossover(float(t_at), t_at, None, False)
    t_b, s_b = pts[first - 1]
    frac = (1.0 - s_b) / (s_at - s_b) if s_at != s_b else 1.0
    t = math.exp(math.log(t_b) + frac * (math.log(t_at) - math.log(t_b)))
    return Crossover(t, t_at, t_b, True)


def overlap_ranges(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs of consecutive swept token counts (one mode's point records, with their ``overlap``) over
    which one strategy is the fastest: ``{"overlap", "from", "to"}``, ``to`` None for the last run."""
    out: list[dict[str, Any]] = []
    for r in sorted(records, key=lambda r: r["tokens"]):
        if out and out[-1]["overlap"] == r["overlap"]:
            out[-1]["to"] = r["tokens"]
        else:
            out.append({"overlap": r["overlap"], "from": r["tokens"], "to": r["tokens"]})
    if out:
        out[-1]["to"] = None
    return out


def memory_advice(records: Sequence[dict[str, Any]], cross: Crossover) -> tuple[str, bool]:
    """What memory leaves of one mode's answer (its point records, with ``fits`` for the DBO step and
    ``fits_without_dbo``): one line, and whether DBO still pays within memory. Empty and True for the toy
    (no memory model)."""
    pts = sorted(records, key=lambda r: r["tokens"])
    if not pts or all(r["fits"] is None for r in pts):
        return "", True
    top = pts[-1]["tokens"]
    no_dbo = [r["tokens"] for r in pts if r["fits_without_dbo"]]
    dbo = [r["tokens"] for r in pts if r["fits"]]
    if not no_dbo:
        return "the model fits at none of the swept token counts on this cluster, with or without DBO", False
    fit = f"the step fits up to {max(no_dbo)} tokens per GPU" + (
        (" with and without DBO" if max(dbo) == max(no_dbo) else f" without DBO and up to {max(dbo)} with DBO")
        if dbo
        else " without DBO, and at no swept count with DBO"
    )
    if max(no_dbo) == top and dbo and max(dbo) == top:
        fit = f"both steps fit at every swept count (up to {top} tokens per GPU)"
    if cross.at is None:
        return fit, False
    pays = [r for r in pts if r["tokens"] >= cross.at and r["fits"]]
    if not pays:
        return (
            f"DBO pays from {cross.at} tokens per GPU, where its step does not fit: it does not pay within "
            f"memory; {fit}",
            False,
        )
    lo, hi = pays[0]["tokens"], pays[-1]["tokens"]
    gain = max(r["speedup"] for r in pays)
    where = f"at {lo}" if lo == hi else f"at {lo}-{hi}"
    mark = ", marginal" if gain < MARGINAL else ""
    return f"DBO pays and fits {where} tokens per GPU (up to x{gain:.2f}{mark}); {fit}", True


def _log_mean(xs: Sequence[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else 0.0


def best_setting(results: Sequence[PointResult], mode: str) -> tuple[int, int]:
    """(ubatches, comm SMs) of ``mode`` with the best geometric-mean speedup over the swept tokens."""
    keys = sorted({(r.ubatches, r.comm_sms) for r in results if r.mode == mode})
    return max(
        keys,
        key=lambda k: _log_mean([r.point.speedup for r in results if (r.mode, r.ubatches, r.comm_sms) == (mode, *k)]),
    )


def _ms(x: float) -> str:
    return f"{x * 1e3:.2f} ms"


def why(r: PointResult) -> str:
    """What decides the point ``r``: what DBO hid against what it added, in one clause."""
    p = r.point
    e = p.engine
    t = r.tokens
    step = p.no_dbo.seconds
    if e.comm_s < 0.05 * step:
        # the comm engine's kernels are the all-to-all's flight only; the table's dispatch and combine
        # stages also hold its SM-held halves (the whole kernel within one node): say both, not 0%
        st = p.no_dbo.stages
        a2a = max(e.comm_s, st.get("dispatch", 0.0) + st.get("combine", 0.0))
        if a2a < 0.05 * step:
            return f"at {t} tokens per GPU the all-to-all is {a2a / step:.0%} of the step: nothing to hide"
        c = getattr(getattr(p, "workload", None), "cluster", None)
        node = c is not None and c.ep <= c.gpus_per_node
        return (
            f"at {t} tokens per GPU the all-to-all is {a2a / step:.0%} of the step ({_ms(a2a)}), but its kernels "
            f"hold the SMs for all but {_ms(e.comm_s)} of it"
            + (" (within one node the SMs move every message with their own NVLink stores)" if node else "")
            + ": nothing in flight for DBO to hide"
        )
    hidden = max(0.0, (e.dbo_overlapped_s or 0.0) - e.overlapped_s)
    added = max(0.0, e.dbo_compute_s - e.compute_s)
    busy = e.dbo_compute_s + e.dbo_comm_s - (e.dbo_overlapped_s or 0.0)  # some engine busy: the device's share
    host = max(0.0, p.dbo.seconds - busy)  # the DBO step's time with both engines idle: waiting on the host
    extra_comm = max(0.0, e.dbo_comm_s - e.comm_s)
    text = (
        f"at {t} tokens per GPU DBO hides {_ms(hidden)} of the all-to-all but adds {_ms(added)} of compute "
        "(each ubatch reads the expert and attention weights again and pays every kernel's floor again)"
    )
    if extra_comm > 0.1 * max(added, 1e-12):
        text += f" and {_ms(extra_comm)} of all-to-all (each ubatch's kernels pay their fixed latency again)"
    if r.mode == Mode.EAGER and (host > 0.2 * p.dbo.seconds or hidden >= added):
        text += (
            f", and the eager DBO step waits on its host ({_ms(host)} beyond its device work: twice the launches, "
            "plus the handoffs); vLLM runs DBO decode in CUDA graphs (--mode graph)"
        )
    return text


def reason_of(points: Sequence[PointResult], cross: Crossover) -> str:
    """The main reason behind one mode's crossover, one line."""
    by_t = {p.tokens: p for p in points}
    if cross.tokens is None:
        worst = max(points, key=lambda p: p.tokens)
        return f"DBO never pays up to {worst.tokens} tokens per GPU: {why(worst)}"
    if cross.below is None:
        top = by_t[cross.at]
        return (
            f"DBO pays from the smallest swept count ({cross.at} tokens per GPU): at {cross.at} it hides "
            f"{top.point.hidden_fraction or 0:.0%} of the all-to-all (speedup {top.point.speedup:.2f}x)"
        )
    return f"below {cross.at} tokens per GPU DBO loses: {why(by_t[cross.below])}"


@dataclass(frozen=True)
class WorkloadVerdict:
    """What a serving run of vLLM's own rule said of DBO for one workload (``demos.prediction.workload``):
    ``threshold``, the run's best decode threshold by throughput; ``enable``, whether DBO at it served more
    output tokens per second than the run without; ``why``, one line with the figures."""

    threshold: int
    enable: bool
    why: str


@dataclass(frozen=True)
class Recommendation:
    """What to pass for ``phase``, from the crossover of ``mode`` (the mode vLLM runs that phase in):
    ``enable`` (None for the toy), the token ``threshold`` (None unless enabled), the ``vllm`` and
    ``sglang`` lines (serve commands, one line each or several with ``#`` comment lines) and the main
    ``reason``; ``reasons``: the one-line reason of every swept mode; ``notes``: what each placeholder of
    the lines and each setting means; ``engines``: the engine release each line is for; ``memory``: what
    the memory model leaves of the answer (where DBO pays and fits, and the gain there; "" for the toy);
    ``overlap_flags``: what selects each overlap strategy in each engine for this model (``dbo``, ``sbo``;
    empty for the toy); ``threshold_basis``: what vLLM's answer rests on, ``ONE_STEP`` (the crossover of
    one forward step) or ``WORKLOAD`` (a serving run's best threshold for a workload; None for the toy and
    where vLLM cannot run DBO at all), and ``basis``: that in one line, with the serving run that would
    decide it per step where it rests on one step (``python -m demos.serving ...``)."""

    phase: str
    mode: str
    enable: bool | None
    threshold: int | None
    vllm: str
    sglang: str
    reason: str
    reasons: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    engines: dict[str, str] = field(default_factory=dict)
    memory: str = ""
    overlap_flags: dict[str, str] = field(default_factory=dict)
    threshold_basis: str | None = None
    basis: str = ""
    atom: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The JSON's ``recommendation`` (the per-mode reasons are its ``reasons``; ``atom`` on AMD GPUs only)."""
        keys = ("phase", "mode", "reason", "enable", "threshold", "vllm", "sglang")
        out = {k: getattr(self, k) for k in keys}
        if self.atom:
            out["atom"] = self.atom
        out.update(notes=list(self.notes), engines=dict(self.engines), memory=self.memory)
        out.update(overlap_flags=dict(self.overlap_flags), threshold_basis=self.threshold_basis)
        return {**out, "basis": self.basis}


def recommend(
    deployment: Deployment,
    crossovers: dict[str, Crossover],
    reasons: dict[str, str],
    *,
    default_mode: str,
    memory: dict[str, tuple[str, bool]] | None = None,
    workload: WorkloadVerdict | None = None,
    serving: str = "",
) -> Recommendation:
    """The vLLM and SGLang lines for ``deployment``'s phase from the crossover of the mode vLLM runs it in
    (``default_mode``: graph for decode, eager for prefill), with the reason: the serve commands of the
    deployment (``demos.prediction.engines.serve_lines``, each engine's pinned release; its ``model_id``
    None: a placeholder the user fills), DBO on from the threshold where it pays, off (with why) where it
    does not; ``notes``: what each placeholder and setting means; ``engines``: the releases; ``memory``:
    ``memory_advice`` per mode, of which that mode's is taken (DBO off where it pays only beyond memory).
    ``workload``: a serving run's verdict for vLLM (``WorkloadVerdict``): the vLLM line then takes its
    threshold, or stays without DBO where DBO lost that run, whatever the crossover; SGLang's line keeps the
    crossover's answer. ``serving``: how to run the serving run that would decide per step (the
    ``python -m demos.serving`` line), said in ``basis`` where the answer rests on one step."""
    d, phase = deployment, deployment.phase
    mode = default_mode if default_mode in crossovers else next(iter(crossovers))
    c = crossovers[mode]
    reason = reasons[mode]
    text, in_memory = (memory or {}).get(mode, ("", True))
    if c.threshold is not None and not in_memory:
        c, reason = Crossover(None, None, None, False), text
    engines = d.engines.as_dict()
    if d.world < 2 or d.ep < 2:
        return Recommendation(
            phase,
            mode,
            False,
            None,
            "do not enable DBO: vLLM's DBO needs data parallel > 1 with expert parallelism (--ep >= 2)",
            "do not enable two-batch overlap: there is no expert-parallel all-to-all to overlap",
            reason,
            dict(reasons),
            (),
            engines,
            text,
            overlap_flags(d),
        )
    enable = c.threshold is not None
    v_enable, v_threshold = (enable, c.threshold) if workload is None else (workload.enable, workload.threshold)
    lines = serve_lines(
        d,
        Overlap.DBO if enable else Overlap.NONE,
        c.threshold,
        vllm=(Overlap.DBO if v_enable else Overlap.NONE, v_threshold if v_enable else None),
    )
    vllm, sglang, notes, atom = lines.vllm, lines.sglang, list(lines.notes), lines.atom
    if lines.atom:
        engines["atom"] = lines.atom_version
    if not v_enable:
        vllm = f"# do not enable DBO for {phase}: {reason if workload is None else workload.why}\n{vllm}"
    if not enable:
        sglang = f"# do not pass --enable-two-batch-overlap: {reason}\n{sglang}"
        if atom and not atom.startswith("# not expressible"):
            atom = f"# do not pass --enable-tbo: {reason}\n{atom}"
    elif workload is not None:
        pass  # vLLM's threshold is the serving run's, not the crossover: the basis line says both
    elif c.interpolated:
        notes.append(
            f"the threshold {c.threshold} is interpolated between the swept {c.below} and {c.at} tokens per GPU"
        )
    elif c.below is None:
        notes.append(f"DBO pays from the smallest swept count, {c.at}: the threshold is at most {c.at} (sweep lower)")
    return Recommendation(
        phase,
        mode,
        v_enable,
        v_threshold if v_enable else None,
        vllm,
        sglang,
        reason,
        dict(reasons),
        tuple(notes),
        engines,
        text,
        overlap_flags(d),
        ONE_STEP if workload is None else WORKLOAD,
        _basis(c, enable, workload, serving),
        atom,
    )


def _basis(c: Crossover, enable: bool, workload: WorkloadVerdict | None, serving: str) -> str:
    """``Recommendation.basis``: what vLLM's answer rests on, one line (``recommend``)."""
    if workload is not None:
        step = f"~{c.threshold}" if c.threshold is not None else "none within the sweep and memory"
        return f"{workload.why}; one step's crossover: {step}"
    run = f": {serving}" if serving else ""
    what = (
        "the threshold rests on one forward step at the crossover" if enable else "the answer rests on one forward step"
    )
    return f"{what}; a serving run decides per step (vLLM's DP vote, idle ranks, mixed batches){run}"
