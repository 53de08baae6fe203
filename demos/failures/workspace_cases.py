"""Scenarios of the workspace: growth policies, orphaned and stale views, a foreign thread."""

from __future__ import annotations

import threading
from typing import Any, Callable, Sequence

import dbo
from demos.failures.text import F32, STEP_BOUNDS, U8, MiB, findings_line, para, say, wrapped
from workspace import WorkspaceManager, sanitizer
from workspace.diagnostics import mib
from workspace.policy import DEFAULT_GROWTH, policy_names
from workspace.tracking import LiveBytesTracker

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
            f"| {r['policy']} | {mib(r['peak_bytes'])} | {mib(r['orphaned_bytes'])} | {found} | {under} | {step} "
            f"| {r['warmup_allocations']} | {mib(r['warmup_peak_bytes'])} |"
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
            f"  {policy:<18} peak {mib(r['peak_bytes'])}, orphaned {mib(r['orphaned_bytes'])}, "
            f"sibling's data intact: {r['sibling_view_intact']}"
        )
        wrapped("sanitizer: " + findings_line(r["findings_detail"]), 21)
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
        sizes = ", ".join(mib(s) for s in r["sizes_at_lock"])
        err = r["locked_step_error"]
        say(f"  {policy:<18} slots at lock [{sizes}] -> DBO step: {r['locked_step']}")
        if err is not None:
            wrapped(f"{type(err).__name__}: {err}", 21, 0)
    say()
    para(
        "What happens",
        "With requester-only growth (vLLM since #39226) only the calling slot grows, and warmup on the main "
        "thread only ever calls as ubatch 0. Ubatch 1's slot is locked at 0 bytes, and the first DBO step "
        "that needs scratch in it fails with 'Workspace is locked ... holds 0.00 MiB' (vllm#41858, #42275, "
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

    with sanitizer.use_sanitizer("collect") as found:
        with dbo.UBatchOrchestrator(2, backend="virtual", **STEP_BOUNDS) as orch:
            results = orch.run(sanitizer.wrap(body), [None, None])
        findings = found()
    say("Each ubatch takes x (1024 floats), fills it, yields, then makes its next get_simultaneous call")
    say("(y, z: 512 floats each, the same bytes), fills y with -1 and z with 0, and reads x again.")
    say("Virtual backend, sanitizer on.")
    say()
    for u, r in enumerate(results):
        say(f"  ubatch {u}: sum(x) expected {r['expected']:.0f}, read {r['got']:.0f}")
    wrapped("sanitizer: " + findings_line(findings), 2)
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
            with sanitizer.use_sanitizer():
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

    with sanitizer.use_sanitizer("collect") as found:
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
    wrapped("sanitizer: " + findings_line(ours_findings), 13)
    say(f"  reference: the helper gets slot 0 -> ubatch 0 reads sum(x) = {ref[0]:.0f} (expected {n})")
    wrapped("sanitizer: " + findings_line(ref_findings), 13)
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
