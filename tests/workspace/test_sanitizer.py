"""workspace.sanitizer: off by default and free; each kind of finding; no false positives."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest
import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

import dbo
import workspace
from dbo.registry import use_ubatch
from demos.toy.comm import ModelledLinkTransport
from demos.toy.model import ModelConfig, ToyMoE
from tests.support.orchestrators import HANDOFF_TIMEOUT
from tests.support.timing import slack
from tests.support.workspace_fixtures import sanitizer_off  # noqa: F401 (autouse: each test starts and ends with it off)
from workspace import WorkspaceManager, sanitizer
from workspace.sanitizer import Finding, SanitizerError

F32 = torch.float32
U8 = torch.uint8
BOUNDS = dict(handoff_timeout=HANDOFF_TIMEOUT, step_timeout=slack(60.0), join_grace=slack(5.0))
HERE = os.path.basename(__file__)


def kinds() -> list[str]:
    return [f.kind for f in sanitizer.findings()]


# ---------------------------------------------------------------------- off by default, and free


@pytest.mark.slow
def test_importing_is_cheap_and_changes_nothing() -> None:
    code = (
        "import sys, time; import workspace; t = time.perf_counter(); import workspace.sanitizer as s; "
        "dt = time.perf_counter() - t; m = workspace.WorkspaceManager('cpu'); "
        f"print(s.enabled(), 'get_simultaneous' in vars(m), m.observers, dt < {slack(0.5)!r})"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=slack(60))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "False", "()", "True"]


def test_disabled_scope_pushes_no_mode_and_the_hot_path_is_the_class_method() -> None:
    m = WorkspaceManager("cpu")
    with sanitizer.use_sanitizer():
        assert _get_current_dispatch_mode() is None
    assert "get_simultaneous" not in vars(m)
    sanitizer.enable("collect")
    assert "get_simultaneous" not in vars(m), "observing never swaps methods on the instance"
    assert m.observers != (), "enabled: every manager reports its hand-outs"
    with sanitizer.use_sanitizer():
        assert _get_current_dispatch_mode() is not None
        with sanitizer.use_sanitizer():  # nested: entered once
            pass
        assert _get_current_dispatch_mode() is not None
    sanitizer.disable()
    assert "get_simultaneous" not in vars(m) and m.observers == ()
    fresh = WorkspaceManager("cpu")
    assert "get_simultaneous" not in vars(fresh)


def test_enable_attaches_to_managers_created_later_and_checks_the_mode() -> None:
    with pytest.raises(ValueError, match="raise"):
        sanitizer.enable("loud")
    sanitizer.enable("collect")
    assert sanitizer.enabled() and sanitizer.mode() == "collect"
    m = WorkspaceManager("cpu", 2)
    assert m.observers
    with pytest.raises(ValueError):
        sanitizer.enable("x")
    assert sanitizer.mode() == "collect"


def test_wrap_keeps_the_function_and_its_result() -> None:
    def forward(x):
        """doc"""
        return x + 1

    w = sanitizer.wrap(forward)
    assert w(1) == 2 and w.__name__ == "forward" and w.__doc__ == "doc"


# ---------------------------------------------------------------------- cross-slot


def test_cross_slot_write_is_reported_with_op_ubatch_and_caller() -> None:
    m = WorkspaceManager("cpu", 2)
    sanitizer.enable("collect")
    with use_ubatch(0):
        (mine,) = m.get_simultaneous(((64,), F32))
    with sanitizer.use_sanitizer(), use_ubatch(1):
        line = sys._getframe().f_lineno + 1
        mine.fill_(3.0)
    (f,) = sanitizer.findings()
    assert isinstance(f, Finding)
    assert (f.kind, f.op, f.ubatch, f.slot, f.owner) == ("cross-slot", "fill_.Scalar", 1, 0, 0)
    assert f.caller.endswith(f"{HERE}:{line}:test_cross_slot_write_is_reported_with_op_ubatch_and_caller")
    assert "ubatch 0" in f.detail and str(f).startswith("cross-slot: fill_.Scalar by ubatch 1")


def test_raise_mode_stops_the_op_before_it_runs() -> None:
    m = WorkspaceManager("cpu", 2)
    sanitizer.enable("raise")
    with use_ubatch(0):
        (mine,) = m.get_simultaneous(((8,), F32))
        mine.fill_(1.0)
    with sanitizer.use_sanitizer(), use_ubatch(1):
        with pytest.raises(SanitizerError) as info:
            mine.fill_(2.0)
    assert info.value.finding.kind == "cross-slot"
    assert mine.tolist() == [1.0] * 8, "the offending write must not have happened"


def test_a_finding_in_a_ubatch_thread_fails_the_step_naming_the_ubatch() -> None:
    m = WorkspaceManager("cpu", 2)
    sanitizer.enable("raise")
    shared = {}

    def body(_):
        u = dbo.dbo_current_ubatch_id()
        (x,) = m.get_simultaneous(((16,), F32))
        if u == 0:
            shared["x"] = x
        dbo.dbo_yield()
        if u == 1:
            shared["x"].add_(1)  # ubatch 1 writes into ubatch 0's slot
        return u

    with dbo.UBatchOrchestrator(2, backend="virtual", **BOUNDS) as orch:
        with pytest.raises(dbo.UBatchFailed) as info:
            orch.run(sanitizer.wrap(body), [None, None])
    assert info.value.ubatch_id == 1 and isinstance(info.value.__cause__, SanitizerError)


def test_a_non_ubatch_thread_touching_a_slot_during_a_step_is_cross_slot() -> None:
    m = WorkspaceManager("cpu", 2)
    sanitizer.enable("collect")
    with use_ubatch(0):
        (x,) = m.get_simultaneous(((16,), F32))
    inside, release = threading.Event(), threading.Event()

    def ubatch1() -> None:
        with use_ubatch(1):
            inside.set()
            release.wait(slack(5))

    t = threading.Thread(target=ubatch1, daemon=True)
    t.start()
    try:
        assert inside.wait(slack(5))
        with sanitizer.use_sanitizer():
            x.zero_()  # the main thread, not a ubatch thread, while a step is active
    finally:
        release.set()
        t.join(slack(5))
    (f,) = sanitizer.findings()
    assert f.kind == "cross-slot" and f.ubatch is None and f.owner == 0
    sanitizer.clear()
    with sanitizer.use_sanitizer():
        x.zero_()  # no step active: the main thread is ubatch 0
    assert sanitizer.findings() == []


def test_cross_slot_on_another_ubatchs_persistent_tensor() -> None:
    m = WorkspaceManager("cpu", 2)
    sanitizer.enable("collect")
    with use_ubatch(1):
        p = m.get_persistent("meta", (4,), torch.int32, zero_init=True)
    with sanitizer.use_sanitizer():
        with use_ubatch(1):
            p.add_(1)  # its own: fine
        with use_ubatch(0):
            p.add_(1)
    (f,) = sanitizer.findings()
    assert f.kind == "cross-slot" and f.owner == 1 and "persistent tensor 'meta'" in f.detail


def test_recv_hooks_act_for_the_ubatch_that_registered_them() -> None:
    # The reference's low-latency pattern: ubatch i parks a receive that writes into ubatch i's
    # scratch; ubatch i+1 runs it. Not a cross-slot access.
    m = WorkspaceManager("cpu", 2)
    sanitizer.enable("collect")

    def body(_):
        u = dbo.dbo_current_ubatch_id()
        (recv,) = m.get_simultaneous(((32,), F32))
        dbo.dbo_register_recv_hook(lambda: dbo.launch(lambda r: r.fill_(u + 1), recv))
        dbo.dbo_yield()
        dbo.dbo_maybe_run_recv_hook()
        dbo.dbo_yield()
        return float(recv.sum())

    with dbo.UBatchOrchestrator(2, backend="virtual", **BOUNDS) as orch:
        out = orch.run(sanitizer.wrap(body), [None, None])
    assert out == [32.0, 64.0]
    assert sanitizer.findings() == []


def test_a_helper_registered_as_the_owner_is_not_cross_slot() -> None:
    m = WorkspaceManager("cpu", 2)
    sanitizer.enable("collect")
    with use_ubatch(0):
        (x,) = m.get_simultaneous(((16,), F32))
    errors: list[BaseException] = []

    def helper() -> None:
        try:
            with sanitizer.use_sanitizer(), use_ubatch(0):  # a helper that works for ubatch 0
                x.fill_(1)
        except BaseException as exc:  # reported below
            errors.append(exc)

    t = threading.Thread(target=helper, daemon=True)
    t.start()
    t.join(slack(10))
    assert not t.is_alive() and not errors
    assert sanitizer.findings() == []
    with sanitizer.use_sanitizer(), use_ubatch(1):
        x.fill_(2)
    assert kinds() == ["cross-slot"]


def test_the_acting_ubatch_comes_from_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sanitizer asks dbo.registry who acts; a hook frame on the stack alone proves nothing."""
    m = WorkspaceManager("cpu", 2)
    sanitizer.enable("collect")
    with use_ubatch(0):
        (x,) = m.get_simultaneous(((16,), F32))

    def maybe_run_recv_hook() -> None:  # named like dbo's hook runner, but not run by dbo
        x.fill_(3)

    with sanitizer.use_sanitizer(), use_ubatch(1):
        maybe_run_recv_hook()
    assert kinds() == ["cross-slot"]
    sanitizer.clear()
    monkeypatch.setattr(dbo.registry, "acting_ubatch_id", lambda: 0)  # as inside a hook ubatch 0 registered
    with sanitizer.use_sanitizer(), use_ubatch(1):
        x.fill_(4)
    assert sanitizer.findings() == []


