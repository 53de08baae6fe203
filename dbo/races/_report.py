"""What ``dbo.races`` reports: the ``Race`` finding, ``RaceError``, and the launch site helper."""

from __future__ import annotations

from dataclasses import dataclass

from dbo.errors import DBOError

KIND = "stream-race"
MODES = ("collect", "raise")
MAX_FINDINGS = 1000


class RaceError(DBOError):
    """Raised (mode "raise") by the op that completes a race, before it runs; ``.finding`` says what."""

    def __init__(self, finding: "Race"):
        super().__init__(str(finding))
        self.finding = finding


@dataclass(frozen=True)
class Race:
    """One stream-order race: two kernels touched the same bytes, at least one wrote, and no event,
    wait or synchronize orders them.

    ``first`` / ``second``: the kernel seen first and the one whose access completed the race, each
    ``(name, stream, ubatch, site)`` with ``site`` the user's ``file:line`` that launched it;
    ``access``: e.g. "write-read" (the first's access, then the second's). ``op``, ``ubatch``,
    ``caller``, ``thread``: the second kernel's aten op, ubatch, launch site and running thread
    (the fields ``workspace.sanitizer.Finding`` has, so both lists read alike). ``count``: how many
    times the same pair of launch sites raced.
    """

    first: tuple[str, str, int | None, str]
    second: tuple[str, str, int | None, str]
    access: str
    op: str
    nbytes: int
    what: str
    thread: str
    count: int = 1
    note: str = ""
    kind: str = KIND
    slot: None = None
    owner: None = None

    @property
    def ubatch(self) -> int | None:
        return self.second[2]

    @property
    def caller(self) -> str:
        return self.second[3]

    @property
    def detail(self) -> str:
        a, b = self.access.split("-")
        return (
            f"{a} by {_side(self.first)} and {b} by {_side(self.second)} of {self.nbytes} overlapping bytes "
            f"({self.what}); no event, wait or synchronize orders the two kernels"
            + (f" ({self.note})" if self.note else "")
        )

    def __str__(self) -> str:
        return f"{self.kind}: {self.op}: {self.detail}"


def _side(k: tuple[str, str, int | None, str]) -> str:
    name, stream, ub, site = k
    who = "no ubatch" if ub is None else f"ubatch {ub}"
    return f"kernel {name!r} on stream {stream!r} ({who}, launched at {site})"
