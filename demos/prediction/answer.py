"""The answer a sweep gives: the crossover per mode, the best ubatches and comm SMs, and what to pass to
vLLM and SGLang, each with its main reason in one line.

* ``crossover(points)``: the smallest swept token count from which DBO pays (speedup > 1 there and at
  every larger swept count), and where the speedup crosses 1 between that count and the one below it,
  interpolated linearly in log(tokens) and marked as such. None when DBO does not pay at the largest.
* ``recommend(...)``: vLLM's DBO switches on when a step has at least the threshold's tokens
  (``num_tokens >= dbo_decode_token_threshold``, per DP rank); vLLM needs data parallel > 1 with expert
  parallelism for DBO. SGLang's two-batch overlap has no threshold: it is on or off. With attention TP
  (``attention_tp`` > 1) the lines take the TP form: vLLM ``--tensor-parallel-size`` with the data
  parallel size the rest of the GPUs (its DeepEP path under TP, the sequence-parallel MoE, needs data
  parallel > 1); SGLang ``--tp`` over every GPU, its attention TP group ``tp / dp`` (with
  ``--enable-dp-attention`` when that is less than every GPU).
* ``reason_of(...)``: why DBO loses below the crossover (or everywhere), from the stage figures of the
  point just below it: what DBO adds (each ubatch reads the weights and pays the kernel floor again;
  on eager, twice the launches) against what it can hide (the all-to-all, at most the shorter of
  compute and comm).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from demos.prediction.sweep import PointResult

__all__ = ["Crossover", "best_setting", "crossover", "reason_of", "recommend", "why"]


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
    if e.comm_s < 0.05 * p.no_dbo.seconds:
        return f"at {t} tokens per GPU the all-to-all is {e.comm_s / p.no_dbo.seconds:.0%} of the step: nothing to hide"
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
    if r.mode == "eager" and (host > 0.2 * p.dbo.seconds or hidden >= added):
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


def recommend(
    model: str,
    phase: str,
    crossovers: dict[str, Crossover],
    reasons: dict[str, str],
    *,
    world: int,
    ep: int,
    default_mode: str,
    attention_tp: int = 1,
) -> dict[str, Any]:
    """The vLLM and SGLang flags for ``phase`` from the crossover of the mode vLLM runs it in
    (``default_mode``: graph for decode, eager for prefill), with the reason; the TP form of them
    for ``attention_tp`` > 1 (module docstring)."""
    mode = default_mode if default_mode in crossovers else next(iter(crossovers))
    c = crossovers[mode]
    reason = reasons[mode]
    out: dict[str, Any] = {"phase": phase, "mode": mode, "reason": reason}
    flag = "--dbo-decode-token-threshold" if phase == "decode" else "--dbo-prefill-token-threshold"
    other = "--dbo-prefill-token-threshold 512" if phase == "decode" else "--dbo-decode-token-threshold 32"
    if world < 2 or ep < 2:
        out.update(
            enable=False,
            threshold=None,
            vllm="do not enable DBO: vLLM's DBO needs data parallel > 1 with expert parallelism (--ep >= 2)",
            sglang="do not enable two-batch overlap: there is no expert-parallel all-to-all to overlap",
        )
        return out
    if c.threshold is None:
        out.update(
            enable=False,
            threshold=None,
            vllm=f"do not enable DBO for {phase}: {reason}",
            sglang=f"do not pass --enable-two-batch-overlap: {reason}",
        )
        return out
    approx = " (interpolated between swept points)" if c.interpolated else ""
    if attention_tp > 1:
        out.update(_tp_lines(model, phase, c.threshold, flag, other, world, attention_tp, approx))
        return out
    out.update(
        enable=True,
        threshold=c.threshold,
        vllm=f"vllm serve {model} --data-parallel-size {world} --enable-expert-parallel --enable-dbo "
        f"{flag} {c.threshold} {other}  # {other.split()[0]} left at vLLM's default: not swept here",
        sglang=f"--enable-two-batch-overlap, if your {phase} batches carry at least {c.threshold} tokens per GPU "
        f"(SGLang has no threshold: below it two-batch overlap slows the step){approx}",
    )
    return out


def _tp_lines(model: str, phase: str, threshold: int, flag: str, other: str, world: int, tp: int, approx: str) -> dict:
    """The TP form of the recommendation (module docstring): DBO on from ``threshold`` tokens per attention
    TP group (what vLLM counts per DP rank)."""
    dp = world // tp
    note = f"  # {other.split()[0]} left at vLLM's default: not swept here"
    vllm = (
        f"vllm serve {model} --tensor-parallel-size {tp} --data-parallel-size {dp} --enable-expert-parallel "
        f"--enable-dbo {flag} {threshold} {other}{note}"
        if dp > 1
        else f"do not enable DBO in vLLM with attention TP over every GPU (--tensor-parallel-size {world}): its "
        "MoE then runs without an all-to-all (an all-reduce), and DBO overlaps only DeepEP's; pass "
        "--data-parallel-size > 1 (the sequence-parallel MoE sends each TP rank's share through DeepEP)"
    )
    dpa = f" --dp {dp} --enable-dp-attention" if dp > 1 else ""
    return {
        "enable": True,
        "threshold": threshold,
        "vllm": vllm,
        "sglang": f"--tp {world}{dpa} --moe-a2a-backend deepep --enable-two-batch-overlap, if your {phase} batches "
        f"carry at least {threshold} tokens per attention TP group of {tp} GPUs (SGLang has no threshold: below it "
        f"two-batch overlap slows the step){approx}",
    }
