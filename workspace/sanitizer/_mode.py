"""Workspace isolation sanitizer: a TorchDispatchMode that judges every tensor access by byte range.

Off by default, and then free: importing this module registers nothing, the managers' hot path is
unchanged, and ``use_sanitizer()`` / ``wrap()`` do nothing. Process-global state (docs/design.md lists all
of it): one sanitizer per process.

Use::

    from workspace import sanitizer

    sanitizer.enable("collect")               # or "raise": the offending op raises SanitizerError
    orch.run(model.forward, inputs)           # every ubatch thread and every kernel is checked
    for f in sanitizer.findings():
        print(f.kind, f.op, f.ubatch, f.caller)
    sanitizer.disable()

A dispatch mode is per thread (a mode entered on the main thread never sees a ubatch thread's
ops). While enabled, the sanitizer registers two hooks with ``dbo.races``: every
``UBatchOrchestrator`` step (and capture) runs its ubatch function inside ``use_sanitizer()``, and
every kernel body, on whichever thread runs it (the ``threads`` backend's executors included),
runs inside it too, judged as the ubatch its launching code acted for and as of its launch.
``wrap(fn)`` / ``with sanitizer.use_sanitizer():`` still work (threads the runtime does not start).
``with sanitizer.use_sanitizer("collect") as found:`` turns the sanitizer on for a block (and
checks the calling thread too), then off; ``found()`` lists the findings.
``enable(mode, races=True)`` also turns on ``dbo.races`` (stream-order races, docs/races.md);
``findings()`` then lists its ``stream-race`` findings after the workspace ones.

What it knows: while enabled it observes every manager (``WorkspaceManager.add_observer``): which
buffer belongs to which slot, which buffers were replaced, which byte ranges each
``get_simultaneous`` call handed out, and the persistent tensors. For every op except view and
metadata-only ops it looks at each tensor argument (in-place and ``out=`` results are arguments,
and other results are fresh memory), takes its storage and its byte range (storage start +
storage_offset * itemsize to the end of its strided extent; never just its start address) and
reports:

* ``cross-slot``: the bytes belong to another ubatch's slot (or a persistent tensor of another
  ubatch), or a thread that is not a ubatch thread touches a slot while a step is active. A recv
  hook acts for the ubatch that registered it, so a hook run by the next ubatch may touch the
  registrant's slot: the sanitizer asks ``dbo.registry.acting_ubatch_id()`` who is acting. A
  helper thread that works for a ubatch registers as that ubatch (``dbo.registry`` scope).
* ``stale-view``: the slot's later ``get_simultaneous`` call handed out bytes of the view the
  tensor is (or derives from): a view used after its lifetime, whose bytes may now hold another
  tensor's data. Judged by identity: while the sanitizer is on, each call hands out fresh tensor
  objects (same bytes, new identity, no ``_base``), so a view from call k is stale once a later
  call of its slot handed out any of its bytes, even the very same start and size; a slice /
  ``.view`` / ``.t()`` of it (its ``_base``) keeps its judgement. A tensor not derived from a
  handed-out view falls back to ranges (stale if it does not lie inside one view's bytes as
  last handed out).
* ``orphaned-view``: the tensor's storage is a buffer the manager has replaced (lockstep growth
  while the owner held views, or a view kept past its slot's deferred reallocation).

A kernel launched by code acting for a ubatch is checked wherever it runs; one launched outside
any ubatch (setup, a graph replay from the main thread) only by a mode its thread entered itself.

This module is the public API and the dispatch mode; the state and the checks are in
``workspace.sanitizer._checks``.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from typing import Any, Callable, Iterator, TypeVar

from torch.utils._python_dispatch import TorchDispatchMode

from dbo import races as _races
from workspace.errors import InvalidArgumentError
from workspace.observers import add_global_observer, remove_global_observer
from workspace.sanitizer._checks import MODES, Finding
from workspace.sanitizer._checks import STATE as _state

T = TypeVar("T")

_tls = threading.local()  # .active: use_sanitizer() has entered the dispatch mode in this thread


class _Mode(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _state.enabled and not _races.touches_no_bytes(func):  # dbo.races' one list: views, metadata
            _state.check(func, args, kwargs)
        return func(*args, **kwargs)


# ---------------------------------------------------------------------- public API


_with_races = False  # findings() lists dbo.races' findings too (enable(races=True), or races were on)
_own_races = False  # enable(races=True) turned dbo.races on: disable() turns it off


def enable(mode: str = "raise", *, races: bool = False) -> None:
    """Start checking: attach to every workspace manager (live and future), hook every ubatch
    thread and kernel body the runtime runs, and clear old findings.

    ``mode``: "raise" (the offending op raises ``SanitizerError`` before it runs) or "collect"
    (the op runs; read ``findings()`` afterwards). ``races``: also turn on ``dbo.races`` in the
    same mode (its findings join ``findings()``). Enable before the step.
    """
    global _with_races, _own_races
    if mode not in MODES:
        raise InvalidArgumentError(f"sanitizer mode must be one of {MODES}, got {mode!r}")
    if not isinstance(races, bool):
        raise InvalidArgumentError(f"races must be True or False, got {races!r}")
    with _state.lock:
        _state.mode = mode
        _state.findings = {}
        _state.dropped = 0
        was = _state.enabled
        _state.enabled = True
    if races:
        _races.enable("raise" if mode == "raise" else "collect")
    _own_races = races or (_own_races and _races.enabled())
    _with_races = _own_races or _races.enabled()
    if not was:
        add_global_observer(_state)
        _races.add_kernel_hook(_kernel_hook)
        _races.add_ubatch_hook(wrap)


def disable() -> None:
    """Stop checking and detach from every manager (and turn off ``dbo.races`` if ``enable`` turned
    it on). Findings stay readable until the next ``enable``."""
    global _own_races
    with _state.lock:
        was = _state.enabled
        _state.enabled = False
    if was:
        _races.remove_kernel_hook(_kernel_hook)
        _races.remove_ubatch_hook(wrap)
        remove_global_observer(_state)
    if _own_races:
        _races.disable()
        _own_races = False
    _state.reset_maps()


def enabled() -> bool:
    """Whether the sanitizer is on."""
    return _state.enabled


def mode() -> str:
    """The current mode ("raise" or "collect")."""
    return _state.mode


def findings() -> list[Any]:
    """Distinct findings since the last ``enable`` / ``clear``, in the order first seen; then, when
    race detection was on with it, ``dbo.races``' ``stream-race`` findings (``dbo.races.Race``:
    the same ``kind`` / ``op`` / ``ubatch`` / ``caller`` / ``thread`` / ``detail`` / ``count``)."""
    with _state.lock:
        out: list[Any] = list(_state.findings.values())
    if _with_races:
        out += _races.findings()
    return out


def clear() -> None:
    """Forget the findings (the sanitizer stays on); race findings too when they are listed."""
    with _state.lock:
        _state.findings = {}
        _state.dropped = 0
    if _with_races:
        _races.clear()


@contextlib.contextmanager
def use_sanitizer(mode: str | None = None) -> Iterator[Callable[[], list[Finding]]]:
    """Check the calling thread's ops for the ``with`` block; yields ``findings``.

    With ``mode`` ("raise" or "collect"): ``enable(mode)`` for the block and ``disable()`` after it.
    Without: only while the sanitizer is enabled (a no-op otherwise). Nested blocks in one thread
    enter the dispatch mode once.
    """
    if mode is not None:
        enable(mode)
    try:
        if not _state.enabled or getattr(_tls, "active", False):
            yield findings
        else:
            _tls.active = True
            try:
                with _Mode():
                    yield findings
            finally:
                _tls.active = False
    finally:
        if mode is not None:
            disable()


@contextlib.contextmanager
def _in_kernel() -> Iterator[None]:
    if getattr(_tls, "active", False):  # virtual / inline: the launching thread is already checked
        yield
        return
    _tls.active = True
    try:
        with _Mode():
            yield
    finally:
        _tls.active = False


def _kernel_hook(stamp: Any) -> Any:
    """dbo.races kernel hook: a kernel launched for a ubatch runs under the sanitizer."""
    if not _state.enabled or stamp.ubatch is None:
        return None
    return _in_kernel()


def wrap(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn`` run inside ``use_sanitizer()``: pass ``wrap(model.forward)`` to ``UBatchOrchestrator.run``."""

    @functools.wraps(fn)
    def sanitized(*args: Any, **kwargs: Any) -> T:
        with use_sanitizer():
            return fn(*args, **kwargs)

    return sanitized
