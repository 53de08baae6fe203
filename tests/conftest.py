"""Guards for every test: no thread left behind, no registry entry left behind."""

from __future__ import annotations

import threading
import time

import pytest

from dbo import registry

# Threads that belong to the interpreter or to libraries, not to a test.
_FOREIGN_PREFIXES = ("pytest_timeout", "ThreadPoolExecutor", "asyncio")


def _our_threads(before: set[int]) -> list[threading.Thread]:
    return [
        t
        for t in threading.enumerate()
        if t.ident not in before and t is not threading.main_thread() and not t.name.startswith(_FOREIGN_PREFIXES)
    ]


@pytest.fixture(autouse=True)
def no_leftovers():
    """Fail a test that leaves a live thread or a registry entry behind (waits up to 2 s for exits)."""
    before = {t.ident for t in threading.enumerate()}
    yield
    deadline = time.monotonic() + 2.0
    left = _our_threads(before)
    while left and time.monotonic() < deadline:
        time.sleep(0.01)
        left = _our_threads(before)
    entries = registry.snapshot()
    registry.prune_dead()
    problems = []
    if left:
        problems.append("threads left running: " + ", ".join(f"{t.name} (daemon={t.daemon})" for t in left))
    if entries:
        problems.append("registry not empty: " + "; ".join(e.describe() for e in entries))
    if problems:
        pytest.fail(" / ".join(problems), pytrace=False)


def pytest_addoption(parser):
    parser.addoption(
        "--stress-count",
        action="store",
        type=int,
        default=1,
        help="multiplier for the stress loops and explorations (tests marked 'stress'); default 1",
    )


@pytest.fixture
def stress_count(request) -> int:
    """The --stress-count multiplier (>= 1)."""
    return max(1, int(request.config.getoption("--stress-count")))
