"""python -m demos.scenarios: every scenario runs, is bounded, and shows what it claims."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from dbo.trace import KernelRecord, Window, busy_fraction, engine_sums, merge_intervals, overlap_seconds, render_ascii
from demos import scenarios
from tests.support.timing import slack
from tests.support.workspace_fixtures import sanitizer_off  # noqa: F401 (autouse: the sanitizer is off)
from workspace import WorkspaceLockedError

MiB = 1 << 20


def test_list_and_unknown_name(capsys) -> None:
    assert scenarios.main(["--list"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == list(scenarios.SCENARIOS)
    assert {
        "orphaned-views",
        "undersized-at-lock",
        "stale-view",
        "foreign-thread",
        "missing-wait",
        "late-event",
        "parked-failure",
        "policies",
    } <= set(listed)
    assert scenarios.main(["no-such-thing"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown scenario 'no-such-thing'" in err[0]


@pytest.mark.slow
def test_command_line_unknown_name_exits_non_zero() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "demos.scenarios", "bogus"], capture_output=True, text=True, timeout=slack(60)
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
    out = capsys.readouterr().out
    assert "What happens" in out
    _doc_figures_printed("peak", out)


def test_undersized_at_lock(capsys) -> None:
    r = scenarios.run_scenario("undersized-at-lock")
    assert r["requester"]["undersized_at_lock"] == [1]
    assert isinstance(r["requester"]["locked_step_error"], WorkspaceLockedError)
    for p in ("lockstep", "deferred-lockstep"):
        assert r[p]["undersized_at_lock"] == [] and r[p]["locked_step"] == "ok"
        assert r[p]["allocations_after_lock"] == 0
    out = capsys.readouterr().out
    assert "0.00 MiB" in out
    _doc_figures_printed("slots at lock", out)


def _doc_figures_printed(what: str, out: str) -> None:
    """Every per-policy figure line docs/scenarios.md quotes for this scenario (``what``: the words
    the line starts with after the policy) is a line the scenario printed, so the page cannot keep
    a figure the scenario no longer gives."""
    import re

    from tests.support.paths import REPO

    policy = r"^\s+(lockstep|requester|deferred-lockstep)\s+"
    quoted = re.findall(policy + "(" + what + r".*)$", (REPO / "docs" / "scenarios.md").read_text(), re.M)
    printed = set(re.findall(policy + "(" + what + r".*)$", out, re.M))
    assert len(quoted) == 3 and all(q in printed for q in quoted), (quoted, printed)


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
    assert len(r["races"]) == 2 and r["races_fixed"] == []  # one per ubatch: recv on comm, consume on compute
    # threads: whichever of the two ran second completes the race (the consume usually runs first)
    assert all({x.first[0], x.second[0]} == {"recv", "consume"} for x in r["races"])
    assert all(sorted(x.access.split("-")) == ["read", "write"] for x in r["races"])


@pytest.mark.parametrize(
    "name, pair",
    [
        ("race-compute-streams", ("produce", "consume")),
        ("race-recv-hook", ("receive", "transfer")),
        ("race-event-after-yield", ("produce", "consume")),
    ],
)
def test_race_scenarios_are_found_on_every_cpu_backend(name, pair) -> None:
    from demos.failures.race_cases import BACKENDS, finding_names

    r = scenarios.run_scenario(name)
    assert set(r["bug"]) == set(BACKENDS) == {"virtual", "inline", "threads"}
    for backend in BACKENDS:
        found = r["bug"][backend]
        assert found, f"{name}: no race found on {backend}"
        assert all(set(p) == set(pair) for p in finding_names(found)), (backend, finding_names(found))
        assert r["fixed"][backend] == [], f"{name}: the fixed program still races on {backend}"
        assert r["fixed_values"][backend] == r["expected"]
    # virtual and inline run nothing concurrently: the bug never shows in their numbers, yet is found
    assert r["bug_values"]["virtual"] == r["expected"] and r["bug_values"]["inline"] == r["expected"]


def test_late_event() -> None:
    r = scenarios.run_scenario("late-event")
    right, late = r["right"], r["late"]
    assert right["overlap_s"] == pytest.approx(right["comm_s"]), "all comm hidden when recorded before the yield"
    assert late["overlap_s"] < right["overlap_s"] and late["step_s"] > right["step_s"]
    assert any("D" in line for line in right["timeline"])


def test_parked_failure() -> None:
    t0 = time.perf_counter()
    r = scenarios.run_scenario("parked-failure")
    assert time.perf_counter() - t0 < slack(10)
    err = r["error"]
    assert err is not None and err.ubatch_id == 1 and isinstance(err.__cause__, RuntimeError)
    assert r["seconds"] < slack(5) and r["threads_left"] == []
    ref = r["reference"]
    assert ref["hung"] and ref["threads_left"] == [] and len(ref["lost"]) == 1


# --- the overlap measure the late-event scenario reports (dbo.trace) -------------------------------


def _k(stream: str, kind: str, start: float, end: float, ubatch: int | None = 0) -> KernelRecord:
    return KernelRecord(stream, f"{kind}{start}", kind, ubatch, start, end)


def test_overlapping_comm_kernels_over_one_compute_kernel_count_once() -> None:
    # compute [0, 10]; two comm kernels on two streams, [2, 6] and [4, 8], overlap each other on
    # [4, 6]: comm ran during compute for [2, 8] = 6 s, not 4 + 4 = 8 s
    recs = [_k("compute", "compute", 0, 10), _k("comm0", "comm", 2, 6), _k("comm1", "comm", 4, 8, 1)]
    assert overlap_seconds(recs) == pytest.approx(6.0)
    # and the same with the kinds swapped: two overlapping compute kernels over one comm kernel
    swapped = [_k("comm", "comm", 0, 10), _k("compute0", "compute", 2, 6), _k("compute1", "compute", 4, 8, 1)]
    assert overlap_seconds(swapped) == pytest.approx(6.0)


def test_timeline_helpers_merge_and_measure() -> None:
    assert merge_intervals([(5, 7), (0, 2), (1, 3), (4, 4), (3, 3.5)]) == [(0, 3.5), (5, 7)]
    recs = [_k("compute", "compute", 0, 4), _k("comm", "comm", 3, 6), _k("comm", "comm", 8, 9)]
    assert overlap_seconds(recs) == pytest.approx(1.0)
    assert busy_fraction(recs, "comm", 0, 10) == pytest.approx(0.4)
    assert busy_fraction(recs, "comm", 5, 5) == 0.0
    assert engine_sums(recs) == {"compute": 4.0, "comm": 4.0}


def test_ascii_timeline_owner_comes_from_the_record_not_the_name() -> None:
    # the kernel names claim ubatch 0; the records say 1 and None: the records win
    recs = [
        KernelRecord("compute", "attn L0 u0", "compute", 1, 0.0, 1.0),
        KernelRecord("comm", "dispatch L0 u0", "comm", None, 0.0, 1.0),
    ]
    lines = render_ascii(
        recs, Window(0.0, 1.0, 0.0), width=4, op_of=lambda r: r.name.split()[0], op_letters={"attn": "A"}
    )
    assert "  compute   1111" in lines and "  comm      ????" in lines
    assert "  compute   AAAA" in lines and "  comm      ????" in lines
    with pytest.raises(ValueError):
        render_ascii(recs, Window(0.0, 1.0, 0.0), width=0)
