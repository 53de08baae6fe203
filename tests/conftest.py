"""Guards for every test: no thread left behind, no registry entry left behind, and per-test
timeouts that grow with ``--stress-count`` for the tests whose work it multiplies."""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import threading
import time

import pytest

from dbo import registry

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    # Started as a background job of a shell without job control (`cmd &` in a script), the suite
    # inherits SIGINT ignored: Python then installs no KeyboardInterrupt handler, here or in the
    # commands the Ctrl-C tests start, and those tests fail (12 of them) for want of a signal. Restore
    # Python's own handler; the commands started from here then get the default disposition.
    signal.signal(signal.SIGINT, signal.default_int_handler)

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
    """Fail a test that leaves a live thread or a registry entry behind (waits up to 2 s, times the
    DBO_TEST_SLACK factor, for exits)."""
    from tests.support.timing import slack

    before = {t.ident for t in threading.enumerate()}
    yield
    deadline = time.monotonic() + slack(2.0)
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


# --- two workers for the whole suite (docs/testing.md, "Two worker processes") ---------------------------

WORKERS = 2
"""Worker processes a whole-suite run starts (pytest-xdist), where the machine has that many CPUs."""

SHARED_SCOPES = {
    "tests/fidelity/test_measured_checks.py": "validate_json",
    "tests/prediction/test_trust.py": "validate_json",
    "tests/zoo/test_attention_module.py": "validate_json",
    "tests/zoo/test_mla_fp8_cache.py": "validate_json",
    "tests/zoo/models/test_sparse_mla.py": "validate_json",
    "tests/zoo/hardware/test_blackwell_ultra.py": "validate_json",
}
"""Test files scheduled on one worker together because they read one session fixture that takes
seconds (``validate_json``); every other file is a unit of its own. ``pytest_collection_modifyitems``
fails a run in which a file not listed here uses ``validate_json``."""


