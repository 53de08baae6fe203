"""Test seams of the DBO runtime: not part of the public API (``dbo.__all__`` does not list them).

Tests and studies use these to reach inside a step:

* ``SyncPrimitives``: the factory of the turn locks and the start barrier a step uses (default:
  plain ``threading``). A controlled scheduler or a fake lock plugs in here.
* ``FaultHook``: ``hook(point, ubatch_id)``, called at "enter", "start", "exit" (in the ubatch
  threads) and "after_barrier" (in the orchestrator's thread, ``ubatch_id`` None).
* ``after_barrier``: a no-argument callable run in the orchestrator's thread after the start
  barrier and before ubatch 0 gets the turn (with one ubatch: before ``fn`` runs).
* ``StepState`` / ``UBatchContext``: the per-step handoff state and the per-ubatch contexts.

``with_seams(orch, fault_hook=..., primitives=..., after_barrier=...)`` installs them on an
orchestrator; they apply from its next step on. A keyword not given keeps its current value;
``None`` clears it. ``seams_of(orch)`` returns what is installed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

from dbo._context import FaultHook, StepState, SyncPrimitives, UBatchContext
from dbo.orchestrator import UBatchOrchestrator

__all__ = ["FaultHook", "Seams", "StepState", "SyncPrimitives", "UBatchContext", "seams_of", "with_seams"]

_KEEP: Any = object()


@dataclass(frozen=True)
class Seams:
    """The seams installed on one orchestrator (all None: production behaviour)."""

    fault_hook: FaultHook | None = None
    primitives: SyncPrimitives | None = None
    after_barrier: Callable[[], None] | None = None


def seams_of(orch: UBatchOrchestrator) -> Seams:
    """The seams installed on ``orch`` (an all-None ``Seams`` when none are)."""
    if not isinstance(orch, UBatchOrchestrator):
        raise TypeError(f"expected a UBatchOrchestrator, got {type(orch).__name__}")
    return orch._seams if orch._seams is not None else Seams()


def with_seams(
    orch: UBatchOrchestrator,
    *,
    fault_hook: FaultHook | None = _KEEP,
    primitives: SyncPrimitives | None = _KEEP,
    after_barrier: Callable[[], None] | None = _KEEP,
) -> UBatchOrchestrator:
    """Install test seams on ``orch`` (keywords not given keep their value; None clears); return ``orch``."""
    current = seams_of(orch)
    changes: dict[str, Any] = {}
    for name, value in (("fault_hook", fault_hook), ("after_barrier", after_barrier)):
        if value is not _KEEP:
            if value is not None and not callable(value):
                raise TypeError(f"{name} must be callable or None, got {type(value).__name__}")
            changes[name] = value
    if primitives is not _KEEP:
        if primitives is not None and not (
            callable(getattr(primitives, "lock", None)) and callable(getattr(primitives, "barrier", None))
        ):
            raise TypeError(
                f"primitives must have lock() and barrier(parties, timeout), got {type(primitives).__name__}"
            )
        changes["primitives"] = primitives
    new = replace(current, **changes)
    orch._seams = None if new == Seams() else new
    return orch