# ---------------------------------------------------------------------- stale-view


def test_stale_view_after_the_same_slots_next_call() -> None:
    m = WorkspaceManager("cpu", 2)
    sanitizer.enable("collect")
    with sanitizer.use_sanitizer(), use_ubatch(0):
        (x,) = m.get_simultaneous(((256,), F32))  # 1 KiB
        x.fill_(1)
        y, z = m.get_simultaneous(((128,), F32), ((128,), F32))  # the same 1 KiB, two views
        y.fill_(2)
        assert sanitizer.findings() == []
        x.sum()
    (f,) = sanitizer.findings()
    assert f.kind == "stale-view" and f.ubatch == 0 and f.op == "sum.default"
    assert "call #1" in f.detail and "call #2" in f.detail


def test_stale_judged_by_byte_range_not_start_address() -> None:
    # The later view starts elsewhere (x's second half): CSAN, keyed by start address, misses this.
    m = WorkspaceManager("cpu", 1)
    sanitizer.enable("collect")
    with sanitizer.use_sanitizer():
        (x,) = m.get_simultaneous(((512,), F32))  # bytes [0, 2048)
        a, b = m.get_simultaneous(((256,), F32), ((64,), F32))  # b at byte 1024: inside x, other start
        assert b.data_ptr() != x.data_ptr()
        b.fill_(0)
        x.mul_(2)
        # Slices of x keep x's judgement (stale: call #2 handed out some of its bytes), whatever
        # bytes the slice itself covers: identity, not ranges, decides.
        x[:128].sum()  # bytes [0, 512): inside a, handed out again as one view -> stale all the same
        x[300:].sum()  # bytes [1200, 2048): overlaps b and x's remnant -> stale
        x[400:].sum()  # bytes [1600, 2048): x's remnant, never handed out again; x is stale -> stale
    found = sanitizer.findings()
    assert [f.kind for f in found] == ["stale-view"] * 4
    assert found[0].op == "mul_.Tensor" and {f.op for f in found[1:]} == {"sum.default"}
    assert "derived" in found[1].detail and "derived" not in found[0].detail


