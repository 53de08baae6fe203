"""Workspace isolation sanitizer: a TorchDispatchMode that judges every tensor access by byte range.

Off by default, and then free: importing this module registers nothing, the managers' hot path is
unchanged, and ``use_sanitizer()`` / ``wrap()`` do nothing. Process-global state (like the registry and the
workspace singleton): one sanitizer per process.

Use::

    from workspace import sanitizer

    sanitizer.enable("collect")               # or "raise": the offending op raises SanitizerError
    orch.run(sanitizer.wrap(model.forward), inputs)   # the mode is entered inside each ubatch thread
    for f in sanitizer.findings():
        print(f.kind, f.op, f.ubatch, f.caller)
    sanitizer.disable()

A dispatch mode is per thread (a mode entered on the main thread never sees a ubatch thread's
ops), so it must be entered in every thread that runs model code: ``wrap(fn)`` or
``with sanitizer.use_sanitizer():`` at the top of the function each ubatch runs.
``with sanitizer.use_sanitizer("collect") as found:`` turns the sanitizer on for a block (and
checks the calling thread too), then off; ``found()`` lists the findings. The orchestrator knows
nothing about the sanitizer.

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
* ``stale-view``: the slot's later ``get_simultaneous`` call handed out bytes that overlap the
  tensor (a view used after its lifetime, whose bytes may now hold another tensor's data).
  Judged by ranges: a view object handed out by call k is stale if a later call handed out any
  of its bytes; a derived tensor (slice, reshape) is stale if it does not lie inside a single
  view's bytes as they were last handed out. Limitation: a derived tensor whose bytes were
  handed out again as exactly one view (same start, same end) looks like that view.
* ``orphaned-view``: the tensor's storage is a buffer the manager has replaced (lockstep growth
  while the owner held views, or a view kept past its slot's deferred reallocation).

Ops that run inside stream kernels on the ``threads`` backend execute on the backend's executor
threads (one per engine), which have no dispatch mode of their own, and are not seen (use
``virtual`` or ``inline`` to sanitize kernels); on ``virtual`` a kernel's math runs in the
launching thread, inside its ``use_sanitizer`` block.

This module is the public API and the dispatch mode; the state and the checks are in
``workspace.sanitizer_checks``.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from typing import Any, Callable, Iterator, TypeVar

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .errors import InvalidArgumentError
from .observers import add_global_observer, remove_global_observer
from .sanitizer_checks import KINDS, MAX_FINDINGS, MODES, Finding, SanitizerError
from .sanitizer_checks import STATE as _state

__all__ = [
    "KINDS",
    "MAX_FINDINGS",
    "MODES",
    "Finding",
    "SanitizerError",
    "clear",
    "disable",
    "enable",
    "enabled",
    "findings",
    "mode",
    "use_sanitizer",
    "wrap",
]

T = TypeVar("T")

_tls = threading.local()  # .active: use_sanitizer() has entered the dispatch mode in this thread


@functools.lru_cache(maxsize=None)
def _skipped(func: Any) -> bool:
    """View and metadata-only ops touch no bytes: never checked."""
    if getattr(func, "is_view", False):
        return True
    tags = getattr(func, "tags", ())
    if torch.Tag.inplace_view in tags:
        return True
    packet = getattr(func, "overloadpacket", None)
    return getattr(packet, "__name__", "") in _METADATA_OPS


_METADATA_OPS = frozenset(
    {
        "empty_like", "new_empty", "new_empty_strided", "new_zeros", "new_ones", "new_full",
        "zeros_like", "ones_like", "full_like", "rand_like", "randn_like", "randint_like",
        "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "is_same_size",
        "_has_compatible_shallow_copy_type", "is_set_to", "resize_", "set_", "lift_fresh",
        "_reshape_alias", "_unsafe_view",
    }
)


class _Mode(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _state.enabled and not _skipped(func):
            _state.check(func, args, kwargs)
        return func(*args, **kwargs)


# ---------------------------------------------------------------------- public API


def enable(mode: str = "raise") -> None:
    """Start checking: attach to every workspace manager (live and future) and clear old findings.

    ``mode``: "raise" (the offending op raises ``SanitizerError`` before it runs) or "collect"
    (the op runs; read ``findings()`` afterwards). Enable before the step whose ubatch threads
    enter ``use_sanitizer()``.
    """
    if mode not in MODES:
        raise InvalidArgumentError(f"sanitizer mode must be one of {MODES}, got {mode!r}")
    with _state.lock:
        _state.mode = mode
        _state.findings = {}
        _state.dropped = 0
        was = _state.enabled
        _state.enabled = True
    if not was:
        add_global_observer(_state)


def disable() -> None:
    """Stop checking and detach from every manager. Findings stay readable until the next ``enable``."""
    with _state.lock:
        was = _state.enabled
        _state.enabled = False
    if was:
        remove_global_observer(_state)
    _state.reset_maps()


def enabled() -> bool:
    """Whether the sanitizer is on."""
    return _state.enabled


def mode() -> str:
    """The current mode ("raise" or "collect")."""
    return _state.mode


def findings() -> list[Finding]:
    """Distinct findings since the last ``enable`` / ``clear``, in the order first seen."""
    with _state.lock:
        return list(_state.findings.values())


def clear() -> None:
    """Forget the findings (the sanitizer stays on)."""
    with _state.lock:
        _state.findings = {}
        _state.dropped = 0


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


def wrap(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn`` run inside ``use_sanitizer()``: pass ``wrap(model.forward)`` to ``UBatchOrchestrator.run``."""

    @functools.wraps(fn)
    def sanitized(*args: Any, **kwargs: Any) -> T:
        with use_sanitizer():
            return fn(*args, **kwargs)

    return sanitized
