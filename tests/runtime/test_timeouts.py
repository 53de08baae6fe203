"""The per-test limits scale with --stress-count (tests/conftest.py), the faulthandler backstop
fires after pytest-timeout, never before it (docs/testing.md, "Timeouts and the segfault"), and
the slack factor for wall-clock bounds (DBO_TEST_SLACK, tests/support/timing.py) is read strictly."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.support.paths import ROOT
from tests.support.timing import ENV, read_slack, slack

PROBE = "DBO_TIMEOUT_PROBE"


def test_the_backstop_fires_after_pytest_timeout_and_ends_the_process(request):
    cfg = request.config
    timeout = float(cfg.getini("timeout"))
    assert timeout > 0
    assert cfg.getini("timeout_method") == "signal"
    # faulthandler's watchdog dumps running threads without the GIL: it may only be the backstop.
    assert float(cfg.getini("faulthandler_timeout")) > timeout
    try:
        exits = cfg.getini("faulthandler_exit_on_timeout")
    except ValueError:  # pytest < 9 has no such option: the backstop dumps and the session goes on
        return
    assert exits is True


def test_a_stress_test_gets_timeout_times_count(request, stress_count):
    marker = request.node.get_closest_marker("timeout")
    if stress_count == 1:
        assert marker is None  # the ini's limit applies as is
    else:
        import pytest_timeout

        base = pytest_timeout.get_env_settings(request.config).timeout
        assert marker is not None and marker.args == (base * stress_count,)


def test_a_plain_test_keeps_the_base_timeout(request):
    assert request.node.get_closest_marker("timeout") is None


def test_probe_sleeps(stress_count):
    """Only run by the subprocess check below: a test that uses stress_count and takes 3 s."""
    if os.environ.get(PROBE) != "1":
        pytest.skip(f"helper for the subprocess check; runs with {PROBE}=1")
    time.sleep(3.0)


def _probe(count: int, timeout: float, fh_timeout: float) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
        "tests/runtime/test_timeouts.py::test_probe_sleeps", f"--stress-count={count}",
        "-o", f"timeout={timeout}", "-o", f"faulthandler_timeout={fh_timeout}",
    ]  # fmt: skip
    env = {**os.environ, PROBE: "1"}
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=slack(90))


@pytest.mark.long(20)
@pytest.mark.slow
def test_scaled_limits_hold_in_a_real_session():
    """3 s of work under limits of 1 s (pytest-timeout) and 2.5 s (faulthandler): fails at count 1
    (the control), passes at count 5 (5 s and 12.5 s)."""
    short = _probe(1, timeout=1.0, fh_timeout=2.5)
    assert short.returncode == 1, short.stdout + short.stderr
    assert "Timeout (>1.0s) from pytest-timeout" in short.stdout, short.stdout
    # pytest-timeout ended the test before the faulthandler backstop could dump or exit.
    assert "Timeout (0:" not in short.stderr, short.stderr

    scaled = _probe(5, timeout=1.0, fh_timeout=2.5)
    assert scaled.returncode == 0, scaled.stdout + scaled.stderr
    assert "1 passed" in scaled.stdout
    assert "Timeout (" not in scaled.stderr, scaled.stderr  # the backstop was re-armed at 12.5 s


@pytest.mark.slow
def test_stress_count_below_one_is_a_usage_error():
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "--co",
        "--stress-count=0",
        "tests/runtime/test_timeouts.py",
    ]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=slack(90))
    assert r.returncode == 4, r.stdout + r.stderr
    assert "--stress-count must be >= 1, got 0" in r.stderr


def test_the_slack_factor_is_one_unless_set_and_never_below_one():
    assert read_slack(None) == 1.0 and read_slack("") == 1.0 and read_slack(" ") == 1.0
    assert read_slack("1") == 1.0 and read_slack("2.5") == 2.5
    for bad in ("0.5", "0", "-2", "abc", "inf", "nan"):
        with pytest.raises(ValueError, match=ENV):
            read_slack(bad)


@pytest.mark.slow
def test_a_bad_slack_factor_is_a_usage_error():
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--co", "tests/runtime/test_timeouts.py"]
    env = {**os.environ, ENV: "fast"}
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=slack(90))
    assert r.returncode == 4, r.stdout + r.stderr
    assert f"{ENV} must be a number >= 1, got 'fast'" in r.stderr