def test_stale_by_identity_when_the_next_call_hands_out_the_very_same_bytes() -> None:
    """The most common stale view: the slot asks for the same shape again and gets the same bytes
    (a cache hit); code then writes through the FIRST view. Same start, same size: only identity
    tells the two views apart. Derived tensors (slices, .view, .t()) keep their view's judgement."""
    m = WorkspaceManager("cpu", 1)
    sanitizer.enable("collect")
    with sanitizer.use_sanitizer():
        (first,) = m.get_simultaneous(((8, 8), F32))
        first_t = first.t()
        first_row = first[1:3]
        (second,) = m.get_simultaneous(((8, 8), F32))
        assert second.data_ptr() == first.data_ptr() and second.shape == first.shape
        assert second is not first
        second.fill_(1)  # the live view: fine
        second[2:4].view(-1).sum()  # derived from the live view: fine
        assert sanitizer.findings() == []
        first.fill_(2)  # stale
        first_t.add_(1)  # derived (.t()) from the stale view: stale
        first_row.view(-1).zero_()  # derived (slice, then .view): stale
    found = sanitizer.findings()
    assert [f.kind for f in found] == ["stale-view"] * 3
    assert [f.op for f in found] == ["fill_.Scalar", "add_.Tensor", "zero_.default"]
    assert all("call #1" in f.detail and "call #2" in f.detail for f in found)


