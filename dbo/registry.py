"""Thread -> ubatch registry: which ubatch does the calling thread run?

Process-global state (docs/design.md, "Process-global state", lists all of it): every registered
thread has an entry here for as long as its scope lasts.

Rules (see docs/protocol.md, "The registry"):

* The lookup is thread-local, so an entry is never found by another thread. A thread that reuses
  the ident of a dead thread (CPython reuses idents) starts unregistered: it can never adopt a
  stale entry.
* ``current_ubatch_id()`` returns the caller's ubatch id if it is registered; 0 if no DBO step is
  active anywhere in the process (no live entry); and raises ``UnregisteredThreadError`` if a step
  is active but the caller is not one of its ubatch threads. vLLM silently answers 0 (or
  a bare KeyError) there, which makes a helper thread share ubatch 0's scratch slot.
* ``dbo_enabled()`` is per thread: true iff the *calling* thread is a registered ubatch thread.
  ``step_active()`` is the process-wide question ("is any ubatch registered?").
* An entry whose thread died without unregistering (it cannot happen through ``use_ubatch``)
  is stale: it is ignored by ``step_active()``, reported by ``snapshot()`` and dropped by
  ``prune_dead()``. A thread Python did not start (a ``_DummyThread``) always reports alive, so its
  stale entry is not detected: register such threads only through ``use_ubatch``.
* ``acting_ubatch_id()`` says which ubatch the calling code acts for. A recv hook runs in another
  thread than the one that registered it (the next ubatch's, or the registrar's own when the next
  one has exited); while it runs, the runtime marks it as acting for the registrar
  (``acting_for``), so per-ubatch resources can be attributed to the ubatch that owns the work.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
from dataclasses import dataclass
from typing import Any, Iterator

from dbo.errors import RegistryError, UnregisteredThreadError

logger = logging.getLogger(__name__)

__all__ = [
    "RegistryEntry",
    "register",
    "unregister",
    "use_ubatch",
    "acting_for",
    "acting_ubatch_id",
    "current_ubatch_id",
    "registered_ubatch_id",
    "current_context",
    "dbo_enabled",
    "step_active",
    "snapshot",
    "prune_dead",
]


@dataclass(frozen=True)
class RegistryEntry:
    """One registration: the ubatch id, and the thread that holds it."""

    token: int
    ubatch_id: int
    thread: threading.Thread
    context: Any = None

    @property
    def alive(self) -> bool:
        return self.thread.is_alive()

    def describe(self) -> str:
        state = "" if self.alive else " (thread dead: stale entry)"
        return f"ubatch {self.ubatch_id} on thread {self.thread.name!r} ident={self.thread.ident}{state}"


_local = threading.local()  # .entry: RegistryEntry of the calling thread, if registered; .acting: see acting_for
_entries: dict[int, RegistryEntry] = {}  # token -> entry; process-global
_entries_lock = threading.Lock()
_tokens = itertools.count(1)


def _check_ubatch_id(ubatch_id: object) -> int:
    if isinstance(ubatch_id, bool) or not isinstance(ubatch_id, int):
        raise TypeError(f"ubatch id must be an int, got {type(ubatch_id).__name__}: {ubatch_id!r}")
    if ubatch_id < 0:
        raise ValueError(f"ubatch id must be >= 0, got {ubatch_id}")
    return ubatch_id


def register(ubatch_id: int, context: Any = None) -> RegistryEntry:
    """Register the calling thread as ubatch ``ubatch_id`` (optionally with its ubatch context).

    Raises ``RegistryError`` if the calling thread is already registered.
    """
    _check_ubatch_id(ubatch_id)
    existing = getattr(_local, "entry", None)
    if existing is not None:
        raise RegistryError(
            f"thread {threading.current_thread().name!r} is already registered as ubatch "
            f"{existing.ubatch_id}; unregister it before registering it as ubatch {ubatch_id}"
        )
    entry = RegistryEntry(next(_tokens), ubatch_id, threading.current_thread(), context)
    with _entries_lock:
        _entries[entry.token] = entry
    _local.entry = entry
    return entry


def unregister() -> int:
    """Remove the calling thread's registration and return its ubatch id.

    Raises ``RegistryError`` if the calling thread is not registered.
    """
    entry = getattr(_local, "entry", None)
    if entry is None:
        raise RegistryError(f"thread {threading.current_thread().name!r} is not registered as a ubatch")
    _local.entry = None
    with _entries_lock:
        _entries.pop(entry.token, None)
    return entry.ubatch_id


@contextlib.contextmanager
def use_ubatch(ubatch_id: int, context: Any = None) -> Iterator[RegistryEntry]:
    """Run the calling thread as ubatch ``ubatch_id`` for the ``with`` block; always unregisters."""
    entry = register(ubatch_id, context)
    try:
        yield entry
    finally:
        if getattr(_local, "entry", None) is entry:
            unregister()


def registered_ubatch_id() -> int | None:
    """The calling thread's ubatch id, or None if it is not registered. Never raises."""
    entry = getattr(_local, "entry", None)
    return None if entry is None else entry.ubatch_id


