"""Validation: table and crossover logic on synthetic measurements, a virtual machine predicted by its
own profile, the CLI's errors, and the hidden-fraction bound that cannot pass 100%."""

from __future__ import annotations

import json
import random
import statistics
from dataclasses import replace

import pytest

from dbo.costs import LinkProfile, scale_profile
from dbo.trace import KernelRecord, engine_sums, overlap_seconds
from demos import validate as cli
from demos.engine_times import EngineTimes, overlap_hidden_fraction
from demos.fidelity import checks
from demos.fidelity import validation as val
from demos.fidelity.validation import Figures, Point, Row, Validation, crossover, format_table, summarize
from demos.toy.results import past_ideal_note
from tests.support.profiles import validation_machine

# --- table and crossover logic on synthetic measurements ------------------------------------------------


def _rows(speedups_meas, speedups_pred, sizes=(16, 128, 1024), schedule="ht", ratio=1.0, err=0.0):
    out = []
    for t, sm, sp in zip(sizes, speedups_meas, speedups_pred):
        m = Figures(1.0, 1.0 / sm, 0.9)
        p = Figures(1.0 + err, (1.0 + err) / sp, 0.9)
        out.append(Row(Point(schedule, t, ratio), m, p))
    return out


@pytest.mark.parametrize(
    "speedups,want",
    [
        ((0.8, 1.2, 1.5), 128),
        ((1.1, 1.2, 1.5), 16),
        ((1.2, 0.9, 1.3), 1024),  # pays at 16 but not at 128: from 1024 on
        ((0.5, 0.6, 0.9), None),
        ((0.5, 0.6, 1.0), None),  # exactly 1 does not pay
    ],
)
def test_crossover_is_the_smallest_size_from_which_dbo_pays(speedups, want):
    rows = _rows(speedups, speedups)
    assert crossover(rows, "ht", "measured") == want
    assert crossover(rows, "ht", "predicted") == want
    assert crossover(rows, "ll", "measured") is None  # no ll rows


def test_summary_errors_and_crossover_within_one_grid_step():
    rows = _rows((0.8, 1.2, 1.5), (1.1, 1.3, 1.6), err=0.1)  # predicted crossover one step early
    rows += _rows((0.8, 0.9, 1.5), (1.1, 1.3, 1.6), schedule="ll")  # two steps early
    s = summarize(Validation("threads", "p", rows))
    assert s["crossover"]["ht eager comm 1x"] == {"measured": 128, "predicted": 16, "within_one_step": True}
    assert s["crossover"]["ll eager comm 1x"] == {"measured": 1024, "predicted": 16, "within_one_step": False}
    errs = sorted(abs(e) for r in rows for e in (r.err_no_dbo, r.err_dbo))
    assert s["median_abs_step_error"] == pytest.approx((errs[5] + errs[6]) / 2)
    assert s["max_abs_speedup_error"] == pytest.approx(max(abs(r.err_speedup) for r in rows))
    assert s["max_abs_step_error"] == pytest.approx(errs[-1])


def test_never_paying_on_both_sides_counts_as_agreement_and_one_side_never_as_past_the_grid():
    rows = _rows((0.5, 0.6, 0.9), (0.5, 0.6, 0.9)) + _rows((0.5, 0.6, 0.9), (0.5, 0.6, 1.2), schedule="ll")
    c = summarize(Validation("threads", "p", rows))["crossover"]
    assert c["ht eager comm 1x"]["within_one_step"] is None  # never, never
    assert c["ll eager comm 1x"] == {"measured": None, "predicted": 1024, "within_one_step": True}