def test_reused_and_derived_views_within_their_lifetime_are_fine() -> None:
    m = WorkspaceManager("cpu", 2)
    sanitizer.enable("raise")
    with sanitizer.use_sanitizer():
        for u in (0, 1):
            with use_ubatch(u):
                for _ in range(3):
                    a, b = m.get_simultaneous(((8, 16), F32), ((16,), torch.int64))
                    a.fill_(1)
                    a[2:4].add_(b[:16].to(F32))
                    a.view(-1).sum()
                    a.t().contiguous().mm(torch.ones(8, 2))
                    b.copy_(torch.arange(16))
                    torch.index_select(a, 0, b[:4] % 8)
                (c,) = m.get_simultaneous(((4,), F32))  # smaller, later call
                c.zero_()
                b.sum()  # b's bytes ([2048, ...)) were not handed out again: still fine
    assert sanitizer.findings() == []


# ---------------------------------------------------------------------- orphaned-view


def test_orphaned_view_under_lockstep_growth() -> None:
    m = WorkspaceManager("cpu", 2, growth="lockstep")
    sanitizer.enable("collect")
    with use_ubatch(1):
        (held,) = m.get_simultaneous(((64,), F32))
    with use_ubatch(0):
        m.get_simultaneous(((1 << 16,), U8))  # reallocates ubatch 1's slot too
    with sanitizer.use_sanitizer(), use_ubatch(1):
        held.add_(1)
    (f,) = sanitizer.findings()
    assert f.kind == "orphaned-view" and f.ubatch == 1 and f.owner == 1 and "replaced" in f.detail


def test_no_orphan_under_deferred_growth_until_the_owner_reallocates() -> None:
    m = WorkspaceManager("cpu", 2, growth="deferred-lockstep")
    sanitizer.enable("collect")
    with use_ubatch(1):
        (held,) = m.get_simultaneous(((64,), F32))
    with use_ubatch(0):
        m.get_simultaneous(((1 << 16,), U8))
    with sanitizer.use_sanitizer(), use_ubatch(1):
        held.add_(1)  # still a live view: its slot had no call
        assert sanitizer.findings() == []
        m.get_simultaneous(((8,), F32))  # its safe point: reallocated
        held.add_(1)  # past its lifetime, in a replaced buffer
    assert kinds() == ["orphaned-view"]


# ---------------------------------------------------------------------- bookkeeping


def test_findings_are_deduplicated_counted_and_survive_disable() -> None:
    m = WorkspaceManager("cpu", 2)
    sanitizer.enable("collect")
    with use_ubatch(0):
        (x,) = m.get_simultaneous(((16,), F32))
    with sanitizer.use_sanitizer(), use_ubatch(1):
        for _ in range(5):
            x.fill_(0)
    (f,) = sanitizer.findings()
    assert f.count == 5
    sanitizer.disable()
    assert len(sanitizer.findings()) == 1
    sanitizer.enable("collect")
    assert sanitizer.findings() == []


def test_disabled_sanitizer_sees_nothing_even_inside_an_open_scope() -> None:
    m = WorkspaceManager("cpu", 2)
    sanitizer.enable("collect")
    with use_ubatch(0):
        (x,) = m.get_simultaneous(((16,), F32))
    with sanitizer.use_sanitizer(), use_ubatch(1):
        sanitizer.disable()
        x.fill_(0)
    assert sanitizer.findings() == []


def test_use_sanitizer_with_a_mode_enables_for_the_block() -> None:
    m = WorkspaceManager("cpu", 2)
    with sanitizer.use_sanitizer("collect") as found:
        with use_ubatch(0):
            (x,) = m.get_simultaneous(((16,), F32))
        with sanitizer.use_sanitizer(), use_ubatch(1):
            x.fill_(0)
        assert [f.kind for f in found()] == ["cross-slot"]
    assert not sanitizer.enabled()


# ---------------------------------------------------------------------- the demo model


@pytest.mark.slow
@pytest.mark.parametrize("schedule", ["ll", "ht"])
def test_no_false_positives_on_the_demo_model(schedule) -> None:
    cfg = ModelConfig(layers=2, tokens=64, hidden=64, experts=4, topk=2, head_dim=16, shared_chunk=16)

    def run(sanitized: bool) -> torch.Tensor:
        workspace.reset_workspace_manager()
        workspace.init_workspace_manager("cpu", num_ubatches=2)
        model = ToyMoE(cfg, ModelledLinkTransport("nvlink"), num_ubatches=2, schedule=schedule)
        fn = sanitizer.wrap(model.forward) if sanitized else model.forward
        try:
            with (
                dbo.UBatchOrchestrator(1, backend="virtual", **BOUNDS) as one,
                dbo.UBatchOrchestrator(2, backend="virtual", **BOUNDS) as two,
            ):
                one.run(fn, [range(0, cfg.tokens)])  # warmup without DBO (slot 0 only)
                two.run(fn, dbo.split_tokens(cfg.tokens, 2))
                workspace.lock_workspace()
                two.run(fn, dbo.split_tokens(cfg.tokens, 2))
            return model.hidden.clone()
        finally:
            workspace.reset_workspace_manager()

    plain = run(False)
    sanitizer.enable("raise")
    checked = run(True)
    assert sanitizer.findings() == []
    assert torch.equal(plain, checked), "the sanitizer must not change results"


