"""How a failed launch is reported: what a failing rank writes, and which failure the launcher names.

A rank that raises writes an error record (``error_record``: the rank, the exception's type and
first line, its traceback, the time, whether it is only a symptom) to ``error-<rank>.json`` in the
launch's folder; the launcher reads them back (``read_errors``) and, once the run has failed, picks
the first error among the records and the ranks that died without one (``first_error``), which
``launch`` raises as ``DistributedError``. ``describe_exit`` words a process's exit status.
"""

from __future__ import annotations

import json
import os
import signal
import time
import traceback
from typing import Sequence

from demos.ranks.faults import is_symptom

__all__ = ["DistributedError", "describe_exit", "error_record", "first_error", "read_errors"]


class DistributedError(RuntimeError):
    """A distributed run failed. ``rank``: the rank of the first error (None: no rank to blame,
    e.g. the launcher's own timeout); ``remote_traceback``: that rank's traceback as text;
    ``exitcodes``: every rank's exit status after the run was stopped (negative: killed by that
    signal); ``pids``: the ranks' process ids (all reaped when this is raised)."""

    def __init__(
        self,
        message: str,
        *,
        rank: int | None = None,
        remote_traceback: str = "",
        exitcodes: Sequence[int | None] = (),
        pids: Sequence[int | None] = (),
        error_type: str | None = None,
    ):
        super().__init__(message)
        self.rank = rank
        self.remote_traceback = remote_traceback
        self.exitcodes = list(exitcodes)
        self.pids = list(pids)
        self.error_type = error_type


def describe_exit(code: int | None) -> str:
    """A process's exit status in words: "exited with status 1", "killed by SIGTERM"."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


_WRAPPERS = ("UBatchFailed", "StreamError", "UBatchAborted")  # dbo's exceptions that carry another as their cause


def _root(exc: BaseException) -> BaseException:
    """The exception to name: the first one in the cause chain that is not just a wrapper."""
    seen = set()
    e = exc
    while type(e).__name__ in _WRAPPERS and e.__cause__ is not None and id(e) not in seen:
        seen.add(id(e))
        e = e.__cause__
    return e


def error_record(rank: int, exc: BaseException) -> dict:
    """What rank ``rank`` reports about ``exc`` (JSON-ready): ``rank``, ``type`` and ``message`` (the
    first line) of the innermost exception that is not just one of dbo's wrappers, the whole
    ``traceback`` as text, ``time`` (wall clock) and ``symptom`` (``is_symptom``)."""
    root = _root(exc)
    text = str(root).strip()
    return {
        "rank": rank,
        "type": type(root).__name__,
        "message": text.splitlines()[0] if text else "",
        "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        "time": time.time(),
        "symptom": is_symptom(exc),
    }


def read_errors(rundir: str) -> dict[int, dict]:
    """The error records in ``rundir`` (``error-<rank>.json``), by rank; unreadable ones are skipped."""
    out = {}
    for name in os.listdir(rundir):
        if name.startswith("error-") and name.endswith(".json"):
            try:
                with open(os.path.join(rundir, name), "rb") as f:
                    rec = json.loads(f.read())
                out[int(rec["rank"])] = rec
            except (OSError, ValueError, KeyError):
                continue
    return out


def first_error(
    causes: list,
    errors: dict[int, dict],
    deaths: dict[int, tuple[float, int]],
    world: int,
    running: list[int],
    started: dict[int, bool],
) -> dict:
    """The failure to report, as a dict (``rank``, ``message``, and for a record ``traceback`` and
    ``type``). ``causes``: ``(time, rank, record or None)`` of each error that is not a symptom and
    each death without a record; the earliest wins. Without causes, the earliest symptom (e.g. a
    collective timeout caused by a hung peer), with the ranks still ``running`` named as perhaps
    stuck. ``deaths``: rank -> (when noticed, exit code); ``started``: whether each dead rank got as
    far as starting (a rank that did not is reported as failing to start)."""
    if causes:
        _, rank, rec = min(causes, key=lambda c: c[0])
    else:  # only symptoms: report the earliest
        rec = min(errors.values(), key=lambda r: r["time"])
        rank = rec["rank"]
    if rec is None:
        code = deaths[rank][1]
        if not started.get(rank, True):
            return dict(
                rank=rank,
                message=f"rank {rank} of {world} failed to start ({describe_exit(code)}; its stderr says why; a script "
                "that launches ranks must guard its entry point with: if __name__ == '__main__':)",
            )
        return dict(
            rank=rank, message=f"rank {rank} of {world} died ({describe_exit(code)}) without reporting an error"
        )
    what = f"{rec['type']}: {rec['message']}" if rec["message"] else rec["type"]
    hint = ""
    if rec["symptom"]:
        stuck = f"; still running, perhaps stuck: rank {', '.join(map(str, running))}" if running else ""
        hint = f" (a symptom: no rank reported a cause{stuck})"
    return dict(
        rank=rank,
        message=f"rank {rank} of {world} failed: {what}{hint}",
        traceback=rec["traceback"],
        type=rec["type"],
    )