def test_table_has_every_row_the_errors_and_the_crossovers():
    rows = _rows((0.8, 1.2, 1.5), (0.9, 1.25, 1.4), err=0.2)
    text = format_table(Validation("threads", "my-profile", rows, notes=["a note"]))
    assert "my-profile" in text and "note: a note" in text
    assert text.count("ht    eager") == 3
    assert "+20%" in text  # no-DBO error of every row
    assert "step time |error|: median" in text
    assert "crossover ht eager comm 1x: DBO pays from 128 tokens measured, 128 tokens predicted" in text
    assert (
        "targets: median_abs_step_error <= 10%: no; max_abs_step_error <= 25%: no; "
        "speedups within 0.1 or their spread: 2/3" in text
    )
    # 1.4 vs 1.5, a hair past; a row without runs has no spread: 0.1 alone
    assert "speedups off by more than 0.1 and their own spread: ht eager 1024 tokens comm 1x: -0.10" in text


def test_a_slowdown_over_a_few_consecutive_runs_spoils_no_points_median(monkeypatch):
    # the machine slows down for three measured runs in a row; run in passes over the grid, each
    # point has at most one of its three runs inside the slowdown, and the median drops it (run
    # point by point, the first point's second and third runs would both have been slow)
    pts = val.grid(True, sizes=(16, 128, 1024), ratios=(1.0,), schedules=("ht",), modes=("eager",))
    measured = []
    link = LinkProfile("l", 1e-6, 1e9)

    def fake(cfg):
        if cfg.meta:  # the prediction
            return Figures(1.0, 0.5, None), link, 1
        measured.append(cfg.tokens)
        slow = len(measured) in (2, 3, 4)
        return Figures(1.0, 5.0 if slow else 0.5, None), link, 1

    monkeypatch.setattr(val, "_figures", fake)
    seen = []
    v = val.validate("virtual", MACHINE, pts, steps=1, repeats=3, progress=seen.append)
    assert measured == [16, 128, 1024] * 3  # pass after pass
    assert [r.measured.dbo_s for r in v.rows] == [0.5, 0.5, 0.5]
    assert seen[0] == "pass 1/3, point 1/3: ht 16 tokens, comm 1x, eager" and seen[-1].startswith("pass 3/3, point 3/3")


def test_each_run_is_kept_beside_the_prediction_over_its_own_link(monkeypatch):
    # run k calibrates a link of k GB/s and measures a speedup of 1 + 0.2k; the prediction over
    # link k gives 1 + 0.1k, so run k's own error is -0.1k: only a prediction paired with its own
    # run's link gives these
    pts = val.grid(True, sizes=(16,), ratios=(1.0,), schedules=("ht",), modes=("eager",))
    measured = []

    def fake(cfg):
        if cfg.meta:
            k = cfg.link.bandwidth / 1e9
            return Figures(1.0, 1.0 / (1 + 0.1 * k), None), cfg.link, 1
        measured.append(cfg)
        k = len(measured)
        return Figures(1.0, 1.0 / (1 + 0.2 * k), None), LinkProfile("l", 1e-6, k * 1e9), 1

    monkeypatch.setattr(val, "_figures", fake)
    (row,) = val.validate("virtual", MACHINE, pts, steps=1, repeats=3).rows
    assert [m.speedup for m, _ in row.runs] == pytest.approx([1.2, 1.4, 1.6])
    assert row.run_speedup_errors() == pytest.approx([-0.1, -0.2, -0.3])
    assert row.measured.speedup == pytest.approx(1.4) and row.predicted.speedup == pytest.approx(1.2)
    assert row.measured_speedup_spread() == pytest.approx(0.4)


def _run_row(tokens, meas, pred):
    """A row of runs with these measured and predicted speedups (the medians as its figures)."""
    runs = tuple((Figures(1.0, 1.0 / m, None), Figures(1.0, 1.0 / q, None)) for m, q in zip(meas, pred))
    mid = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    return Row(Point("ht", tokens, 0.5), Figures(1.0, 1.0 / mid(meas), None), Figures(1.0, 1.0 / mid(pred), None), runs)


