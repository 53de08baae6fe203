"""UBatchOrchestrator: run one function as N ubatch threads that hand the turn to each other.

One step: build the contexts, spawn one named daemon thread per ubatch, meet them at the start
barrier, give the turn to ubatch 0, wait (bounded) for all of them, synchronize the streams and
return the results in ubatch order. The first failure anywhere aborts the step: every waiter wakes,
every thread unwinds and deregisters, and ``run`` raises ``UBatchFailed`` naming the ubatch, with the
original exception as ``__cause__``. The orchestrator is reusable after a failed step.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from dbo import registry
from dbo._context import StepState, UBatchContext, ubatch_main
from dbo._sites import where_is
from dbo.errors import DBOError, HandoffTimeout, StepHung, UBatchFailed
from dbo.streams import Backend, Stream, current_stream, get_backend, set_stream
from dbo.streams.observer import stream_observer

if TYPE_CHECKING:
    from dbo.capture import CapturedStep

logger = logging.getLogger(__name__)

__all__ = ["UBatchOrchestrator", "StepPlan", "STREAM_LAYOUTS"]

STREAM_LAYOUTS = ("per-ubatch", "shared")


class StepPlan:
    """A step the orchestrator has validated and holds (``UBatchOrchestrator.prepare_step``, or
    ``hold`` for a replay): what ``run`` and ``dbo.capture`` share, and the only way capture and
    replay reach inside the orchestrator (beyond its public attributes).

    ``fn``: the step's function, wrapped by the stream observer's ``wrap_ubatch`` when one is
    installed (None for a hold, which runs none); ``inputs``: one per ubatch (empty for a hold);
    ``streams``: the (compute, comm) pair of each ubatch; ``backend``.
    """

    __slots__ = ("_orch", "fn", "inputs")

    def __init__(self, orch: "UBatchOrchestrator", fn: Callable[[Any], Any] | None = None, inputs: Sequence[Any] = ()):
        self._orch = orch
        self.fn = fn
        self.inputs = list(inputs)

    @property
    def backend(self) -> Backend:
        return self._orch.backend

    @property
    def streams(self) -> list[tuple[Stream, Stream]]:
        return list(self._orch._streams)

    def new_state(
        self, pairs: Sequence[tuple[Stream, Stream]] | None = None, *, host_costs: bool = True, fault_hooks: bool = True
    ) -> StepState:
        """The handoff state of one step, its contexts built: ubatch i on ``pairs[i]`` (default:
        ``streams``) with two new events of the backend. The test seams' primitives apply
        (``dbo.testing``), their fault hook with ``fault_hooks``; ``host_costs``: the backend's
        ``host_event`` is told of handoffs (host costs on the virtual backend)."""
        orch, b, n = self._orch, self._orch.backend, self._orch.num_ubatches
        seams = orch._seams
        pairs = self.streams if pairs is None else pairs
        primitives = None if seams is None else seams.primitives
        step = StepState(n, orch.handoff_timeout, b.tracer, primitives, b.now)
        if host_costs:
            step.host_event = b.host_event  # host costs of handoffs, thread start/join (virtual backend)
        fault_hook = seams.fault_hook if (fault_hooks and seams is not None) else None
        step.contexts = [UBatchContext(i, step, *pairs[i], b.new_event(), b.new_event(), fault_hook) for i in range(n)]
        return step

    def wait_for_threads(self, step: StepState, started: float) -> None:
        """Bounded join of ``step``'s threads, started at ``started`` (``time.monotonic``): the
        orchestrator's step timeout aborts the step, its join grace then bounds the unwinding
        (``StepHung`` past it, after recovering the streams)."""
        self._orch._wait_for_threads(step, started)

    def recover(self) -> None:
        """After a failed step, capture or replay: drop the streams, which may hold sticky errors or
        queued work (a backend the orchestrator made is replaced by a new one)."""
        self._orch._recover_streams()


class UBatchOrchestrator:
    """Runs ``fn(ubatch_inputs[i])`` in ubatch i's thread, N threads passing one turn around a ring.

    ``num_ubatches=1`` runs without DBO: ``fn`` runs in the calling thread, unregistered, so every
    ``dbo_*`` call is a no-op; use it as the reference for output comparisons.

    ``stream_layout``: "per-ubatch" gives each ubatch its own compute and comm streams (default);
    "shared" gives all ubatches one compute and one comm stream, as vLLM does.

    ``handoff_timeout`` bounds every wait for the turn or the start barrier; ``step_timeout`` bounds
    a whole step; ``join_grace`` is how long threads of an aborted step get to unwind before the step
    is declared hung (``StepHung``). Tests reach inside a step through ``dbo.testing.with_seams``
    (fault hook, sync primitives, after-barrier callback), which sets ``_seams``.
    """

    def __init__(
        self,
        num_ubatches: int = 2,
        backend: str | Backend = "auto",
        stream_layout: str = "per-ubatch",
        handoff_timeout: float = 60.0,
        *,
        step_timeout: float | None = 600.0,
        join_grace: float = 10.0,
        tracer: Any = None,
        **backend_options: Any,
    ):
        if isinstance(num_ubatches, bool) or not isinstance(num_ubatches, int):
            raise TypeError(f"num_ubatches must be an int, got {type(num_ubatches).__name__}")
        if num_ubatches < 1:
            raise ValueError(f"num_ubatches must be >= 1, got {num_ubatches}")
        if stream_layout not in STREAM_LAYOUTS:
            raise ValueError(f"stream_layout must be one of {STREAM_LAYOUTS}, got {stream_layout!r}")
        for name, value in (("handoff_timeout", handoff_timeout), ("join_grace", join_grace)):
            if not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
        if step_timeout is not None and (not isinstance(step_timeout, (int, float)) or step_timeout <= 0):
            raise ValueError(f"step_timeout must be a positive number of seconds or None, got {step_timeout!r}")
        self.num_ubatches = num_ubatches
        self.stream_layout = stream_layout
        self.handoff_timeout = float(handoff_timeout)
        self.step_timeout = None if step_timeout is None else float(step_timeout)
        self.join_grace = float(join_grace)
        self._seams: Any = None  # dbo.testing.Seams, installed by dbo.testing.with_seams
        self._backend_spec = backend
        self._backend_options = dict(backend_options)
        if tracer is not None:
            self._backend_options["tracer"] = tracer
        self._owns_backend = isinstance(backend, str)
        self.backend: Backend = get_backend(backend, **self._backend_options) if self._owns_backend else backend
        if not self._owns_backend and tracer is not None:
            self.backend.tracer = tracer
        self._streams = self._make_streams()
        self._running = threading.Lock()
        self.last_step_handoffs = 0
        self.closed = False

    # -- streams ----------------------------------------------------------------------------------
    def _new_stream(self, name: str, role: str) -> Stream:
        """A new ``role`` stream called ``name`` (or ``name#k`` if a stream of that name already exists)."""
        taken = {s.name for s in self.backend.streams}
        k, unique = 1, name
        while unique in taken:
            k += 1
            unique = f"{name}#{k}"
        return self.backend.new_stream(unique, role=role)

    def _make_streams(self) -> list[tuple[Stream, Stream]]:
        if self.stream_layout == "shared" or self.num_ubatches == 1:
            pair = (self._new_stream("compute", "compute"), self._new_stream("comm", "comm"))
            return [pair] * self.num_ubatches
        return [
            (self._new_stream(f"compute{i}", "compute"), self._new_stream(f"comm{i}", "comm"))
            for i in range(self.num_ubatches)
        ]

    def streams(self, ubatch_id: int) -> tuple[Stream, Stream]:
        """The (compute, comm) streams of ubatch ``ubatch_id``."""
        return self._streams[ubatch_id]

    def all_streams(self) -> list[Stream]:
        seen: dict[int, Stream] = {}
        for pair in self._streams:
            for s in pair:
                seen.setdefault(id(s), s)
        return list(seen.values())

    @property
    def tracer(self) -> Any:
        return self.backend.tracer

    def synchronize(self) -> None:
        """Wait for every stream of this orchestrator (bounded by the backend's timeout)."""
        for s in self.all_streams():
            s.synchronize()

    def _recover_streams(self) -> None:
        """After a failed step: drop streams that may hold sticky errors or queued work."""
        if self._owns_backend:
            tracer = self.backend.tracer
            self.backend.close()
            self.backend = get_backend(self._backend_spec, **self._backend_options)
            self.backend.tracer = tracer
        self._streams = self._make_streams()

    # -- lifecycle --------------------------------------------------------------------------------
    def close(self) -> None:
        """Close the backend (if this orchestrator created it): on threads, its executor and watchdog
        threads stop. Idempotent."""
        if not self.closed:
            self.closed = True
            if self._owns_backend:
                self.backend.close()

    def __enter__(self) -> "UBatchOrchestrator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- one step ---------------------------------------------------------------------------------
    def run(self, fn: Callable[[Any], Any], ubatch_inputs: Sequence[Any]) -> list[Any]:
        """Run one step; return ``[fn(ubatch_inputs[i]) for i]`` computed in ubatch threads.

        Streams are synchronized before returning, so results may be read at once.
        """
        with self.prepare_step(fn, ubatch_inputs) as plan:
            if self.num_ubatches == 1:
                return self._run_single(plan.fn, plan.inputs[0])
            return self._run_threads(plan)

    @contextlib.contextmanager
    def prepare_step(
        self, fn: Callable[[Any], Any], ubatch_inputs: Sequence[Any], *, action: str = "run"
    ) -> Iterator[StepPlan]:
        """Validate one step of ``fn`` over ``ubatch_inputs`` and hold the orchestrator for it; yield
        its ``StepPlan``. ``run`` and ``capture`` (``dbo.capture``) both start here, so they refuse
        the same things: DBOError when closed, TypeError for an ``fn`` that is not callable,
        ValueError for a number of inputs other than ``num_ubatches``, and ``hold``'s refusals.
        ``action`` ("run", "capture") names the caller in those messages."""
        if self.closed:
            raise DBOError("this UBatchOrchestrator is closed")
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        inputs = list(ubatch_inputs)
        if len(inputs) != self.num_ubatches:
            raise ValueError(f"expected {self.num_ubatches} ubatch inputs, got {len(inputs)}")
        with self.hold(f"UBatchOrchestrator.{action}") as plan:
            observer = stream_observer()
            plan.fn = fn if observer is None else observer.wrap_ubatch(fn)  # dbo.races: sanitizers wrap the body
            plan.inputs = inputs
            yield plan

    @contextlib.contextmanager
    def hold(self, what: str) -> Iterator[StepPlan]:
        """Hold the orchestrator for ``what`` (a step, a capture, a replay: one at a time), yielding
        a ``StepPlan`` that runs no function. DBOError from inside a ubatch thread (steps do not
        nest) or while another thread holds it."""
        if registry.dbo_enabled():
            raise DBOError(f"{what} called from inside a ubatch thread; steps do not nest")
        if not self._running.acquire(blocking=False):
            raise DBOError("this UBatchOrchestrator is already running a step in another thread")
        try:
            yield StepPlan(self)
        finally:
            self._running.release()

    def _run_single(self, fn: Callable[[Any], Any], inp: Any) -> list[Any]:
        after_barrier = None if self._seams is None else self._seams.after_barrier
        compute, _ = self._streams[0]
        previous = current_stream()
        set_stream(compute)
        try:
            if after_barrier is not None:
                after_barrier()
            out = fn(inp)
            self.synchronize()
        except BaseException as exc:
            set_stream(previous)
            self._recover_streams()
            raise UBatchFailed(f"ubatch 0 of 1 failed: {type(exc).__name__}: {exc}", 0) from exc
        set_stream(previous)
        self.last_step_handoffs = 0
        return [out]

    def _run_threads(self, plan: StepPlan) -> list[Any]:
        n = self.num_ubatches
        seams = self._seams
        fault_hook = None if seams is None else seams.fault_hook
        after_barrier = None if seams is None else seams.after_barrier
        step = plan.new_state()
        b = self.backend
        results: list[Any] = [None] * n
        step.threads = [
            threading.Thread(
                target=ubatch_main,
                args=(step.contexts[i], plan.fn, plan.inputs[i], results),
                name=f"dbo-ubatch-{i}",
                daemon=True,
            )
            for i in range(n)
        ]
        started = time.monotonic()
        try:
            for t in step.threads:
                b.host_event("thread_start")
                t.start()
            try:
                step.barrier.wait()
            except threading.BrokenBarrierError:
                if not step.aborted:
                    step.abort(
                        None,
                        HandoffTimeout(
                            f"the start barrier was not reached within {self.handoff_timeout:g} s; "
                            + step.describe_parked(),
                            step.parked(),
                        ),
                    )
            else:
                if fault_hook is not None:
                    fault_hook("after_barrier", None)
                if after_barrier is not None:
                    after_barrier()
                step.give_turn(0)
        except BaseException as exc:  # the orchestrator itself failed (or was interrupted)
            step.abort(None, exc)
            step.release_unstarted()  # interrupted while starting them: no wait for those never started
        try:
            self._wait_for_threads(step, started)
        except StepHung:
            raise
        except BaseException as exc:  # e.g. Ctrl-C in this thread: end the step before leaving
            step.abort(None, exc)
            step.all_done.wait(self.join_grace)
            self._recover_streams()
            raise
        self.last_step_handoffs = step.handoffs
        if step.failure is not None:
            self._recover_streams()
            uid, exc = step.failure
            # The exception's traceback holds ubatch_main's frame, which holds the step, which holds
            # the exception: a cycle that would keep the failed ubatch's tensors (workspace views
            # included) alive until the cyclic GC runs. Break it now.
            step.failure = None
            step.contexts = []
            step.threads = []
            who = "the orchestrator" if uid is None else f"ubatch {uid} of {n}"
            raise UBatchFailed(f"{who} failed: {type(exc).__name__}: {exc}", uid) from exc
        try:
            self.synchronize()
        except BaseException as exc:
            self._recover_streams()
            raise UBatchFailed(f"a stream of the step failed: {type(exc).__name__}: {exc}", None) from exc
        return results

    # -- capture and replay (dbo/capture/_step.py) ------------------------------------------------
    def capture(self, fn: Callable[[Any], Any], ubatch_inputs: Sequence[Any]) -> "CapturedStep":
        """Run one step while capturing it; return a ``CapturedStep`` whose ``replay()`` re-runs it
        on the same static tensors without ubatch threads, handoffs or model Python. A host sync
        during the capture raises ``CaptureError``; it refuses what ``run`` refuses
        (``prepare_step``). See docs/capture.md."""
        from dbo.capture import capture_step

        return capture_step(self, fn, ubatch_inputs)

    def _wait_for_threads(self, step: StepState, started: float) -> None:
        """Bounded join: wait for all threads; past the step timeout abort; past the grace, StepHung."""
        aborted_at: float | None = None
        while not step.all_done.is_set():
            now = time.monotonic()
            if step.aborted and aborted_at is None:
                aborted_at = now
            if aborted_at is None and self.step_timeout is not None and now - started > self.step_timeout:
                step.abort(
                    None,
                    HandoffTimeout(
                        f"the step ran longer than step_timeout={self.step_timeout:g} s; " + step.describe_parked(),
                        step.parked(),
                    ),
                )
                continue
            if aborted_at is not None and now - aborted_at > self.join_grace:
                live = [f"{t.name} at {where_is(t)}" for t in step.threads if t.is_alive()]
                uid, cause = step.failure if step.failure else (None, None)
                err = StepHung(
                    f"{len(live)} ubatch thread(s) did not finish within {self.join_grace:g} s after the step "
                    f"was aborted: " + "; ".join(live),
                    live,
                )
                self._recover_streams()
                raise err from cause
            step.all_done.wait(0.1 if aborted_at is None else 0.02)
        for t in step.threads:  # they have all returned from their target; reap them
            if t.ident is None:  # never started (release_unstarted)
                continue
            t.join(self.join_grace)
            self.backend.host_event("thread_join")
