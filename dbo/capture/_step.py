"""Capture one DBO step and replay it without ubatch threads, handoffs or model Python.

``UBatchOrchestrator.capture(fn, ubatch_inputs)`` runs the step once, as ``run`` would, while
recording it; ``CapturedStep.replay()`` re-runs it on the same static tensors. See docs/capture.md.

* CPU backends (threads, virtual, inline): the contexts get recording proxies of the real streams
  and events (``dbo.capture._guard``); the backend's ``new_event`` / ``stream`` / ``new_stream``
  hand out proxies too while the capture runs, and the real streams refuse direct use. The replay
  re-issues the recorded launches, event records and waits, in order, on the same real streams,
  from the calling thread, then synchronizes.
* cuda: a real ``torch.cuda.CUDAGraph`` (``dbo.capture._cuda``); the replay is ``graph.replay()``.
* Everywhere: a host sync during the capture raises ``CaptureError`` naming the op and the user's
  ``file:line``; the global workspace manager (if any) is locked while the capture runs.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from typing import Any, Callable, Iterator, Sequence

from dbo._context import UBatchContext, ubatch_main
from dbo._sites import user_site
from dbo.capture._guard import HostSyncGuard, Recorder, RecordingEvent, RecordingStream
from dbo.errors import CaptureError, DBOError, HandoffTimeout, StepHung, UBatchFailed
from dbo.streams import Stream, use_stream

_STREAM_OPS = ("launch", "wait_event", "synchronize", "query")


class CapturedStep:
    """A captured step. ``replay()`` re-runs it and returns ``outputs`` (the objects ``fn`` returned
    at capture, now holding the replay's values); ``close()`` frees it (idempotent).

    ``num_kernels``: kernels launched by the step; ``num_ops``: kernels, event records and waits.
    A replay holds its orchestrator as a step does (``UBatchOrchestrator.hold``).
    """

    def __init__(self, orch: Any, outputs: list[Any], ops: list[tuple], region: Any = None):
        self._orch = orch
        self._backend = orch.backend
        self.outputs = outputs
        self._ops = ops
        self._region = region  # cuda: the CudaRegion holding the graph
        self._graph = region.graph if region is not None else None
        self._streams = _streams_of(ops)
        self.num_kernels = sum(1 for op in ops if op[0] == "launch")
        self.num_ops = len(ops)
        self.closed = False

    def __repr__(self) -> str:
        state = " closed" if self.closed else ""
        kind = "cuda graph" if self._graph is not None else "recorded"
        return f"<CapturedStep {kind} {self._backend.name}: {self.num_kernels} kernels, {self.num_ops} ops{state}>"

    def replay(self, *, sync: bool = True) -> list[Any]:
        """Re-run the step; with ``sync`` (default) wait for it before returning ``outputs``."""
        if self.closed:
            raise DBOError("replay of a closed CapturedStep; capture the step again")
        orch = self._orch
        if orch.closed or self._backend is not orch.backend or self._backend.closed:
            raise DBOError(
                "replay of a CapturedStep whose orchestrator was closed or replaced its streams after a "
                "failed step; capture the step again"
            )
        with orch.hold("CapturedStep.replay") as plan:
            b = self._backend
            tr = b.tracer if (b.tracer is not None and b.tracer.enabled) else None
            t0 = b.now() if tr is not None else 0.0
            hook = getattr(b, "on_graph_replay", None)  # the virtual backend's host-time model, if any
            cm = hook() if hook is not None else None
            try:
                with cm if cm is not None else contextlib.nullcontext():
                    self._issue()
                if sync and self._region is not None:
                    self._region.replay_sync()
                elif sync:
                    for s in self._streams:
                        s.synchronize()
            except BaseException as exc:
                self.close()
                plan.recover()
                raise UBatchFailed(f"replay of a captured step failed: {type(exc).__name__}: {exc}", None) from exc
            if tr is not None:
                tr.span("main", "replay", t0, b.now(), kernels=self.num_kernels)
            return self.outputs

    def _issue(self) -> None:
        if self._graph is not None:
            self._graph.replay()
            return
        for op in self._ops:
            tag = op[0]
            if tag == "launch":
                _, s, fn, args, spec = op
                s.launch(fn, *args, **spec._asdict())  # every field of the recorded KernelSpec
            elif tag == "record":
                op[1].record(op[2])
            else:
                op[1].wait_event(op[2])

    def close(self) -> None:
        """Free the graph (cuda) or the recorded ops. Idempotent."""
        if not self.closed:
            self.closed = True
            self._ops = []
            if self._graph is not None:
                reset = getattr(self._graph, "reset", None)
                if reset is not None:
                    reset()
                self._graph = None
                self._region = None

    def __enter__(self) -> "CapturedStep":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _streams_of(ops: list[tuple]) -> list[Stream]:
    seen: dict[int, Stream] = {}
    for op in ops:
        s = op[1] if op[0] in ("launch", "wait") else op[2]
        seen.setdefault(id(s), s)
    return list(seen.values())


# --- the capture ---------------------------------------------------------------------------------


def capture_step(orch: Any, fn: Callable[[Any], Any], ubatch_inputs: Sequence[Any]) -> CapturedStep:
    """Capture one step of ``orch`` (see ``UBatchOrchestrator.capture``): it is validated and held
    as ``run``'s is (``UBatchOrchestrator.prepare_step``)."""
    with orch.prepare_step(fn, ubatch_inputs, action="capture") as plan:
        return _capture(orch, plan)


def _capture(orch: Any, plan: Any) -> CapturedStep:
    """Capture the step ``plan`` (a ``dbo.orchestrator.StepPlan`` that ``orch`` holds) describes."""
    b = plan.backend
    is_cuda = b.name == "cuda"
    rec = Recorder(b)
    tr = b.tracer if (b.tracer is not None and b.tracer.enabled) else None
    t0 = b.now() if tr is not None else 0.0
    region: Any = None
    try:
        with _workspace_locked(), _patched_backend(b, rec, guard_launches=not is_cuda):
            if is_cuda:
                from dbo.capture._cuda import CudaRegion

                region = CudaRegion(b)
                rec.on_new_stream = region.fork
            pairs = [(rec.stream(c), rec.stream(m)) for c, m in plan.streams]
            outputs = _drive(orch, plan, pairs, rec, region)
            rec.active = False
        orch.synchronize()  # raises a kernel's failure (sticky), e.g. a host sync refused inside it
        for s in _streams_of(rec.ops):
            s.synchronize()
        if region is not None:
            region.synchronize()  # run the graph once: the outputs hold the step's values
    except BaseException as exc:
        rec.active = False
        plan.recover()
        _clear_refusals(b)
        _raise_translated(exc)
        raise
    finally:
        rec.active = False
    if tr is not None:
        tr.span("main", "capture", t0, b.now(), kernels=sum(1 for op in rec.ops if op[0] == "launch"))
    return CapturedStep(orch, outputs, rec.ops, region)


def _drive(orch: Any, plan: Any, pairs: list, rec: Recorder, region: Any) -> list[Any]:
    """Run the step once with the recording streams; ``region`` (cuda) brackets the device work."""
    n, fn, inputs = orch.num_ubatches, plan.fn, plan.inputs
    enter = region.enter if region is not None else contextlib.nullcontext
    replay_kind = None if region is not None else orch.backend.name  # CPU: host-side writes are refused
    if n == 1:
        try:
            with enter(), use_stream(pairs[0][0]), HostSyncGuard(replay_kind):
                return [fn(inputs[0])]
        except BaseException as exc:
            raise UBatchFailed(f"capture: ubatch 0 of 1 failed: {type(exc).__name__}: {exc}", 0) from exc
    # the test seams' sync primitives apply; the events are recording events (the backend is patched)
    step = plan.new_state(pairs, host_costs=False, fault_hooks=False)
    results: list[Any] = [None] * n
    prelude = region.thread_prelude if region is not None else None
    step.threads = [
        threading.Thread(
            target=_capture_main,
            args=(step.contexts[i], fn, inputs[i], results, prelude, replay_kind),
            name=f"dbo-capture-{i}",
            daemon=True,
        )
        for i in range(n)
    ]
    started = time.monotonic()
    try:
        for t in step.threads:
            t.start()
        step.barrier.wait()
    except threading.BrokenBarrierError:
        if not step.aborted:
            msg = f"the start barrier was not reached within {orch.handoff_timeout:g} s"
            step.abort(None, HandoffTimeout(msg, step.parked()))
    except BaseException as exc:  # Ctrl-C while starting the threads or at the barrier: end the step
        step.abort(None, exc)
        step.release_unstarted()
    else:
        try:
            with enter():
                step.give_turn(0)
                if not step.all_done.wait(orch.step_timeout):
                    msg = f"the capture ran longer than step_timeout={orch.step_timeout} s"
                    raise HandoffTimeout(msg, step.parked())
        except BaseException as exc:
            step.abort(None, exc)
    try:
        plan.wait_for_threads(step, started)
    except StepHung:
        raise
    except BaseException as exc:  # Ctrl-C in this thread while it waits: end the step before leaving
        step.abort(None, exc)
        step.all_done.wait(orch.join_grace)
        raise
    if step.failure is not None:
        uid, exc = step.failure
        step.failure, step.contexts, step.threads = None, [], []
        who = "the orchestrator" if uid is None else f"ubatch {uid} of {n}"
        raise UBatchFailed(f"capture: {who} failed: {type(exc).__name__}: {exc}", uid) from exc
    return results


def _capture_main(
    ctx: UBatchContext, fn: Callable, inp: Any, results: list, prelude: Callable | None, replay_kind: str | None
) -> None:
    """A ubatch thread of a capture: the backend's prelude (cuda: device, cuBLAS) before the
    barrier, then the usual ubatch body under the host-sync guard."""

    if prelude is not None:
        try:
            prelude()
        except BaseException as exc:
            ctx.step.abort(ctx.id, exc)
            ctx.step.mark_done()
            return
    with HostSyncGuard(replay_kind):
        ubatch_main(ctx, fn, inp, results)


@contextlib.contextmanager
def _patched_backend(b: Any, rec: Recorder, *, guard_launches: bool) -> Iterator[None]:
    """While capturing: the backend hands out recording proxies, and its real streams refuse to be
    used directly (CPU backends: their work would be missing from the replay; everywhere: a
    synchronize or query is a host sync)."""
    cls = type(b)
    patched: list[Stream] = []

    def guard(s: Stream) -> None:
        for op in _STREAM_OPS if guard_launches else ("synchronize", "query"):
            setattr(s, op, _direct_use_refusal(s, op, rec))
        patched.append(s)

    def new_stream(name: str | None = None, role: str = "compute") -> RecordingStream:
        s = cls.new_stream(b, name, role)
        if rec.active:
            guard(s)
            if rec.on_new_stream is not None:
                rec.on_new_stream(s)
        return rec.stream(s)

    b.new_event = lambda: RecordingEvent(cls.new_event(b), rec)
    b.stream = lambda name, role=None: rec.stream(cls.stream(b, name, role))
    b.new_stream = new_stream

    def synchronize() -> None:  # a backend may sync without its streams' methods (virtual does)
        if rec.active:
            rec.refuse("Backend.synchronize()")
        cls.synchronize(b)

    b.synchronize = synchronize
    for s in b.streams:
        guard(s)
    try:
        yield
    finally:
        for attr in ("new_event", "stream", "new_stream", "synchronize"):
            b.__dict__.pop(attr, None)
        for s in patched:
            for op in _STREAM_OPS:
                s.__dict__.pop(op, None)


def _direct_use_refusal(s: Stream, op: str, rec: Recorder) -> Callable:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        if not rec.active:
            return getattr(type(s), op)(s, *args, **kwargs)
        if op in ("synchronize", "query"):
            rec.refuse(f"Stream.{op}() of stream {s.name!r}")
        raise CaptureError(
            f"stream {s.name!r} was used directly during capture ({op} at {user_site()}): its work would be "
            f"missing from the replay; inside a captured step use dbo.current_stream() or backend.stream(name)"
        )

    return refuse


@contextlib.contextmanager
def _workspace_locked() -> Iterator[None]:
    """Lock the global workspace manager (if one is initialized) for the capture; restore after."""
    mod = sys.modules.get("workspace")  # dbo never imports workspace; use it only if it is loaded
    manager = None
    if mod is not None and mod.is_workspace_manager_initialized():
        manager = mod.current_workspace_manager()
    was_locked = manager is None or manager.is_locked()
    if not was_locked:
        manager.lock()
    try:
        yield
    finally:
        if not was_locked:
            manager.unlock()


def _clear_refusals(b: Any) -> None:
    """After a refused capture: streams of ``b`` that failed only because a kernel was refused (a
    host sync during capture) are drained and made usable again. The orchestrator replaces its own
    streams, but a backend it does not own (shared, as in the demo) keeps the others, such as a
    transport's own comm stream fetched by name; a real failure stays sticky."""
    for s in b.streams:
        if s.error is None or not _is_refusal(s.error):
            continue
        try:
            s.synchronize()  # let the skipped tail drain; it raises the sticky error
        except Exception:  # that error; a KeyboardInterrupt landing here goes on (it ends the command)
            pass
        s._error = None
        s._error_note = ""


def _is_refusal(exc: BaseException) -> bool:
    try:
        _raise_translated(exc)
    except CaptureError:
        return True
    return False


def _raise_translated(exc: BaseException) -> None:
    """Raise the CaptureError behind ``exc`` (a host sync, a locked-workspace allocation), if any.

    Both links of every exception are followed (``__cause__`` and ``__context__``): a sibling's
    failure can wrap the refusal on one link while the other leads elsewhere."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        e = todo.pop(0)
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, CaptureError):
            raise CaptureError(str(e)) from exc
        if type(e).__name__ == "WorkspaceLockedError":
            where = getattr(e, "caller", None) or "<unknown>"
            raise CaptureError(f"host sync during capture: workspace allocation at {where}: {e}") from exc
        todo.extend(x for x in (e.__cause__, e.__context__) if x is not None)