def acting_ubatch_id() -> int | None:
    """The ubatch the calling code acts for; never raises.

    Inside a recv hook (any thread): the ubatch that registered the hook. Elsewhere: the calling
    thread's registered ubatch id, or None for an unregistered thread.
    """
    acting = getattr(_local, "acting", None)
    if acting is not None:
        return acting
    entry = getattr(_local, "entry", None)
    return None if entry is None else entry.ubatch_id


@contextlib.contextmanager
def acting_for(ubatch_id: int) -> Iterator[int]:
    """Mark the calling thread as acting for ``ubatch_id`` in the ``with`` block (nests; restores the
    previous value on exit). The runtime wraps every recv hook in it with the registrar's id."""
    _check_ubatch_id(ubatch_id)
    previous = getattr(_local, "acting", None)
    _local.acting = ubatch_id
    try:
        yield ubatch_id
    finally:
        _local.acting = previous


def current_context() -> Any:
    """The context object registered with the calling thread, or None."""
    entry = getattr(_local, "entry", None)
    return None if entry is None else entry.context


def current_ubatch_id() -> int:
    """The calling thread's ubatch id; 0 when no DBO step is active.

    Raises ``UnregisteredThreadError`` when a step is active (some live thread is registered) and
    the caller is not registered: it would otherwise silently share ubatch 0's resources.
    """
    entry = getattr(_local, "entry", None)
    if entry is not None:
        return entry.ubatch_id
    if not _entries:
        return 0
    with _entries_lock:
        live = [e for e in _entries.values() if e.alive]
    if not live:
        return 0
    who = ", ".join(e.describe() for e in sorted(live, key=lambda e: e.ubatch_id))
    raise UnregisteredThreadError(
        f"thread {threading.current_thread().name!r} asked for its ubatch id while a DBO step is "
        f"active ({who}), but it is not a ubatch thread. Run the code inside the ubatch's thread, or "
        f"wrap it in dbo.registry.use_ubatch(ubatch_id) to say which ubatch it acts for."
    )


def dbo_enabled() -> bool:
    """True iff the calling thread is a registered ubatch thread (per thread; vLLM answers it per process)."""
    return getattr(_local, "entry", None) is not None


def step_active() -> bool:
    """True iff any live thread in the process is registered as a ubatch."""
    with _entries_lock:
        return any(e.alive for e in _entries.values())


def snapshot() -> list[RegistryEntry]:
    """Every entry, live or stale, sorted by ubatch id (for tests and diagnostics)."""
    with _entries_lock:
        entries = list(_entries.values())
    return sorted(entries, key=lambda e: (e.ubatch_id, e.token))


def prune_dead() -> list[RegistryEntry]:
    """Drop entries whose thread has died without unregistering; return them."""
    with _entries_lock:
        dead = [e for e in _entries.values() if not e.alive]
        for e in dead:
            del _entries[e.token]
    for e in dead:
        logger.warning("dropped stale registry entry: %s", e.describe())
    return dead