def test_a_speedup_miss_within_its_spread_passes_and_the_spread_is_summarized():
    row = _run_row
    rows = [
        row(16, (1.00, 1.02, 1.01), (1.03, 1.03, 1.03)),  # within 0.1, spread 0.02
        row(128, (0.90, 1.05, 0.95), (1.05, 1.07, 1.07)),  # +0.12 at the medians; runs +0.15, +0.02, +0.12
        row(1024, (1.40, 1.40), (1.41, 1.41)),  # spread 0
    ]
    s = summarize(Validation("threads", "p", rows))
    # 128's +0.12 misses 0.1 but not its own measured spread of 0.15
    assert s["speedups_off"] == []
    assert s["targets"]["speedups within 0.1 or their spread"] == "3/3"
    assert s["speedups_within_spread"] == [
        {"point": "ht eager 128 tokens comm 0.5x", "err_speedup": pytest.approx(0.12), "spread": pytest.approx(0.15)}
    ]
    assert s["measured_speedup_spread"] == {
        "runs": 3,
        "median": pytest.approx(0.02),
        "max": pytest.approx(0.15),
        "max_point": "ht eager 128 tokens comm 0.5x",
    }
    text = format_table(Validation("threads", "p", rows))
    assert (
        "measured speedup between a point's 3 runs: moved by a median 0.02, at most 0.15 "
        "(ht eager 128 tokens comm 0.5x); the target allows 0.1 or a point's own spread" in text
    )
    assert "within their own spread (not 0.1): ht eager 128 tokens comm 0.5x: +0.12 (spread 0.15)" in text
    assert "speedups off by more than" not in text


def test_the_speedup_target_is_0_1_or_the_points_own_spread_when_larger():
    wide = _run_row(16, (0.90, 1.00, 1.10), (1.05, 1.15, 1.25))  # every run +0.15; measured spread 0.2
    narrow = _run_row(128, (1.00, 1.02, 1.05), (1.20, 1.17, 1.16))  # runs +0.20, +0.15, +0.11; spread 0.05
    assert wide.err_speedup == pytest.approx(0.15) and wide.measured_speedup_spread() == pytest.approx(0.2)
    assert narrow.err_speedup == pytest.approx(0.15) and narrow.measured_speedup_spread() == pytest.approx(0.05)
    assert wide.speedup_tolerance() == pytest.approx(0.2) and narrow.speedup_tolerance() == pytest.approx(0.1)
    s = summarize(Validation("threads", "p", [wide, narrow]))
    assert s["targets"]["speedups within 0.1 or their spread"] == "1/2"
    assert [w["point"] for w in s["speedups_within_spread"]] == ["ht eager 16 tokens comm 0.5x"]
    assert s["speedups_off"] == ["ht eager 128 tokens comm 0.5x: +0.15 (runs +0.20, +0.15, +0.11: off in 3 of 3)"]
    text = format_table(Validation("threads", "p", [wide, narrow]))
    assert "within their own spread (not 0.1): ht eager 16 tokens comm 0.5x: +0.15 (spread 0.20)" in text
    assert "speedups off by more than 0.1 and their own spread: ht eager 128 tokens comm 0.5x: +0.15" in text


def test_a_row_without_runs_is_held_to_0_1():
    # no runs, no spread: the medians' +0.15 misses, +0.09 passes
    off, near = (
        Row(Point("ll", 16, 1.0), Figures(1.0, 1.0, None), Figures(1.0, 1 / 1.15, None)),
        Row(Point("ll", 128, 1.0), Figures(1.0, 1.0, None), Figures(1.0, 1 / 1.09, None)),
    )
    assert off.measured_speedup_spread() is None and off.speedup_tolerance() == 0.1
    s = summarize(Validation("threads", "p", [off, near]))
    assert s["targets"]["speedups within 0.1 or their spread"] == "1/2"
    assert s["speedups_off"] == ["ll eager 16 tokens comm 1x: +0.15"] and s["speedups_within_spread"] == []


