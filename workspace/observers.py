"""Manager observers, and the process-wide list of observers that watch every manager.

An observer (the sanitizer, a memory tracker) subclasses ``WorkspaceObserver`` and is attached to
one manager with ``WorkspaceManager.add_observer``, or to every live and future manager with
``add_global_observer``. Managers register here when they are built (weakly: a dropped manager
leaves the set by itself).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import torch

__all__ = ["WorkspaceObserver", "add_global_observer", "remove_global_observer"]


class WorkspaceObserver:
    """Base class of manager observers; every method is a no-op.

    ``buffer_allocated``, ``buffer_retired`` and ``persistent_created`` run under the manager's
    lock: keep them quick and never call back into the manager. ``views_handed_out`` runs in the
    calling thread after every ``get_simultaneous`` (hits included) while the observer is attached.
    ``buffer_retired`` comes after the manager dropped every reference it held: a live
    ``storage_ref()`` means someone else still holds views of the buffer (they are orphaned).
    ``manager`` is the ``workspace.manager.WorkspaceManager`` that calls (typed ``Any`` here: the
    manager imports this module, and annotations must not close an import cycle).
    """

    def buffer_allocated(self, manager: Any, slot: int, buffer: torch.Tensor) -> None:
        """A slot got a new buffer (also called on attach for each buffer the manager already holds)."""

    def buffer_retired(self, manager: Any, slot: int, storage_ref: weakref.ref, nbytes: int) -> None:
        """The manager dropped a slot's buffer (growth or deferred reallocation)."""

    def views_handed_out(self, manager: Any, slot: int, views: list[torch.Tensor]) -> None:
        """A ``get_simultaneous`` call of ``slot`` returned ``views``."""

    def persistent_created(self, manager: Any, slot: int, key: Any, tensor: torch.Tensor) -> None:
        """``get_persistent`` created a tensor for ``slot`` (also called on attach for existing ones)."""


_lock = threading.Lock()
_managers: "weakref.WeakSet[Any]" = weakref.WeakSet()
_global_observers: list[WorkspaceObserver] = []


def track_manager(manager: Any) -> tuple[WorkspaceObserver, ...]:
    """Record a new manager; return the global observers it must attach."""
    with _lock:
        _managers.add(manager)
        return tuple(_global_observers)


def add_global_observer(observer: WorkspaceObserver) -> None:
    """Attach ``observer`` to every live manager and to every manager created later."""
    with _lock:
        if observer not in _global_observers:
            _global_observers.append(observer)
        managers = list(_managers)
    for m in managers:
        m.add_observer(observer)


def remove_global_observer(observer: WorkspaceObserver) -> None:
    """Detach ``observer`` from every manager (no error if it was not attached)."""
    with _lock:
        if observer in _global_observers:
            _global_observers.remove(observer)
        managers = list(_managers)
    for m in managers:
        m.remove_observer(observer)
