"""Exception types of the DBO runtime.

Every error the runtime raises on purpose is a ``DBOError``; the more specific classes below say
what went wrong and carry the data a caller needs to react (which ubatch, where it was parked).
"""

from __future__ import annotations


class DBOError(RuntimeError):
    """Base class of every error the DBO runtime raises on purpose."""


class RegistryError(DBOError):
    """Misuse of the thread -> ubatch registry (double registration, unregistering twice, ...)."""


class UnregisteredThreadError(RegistryError, LookupError):
    """A thread that is not a ubatch thread asked for its ubatch id while a DBO step is active.

    vLLM silently maps such a thread to slot 0 (or fails with a bare KeyError); we refuse,
    because sharing ubatch 0's scratch slot from another thread breaks workspace isolation.
    """


class RecvHookConflict(DBOError):
    """A recv hook was registered on a ubatch context that already holds a pending one."""


class StreamError(DBOError):
    """A kernel failed on a stream, or a stream or event was used wrongly."""


class StreamTimeout(StreamError, TimeoutError):
    """A wait on a stream or event did not finish within its bound."""


class UBatchAborted(DBOError):
    """Raised inside a ubatch thread whose step was aborted because another party failed.

    It only unwinds the thread; the orchestrator reports the original failure instead.
    """


class HandoffTimeout(DBOError, TimeoutError):
    """A ubatch waited longer than the handoff timeout for its turn (or the start barrier).

    ``parked`` maps each ubatch id to where its thread was at the time (``function:line`` or a state).
    """

    def __init__(self, message: str, parked: dict[int, str] | None = None):
        super().__init__(message)
        self.parked = dict(parked or {})


class UBatchFailed(DBOError):
    """A DBO step failed. ``ubatch_id`` names the ubatch (None: the orchestrator itself).

    The original exception is attached as ``__cause__``.
    """

    def __init__(self, message: str, ubatch_id: int | None):
        super().__init__(message)
        self.ubatch_id = ubatch_id


class StepHung(DBOError):
    """Threads of an aborted step did not finish within the join bound (stuck outside any DBO wait)."""

    def __init__(self, message: str, live_threads: list[str]):
        super().__init__(message)
        self.live_threads = list(live_threads)


class CaptureError(DBOError):
    """A step could not be captured: it made the host wait on the device (``.item()``, ``.tolist()``,
    ``bool(tensor)``, a data-dependent shape, a stream or event synchronize or query, a workspace
    allocation), or used a stream in a way the replay could not repeat. The message names the op
    and the caller's ``file:line``. See docs/capture.md.
    """