def whole_suite_on_workers(config) -> bool:
    """Whether this run spreads itself over ``WORKERS`` processes: pytest-xdist is installed, this is not
    one of its workers, the command named no ``-n``/``--dist``/``--tx``, no path or test, no ``-k``
    selection (a ``-m`` tier is the whole tree's tests of that tier: the fast tier spreads too), no ``-s``,
    ``--pdb`` or ``--collect-only``, and the process may use ``WORKERS`` CPUs."""
    o = config.option
    return (
        config.pluginmanager.hasplugin("xdist")
        and not hasattr(config, "workerinput")
        and getattr(o, "numprocesses", None) is None
        and getattr(o, "dist", "no") == "no"
        and not getattr(o, "tx", None)
        and config.args_source == pytest.Config.ArgsSource.TESTPATHS
        and not o.keyword
        and o.capture != "no"
        and not o.usepdb
        and not o.collectonly
        and len(os.sched_getaffinity(0)) >= WORKERS
    )


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """A whole-suite run (``whole_suite_on_workers``) runs on ``WORKERS`` processes, a file (or a
    ``SHARED_SCOPES`` group) per unit, longest tests first; ``-n 0`` keeps it in one process."""
    if whole_suite_on_workers(config):
        config.option.numprocesses = WORKERS
        config.option.dist = "loadfile"
        config.option.loadscopereorder = False  # collection order: the ``long`` tests first


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` with the ``SHARED_SCOPES`` files as one unit each group."""
    if config.option.dist != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedFileScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return SHARED_SCOPES.get(path, path)

    return SharedFileScheduling(config, log)


def pytest_addoption(parser):
    parser.addoption(
        "--stress-count",
        action="store",
        type=int,
        default=1,
        help="multiplier for the stress loops and explorations (tests that use the stress_count "
        "fixture); their pytest-timeout and faulthandler timeouts are multiplied by it too; default 1",
    )


def pytest_configure(config):
    if config.getoption("--stress-count") < 1:
        raise pytest.UsageError(f"--stress-count must be >= 1, got {config.getoption('--stress-count')}")
    try:  # the slack factor for wall-clock bounds, read once from DBO_TEST_SLACK (tests/support/timing.py)
        from tests.support import timing  # noqa: F401
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def pytest_report_header(config):
    from tests.support.timing import ENV, SLACK

    if SLACK != 1.0:
        return f"{ENV}={SLACK:g}: every wall-clock liveness bound in the tests is {SLACK:g} x longer"
    return None


def _scaled(item) -> int:
    """The timeout multiplier of one test: --stress-count if it uses the stress_count fixture, else 1."""
    return int(item.config.getoption("--stress-count")) if "stress_count" in getattr(item, "fixturenames", ()) else 1


def long_seconds(item) -> float:
    """The seconds a ``long``-marked test (or file) takes on a worker, as its marker says
    (``@pytest.mark.long(125)``; a bare ``long`` counts 20); 0 for any other test."""
    marker = item.get_closest_marker("long")
    if marker is None:
        return 0.0
    return float(marker.args[0]) if marker.args else 20.0


def pytest_collection_modifyitems(config, items):
    """Put the ``long`` tests first, longest first (``long_seconds``: a run spread over workers then
    starts them first rather than one worker running one alone at the end; a stable sort, the rest in
    collection order), hold ``SHARED_SCOPES`` to every user of ``validate_json``, and give every test
    that uses ``stress_count`` a pytest-timeout of base x count.

    The base is the effective timeout (``--timeout``, PYTEST_TIMEOUT or the ini's ``timeout``); a
    test's own ``@pytest.mark.timeout`` wins. Without this, ``--stress-count 10`` multiplies the
    work of a test by up to 10 while its limit stays at 120 s.
    """
    items.sort(key=lambda item: -long_seconds(item))
    unshared = sorted(
        {i.nodeid.split("::", 1)[0] for i in items if "validate_json" in getattr(i, "fixturenames", ())}
        - set(SHARED_SCOPES)
    )
    if unshared:
        raise pytest.UsageError(f"tests/conftest.py: add {', '.join(unshared)} to SHARED_SCOPES (uses validate_json)")
    count = int(config.getoption("--stress-count"))
    if count == 1 or not config.pluginmanager.hasplugin("timeout"):
        return
    import pytest_timeout

    base = pytest_timeout.get_env_settings(config).timeout
    if not base:  # 0 or None: timeouts are off
        return
    for item in items:
        if _scaled(item) > 1 and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(base * count))


def _faulthandler_fd(config) -> int:
    try:  # the duplicate of stderr that pytest's faulthandler plugin writes to
        from _pytest.faulthandler import fault_handler_stderr_fd_key

        return config.stash[fault_handler_stderr_fd_key]
    except (ImportError, KeyError):
        return sys.__stderr__.fileno()


def _exit_on_timeout(config) -> bool:
    try:  # the ini option exists from pytest 9 on
        return bool(config.getini("faulthandler_exit_on_timeout"))
    except ValueError:
        return False


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Re-arm pytest's faulthandler backstop at ``faulthandler_timeout`` x count for scaled tests, and at
    1.5 x a test's own ``@pytest.mark.timeout`` where that is longer (else a test allowed 600 s is ended
    by the backstop at 180 s).

    pytest arms ``faulthandler.dump_traceback_later`` around each test (its runtest_protocol
    wrapper, which also cancels it at the end); this runs inside that wrapper, so arming again
    replaces the deadline. The backstop must stay *later* than pytest-timeout: a faulthandler dump
    reads the frames of running threads without the GIL and can crash the process (see
    docs/testing.md, "Timeouts and the segfault").
    """
    count = _scaled(item)
    own = _own_timeout(item)
    fh_timeout = float(item.config.getini("faulthandler_timeout") or 0.0)
    if fh_timeout <= 0 or not item.config.pluginmanager.hasplugin("faulthandler"):  # -p no:faulthandler
        return
    later = max(fh_timeout * count, own * 1.5)  # a test's own longer pytest-timeout moves the backstop too
    if later > fh_timeout:
        faulthandler.dump_traceback_later(
            later,
            file=_faulthandler_fd(item.config),
            exit=_exit_on_timeout(item.config),
        )


def _own_timeout(item) -> float:
    """The seconds of a test's own ``@pytest.mark.timeout(...)`` (0 without one)."""
    marker = item.get_closest_marker("timeout")
    if marker is None:
        return 0.0
    value = marker.args[0] if marker.args else marker.kwargs.get("timeout", 0)
    try:
        return float(value or 0)
    except (TypeError, ValueError):
        return 0.0


@pytest.fixture
def stress_count(request) -> int:
    """The --stress-count multiplier (>= 1)."""
    return max(1, int(request.config.getoption("--stress-count")))


@pytest.fixture(scope="session")
def validate_json(tmp_path_factory):
    """``python -m demos.validate CHECK --no-progress --json PATH`` run once per session per check (the
    measured checks take seconds each, and tests in several files read them): ``validate_json("silicon")``
    is the JSON that check wrote, parsed afresh for each caller."""
    from demos.validate import main

    written: dict[str, str] = {}

    def run(check: str) -> dict:
        if check not in written:
            out = tmp_path_factory.mktemp("validate") / f"{check}.json"
            assert main([check, "--no-progress", "--json", str(out)]) == 0
            written[check] = out.read_text()
        return json.loads(written[check])

    return run
