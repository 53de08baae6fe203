"""Ubatch threads without an orchestrator: each body runs under ``use_ubatch(i)`` on its own thread."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from dbo.registry import use_ubatch
from tests.support.timing import slack


def run_ubatches(n: int, body: Callable[[int, threading.Barrier], Any], *, join_s: float = 10.0) -> list[Any]:
    """Run ``body(i, barrier)`` as ubatch i on its own daemon thread; return results, re-raise the first error.

    The barrier (n parties) and each join are bounded by ``slack(join_s)``; a thread still alive
    after its join fails the caller. A body that raises aborts the barrier, so its siblings do not
    wait for it.
    """
    bound = slack(join_s)
    barrier = threading.Barrier(n, timeout=bound)
    results: list[Any] = [None] * n
    errors: list[BaseException] = []

    def main(i: int) -> None:
        try:
            with use_ubatch(i):
                results[i] = body(i, barrier)
        except BaseException as exc:  # reported below
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=main, args=(i,), name=f"ubatch-{i}", daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(bound)
    assert not any(t.is_alive() for t in threads), "ubatch thread did not finish"
    if errors:
        raise errors[0]
    return results
