"""Figures that docs/overlap.md quotes from deterministic (virtual) commands, recomputed: a page cannot
keep a number the command no longer prints (issue 24: "349 ms against 141 ms" had gone stale)."""

from __future__ import annotations

import re

import pytest

from demos.experiment.run import run
from demos.moe.config import OverlapConfig
from tests.support.paths import REPO

pytestmark = pytest.mark.timeout(300)

DSV3_SHAPED = dict(
    backend="virtual",
    profile="h200",
    link="ib400",
    hidden=7168,
    experts=256,
    topk=8,
    layers=61,
    tokens=256,
    expert_ffn=2048,
    schedule="ll",
    steps=1,
    warmup=1,
)


def _quoted() -> tuple[float, ...]:
    text = " ".join((REPO / "docs" / "overlap.md").read_text().split())
    m = re.search(
        r"eager no DBO (\d+) ms, eager DBO (\d+) ms \((\d\.\d+)x: host-bound\); `--graph` no DBO (\d+) ms, "
        r"DBO (\d+) ms \((\d\.\d+)x\)",
        text,
    )
    assert m, "the DeepSeek-V3-sized paragraph of overlap.md changed its wording: update this test"
    return tuple(float(x) for x in m.groups())


def test_the_deepseek_sized_eager_and_graph_figures_are_what_the_command_gives():
    eager_no, eager_dbo, eager_sp, graph_no, graph_dbo, graph_sp = _quoted()
    e = run(OverlapConfig(**DSV3_SHAPED))
    g = run(OverlapConfig(**DSV3_SHAPED, graph=True))
    assert round(e.time_no_dbo_s * 1e3) == eager_no and round(e.time_dbo_s * 1e3) == eager_dbo
    assert round(e.speedup, 2) == eager_sp
    assert round(g.time_no_dbo_s * 1e3) == graph_no and round(g.time_dbo_s * 1e3) == graph_dbo
    assert round(g.speedup, 2) == graph_sp


def test_eager_dbo_that_loses_on_a_host_bound_profile_says_so_and_points_to_graph():
    from demos.overlap import report_of

    e = run(OverlapConfig(backend="virtual", profile="h200", schedule="ll", steps=1, warmup=1))
    assert e.speedup < 1
    note = report_of(e)["speedup_note"]
    assert note and "host-bound" in note and "--graph" in note
    g = run(OverlapConfig(backend="virtual", profile="h200", schedule="ll", steps=1, warmup=1, graph=True))
    assert report_of(g)["speedup_note"] is None or "host-bound" not in report_of(g)["speedup_note"]
    cpu = run(OverlapConfig(backend="virtual", steps=1, warmup=1))  # the cpu profile has no host costs
    assert cpu.speedup > 1 and "host-bound" not in (report_of(cpu)["speedup_note"] or "")


@pytest.mark.parametrize("schedule, ratio", [("ht", 1.0), ("ll", 1.0), ("ht", 2.0), ("ll", 0.5)])
def test_the_link_rescale_is_exact_on_virtual_even_on_a_host_bound_profile(schedule, ratio):
    """The report's link line says comm = R x compute: on virtual that holds to 0.5% (it was 1.71x on h200)."""
    res = run(OverlapConfig(backend="virtual", profile="h200", schedule=schedule, comm_ratio=ratio, steps=1, warmup=1))
    assert res.engine.comm_ratio == pytest.approx(ratio, rel=0.006)


def _table_row(command: str) -> tuple[float, float]:
    """(speedup, hidden %) of ``command``'s row in overlap.md's Performance table."""
    text = (REPO / "docs" / "overlap.md").read_text()
    m = re.search(r"\| `" + re.escape(command) + r"`[^|]*\| (\d\.\d+)x \| (\d+\.\d)% \|", text)
    assert m, f"overlap.md has no Performance row for {command}"
    return float(m.group(1)), float(m.group(2))


@pytest.mark.parametrize(
    "command, kw",
    [
        ("python -m demos.overlap --backend virtual", dict()),
        ("python -m demos.overlap --backend virtual --schedule ll", dict(schedule="ll")),
    ],
)
def test_the_virtual_rows_of_the_performance_table_are_what_the_command_gives(command, kw):
    speedup, hidden = _table_row(command)
    res = run(OverlapConfig(backend="virtual", **kw))
    assert round(res.speedup, 2) == speedup
    assert round(res.hidden_fraction * 100, 1) == hidden


def test_the_stream_layout_comparison_quotes_the_commands_figures():
    text = " ".join((REPO / "docs" / "overlap.md").read_text().split())
    m = re.search(r"per-ubatch streams \((\d+\.\d)% against (\d+\.\d)%\)", text)
    assert m
    own = run(OverlapConfig(backend="virtual", schedule="ll"))
    shared = run(OverlapConfig(backend="virtual", schedule="ll", stream_layout="shared"))
    assert round(own.hidden_fraction * 100, 1) == float(m.group(1))
    assert round(shared.hidden_fraction * 100, 1) == float(m.group(2))
