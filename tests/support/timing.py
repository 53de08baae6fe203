"""Wall-clock liveness bounds for the tests, stretched by one slack factor from the environment.

``DBO_TEST_SLACK`` (a number >= 1, default 1.0) multiplies every bound a test puts on how long
something may take in wall-clock time: join and wait timeouts, gate waits, and "took < X s"
checks. It only ever makes a bound more generous, so on a loaded machine a slow but correct run
passes where it would otherwise fail. Times a test *expects* to elapse (a backend timeout that
must fire, a sleep that must be overtaken) are not liveness bounds and are never scaled.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable

ENV = "DBO_TEST_SLACK"


def read_slack(raw: str | None) -> float:
    """The slack factor for one value of ``DBO_TEST_SLACK`` (unset or blank: 1.0).

    Raises ValueError for a value that is not a finite number >= 1.
    """
    if raw is None or not raw.strip():
        return 1.0
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{ENV} must be a number >= 1, got {raw!r}") from None
    if not math.isfinite(value) or value < 1.0:
        raise ValueError(f"{ENV} must be a finite number >= 1, got {raw!r}")
    return value


SLACK = read_slack(os.environ.get(ENV))


def slack(seconds: float) -> float:
    """``seconds`` stretched by the slack factor: the bound to use for a wall-clock liveness check."""
    return seconds * SLACK


def wait_until(pred: Callable[[], object], bound: float = 5.0, poll: float = 0.001) -> bool:
    """Poll ``pred`` until it is true (True) or ``slack(bound)`` seconds have passed (False)."""
    deadline = time.monotonic() + slack(bound)
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(poll)
    return True


GATE = slack(5.0)  # most seconds a test kernel blocks on a gate before it gives up