def test_errors_pair_each_run_with_its_own_prediction():
    # one point's three runs from a validation on 2026-12-02 (ms): the measured no-DBO and DBO
    # medians are run 2's, the predicted no-DBO median is run 3's and its DBO median run 2's;
    # the difference of the medians' speedups (+0.11) compares run 2's measurement with a mix of
    # runs 2 and 3, while each run's own prediction is within 0.09 of it
    runs = tuple(
        (Figures(mn / 1e3, md / 1e3, None), Figures(pn / 1e3, pd / 1e3, None))
        for mn, md, pn, pd in ((18.18, 22.02, 15.72, 18.18), (15.70, 21.80, 14.66, 18.16), (15.20, 18.81, 15.03, 18.16))
    )
    meas, pred = val._median_figures([m for m, _ in runs]), val._median_figures([q for _, q in runs])
    row = Row(Point("ht", 16, 0.5), meas, pred, runs)
    assert pred.speedup - meas.speedup == pytest.approx(0.107, abs=1e-3)
    assert row.run_speedup_errors() == pytest.approx([0.039, 0.087, 0.019], abs=1e-3)
    assert row.err_speedup == pytest.approx(0.039, abs=1e-3)  # the median of the runs' own errors
    assert row.err_no_dbo == pytest.approx(statistics.median([15.72 / 18.18 - 1, 14.66 / 15.70 - 1, 15.03 / 15.20 - 1]))
    assert row.err_dbo == pytest.approx(statistics.median([18.18 / 22.02 - 1, 18.16 / 21.80 - 1, 18.16 / 18.81 - 1]))
    assert summarize(Validation("threads", "p", [row]))["speedups_off"] == []


def test_rows_without_runs_keep_the_plain_miss_and_no_spread():
    rows = _rows((0.8, 1.2, 1.5), (0.9, 1.25, 1.4))
    s = summarize(Validation("threads", "p", rows))
    assert s["speedups_off"] == ["ht eager 1024 tokens comm 1x: -0.10"]
    assert s["measured_speedup_spread"] is None
    assert "measured speedup between" not in format_table(Validation("threads", "p", rows))


def test_a_point_that_cannot_run_is_skipped_in_every_pass(monkeypatch):
    pts = val.grid(True, sizes=(16, 128), ratios=(1.0,), schedules=("ht",), modes=("eager",))
    calls = []

    def fake(cfg):
        if cfg.tokens == 16 and not cfg.meta:
            calls.append(cfg.tokens)
            raise val.ConfigError("comm ratio too small")
        return Figures(1.0, 0.5, None), LinkProfile("l", 1e-6, 1e9), 1

    monkeypatch.setattr(val, "_figures", fake)
    v = val.validate("virtual", MACHINE, pts, steps=1, repeats=3)
    assert [r.point.tokens for r in v.rows] == [128] and calls == [16]
    assert len(v.notes) == 1 and "16 tokens" in v.notes[0]


def test_a_point_with_a_dtype_in_its_shapes_takes_another_on_top():
    pts = val.grid(True, backend="cuda", sizes=(16,), ratios=(1.0,), schedules=("ht",), modes=("eager",))
    assert dict(pts[0].shapes)["dtype"] == "bfloat16"
    assert pts[0].config(backend="virtual", dtype="float32").dtype == "float32"


def test_an_empty_validation_still_formats():
    text = format_table(Validation("threads", "p", [], notes=["ht 16 tokens comm 0.5x eager: skipped (too small)"]))
    assert "median  n/a" in text or "n/a" in text
    assert "skipped" in text


def test_grid_covers_schedules_sizes_ratios_and_modes():
    pts = val.grid(True)
    assert {p.schedule for p in pts} == {"ht", "ll"}
    assert {p.comm_ratio for p in pts} == {0.5, 1.0, 2.0}
    sizes = sorted({p.tokens for p in pts})
    assert len(sizes) >= 3 and sizes[0] <= 16 and sizes[-1] >= 1024
    assert {p.mode for p in pts} == ({"eager", "graph"} if val.graph_supported() else {"eager"})
    assert not any(p.mode == "graph" and p.schedule == "ht" for p in pts)  # the demo cannot capture ht


# --- a virtual machine predicted by its own profile, and by a wrong one ----------------------------------

MACHINE = validation_machine()


