"""``python -m demos.scenarios [NAME ...] [--list]``: the known failure modes, reproduced and explained.

Each scenario runs a small program on the DBO runtime (``dbo``) and the workspace (``workspace``),
prints what happens, what the sanitizer (``workspace.sanitizer``) and the growth policies show, and
a paragraph on why. ``run_scenario(name)`` returns the figures as a dict (the tests use it).
docs/scenarios.md walks through the output.

Every scenario is bounded: the whole set runs in a few seconds, and nothing can hang (the one that
models the reference's hang stops its model after a short patience).
"""

from __future__ import annotations

import argparse
import sys
import textwrap
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

import dbo
from dbo import registry
from dbo.trace import KernelRecord, Tracer
from workspace import WorkspaceManager, sanitizer
from workspace.policy import DEFAULT_GROWTH, policy_names
from workspace.tracking import LiveBytesTracker

__all__ = ["SCENARIOS", "Scenario", "run_scenario", "measure_policy", "policy_table", "main"]

MiB = 1 << 20
U8 = torch.uint8
F32 = torch.float32
WIDTH = 96
STEP_BOUNDS = dict(handoff_timeout=10.0, step_timeout=30.0, join_grace=5.0)


def say(text: str = "") -> None:
    print(text)


def para(title: str, text: str) -> None:
    """A wrapped paragraph under a bold-ish title."""
    say(f"{title}:")
    for line in textwrap.wrap(" ".join(text.split()), WIDTH - 2):
        say("  " + line)


def _findings_line(found: Sequence[sanitizer.Finding]) -> str:
    if not found:
        return "no findings"
    return "; ".join(f"{f.kind} x{f.count} ({f.op} by {_who(f.ubatch)} at {_short(f.caller)})" for f in found)


def _who(ubatch: int | None) -> str:
    return "a non-ubatch thread" if ubatch is None else f"ubatch {ubatch}"


def _short(caller: str) -> str:
    path, _, rest = caller.partition(":")
    return path.rsplit("/", 1)[-1] + ":" + rest


def wrapped(text: str, indent: int, hang: int = 2) -> None:
    """``text`` wrapped to the page width: the first line indented by ``indent`` spaces, the rest
    by ``indent + hang``."""
    lines = textwrap.wrap(text, WIDTH - indent - hang)
    for i, line in enumerate(lines):
        say(" " * (indent + (hang if i else 0)) + line)


def _mib(n: int) -> str:
    return f"{n / MiB:.2f} MiB"


# ---------------------------------------------------------------------- growth policies


def _parked_sibling_body(m: WorkspaceManager, size: int) -> Callable[[Any], bool]:
    """Both ubatches take ``size`` bytes; ubatch 0 then grows to 4x while ubatch 1, parked at its
    yield, still holds its view; ubatch 1 resumes, reads its view, then grows too."""

    def body(_: Any) -> bool:
        u = dbo.dbo_current_ubatch_id()
        (a,) = m.get_simultaneous(((size,), U8))
        a.fill_(u + 1)
        dbo.dbo_yield()  # u0 -> u1 -> u0: ubatch 1 is now parked, holding `a`
        if u == 0:
            del a
            (big,) = m.get_simultaneous(((4 * size,), U8))  # the growth happens here
            big.fill_(9)
            del big
            dbo.dbo_yield()  # -> ubatch 1 resumes with its view
            return True
        intact = bool((a == u + 1).all())  # a live view, by contract: its slot had no call since
        del a
        (big,) = m.get_simultaneous(((4 * size,), U8))
        big.fill_(9)
        del big
        return intact

    return body


