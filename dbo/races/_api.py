"""The switches of ``dbo.races``: turning detection on and off, its findings, and the clients'
hooks (see ``dbo.races._detector`` for the model, docs/races.md for the use).

Off by default, and then free: the detector is not installed as a stream observer, and each
backend's launch / record / wait / synchronize pays one ``is not None`` test
(``dbo.streams.observer``). It is installed while detection is on or any hook is registered.

Use::

    from dbo import races

    races.enable()                      # "collect" (default) or "raise"
    orch.run(model.forward, inputs)     # no wrapping: every kernel is watched, on any thread
    for r in races.findings():
        print(r)                        # both kernels, their streams, ubatches and launch lines
    races.disable()
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

from dbo.races._detector import DETECTOR
from dbo.races._report import MODES, Race
from dbo.races._shadow import KernelStamp
from dbo.streams.observer import add_stream_observer, remove_stream_observer


def _install() -> None:
    """Install the detector as a stream observer while it has anything to do; uninstall it otherwise."""
    if DETECTOR.on or DETECTOR.kernel_hooks or DETECTOR.ubatch_hooks or DETECTOR.launch_hooks:
        add_stream_observer(DETECTOR)
    else:
        remove_stream_observer(DETECTOR)


def enable(mode: str = "collect") -> None:
    """Start watching every backend's streams and events; forget earlier clocks and findings.

    ``mode``: "collect" (default: read ``findings()`` afterwards) or "raise" (the op that completes
    a race raises ``RaceError`` inside its kernel, which fails the kernel's stream). Enable when
    nothing is in flight: work launched before is not seen.
    """
    if mode not in MODES:
        raise ValueError(f"race detection mode must be one of {MODES}, got {mode!r}")
    DETECTOR.reset()
    with DETECTOR.lock:
        DETECTOR.mode = mode
        DETECTOR.found = {}
        DETECTOR.dropped = 0
        DETECTOR.on = True
    _install()


def disable() -> None:
    """Stop watching. Findings stay readable until the next ``enable`` / ``clear``."""
    with DETECTOR.lock:
        DETECTOR.on = False
    _install()
    DETECTOR.reset()


def enabled() -> bool:
    """Whether race detection is on."""
    return DETECTOR.on


def findings() -> list[Race]:
    """Distinct races since the last ``enable`` / ``clear``, in the order first seen."""
    with DETECTOR.lock:
        return list(DETECTOR.found.values())


def clear() -> None:
    """Forget the findings (detection stays on)."""
    with DETECTOR.lock:
        DETECTOR.found = {}
        DETECTOR.dropped = 0


@contextlib.contextmanager
def use_races(mode: str = "collect") -> Iterator[Callable[[], list[Race]]]:
    """Race detection on for the ``with`` block (then off); yields ``findings``."""
    enable(mode)
    try:
        yield findings
    finally:
        disable()


def launch_count() -> int:
    """Kernels launched so far while the observer was installed: a kernel's ``ticket`` is this
    count right after its launch, so "handed out before kernel k was launched" is
    ``launch_count() (then) < k.ticket``."""
    return DETECTOR.launches


def _add(attr: str, hook: Callable) -> None:
    with DETECTOR.lock:
        hooks = getattr(DETECTOR, attr)
        if hook not in hooks:
            setattr(DETECTOR, attr, hooks + [hook])  # a new list: a kernel iterating the old one is unaffected
    _install()


def _remove(attr: str, hook: Callable) -> None:
    with DETECTOR.lock:
        setattr(DETECTOR, attr, [h for h in getattr(DETECTOR, attr) if h is not hook])
    _install()


def add_kernel_hook(hook: Callable[[KernelStamp], Any]) -> None:
    """Call ``hook(stamp)`` at the start of every kernel body, on the thread that runs it; a context
    manager it returns is entered around the body (None: nothing). Installs the observer."""
    _add("kernel_hooks", hook)


def remove_kernel_hook(hook: Callable[[KernelStamp], Any]) -> None:
    _remove("kernel_hooks", hook)


def add_ubatch_hook(hook: Callable[[Callable], Callable]) -> None:
    """``hook(fn) -> fn'``: applied to the function every ``UBatchOrchestrator`` step runs in its
    ubatch threads (and in a capture). Installs the observer."""
    _add("ubatch_hooks", hook)


def remove_ubatch_hook(hook: Callable[[Callable], Callable]) -> None:
    _remove("ubatch_hooks", hook)


def add_launch_hook(hook: Callable[[KernelStamp], None]) -> None:
    """Call ``hook(stamp)`` right after every launch is stamped (a kernel whose ``fn`` is None
    too), on the launching thread: ``stamp.clock`` is the kernel's vector clock as of its launch.
    Installs the observer."""
    _add("launch_hooks", hook)


def remove_launch_hook(hook: Callable[[KernelStamp], None]) -> None:
    _remove("launch_hooks", hook)


def hook_counts() -> dict[str, int]:
    """How many hooks of each kind are registered: {"kernel": n, "ubatch": n, "launch": n}."""
    with DETECTOR.lock:
        return {
            "kernel": len(DETECTOR.kernel_hooks),
            "ubatch": len(DETECTOR.ubatch_hooks),
            "launch": len(DETECTOR.launch_hooks),
        }