def test_the_machines_own_profile_predicts_it_exactly():
    pts = val.grid(True, sizes=(8, 64), ratios=(1.0,), schedules=("ht",), modes=("eager",), layers=1, hidden=64)
    v = val.validate("virtual", MACHINE, pts, steps=1, truth=MACHINE)
    assert len(v.rows) == 2 and not v.notes
    for r in v.rows:
        assert r.err_no_dbo == pytest.approx(0, abs=1e-9)
        assert r.err_dbo == pytest.approx(0, abs=1e-9)
        assert r.err_speedup == pytest.approx(0, abs=1e-9)


def test_a_twice_slower_device_shows_as_errors():
    pts = val.grid(True, sizes=(512,), ratios=(1.0,), schedules=("ll",), modes=("eager",), layers=1, hidden=64)
    slow = scale_profile(MACHINE, 0.5)
    v = val.validate("virtual", slow, pts, steps=1, truth=MACHINE)
    r = v.rows[0]
    assert r.err_no_dbo > 0.3 and r.err_dbo > 0.3  # the link is the measured run's: comm is unchanged


@pytest.mark.parametrize(
    "step_s,steps,min_time,want",
    [
        (0.004, 5, 0.1, 25),  # small steps: enough of them to fill min_time
        (0.03, 5, 0.1, 5),  # long enough already
        (1e-6, 5, 0.1, val.MAX_STEPS),  # capped
        (0.004, 5, 0.0, 5),  # 0: exactly steps
        (0.0, 7, 0.1, 7),  # no guess: as asked
    ],
)
def test_steps_for_fills_the_minimum_time_within_the_cap(step_s, steps, min_time, want):
    assert val.steps_for(step_s, steps, min_time) == want


@pytest.mark.slow
def test_validate_times_short_steps_for_the_minimum_time(monkeypatch):
    seen = []
    real = val._figures

    def figures(cfg):
        if not cfg.meta:  # the measured run (the guess and the prediction are shape-only)
            seen.append((cfg.tokens, cfg.steps))
        return real(cfg)

    monkeypatch.setattr(val, "_figures", figures)
    pts = val.grid(True, sizes=(8, 512), ratios=(1.0,), schedules=("ll",), modes=("eager",), layers=1, hidden=64)
    guess = {
        p.tokens: val._figures(
            p.config(backend="virtual", profile=MACHINE, steps=1, warmup=1, meta=True, dtype="float32")
        )[0].no_dbo_s
        for p in pts
    }
    seen.clear()
    v = val.validate("virtual", MACHINE, pts, steps=2, min_time=0.01, truth=MACHINE)
    assert len(v.rows) == 2
    assert seen == [(t, val.steps_for(guess[t], 2, 0.01)) for t in (8, 512)]
    assert seen[0][1] > 2  # the small step got more steps than asked


# --- the command line ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--profile", "/nonexistent/p.json"], "cannot read device profile"),
        (["--profile", "no-such-profile"], "unknown device profile"),
        (["--json", "/nonexistent-dir/v.json"], "does not exist"),
        (["--sizes", "0,16"], "positive"),
        (["--ratios", "x"], "comma-separated"),
        (["--schedules", "xx"], "unknown schedule"),
        (["--steps", "0"], "positive integer"),
        (["--min-time", "-1"], "seconds >= 0"),
        (["--min-time", "soon"], "seconds >= 0"),
        (["--backend", "inline"], "invalid choice"),
    ],
)
@pytest.mark.parametrize("spelling", [[], ["grid"]], ids=["default", "grid"])
def test_cli_bad_arguments_are_one_line_and_exit_2(argv, needle, spelling, capsys, monkeypatch):
    monkeypatch.setattr(checks, "validate", lambda *a, **k: pytest.fail("ran despite a bad argument"))
    monkeypatch.setattr(checks, "calibrate", lambda *a, **k: pytest.fail("calibrated despite a bad argument"))
    assert cli.main(spelling + argv) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


