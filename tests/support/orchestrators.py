"""Orchestrators for the tests: bounded handoffs, the CPU backends and the stream layouts.

Every orchestrator a test builds gets a handoff timeout far below the per-test timeout (never the
60 s default), stretched by the slack factor (``tests.support.timing``), so a hang fails the test
while a slow machine does not.
"""

from __future__ import annotations

from typing import Any

import dbo
from tests.support.timing import slack

BACKENDS = ["threads", "virtual"]  # the CPU backends on which ubatches really interleave
LAYOUTS = ["per-ubatch", "shared"]
HANDOFF_TIMEOUT = slack(10.0)


def orchestrator(
    n: int, backend: str = "threads", stream_layout: str = "per-ubatch", **kw: Any
) -> dbo.UBatchOrchestrator:
    """A ``UBatchOrchestrator`` of ``n`` ubatches with ``handoff_timeout=HANDOFF_TIMEOUT`` unless given."""
    kw.setdefault("handoff_timeout", HANDOFF_TIMEOUT)
    return dbo.UBatchOrchestrator(num_ubatches=n, backend=backend, stream_layout=stream_layout, **kw)