# ---------------------------------------------------------------------- enable once, see everything


@pytest.mark.parametrize("backend", ["virtual", "inline", "threads"])
def test_enable_alone_checks_ubatch_threads_and_kernels_on_any_thread(backend) -> None:
    """No wrap: the orchestrator runs the ubatch body under the sanitizer, and every kernel body
    is checked on the thread that runs it (threads: the executors), as the launching ubatch."""
    m = WorkspaceManager("cpu", 2)
    views: dict[int, torch.Tensor] = {}
    threads: list[str] = []

    def touch(x: torch.Tensor) -> None:
        threads.append(threading.current_thread().name)
        x.add_(1)

    def body(u: int) -> None:
        (views[u],) = m.get_simultaneous(((64,), F32))
        dbo.dbo_yield()
        if u == 1:
            dbo.launch(touch, views[0], name="touch")  # ubatch 1's kernel on ubatch 0's slot
            views[0].sum()  # and on the host, in ubatch 1's thread
        dbo.dbo_yield()

    sanitizer.enable("collect")
    with dbo.UBatchOrchestrator(2, backend=backend, **BOUNDS) as orch:
        orch.run(body, [0, 1])
    found = sanitizer.findings()
    assert sorted(f.op for f in found) == ["add_.Tensor", "sum.default"]
    assert all(f.kind == "cross-slot" and f.ubatch == 1 and f.owner == 0 for f in found)
    kernel = next(f for f in found if f.op == "add_.Tensor")
    assert kernel.thread == threads[0]
    if backend == "threads":
        assert threads[0].startswith("dbo-stream-")
    sanitizer.disable()
    sanitizer.enable("collect")  # hooks are dropped by disable and put back once by enable
    from dbo.races import hook_counts

    assert hook_counts()["kernel"] == 1 and hook_counts()["ubatch"] == 1


def test_a_kernel_is_judged_as_of_its_launch_on_threads() -> None:
    """threads: a kernel launched before the slot's next call may run after it: not stale (the
    stream orders it before the next call's kernels). One launched after that call: stale."""
    m = WorkspaceManager("cpu", 1)
    gate = threading.Event()

    def wait_gate(_: torch.Tensor) -> None:
        gate.wait(slack(5))

    def fill(x: torch.Tensor) -> None:
        x.fill_(3)

    sanitizer.enable("collect")
    with dbo.get_backend("threads", timeout=slack(10)) as b, use_ubatch(0):
        s = b.new_stream("s")
        (x,) = m.get_simultaneous(((32,), F32))
        s.launch(wait_gate, x)
        s.launch(fill, x, name="early")  # launched while x is live
        (y,) = m.get_simultaneous(((32,), F32))  # same bytes again: x is stale from here on
        s.launch(fill, x, name="late")  # launched through the stale view
        gate.set()
        s.synchronize()
    found = sanitizer.findings()
    assert [f.kind for f in found] == ["stale-view"]
    assert found[0].count == 1  # "late" only (both kernels' fill_ is the same line: one finding)
    assert found[0].thread.startswith("dbo-stream-")


def test_enable_with_races_lists_stream_races_after_workspace_findings() -> None:
    from dbo import races

    m = WorkspaceManager("cpu", 1)
    sanitizer.enable("collect", races=True)
    assert races.enabled()
    with dbo.get_backend("virtual") as b, use_ubatch(0):
        a, c = b.new_stream("a"), b.new_stream("c")
        (x,) = m.get_simultaneous(((32,), F32))
        a.launch(lambda t: t.fill_(1), x, name="w")
        c.launch(lambda t: t.sum(), x, name="r")
    found = sanitizer.findings()
    assert [f.kind for f in found] == ["stream-race"]
    assert found[0].op == "sum.default" and found[0].ubatch == 0 and HERE in found[0].caller
    sanitizer.disable()
    assert not races.enabled() and len(sanitizer.findings()) == 1  # readable until the next enable
    with pytest.raises(workspace.errors.InvalidArgumentError):
        sanitizer.enable("collect", races="yes")