def test_cli_runs_a_grid_and_writes_json(tmp_path, capsys, monkeypatch):
    real = val.validate
    monkeypatch.setattr(
        checks,
        "validate",
        lambda backend, profile, points, **kw: real(
            "virtual",
            profile,
            [replace(p, shapes=(("hidden", 64), ("layers", 1))) for p in points],
            steps=1,
            truth=MACHINE,
        ),
    )
    path = tmp_path / "m.json"
    MACHINE.to_json(path)
    out = tmp_path / "v.json"
    assert (
        cli.main(
            [
                "--profile",
                str(path),
                "--sizes",
                "8,64",
                "--ratios",
                "1",
                "--schedules",
                "ll",
                "--json",
                str(out),
                "--no-progress",
                "--no-held-out",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "crossover ll eager comm 1x" in text
    d = json.loads(out.read_text())
    assert len(d["rows"]) == (4 if val.graph_supported() else 2)  # eager (and graph) x 2 sizes
    assert d["summary"]["max_abs_step_error"] == pytest.approx(0, abs=1e-9)
    one = d["rows"][0]["runs"]
    assert len(one) == 1 and one[0]["err_speedup"] == pytest.approx(0, abs=1e-9)  # one repeat: one run
    assert one[0]["measured"]["speedup"] == pytest.approx(d["rows"][0]["measured"]["speedup"])
    assert d["summary"]["measured_speedup_spread"] is None  # no point has two runs


def test_cli_h200_comparison():
    rows = val.compare_h200()
    assert [r["config"].split(",")[0] for r in rows] == ["default ht", "default ll", "ll"]
    for r in rows:
        assert r["predicted_no_dbo_s"] > 0 and r["right_side_of_1"]
    from demos.toy import kernels

    assert not getattr(kernels.experts_ll_kernel, "dbo_syncs_host", False)  # marked for the comparison only
    assert rows[1]["predicted_no_dbo_s"] > rows[1]["now_no_dbo_s"]  # the measured ll synced: slower


# --- the hidden fraction: each step's own kernel times, never past 100% -----------------------------------


def test_hidden_cannot_pass_100_percent_when_the_dbo_steps_kernels_run_faster():
    # the 32-layer threads case: DBO's smaller GEMMs ran faster, so (no-DBO - DBO) / hideable(no-DBO)
    # said 124.9%; from each step's own kernels the fraction stays <= 1
    e = EngineTimes(
        compute_s=0.436, comm_s=0.499, overlapped_s=0.0, dbo_compute_s=0.300, dbo_comm_s=0.499, dbo_overlapped_s=0.295
    )
    t_no, t_dbo = 0.946, 0.430
    assert (t_no - t_dbo) / e.hideable_s > 1.1  # the old definition
    h = overlap_hidden_fraction(e)
    assert h == pytest.approx(0.295 / 0.300) and h <= 1
    ideal = t_no / (t_no - e.hideable_s)
    note = past_ideal_note(t_no / t_dbo, ideal, e, t_no, t_dbo)
    assert note is not None and "compute kernels" in note and "past" in note
    assert past_ideal_note(1.5, ideal, e, t_no, t_dbo) is None


def test_hidden_counts_only_what_dbo_adds_to_the_overlap_without_dbo():
    e = EngineTimes(
        compute_s=1.0, comm_s=1.0, overlapped_s=0.4, dbo_compute_s=1.0, dbo_comm_s=1.0, dbo_overlapped_s=0.7
    )
    assert overlap_hidden_fraction(e) == pytest.approx((0.7 - 0.4) / (1 - 0.4))
    nothing_left = replace(e, overlapped_s=1.0)
    assert overlap_hidden_fraction(nothing_left) is None


def test_hidden_is_at_most_one_for_any_kernel_records():
    rng = random.Random(7)
    for _ in range(300):
        recs = []
        for kind in ("compute", "comm"):
            t = rng.random()
            for _ in range(rng.randint(1, 6)):
                d = rng.random()
                recs.append(KernelRecord(kind, f"{kind} L0 u0", kind, 0, t, t + d))
                t += d + rng.random() * 0.5 * rng.randint(0, 1)
        s = engine_sums(recs)
        e = EngineTimes(
            s["compute"] * rng.uniform(0.3, 3),
            s["comm"] * rng.uniform(0.3, 3),
            0.0,
            s["compute"],
            s["comm"],
            overlap_seconds(recs),
        )
        h = overlap_hidden_fraction(e)
        assert h is None or h <= 1.0 + 1e-12, (h, recs)


def test_the_report_prints_the_bound_from_the_dbo_steps_own_kernels():
    from demos.overlap import format_report, run_overlap

    rep = run_overlap(backend="virtual", steps=1, layers=2, tokens=64, hidden=64)
    assert rep["overlapped_dbo_s"] is not None and rep["hidden_fraction"] <= 1
    assert rep["bound_s"] <= rep["time_dbo_s"] + 1e-12
    text = format_report(rep)
    assert "ideal DBO step" in text and "own kernels" in text


# --- held-out points: shapes the grid and the calibration hold fixed -------------------------------------


def test_the_held_out_points_vary_topk_experts_and_hidden_off_the_grid():
    grid_shapes = {dict(p.shapes)["hidden"] for p in val.grid(True)}
    held = val.held_out_points(True)
    sh = [dict(p.shapes) for p in held]
    assert all(p.held_out for p in held) and not any(p.held_out for p in val.grid(True))
    assert {s["topk"] for s in sh} >= {1, 3, 4} and {s["experts"] for s in sh} >= {4, 16}
    assert {s["hidden"] for s in sh} - grid_shapes  # at least one hidden size the grid does not run
    assert {p.schedule for p in held} == {"ht", "ll"}


def test_a_machines_own_profile_predicts_its_held_out_points_exactly():
    """On a virtual machine predicted by its own profile, off-grid shapes come out exact too: among
    them 16 experts, where the prediction must use the measured run's expert-parallel size (a
    prediction at another ep reads other expert weights and is off)."""
    pts = [replace(p, tokens=p.tokens // 8) for p in val.held_out_points(True)]
    pts = [replace(p, shapes=tuple((k, 1 if k == "layers" else v) for k, v in p.shapes)) for p in pts]
    v = val.validate("virtual", MACHINE, pts, steps=1, truth=MACHINE)
    assert len(v.rows) == len(pts)
    for r in v.rows:
        assert r.err_no_dbo == pytest.approx(0, abs=1e-9), r.point.label()
        assert r.err_dbo == pytest.approx(0, abs=1e-9), r.point.label()


def test_held_out_rows_count_in_the_errors_but_not_in_the_crossovers():
    rows = _rows((0.8, 1.2, 1.5), (0.8, 1.2, 1.5))
    off = Point("ht", 64, 1.0, "eager", (("experts", 16), ("hidden", 192), ("layers", 2), ("topk", 4)), held_out=True)
    rows.append(Row(off, Figures(1.0, 2.0, 0.9), Figures(1.3, 2.0, 0.9)))  # DBO loses; 30% off
    v = Validation("threads", "p", rows)
    s = summarize(v)
    assert s["crossover"]["ht eager comm 1x"]["measured"] == 128  # the held-out 64-token loss is not a grid size
    assert s["max_abs_step_error"] == pytest.approx(0.3)
    assert s["held_out"]["points"] == 1 and s["held_out"]["max_abs_step_error"] == pytest.approx(0.3)
    assert any("topk 4, experts 16, hidden 192" in x for x in s["speedups_off"])
    table = format_table(v)
    assert "held out (shapes the grid and the calibration hold fixed" in table
    assert "held out (1 points): step time |error| median 15%, max 30%" in table


def test_the_cli_leaves_the_held_out_points_out_when_asked(monkeypatch):
    seen = []

    def fake_validate(backend, profile, points, **kw):
        seen.append(points)
        return Validation(backend, "p", [])

    monkeypatch.setattr(checks, "validate", fake_validate)
    assert cli.main(["--profile", "cpu", "--quick", "--no-progress"]) == 0
    assert cli.main(["--profile", "cpu", "--quick", "--no-progress", "--no-held-out"]) == 0
    assert sum(p.held_out for p in seen[0]) == len(val.HELD_OUT) and not any(p.held_out for p in seen[1])
