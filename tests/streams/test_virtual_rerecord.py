"""A wait queued on a sleeping virtual device keeps the record it waited for.

With ``idle_hold`` (the device sleeps while the host runs Python) and ``kernel_sync`` (a kernel
that syncs the host), a stream's wait on an event could still be queued when the host recorded the
same event again; the queued wait then read the new record's not-yet-known time and the step
crashed with a TypeError. CUDA's rule, which the backend follows now: a wait sees the most recent
record at the moment of the wait call, and later records do not change it.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from dbo.costs import HostCosts, OpCost, get_profile
from demos.toy.config import OverlapConfig
from demos.toy.ops import OPS
from demos.toy.run import run

# Host figures of a threads calibration that crashed; every op returns to Python a few times (GIL calls),
# so kernels wait for the host and the device queue holds the waits.
SLEEPY_SYNCING_HOST = HostCosts(
    launch=1.83e-05,
    kernel=1.76e-06,
    event=2.57e-06,
    handoff=4.38e-06,
    stream_switch=4.1e-07,
    sync=3.2e-07,
    thread_start=2.29e-04,
    thread_join=8.58e-05,
    idle_hold=5.24e-03,
    kernel_sync=True,
    ops={op: OpCost(gil_calls=4) for op in OPS},
)


@pytest.mark.parametrize("schedule", ["ht", "ll"])
def test_a_step_with_re_recorded_events_on_a_sleeping_device_runs(schedule: str) -> None:
    profile = replace(get_profile("h200"), name="sleepy-syncing", host=SLEEPY_SYNCING_HOST)
    res = run(
        OverlapConfig(
            backend="virtual",
            profile=profile,
            schedule=schedule,
            tokens=16,
            layers=2,
            hidden=256,
            steps=1,
            warmup=1,
            meta=True,
        )
    )
    assert min(res.times_dbo_s) > 0 and min(res.times_no_dbo_s) > 0
