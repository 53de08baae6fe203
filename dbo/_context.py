"""Per-step handoff state and per-ubatch contexts.

One ``StepState`` per DBO step holds the turn token, the abort flag and the first failure. Each
ubatch thread has a ``UBatchContext``: its id, its compute and comm streams, its done-events and
the recv hook parked on it. Exactly one ubatch thread holds the turn at a time; the turn moves only
at yield points and at exit (see docs/protocol.md).

The turn is a ring of ``threading.Lock`` objects, one per ubatch, held ("locked") while that
ubatch must not run. Passing the turn to ubatch j releases lock j; waiting for one's turn acquires
one's own lock with a timeout. That is the cost of a bare two-lock ping-pong and nothing more:
abort-safety comes from ``abort()`` releasing every lock (so every waiter wakes at once and sees the
flag), not from polling.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from dbo import registry
from dbo._sites import where_is
from dbo.errors import DBOError, HandoffTimeout, RecvHookConflict, UBatchAborted
from dbo.streams import Event, Stream, current_stream, set_stream
from dbo.trace import ubatch_track

FaultHook = Callable[[str, "int | None"], None]
"""Test seam: called as ``hook(point, ubatch_id)`` at "enter", "start", "exit" and "after_barrier"."""


class SyncPrimitives:
    """Factory of the blocking primitives a step uses: the turn locks and the start barrier.

    The default is plain ``threading``. A test can pass its own (for example a controlled scheduler
    that decides which runnable thread proceeds) to ``UBatchOrchestrator(primitives=...)``. A lock
    must support ``acquire(timeout=...)`` and ``release()`` from another thread; a barrier
    ``wait()`` and ``abort()`` with ``threading.BrokenBarrierError`` semantics.
    """

    def lock(self) -> Any:
        return threading.Lock()

    def barrier(self, parties: int, timeout: float) -> Any:
        return threading.Barrier(parties, timeout=timeout)


THREADING = SyncPrimitives()


class StepState:
    """Shared state of one DBO step: the turn ring, the start barrier, the abort flag, the first failure."""

    host_event: Callable[[str], None] = staticmethod(lambda what: None)  # the backend's (set by the orchestrator)

    def __init__(
        self,
        num_ubatches: int,
        timeout: float,
        tracer: Any = None,
        primitives: SyncPrimitives | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ):
        prims = primitives if primitives is not None else THREADING
        self.num_ubatches = num_ubatches
        self.timeout = timeout
        self.tracer = tracer if (tracer is not None and tracer.enabled) else None
        self.clock = clock  # the backend's clock, so host spans line up with the stream tracks
        self.barrier = prims.barrier(num_ubatches + 1, timeout)
        self._turn = [prims.lock() for _ in range(num_ubatches)]
        for lock in self._turn:
            lock.acquire()
        self.holder: int | None = None  # ubatch that holds the turn
        self.exited = [False] * num_ubatches
        self.contexts: list[UBatchContext] = []
        self.threads: list[threading.Thread] = []
        self.aborted = False
        self.failure: tuple[int | None, BaseException] | None = None
        self._abort_lock = threading.Lock()
        self.all_done = threading.Event()
        self._done_count = 0
        self._done_lock = threading.Lock()
        self.handoffs = 0
        self._run_since = [0.0] * num_ubatches
        self._next = [(i + 1) % num_ubatches for i in range(num_ubatches)]  # ring over live ubatches

    # -- the turn ---------------------------------------------------------------------------------
    def give_turn(self, ubatch_id: int) -> None:
        """Hand the turn to ``ubatch_id`` (wakes it)."""
        self.holder = ubatch_id
        try:
            self._turn[ubatch_id].release()
        except RuntimeError:  # already released by abort(): the waiter is awake anyway
            pass

    def wait_turn(self, ubatch_id: int) -> None:
        """Block until ``ubatch_id`` holds the turn; raise on abort or after ``timeout`` seconds."""
        if self.aborted:
            raise UBatchAborted(f"ubatch {ubatch_id}: step aborted")
        acquired = self._turn[ubatch_id].acquire(True, self.timeout)
        if not acquired or self.aborted or self.holder != ubatch_id:
            self._bad_wake(ubatch_id, acquired)
        if self.tracer is not None:
            self._run_since[ubatch_id] = self.clock()

    def _bad_wake(self, ubatch_id: int, acquired: bool) -> None:
        """A wait for the turn ended without a clean turn: abort, timeout or a broken invariant.

        Raises, except when the turn arrived just as the wait timed out (then it takes the turn).
        """
        if self.aborted:
            raise UBatchAborted(f"ubatch {ubatch_id}: step aborted")
        if acquired:
            raise DBOError(f"handoff invariant broken: ubatch {ubatch_id} woke but the turn is with {self.holder}")
        if self.holder == ubatch_id and self._turn[ubatch_id].acquire(True, 1.0):
            if self.aborted:
                raise UBatchAborted(f"ubatch {ubatch_id}: step aborted")
            return
        err = HandoffTimeout(
            f"ubatch {ubatch_id} waited {self.timeout:g} s for its turn; " + self.describe_parked(),
            self.parked(),
        )
        self.abort(ubatch_id, err)
        raise err

    def next_live(self, ubatch_id: int) -> int:
        """The next ubatch after ``ubatch_id`` around the ring that has not exited (itself if none)."""
        n = self.num_ubatches
        for k in range(1, n):
            j = (ubatch_id + k) % n
            if not self.exited[j]:
                return j
        return ubatch_id

    def _trace_handoff(self, src: int, dst: int, reason: str) -> None:
        tr = self.tracer
        now = self.clock()
        tr.span(ubatch_track(src), reason, self._run_since[src], now, ubatch=src)
        tr.handoff(src, dst, now, now)

    def mark_exited(self, ubatch_id: int) -> None:
        """Take ``ubatch_id`` out of the ring (called by the turn holder at its exit)."""
        self.exited[ubatch_id] = True
        self._next = [self.next_live(i) for i in range(self.num_ubatches)]

    def pass_turn(self, ubatch_id: int, reason: str) -> int:
        """Give the turn from ``ubatch_id`` to the next live ubatch; return who got it (-1: nobody)."""
        nxt = self._next[ubatch_id]
        if nxt == ubatch_id:
            if not self.exited[ubatch_id]:
                return ubatch_id
            if self.tracer is not None:  # the last ubatch to exit: close its host span
                self.tracer.span(
                    ubatch_track(ubatch_id), reason, self._run_since[ubatch_id], self.clock(), ubatch=ubatch_id
                )
            return -1
        self.handoffs += 1
        self.host_event("yield")  # host cost of the handoff (virtual backend)
        if self.tracer is not None:
            self._trace_handoff(ubatch_id, nxt, reason)
        self.give_turn(nxt)
        return nxt

    def yield_turn(self, ubatch_id: int) -> None:
        """Pass the turn on and wait for it to come back. A no-op when no other ubatch is live.

        This is the hot path of every yield: the release of the next lock is followed at once by
        the acquire of our own, so the woken thread does not wait for the GIL.
        """
        if self.aborted:
            raise UBatchAborted(f"ubatch {ubatch_id}: step aborted")
        nxt = self._next[ubatch_id]
        if nxt == ubatch_id:
            return
        self.handoffs += 1
        self.host_event("yield")  # host cost of the handoff (virtual backend)
        if self.tracer is not None:
            self._trace_handoff(ubatch_id, nxt, "run")
        self.holder = nxt
        try:
            self._turn[nxt].release()
        except RuntimeError:  # already released by abort()
            pass
        acquired = self._turn[ubatch_id].acquire(True, self.timeout)
        if not acquired or self.aborted or self.holder != ubatch_id:
            self._bad_wake(ubatch_id, acquired)
        if self.tracer is not None:
            self._run_since[ubatch_id] = self.clock()

    # -- failure ----------------------------------------------------------------------------------
    def abort(self, ubatch_id: int | None, exc: BaseException) -> None:
        """Record the first failure, set the abort flag, and wake every waiter (barrier and turns)."""
        with self._abort_lock:
            if self.failure is None:
                self.failure = (ubatch_id, exc)
            self.aborted = True
        self.barrier.abort()
        for lock in self._turn:
            try:
                lock.release()
            except RuntimeError:
                pass

    def mark_done(self) -> None:
        with self._done_lock:
            self._done_count += 1
            if self._done_count == self.num_ubatches:
                self.all_done.set()

    def release_unstarted(self) -> None:
        """After a failure in the loop that starts the threads (Ctrl-C lands there too): count each
        thread that never started as done, since it never will mark itself (else the step's join
        waits for it until the join grace runs out, and raises StepHung). A thread is started once
        ``start()`` has handed it to the OS: it is then listed by ``threading.enumerate()`` (before
        it runs) or has an ident (after), and it ends on the abort by itself."""
        alive = set(threading.enumerate())
        for t in self.threads:
            if t.ident is None and t not in alive:
                self.mark_done()

    def parked(self) -> dict[int, str]:
        """Where each ubatch thread is now (for timeout messages)."""
        out = {}
        for i, t in enumerate(self.threads):
            state = "holds the turn" if self.holder == i else "waiting"
            out[i] = f"{state}, at {where_is(t)}"
        return out

    def describe_parked(self) -> str:
        return "; ".join(f"ubatch {i}: {w}" for i, w in self.parked().items())


class UBatchContext:
    """What one ubatch thread needs during a step: id, streams, done-events, pending recv hook."""

    __slots__ = (
        "id",
        "step",
        "compute_stream",
        "comm_stream",
        "compute_done",
        "comm_done",
        "recv_hook",
        "recv_hook_from",
        "fault_hook",
    )

    def __init__(
        self,
        ubatch_id: int,
        step: StepState,
        compute_stream: Stream,
        comm_stream: Stream,
        compute_done: Event,
        comm_done: Event,
        fault_hook: FaultHook | None = None,
    ):
        self.id = ubatch_id
        self.step = step
        self.compute_stream = compute_stream
        self.comm_stream = comm_stream
        self.compute_done = compute_done
        self.comm_done = comm_done
        self.recv_hook: Callable[[], Any] | None = None
        self.recv_hook_from: int | None = None  # the ubatch that registered ``recv_hook``
        self.fault_hook = fault_hook

    def __repr__(self) -> str:
        return f"UBatchContext(id={self.id}, of={self.step.num_ubatches})"

    # -- entering and leaving ---------------------------------------------------------------------
    def enter(self) -> None:
        """Register, meet the others at the start barrier, wait for the turn, start on the compute stream."""
        registry.register(self.id, self)
        if self.fault_hook is not None:
            self.fault_hook("enter", self.id)
        try:
            self.step.barrier.wait()
        except threading.BrokenBarrierError:
            if self.step.aborted:
                raise UBatchAborted(f"ubatch {self.id}: step aborted before start") from None
            raise HandoffTimeout(
                f"ubatch {self.id} waited {self.step.timeout:g} s at the start barrier; " + self.step.describe_parked(),
                self.step.parked(),
            ) from None
        self.step.wait_turn(self.id)
        set_stream(self.compute_stream)
        if self.fault_hook is not None:
            self.fault_hook("start", self.id)

    def exit(self) -> None:
        """Normal exit: run the recv hook parked here, then hand the turn on (caller unregisters)."""
        if self.fault_hook is not None:
            self.fault_hook("exit", self.id)
        self.maybe_run_recv_hook()
        self.step.mark_exited(self.id)
        self.step.pass_turn(self.id, "run")

    # -- turn passing with stream actions -------------------------------------------------------------
    def check_stream(self, expected: Stream, api: str) -> None:
        cur = current_stream()
        if cur is not expected:
            raise DBOError(
                f"{api}: ubatch {self.id} must be on its {expected.name!r} stream, but its current stream is "
                f"{getattr(cur, 'name', cur)!r}"
            )

    def switch_sync(self, src: Stream, dst: Stream, done: Event) -> None:
        """Record ``done`` on ``src``, make ``dst`` current and make it wait for ``done``."""
        done.record(src)
        set_stream(dst)
        dst.wait_event(done)

    def yield_and_switch(self, src: Stream, dst: Stream, done: Event, api: str) -> None:
        """Record ``done`` on ``src`` *before* yielding, then switch to ``dst`` and wait for it.

        Recording before the yield makes the event cover exactly this ubatch's work; recording it
        after would also cover the sibling's work and serialize the streams (vllm#38451).
        """
        self.check_stream(src, api)
        done.record(src)
        self.step.yield_turn(self.id)
        set_stream(dst)
        dst.wait_event(done)

    # -- recv hooks -------------------------------------------------------------------------------
    def register_recv_hook(self, hook: Callable[[], Any]) -> None:
        """Park ``hook`` on the next ubatch's context; it runs there at its next hook site or exit.

        If the next ubatch has already exited (or this is the only live ubatch), nobody would ever run
        it, so it runs at once in this thread.
        """
        if not callable(hook):
            raise TypeError(f"recv hook must be callable, got {type(hook).__name__}")
        step = self.step
        nxt = (self.id + 1) % step.num_ubatches
        target = step.contexts[nxt]
        if step.exited[nxt] or target is self:
            with registry.acting_for(self.id):
                hook()
            return
        if target.recv_hook is not None:
            raise RecvHookConflict(
                f"ubatch {self.id} registered a recv hook on ubatch {nxt}, which still holds a pending one "
                f"({getattr(target.recv_hook, '__name__', target.recv_hook)!r}); run it with "
                f"dbo_maybe_run_recv_hook() before registering another"
            )
        target.recv_hook = hook
        target.recv_hook_from = self.id

    def maybe_run_recv_hook(self) -> None:
        """Run (and clear) the hook parked here, acting for the ubatch that registered it."""
        hook = self.recv_hook
        if hook is not None:
            registrar = self.recv_hook_from
            self.recv_hook = None
            self.recv_hook_from = None
            with registry.acting_for(registrar):
                hook()


def ubatch_main(ctx: UBatchContext, fn: Callable[[Any], Any], inp: Any, results: list[Any]) -> None:
    """Body of a ubatch thread: enter, run ``fn``, exit; on any failure abort the step."""
    step = ctx.step
    try:
        try:
            ctx.enter()
            results[ctx.id] = fn(inp)
            ctx.exit()
        finally:
            if registry.dbo_enabled():
                registry.unregister()
            set_stream(None)
    except UBatchAborted:
        if not step.aborted:  # raised by user code, not by an abort: treat it as a failure
            step.abort(ctx.id, UBatchAborted(f"ubatch {ctx.id} raised UBatchAborted outside an abort"))
    except BaseException as exc:
        step.abort(ctx.id, exc)
    finally:
        step.mark_done()