def measure_policy(policy: str, size: int = MiB, steps: int = 8) -> dict:
    """Three deterministic experiments on one growth policy (2 ubatches, virtual backend).

    1. parked sibling: ``_parked_sibling_body``; live-bytes peak, orphaned bytes (LiveBytesTracker)
       and the sanitizer's findings.
    2. warmup on the main thread (slot 0 only) to 4 x ``size``, lock, then a DBO step where each
       ubatch needs 2 x ``size``: slots undersized at lock, and whether the step fails.
    3. a warmup of ``steps`` growing requests on the main thread, then lock: buffer allocations
       and live-bytes peak.
    """
    row: dict[str, Any] = {"policy": policy}
    # 1. growth while a parked sibling holds views
    m = WorkspaceManager("cpu", 2, growth=policy)
    tracker = LiveBytesTracker().attach(m)
    was_on = sanitizer.enabled()
    if not was_on:
        sanitizer.enable("collect")
    try:
        sanitizer.clear()
        with dbo.UBatchOrchestrator(2, backend="virtual", **STEP_BOUNDS) as orch:
            intact = orch.run(sanitizer.wrap(_parked_sibling_body(m, size)), [None, None])
        found = sanitizer.findings()
    finally:
        if not was_on:
            sanitizer.disable()
    row.update(
        peak_bytes=tracker.peak,
        orphaned_bytes=tracker.orphaned_peak,
        live_after=tracker.live,
        sibling_view_intact=intact[1],
        findings=[f.kind for f in found],
        findings_detail=found,
    )
    del m
    # 2. undersized at lock
    m = WorkspaceManager("cpu", 2, growth=policy)
    (v,) = m.get_simultaneous(((4 * size,), U8))  # warmup on the main thread: no step, so slot 0
    del v
    m.lock()
    row["sizes_at_lock"] = m.slot_sizes()
    row["undersized_at_lock"] = m.undersized_slots()

    def locked_step(_: Any) -> int:
        (w,) = m.get_simultaneous(((2 * size,), U8))
        w.fill_(1)
        return w.numel()

    try:
        with dbo.UBatchOrchestrator(2, backend="virtual", **STEP_BOUNDS) as orch:
            orch.run(locked_step, [None, None])
        row["locked_step"] = "ok"
        row["locked_step_error"] = None
    except dbo.UBatchFailed as exc:
        cause = exc.__cause__
        row["locked_step"] = f"ubatch {exc.ubatch_id} failed"
        row["locked_step_error"] = cause
    row["allocations_after_lock"] = m.stats()["allocations_after_lock"]
    del m
    # 3. allocations over a warmup
    m = WorkspaceManager("cpu", 2, growth=policy)
    tracker = LiveBytesTracker().attach(m)
    for k in range(1, steps + 1):
        (v,) = m.get_simultaneous(((k * size // steps,), U8))
        del v
    m.lock()
    stats = m.stats()
    row["warmup_allocations"] = stats["allocations"]
    row["warmup_peak_bytes"] = tracker.peak
    row["warmup_reserved_at_lock"] = stats["bytes_reserved"]
    return row


def policy_table(rows: Sequence[dict]) -> list[str]:
    """The comparison table (markdown) of ``measure_policy`` rows."""
    head = (
        "| policy | peak, parked sibling | orphaned | sanitizer | undersized at lock | locked DBO step "
        "| warmup allocations | warmup peak |"
    )
    out = [head, "|" + "---|" * 8]
    for r in rows:
        found = ", ".join(sorted(set(r["findings"]))) or "none"
        under = ", ".join(f"slot {s}" for s in r["undersized_at_lock"]) or "none"
        step = r["locked_step"]
        if r["locked_step_error"] is not None:
            step += f" ({type(r['locked_step_error']).__name__})"
        out.append(
            f"| {r['policy']} | {_mib(r['peak_bytes'])} | {_mib(r['orphaned_bytes'])} | {found} | {under} | {step} "
            f"| {r['warmup_allocations']} | {_mib(r['warmup_peak_bytes'])} |"
        )
    return out


def scenario_policies() -> dict:
    rows = [measure_policy(p) for p in policy_names()]
    say("Three experiments per growth policy, 2 ubatches, 1 MiB = the first request (LiveBytesTracker):")
    say("  peak / orphaned: ubatch 0 grows 1 -> 4 MiB while ubatch 1 is parked holding a 1 MiB view;")
    say("  undersized / locked step: warmup on the main thread to 4 MiB, lock, then each ubatch needs 2 MiB;")
    say("  warmup: 8 growing requests (0.125 .. 1 MiB) on the main thread, then lock.")
    say()
    for line in policy_table(rows):
        say(line)
    say()
    para(
        "Why",
        f"lockstep reallocates the parked sibling's slot under its live view: the old megabyte stays "
        f"alive (orphaned, peak +1 MiB) and the sanitizer flags the sibling's next use as an orphaned-view. "
        f"requester never touches a sibling, so nothing is orphaned, but a slot warmup never ran is locked "
        f"at 0 bytes and the first DBO step fails. deferred-lockstep raises every capacity at once but "
        f"reallocates a sibling only at its own next call (or at lock): nothing orphaned, nothing undersized, "
        f"and fewer allocations during warmup. It is the default ({DEFAULT_GROWTH}).",
    )
    return {"rows": rows}


def scenario_orphaned_views() -> dict:
    say("Ubatch 0 grows its slot (1 -> 4 MiB) while ubatch 1 is parked at a yield holding a 1 MiB view;")
    say("ubatch 1 resumes and reads its view (legal: its slot had no call since). Virtual backend.")
    say()
    out = {}
    for policy in policy_names():
        r = measure_policy(policy)
        out[policy] = r
        say(
            f"  {policy:<18} peak {_mib(r['peak_bytes'])}, orphaned {_mib(r['orphaned_bytes'])}, "
            f"sibling's data intact: {r['sibling_view_intact']}"
        )
        wrapped("sanitizer: " + _findings_line(r['findings_detail']), 21)
    say()
    para(
        "What happens",
        "Under lockstep, ubatch 0's growth frees and reallocates every slot, ubatch 1's included. Ubatch 1's "
        "view keeps the old buffer alive: its data is intact, but it now lives in an orphaned 1 MiB that no "
        "slot owns (the vllm#39226 'DBO leak'; on a GPU with a caching allocator the block is not even "
        "returned), and an address a CUDA graph captured from it would be stale. The sanitizer sees the "
        "access land in a replaced buffer: orphaned-view. Requester-only and deferred-lockstep leave ubatch "
        "1's buffer alone until its own next call, where its old view is dead by contract: nothing orphaned.",
    )
    return out


def scenario_undersized_at_lock() -> dict:
    say("Warmup runs on the main thread (no DBO step: every request uses slot 0) up to 4 MiB, then lock();")
    say("the first DBO step needs 2 MiB in each ubatch's slot.")
    say()
    out = {}
    for policy in policy_names():
        r = measure_policy(policy)
        out[policy] = r
        sizes = ", ".join(_mib(s) for s in r["sizes_at_lock"])
        err = r["locked_step_error"]
        say(f"  {policy:<18} slots at lock [{sizes}] -> DBO step: {r['locked_step']}")
        if err is not None:
            wrapped(f"{type(err).__name__}: {err}", 21, 0)
    say()
    para(
        "What happens",
        "With requester-only growth (vLLM since #39226) only the calling slot grows, and warmup on the main "
        "thread only ever calls as ubatch 0. Ubatch 1's slot is locked at 0 bytes, and the first DBO step "
        "that needs scratch in it fails with 'Workspace is locked ... holds 0.00 MB' (vllm#41858, #42275, "
        "#42112). Lockstep and deferred-lockstep size every slot of the lane: deferred-lockstep allocates the "
        "sibling's buffer at lock() at the latest, so nothing is allocated while locked either. The sanitizer "
        "has nothing to say: this is a sizing failure, loud by design.",
    )
    return out


# ---------------------------------------------------------------------- view lifetime


def scenario_stale_view() -> dict:
    n = 1024
    m = WorkspaceManager("cpu", 2)

    def body(_: Any) -> dict:
        u = dbo.dbo_current_ubatch_id()
        (x,) = m.get_simultaneous(((n,), F32))  # e.g. an attention output, consumed later
        x.fill_(u + 1)
        dbo.dbo_yield()  # held across the yield: fine so far (the sibling has its own slot)
        y, z = m.get_simultaneous(((n // 2,), F32), ((n // 2,), F32))  # the next call: same bytes
        y.fill_(-1.0)
        z.fill_(0.0)
        got = float(x.sum())  # x is stale: its bytes are y's and z's now
        return {"expected": float(n * (u + 1)), "got": got}

    with sanitizer.sanitizing("collect") as found:
        with dbo.UBatchOrchestrator(2, backend="virtual", **STEP_BOUNDS) as orch:
            results = orch.run(sanitizer.wrap(body), [None, None])
        findings = found()
    say("Each ubatch takes x (1024 floats), fills it, yields, then makes its next get_simultaneous call")
    say("(y, z: 512 floats each, the same bytes), fills y with -1 and z with 0, and reads x again.")
    say("Virtual backend, sanitizer on.")
    say()
    for u, r in enumerate(results):
        say(f"  ubatch {u}: sum(x) expected {r['expected']:.0f}, read {r['got']:.0f}")
    wrapped("sanitizer: " + _findings_line(findings), 2)
    say("  policies: all the same (no growth is involved)")
    say()
    para(
        "What happens",
        "A workspace view lives until its slot's next get_simultaneous call, which hands the same bytes out "
        "again (the maintainers' 'group of torch.empty calls' contract, vllm#44544). The yield is harmless: "
        "the sibling has its own slot. The ubatch's own next call is not: y now occupies x's bytes, so x "
        "reads y's -1s. The sanitizer judges by byte ranges, not start addresses (CSAN keys accesses by "
        "start address and misses views at other offsets): x came from call #1, call #2 handed out bytes "
        "inside it, so the read is a stale-view. Fix: take everything needed together in one call, or copy "
        "what must survive into a persistent tensor (get_persistent).",
    )
    return {"results": results, "findings": findings}


# ---------------------------------------------------------------------- foreign thread


def scenario_foreign_thread() -> dict:
    n = 256
    m = WorkspaceManager("cpu", 2)
    spec = ((n,), F32)
    outcome: dict[str, Any] = {}

    def run(model_reference: bool) -> tuple[list, list]:
        helper_done = threading.Event()
        errors: list[BaseException] = []

        def helper() -> None:
            with sanitizer.scope():
                try:
                    if model_reference:
                        # The reference maps a thread it does not know to slot 0 (dbo_current_ubatch_id()
                        # answers 0); model that by asking for slot 0's views directly.
                        (scratch,) = m._get_at(0, (spec,))
                    else:
                        (scratch,) = m.get_simultaneous(spec)
                    scratch.fill_(-7.0)  # e.g. a prefetch helper writing its "scratch"
                except BaseException as exc:  # reported by the scenario
                    errors.append(exc)
                finally:
                    helper_done.set()

        def body(_: Any) -> float:
            u = dbo.dbo_current_ubatch_id()
            (x,) = m.get_simultaneous(spec)
            x.fill_(u + 1)
            t = None
            if u == 0:
                t = threading.Thread(target=helper, name="helper", daemon=True)
                t.start()
            dbo.dbo_yield()  # ubatch 0 parks holding x; ubatch 1 runs
            if u == 1:
                helper_done.wait(5.0)  # let the helper run while ubatch 0 is parked
            dbo.dbo_yield()
            if t is not None:
                t.join(5.0)
            return float(x.sum())

        with dbo.UBatchOrchestrator(2, backend="virtual", **STEP_BOUNDS) as orch:
            results = orch.run(sanitizer.wrap(body), [None, None])
        return results, errors

    with sanitizer.sanitizing("collect") as found:
        ours, ours_errors = run(False)
        ours_findings = found()
        sanitizer.clear()
        ref, _ = run(True)
        ref_findings = found()
    say("Ubatch 0 starts a helper thread and parks at a yield holding x (256 floats of 1.0); the helper")
    say("asks the workspace for scratch during the step and writes -7 into it. Virtual backend.")
    say()
    err = ours_errors[0] if ours_errors else None
    say(f"  ours:      the helper gets {type(err).__name__ if err else 'no error'}")
    if err is not None:
        wrapped(str(err), 13, 0)
    say(f"             ubatch 0 reads sum(x) = {ours[0]:.0f} (expected {n})")
    wrapped("sanitizer: " + _findings_line(ours_findings), 13)
    say(f"  reference: the helper gets slot 0 -> ubatch 0 reads sum(x) = {ref[0]:.0f} (expected {n})")
    wrapped("sanitizer: " + _findings_line(ref_findings), 13)
    say("  policies: all the same (no growth is involved)")
    say()
    para(
        "What happens",
        "The reference's registry answers 0 to any thread it does not know while a step runs (or raises a "
        "bare KeyError), so a helper thread silently shares ubatch 0's slot and overwrites its live views. "
        "Here the registry refuses: UnregisteredThreadError names the live ubatches and says how to fix it "
        "(run the work in the ubatch's thread, or wrap it in dbo.registry.use_ubatch(i) to say which ubatch "
        "it acts for, accepting that ubatch's lifetime rule). With the reference's mapping modelled, the "
        "sanitizer, entered in the helper too, reports the write as cross-slot by a non-ubatch thread.",
    )
    outcome.update(
        ours=ours, ours_error=err, ours_findings=ours_findings, reference=ref, reference_findings=ref_findings
    )
    return outcome


# ---------------------------------------------------------------------- streams


def scenario_missing_wait() -> dict:
    n = 4096
    transfer_s = 0.05
    m = WorkspaceManager("cpu", 2)

    def make_body(sync: bool) -> Callable[[Any], None]:
        def recv(buf: torch.Tensor, value: float) -> None:
            buf.fill_(value)

        def consume(buf: torch.Tensor, out: torch.Tensor) -> None:
            out.copy_(buf.sum().reshape(1))

        def body(_: Any) -> None:
            u = dbo.dbo_current_ubatch_id()
            buf, out = m.get_simultaneous(((n,), F32), ((1,), F32))
            buf.zero_()
            out.fill_(-1.0)
            dbo.dbo_switch_to_comm()
            dbo.launch(recv, buf, float(u + 1), name="recv", kind="comm", cost=transfer_s)  # data lands at the end
            if sync:
                dbo.dbo_switch_to_compute_sync()  # record comm-done, switch, compute waits for it
            else:
                dbo.dbo_switch_to_compute()  # the bug: switch without the event
            dbo.launch(consume, buf, out, name="consume", kind="compute")
            dbo.dbo_yield()

        return body

    def run(sync: bool) -> tuple[list[float], list[sanitizer.Finding]]:
        with sanitizer.sanitizing("collect") as found:
            with dbo.UBatchOrchestrator(2, backend="threads", **STEP_BOUNDS) as orch:
                orch.run(sanitizer.wrap(make_body(sync)), [None, None])
            got = []
            for u in range(2):
                with registry.use_ubatch(u):
                    _, out = m.get_simultaneous(((n,), F32), ((1,), F32))
                    got.append(float(out[0]))
            return got, found()

    wrong, wrong_findings = run(False)
    right, _ = run(True)
    expected = [float(n * (u + 1)) for u in range(2)]
    say("Each ubatch receives 4096 floats on its comm stream (a 50 ms transfer whose data lands at its end),")
    say("switches to its compute stream and sums them there. Threads backend: a compute and a comm executor thread.")
    say()
    say(f"  dbo_switch_to_compute()       (no event): sums {wrong}  expected {expected}")
    say(f"  dbo_switch_to_compute_sync()  (event)   : sums {right}")
    wrapped(
        f"sanitizer: {_findings_line(wrong_findings)} (kernels run on the backend's executor threads, and it checks slot "
        "ownership and view lifetimes, not the ordering between streams)",
        2,
    )
    say("  policies: all the same (no growth is involved)")
    say()
    para(
        "What happens",
        "A stream switch without an event orders nothing: the compute stream's sum starts at once, while the "
        "transfer is still in flight, and reads the zeros that were there before (on a GPU: whatever the "
        "buffer held, sometimes). dbo_switch_to_compute_sync records comm-done on the comm stream and makes "
        "the compute stream wait for it. This is a stream-ordering race, not an isolation one: the bytes are "
        "the ubatch's own and live, so the workspace sanitizer is silent by design. The threads backend makes "
        "the race real on a CPU; a CSAN-style vector-clock checker fed with the simulated streams' "
        "record/wait events is the tool that flags it without running it (REFERENCE.md 7.1, rank 10).",
    )
    return {"wrong": wrong, "right": right, "expected": expected, "findings": wrong_findings}


def _overlap(kernels: Sequence[KernelRecord]) -> float:
    """Seconds of comm kernels that run while some compute kernel runs."""
    compute = sorted((k.start, k.end) for k in kernels if k.kind == "compute")
    merged: list[list[float]] = []
    for s, e in compute:
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    total = 0.0
    for k in kernels:
        if k.kind != "comm":
            continue
        for s, e in merged:
            total += max(0.0, min(e, k.end) - max(s, k.start))
    return total


def _timeline(kernels: Sequence[KernelRecord], width: int = 72) -> list[str]:
    """One text row per stream: a letter per kernel (upper case: ubatch 0, lower case: ubatch 1)."""
    end = max(k.end for k in kernels)
    streams = sorted({k.stream for k in kernels}, key=lambda s: (not s.startswith("compute"), s))
    rows = []
    for s in streams:
        line = []
        for c in range(width):
            t = (c + 0.5) * end / width
            ch = "."
            for k in kernels:
                if k.stream == s and k.start <= t < k.end:
                    ch = k.name[0].upper() if k.ubatch == 0 else k.name[0].lower()
            line.append(ch)
        rows.append(f"  {s:<8}|{''.join(line)}|")
    rows.append(f"  {'':<8} 0{'':<{width - 10}}{end * 1e3:6.2f} ms")
    return rows


def scenario_late_event(layers: int = 4) -> dict:
    tc, tm = 1e-3, 1e-3

    def body_for(late: bool) -> Callable[[Any], None]:
        def body(_: Any) -> None:
            ctx = registry.current_context()
            for _layer in range(layers):
                dbo.launch(None, name="attn", kind="compute", cost=tc)
                if late:  # the bug: yield first, then capture the event
                    dbo.dbo_yield()
                    ctx.compute_done.record(ctx.compute_stream)  # now also covers the sibling's attention
                    dbo.set_stream(ctx.comm_stream)
                    ctx.comm_stream.wait_event(ctx.compute_done)
                else:
                    dbo.dbo_yield_and_switch_from_compute_to_comm()  # record, yield, switch, wait
                dbo.launch(None, name="dispatch", kind="comm", cost=tm)
                dbo.dbo_yield_and_switch_from_comm_to_compute()
                dbo.launch(None, name="experts", kind="compute", cost=tc)

        return body

    out: dict[str, Any] = {}
    for late in (False, True):
        tracer = Tracer()
        with dbo.UBatchOrchestrator(2, backend="virtual", stream_layout="shared", tracer=tracer, **STEP_BOUNDS) as orch:
            orch.run(body_for(late), [None, None])
            kernels = tracer.kernels()
        step = max(k.end for k in kernels) - min(k.start for k in kernels)
        comm = sum(k.duration for k in kernels if k.kind == "comm")
        out["late" if late else "right"] = {
            "step_s": step,
            "overlap_s": _overlap(kernels),
            "comm_s": comm,
            "timeline": _timeline(kernels),
        }
    say(f"{layers} layers per ubatch: attention (1 ms compute), dispatch (1 ms comm), experts (1 ms compute);")
    say("shared compute and comm streams, as vLLM. Virtual backend (deterministic). A/a attention, D/d")
    say("dispatch, E/e experts; upper case ubatch 0, lower case ubatch 1.")
    for key, label in (
        ("right", "dbo_yield_and_switch_from_compute_to_comm (record, yield, switch, wait)"),
        ("late", "by hand, wrong: yield, then record, switch, wait"),
    ):
        r = out[key]
        say()
        say(f"  {label}")
        for line in r["timeline"]:
            say(line)
        say(
            f"  step {r['step_s'] * 1e3:.2f} ms, comm hidden under compute {r['overlap_s'] * 1e3:.2f} of "
            f"{r['comm_s'] * 1e3:.2f} ms"
        )
    say()
    say("  sanitizer: not involved (no workspace access); policies: not involved")
    say()
    para(
        "What happens",
        "The compute-done event must be recorded before the yield: it then covers exactly this ubatch's "
        "attention. Recorded after the yield, it also covers the attention the sibling enqueued on the shared "
        "compute stream meanwhile, so each dispatch waits for the sibling's compute and no longer runs under "
        "it: the overlap is lost and the step gets longer (vllm#38451, DeepEP's 'previous event' captured "
        "after the yield). Nothing fails and the outputs are right, which is why only a timeline shows it.",
    )
    return out


# ---------------------------------------------------------------------- failure while parked


class _WouldHang(Exception):
    pass


def _reference_model(patience: float) -> dict:
    """A model of vLLM V1's handoff: a ring of threading.Events, no abort, untimed waits (bounded here
    by ``patience`` so that the demonstration cannot hang), a failure goes to the thread's excepthook."""
    n = 2
    events = [threading.Event() for _ in range(n)]
    barrier = threading.Barrier(n + 1, timeout=5.0)
    log: list[str] = []
    lost: list[BaseException] = []
    release = threading.Event()

    def wait_turn(i: int, where: str) -> None:
        if not events[i].wait(patience):  # the reference waits forever here
            log.append(f"ubatch {i} still parked at {where} after {patience:.1f} s: the reference would hang")
            release.wait(5.0)
            raise _WouldHang(where)
        events[i].clear()

    def yield_(i: int, where: str) -> None:
        events[(i + 1) % n].set()
        wait_turn(i, where)

    def main(i: int) -> None:
        try:
            barrier.wait()
            wait_turn(i, "its start")
            try:
                for k in range(1, 4):  # three layers, one yield each
                    yield_(i, f"yield {k}")
                    if i == 1:
                        raise RuntimeError("ubatch 1 failed after its first yield")
            finally:
                events[(i + 1) % n].set()  # __exit__ signals the next ubatch, exception or not
        except _WouldHang:
            pass
        except BaseException as exc:  # V1: goes to threading.excepthook, never reaches the main thread
            lost.append(exc)
            log.append(f"ubatch {i} raised {type(exc).__name__}: {exc} (lost in threading.excepthook)")

    threads = [threading.Thread(target=main, args=(i,), name=f"ref-ubatch-{i}", daemon=True) for i in range(n)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    barrier.wait()
    events[0].set()
    joined = True
    for t in threads:
        t.join(patience + 0.5)  # the reference joins with no timeout
        joined = joined and not t.is_alive()
    hung = not joined or any("would hang" in line for line in log)
    release.set()
    for t in threads:
        t.join(5.0)
    return {
        "hung": hung,
        "log": log,
        "main_thread_saw": None,
        "lost": lost,
        "seconds": time.perf_counter() - t0,
        "threads_left": [t.name for t in threads if t.is_alive()],
    }


def scenario_parked_failure(patience: float = 0.3) -> dict:
    def body(_: Any) -> None:
        u = dbo.dbo_current_ubatch_id()
        for _layer in range(3):  # three layers, one yield each
            dbo.dbo_yield()  # ubatch 0 parks here while ubatch 1 runs
            if u == 1:
                raise RuntimeError("ubatch 1 failed after its first yield")

    t0 = time.perf_counter()
    err: dbo.UBatchFailed | None = None
    with dbo.UBatchOrchestrator(2, backend="threads", **STEP_BOUNDS) as orch:
        try:
            orch.run(body, [None, None])
        except dbo.UBatchFailed as exc:
            err = exc
    ours_s = time.perf_counter() - t0
    left = [t.name for t in threading.enumerate() if t.name.startswith("dbo-ubatch")]
    ref = _reference_model(patience)
    say("Ubatch 1 raises after its first yield, while ubatch 0 is parked waiting for the turn.")
    say()
    cause = type(err.__cause__).__name__ if err is not None else None
    say(f"  ours:      {type(err).__name__} after {ours_s * 1e3:.1f} ms: {err}")
    say(f"             .ubatch_id={err.ubatch_id if err is not None else None}, __cause__ {cause}; registry empty: "
        f"{not registry.snapshot()}, ubatch threads left: {left or 'none'}")
    say("  reference (a model of V1's event ring, waits bounded here at "
        f"{patience:.1f} s instead of forever):")
    for line in ref["log"]:
        say(f"             {line}")
    say(f"             the main thread's join would block forever; it never sees the exception")
    say("  sanitizer: not involved; policies: not involved")
    say()
    para(
        "What happens",
        "In the reference the failing thread still signals its successor once on exit and its exception goes "
        "to threading.excepthook. Ubatch 0 resumes, runs to its next yield, passes the turn to a dead thread "
        "and waits for a turn that never comes; the untimed join hangs the step (#55586 was closed unmerged). "
        "Here the first failure aborts the step: it is recorded, every turn lock is released so every waiter "
        "wakes at once and unwinds with UBatchAborted, and run() raises UBatchFailed naming ubatch 1 with the "
        "original exception as __cause__, in milliseconds, with no thread or registry entry left behind.",
    )
    return {"error": err, "seconds": ours_s, "threads_left": left, "reference": ref}


# ---------------------------------------------------------------------- registry


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    run: Callable[[], dict]


_ALL = (
    ("orphaned-views", "eager lockstep growth orphans a parked sibling's views", scenario_orphaned_views),
    ("undersized-at-lock", "requester-only growth locks a sibling slot at 0 bytes", scenario_undersized_at_lock),
    ("stale-view", "a view held across a yield, overwritten by the same ubatch's next call", scenario_stale_view),
    ("foreign-thread", "a thread that is not a ubatch thread asks for a slot during a step", scenario_foreign_thread),
    ("missing-wait", "no wait_event between the comm and compute streams: a real race", scenario_missing_wait),
    ("late-event", "the done-event captured after the yield destroys the overlap", scenario_late_event),
    ("parked-failure", "a ubatch fails while its sibling is parked: the reference hangs, ours aborts",
     scenario_parked_failure),
    ("policies", "the growth policies side by side: peak, orphaned bytes, sizes at lock", scenario_policies),
)
SCENARIOS: dict[str, Scenario] = {name: Scenario(name, summary, fn) for name, summary, fn in _ALL}


def run_scenario(name: str) -> dict:
    """Run one scenario (printing its report); return its figures. KeyError for an unknown name."""
    scenario = SCENARIOS[name]
    say("=" * WIDTH)
    say(f"{scenario.name}: {scenario.summary}")
    say("=" * WIDTH)
    t0 = time.perf_counter()
    result = scenario.run()
    say(f"({time.perf_counter() - t0:.2f} s)")
    say()
    return result


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m demos.scenarios",
        description="Reproduce and explain the known DBO failure modes (docs/scenarios.md).",
    )
    p.add_argument("names", nargs="*", metavar="NAME", help="scenarios to run (default: all); see --list")
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.list:
        for s in SCENARIOS.values():
            print(f"{s.name:<20} {s.summary}")
        return 0
    unknown = [n for n in args.names if n not in SCENARIOS]
    if unknown:
        print(
            f"demos.scenarios: unknown scenario {unknown[0]!r}; valid: {', '.join(SCENARIOS)}",
            file=sys.stderr,
        )
        return 2
    for name in args.names or list(SCENARIOS):
        run_scenario(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
