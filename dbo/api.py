"""The ``dbo_*`` free functions, with vLLM's names and meanings.

Each looks up the calling thread's ubatch context in the registry. Outside a DBO step (the caller
is not a registered ubatch thread) every one of them is a no-op, so the same model code runs with
and without DBO. See docs/protocol.md for the table of what each does.
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from dbo import registry
from dbo.streams import set_stream, use_stream

__all__ = [
    "dbo_enabled",
    "dbo_current_ubatch_id",
    "dbo_num_ubatches",
    "dbo_yield",
    "dbo_yield_and_switch_from_compute_to_comm",
    "dbo_yield_and_switch_from_comm_to_compute",
    "dbo_switch_to_comm",
    "dbo_switch_to_compute",
    "dbo_switch_to_comm_sync",
    "dbo_switch_to_compute_sync",
    "dbo_register_recv_hook",
    "dbo_maybe_run_recv_hook",
    "dbo_get_previous_event",
]

T = TypeVar("T")

dbo_enabled = registry.dbo_enabled
_ctx = registry.current_context


def dbo_current_ubatch_id() -> int:
    """The calling thread's ubatch id; 0 when no DBO step is active anywhere in the process.

    Raises ``UnregisteredThreadError`` when a step is active and the caller is not one of its ubatch
    threads (vLLM answers 0 there, which makes a helper thread share ubatch 0's scratch).
    """
    return registry.current_ubatch_id()


def dbo_num_ubatches() -> int:
    """Number of ubatches in the caller's step (1 outside a DBO step)."""
    ctx = _ctx()
    return 1 if ctx is None else ctx.step.num_ubatches


def dbo_yield() -> None:
    """Pass the turn to the next ubatch and wait for it to come back; keeps the current stream."""
    ctx = _ctx()
    if ctx is not None:
        ctx.step.yield_turn(ctx.id)


def dbo_yield_and_switch_from_compute_to_comm() -> None:
    """Record compute-done on the compute stream, yield, switch to the comm stream and wait for it."""
    ctx = _ctx()
    if ctx is not None:
        ctx.yield_and_switch(
            ctx.compute_stream, ctx.comm_stream, ctx.compute_done, "dbo_yield_and_switch_from_compute_to_comm"
        )


def dbo_yield_and_switch_from_comm_to_compute() -> None:
    """Record comm-done on the comm stream, yield, switch to the compute stream and wait for it."""
    ctx = _ctx()
    if ctx is not None:
        ctx.yield_and_switch(
            ctx.comm_stream, ctx.compute_stream, ctx.comm_done, "dbo_yield_and_switch_from_comm_to_compute"
        )


def dbo_switch_to_comm() -> None:
    """Make the comm stream current (no event, no yield)."""
    ctx = _ctx()
    if ctx is not None:
        set_stream(ctx.comm_stream)


def dbo_switch_to_compute() -> None:
    """Make the compute stream current (no event, no yield)."""
    ctx = _ctx()
    if ctx is not None:
        set_stream(ctx.compute_stream)


def dbo_switch_to_comm_sync() -> None:
    """Record compute-done on the compute stream, switch to comm, comm waits for it (no yield)."""
    ctx = _ctx()
    if ctx is not None:
        ctx.switch_sync(ctx.compute_stream, ctx.comm_stream, ctx.compute_done)


def dbo_switch_to_compute_sync() -> None:
    """Record comm-done on the comm stream, switch to compute, compute waits for it (no yield)."""
    ctx = _ctx()
    if ctx is not None:
        ctx.switch_sync(ctx.comm_stream, ctx.compute_stream, ctx.comm_done)


def dbo_register_recv_hook(hook: Callable[[], Any]) -> None:
    """Park ``hook`` on the next ubatch; it runs at that ubatch's next hook site or exit.

    Outside a DBO step the hook runs at once. A second hook over a pending one raises RecvHookConflict.
    """
    ctx = _ctx()
    if ctx is None:
        hook()
    else:
        ctx.register_recv_hook(hook)


def dbo_maybe_run_recv_hook() -> None:
    """Run (and clear) the recv hook parked on the caller's ubatch, if any."""
    ctx = _ctx()
    if ctx is not None:
        ctx.maybe_run_recv_hook()


def dbo_get_previous_event(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call ``fn`` with the compute stream current, so an event it captures belongs to that stream."""
    ctx = _ctx()
    if ctx is None:
        return fn(*args, **kwargs)
    with use_stream(ctx.compute_stream):
        return fn(*args, **kwargs)
