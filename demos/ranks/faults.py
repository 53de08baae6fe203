"""Fault injection for distributed runs (a test seam), and telling a first error from a symptom."""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["FAULT_ENV", "Fault", "InjectedFault", "fault_for", "is_symptom"]

FAULT_ENV = "DBO_DIST_FAULT"
"""Environment variable holding a fault to inject (``Fault.parse``); inherited by spawned ranks."""


class CollectiveError(RuntimeError):
    """A torch.distributed collective failed or timed out: usually a symptom (a peer rank died,
    raised or hangs), not the first error of a run. The transports raise it (``demos.toy.dist_comm``)."""


class InjectedFault(RuntimeError):
    """The exception a ``Fault`` of kind "raise" raises."""


def is_symptom(exc: BaseException) -> bool:
    """True if ``exc`` (or anything in its cause chain) is a failed collective: the sign that some
    *other* rank failed or hangs, rather than a first error."""
    try:
        import torch.distributed as dist

        dist_errors: tuple = (dist.DistError,)
    except (ImportError, AttributeError):  # pragma: no cover - torch without distributed
        dist_errors = ()
    seen = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, CollectiveError) or (dist_errors and isinstance(e, dist_errors)):
            return True
        e = e.__cause__ or e.__context__
    return False


# --- fault injection (a test seam) ---------------------------------------------------------------

_FAULT_POINTS = ("init", "step", "collective")
_FAULT_KINDS = ("raise", "exit", "kill", "hang")


@dataclass(frozen=True)
class Fault:
    """A fault to inject on one rank: at ``at`` ("init": before the rendezvous; "step": in a
    ubatch thread at the start of the n-th DBO step's forward; "collective": before the n-th
    collective the transport issues), of kind ``kind`` ("raise": raise InjectedFault; "exit":
    ``os._exit(3)`` without a word; "kill": SIGKILL itself; "hang": sleep until killed)."""

    rank: int
    at: str = "collective"
    kind: str = "raise"
    n: int = 1

    def __post_init__(self) -> None:
        if self.at not in _FAULT_POINTS:
            raise ValueError(f"fault point must be one of {_FAULT_POINTS}, got {self.at!r}")
        if self.kind not in _FAULT_KINDS:
            raise ValueError(f"fault kind must be one of {_FAULT_KINDS}, got {self.kind!r}")
        if self.rank < 0 or self.n < 1:
            raise ValueError(f"bad fault {self!r}")

    @classmethod
    def parse(cls, text: str) -> "Fault":
        """``"rank=1,at=collective,n=5,kind=raise"`` (rank required; the rest as the defaults)."""
        fields: dict[str, Any] = {}
        for part in text.split(","):
            if not part.strip():
                continue
            key, _, value = part.partition("=")
            key, value = key.strip(), value.strip()
            if key in ("rank", "n"):
                fields[key] = int(value)
            elif key in ("at", "kind"):
                fields[key] = value
            else:
                raise ValueError(f"{FAULT_ENV}: unknown field {key!r} in {text!r}")
        if "rank" not in fields:
            raise ValueError(f"{FAULT_ENV}: a fault needs rank=R, got {text!r}")
        return cls(**fields)

    def __str__(self) -> str:
        return f"rank={self.rank},at={self.at},n={self.n},kind={self.kind}"

    def trigger(self, where: str) -> None:
        """Do the fault now (``where`` says where, for the message)."""
        msg = f"injected fault on rank {self.rank}: {self.kind} at {where}"
        if self.kind == "raise":
            raise InjectedFault(msg)
        sys.stderr.write(msg + "\n")
        sys.stderr.flush()
        if self.kind == "exit":
            os._exit(3)
        if self.kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        while True:  # hang: until someone kills this process
            time.sleep(3600)


def fault_for(rank: int) -> Fault | None:
    """The fault ``DBO_DIST_FAULT`` asks for on rank ``rank``, or None (unset, or for another rank)."""
    text = os.environ.get(FAULT_ENV, "").strip()
    if not text:
        return None
    f = Fault.parse(text)
    return f if f.rank == rank else None
