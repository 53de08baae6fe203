"""python -m demos.scenarios: every scenario runs, is bounded, and shows what it claims."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from demos import scenarios
from workspace import WorkspaceLockedError, sanitizer

MiB = 1 << 20


@pytest.fixture(autouse=True)
def sanitizer_off():
    sanitizer.disable()
    yield
    sanitizer.disable()


def test_list_and_unknown_name(capsys) -> None:
    assert scenarios.main(["--list"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == list(scenarios.SCENARIOS)
    assert {
        "orphaned-views", "undersized-at-lock", "stale-view", "foreign-thread",
        "missing-wait", "late-event", "parked-failure", "policies",
    } <= set(listed)
    assert scenarios.main(["no-such-thing"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown scenario 'no-such-thing'" in err[0]


def test_command_line_unknown_name_exits_non_zero() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "demos.scenarios", "bogus"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode != 0 and proc.stdout == ""
    assert proc.stderr.strip().count("\n") == 0 and "bogus" in proc.stderr


def test_orphaned_views(capsys) -> None:
    r = scenarios.run_scenario("orphaned-views")
    assert r["lockstep"]["orphaned_bytes"] == MiB and r["lockstep"]["peak_bytes"] == 9 * MiB
    assert r["lockstep"]["findings"] == ["orphaned-view"]
    for p in ("requester", "deferred-lockstep"):
        assert r[p]["orphaned_bytes"] == 0 and r[p]["peak_bytes"] == 8 * MiB and r[p]["findings"] == []
    assert all(row["sibling_view_intact"] for row in r.values())
    assert "What happens" in capsys.readouterr().out


def test_undersized_at_lock(capsys) -> None:
    r = scenarios.run_scenario("undersized-at-lock")
    assert r["requester"]["undersized_at_lock"] == [1]
    assert isinstance(r["requester"]["locked_step_error"], WorkspaceLockedError)
    for p in ("lockstep", "deferred-lockstep"):
        assert r[p]["undersized_at_lock"] == [] and r[p]["locked_step"] == "ok"
        assert r[p]["allocations_after_lock"] == 0
    assert "0.00 MiB" in capsys.readouterr().out


def test_policies_table_picks_the_default(capsys) -> None:
    r = scenarios.run_scenario("policies")
    rows = {row["policy"]: row for row in r["rows"]}
    best = [p for p, row in rows.items() if row["orphaned_bytes"] == 0 and not row["undersized_at_lock"]]
    assert best == ["deferred-lockstep"] == [scenarios.DEFAULT_GROWTH]
    assert rows["deferred-lockstep"]["warmup_allocations"] < rows["lockstep"]["warmup_allocations"]
    out = capsys.readouterr().out
    assert "| policy |" in out and "| deferred-lockstep |" in out


def test_stale_view() -> None:
    r = scenarios.run_scenario("stale-view")
    assert all(x["got"] != x["expected"] for x in r["results"])
    assert {f.kind for f in r["findings"]} == {"stale-view"} and {f.ubatch for f in r["findings"]} == {0, 1}


def test_foreign_thread() -> None:
    r = scenarios.run_scenario("foreign-thread")
    assert type(r["ours_error"]).__name__ == "UnregisteredThreadError"
    assert r["ours"][0] == 256.0 and r["ours_findings"] == []
    assert r["reference"][0] != 256.0
    (f,) = r["reference_findings"]
    assert f.kind == "cross-slot" and f.ubatch is None and f.owner == 0


def test_missing_wait() -> None:
    r = scenarios.run_scenario("missing-wait")
    assert r["right"] == r["expected"]
    assert r["wrong"] != r["expected"], "without the event the compute stream reads before the data lands"
    assert r["findings"] == []


def test_late_event() -> None:
    r = scenarios.run_scenario("late-event")
    right, late = r["right"], r["late"]
    assert right["overlap_s"] == pytest.approx(right["comm_s"]), "all comm hidden when recorded before the yield"
    assert late["overlap_s"] < right["overlap_s"] and late["step_s"] > right["step_s"]
    assert any("D" in line for line in right["timeline"])


def test_parked_failure() -> None:
    t0 = time.perf_counter()
    r = scenarios.run_scenario("parked-failure")
    assert time.perf_counter() - t0 < 10
    err = r["error"]
    assert err is not None and err.ubatch_id == 1 and isinstance(err.__cause__, RuntimeError)
    assert r["seconds"] < 5 and r["threads_left"] == []
    ref = r["reference"]
    assert ref["hung"] and ref["threads_left"] == [] and len(ref["lost"]) == 1
