"""One measured run, however many rows hold it (``demos.zoo.measured_copies``): the matching rule on synthetic
rows, what the copies share, the copy a check takes, and the measured extra's own copies (skipped without it)."""

from __future__ import annotations

import pytest

from demos.zoo import measured
from demos.zoo.measured_copies import (
    COPIES,
    ROUNDING,
    SAME_MODEL,
    first_expressible,
    measured_runs,
    merged,
    run_groups,
    same_run,
)
from demos.zoo.measured_rows import SiliconRow

needs_tables = pytest.mark.skipif(not measured.available(), reason="needs the measured extra")


def _row(id="a", tpot=6.332719e-3, ttft=0.3383364, **kw) -> SiliconRow:
    base = dict(
        id=id,
        engine="sglang",
        model="Qwen/Qwen3.5-397B-A17B",
        system="b200_sxm",
        precision="fp8",
        mode="agg",
        isl=1024,
        osl=1024,
        batch=4,
        tp=4,
        attention_dp=1,
        moe_ep=1,
        moe_tp=4,
        prefill=None,
        ttft_s=ttft,
        tpot_s=tpot,
        concurrency=4,
    )
    return SiliconRow(**{**base, **kw})


def test_a_copy_rounded_to_a_hundredth_of_a_millisecond_is_the_same_run():
    exact = _row()
    rounded = _row("gap", tpot=6.33e-3, ttft=0.33834)
    assert same_run(exact, rounded) and same_run(rounded, exact)


@pytest.mark.parametrize(
    "change",
    [
        dict(tpot=6.332719e-3 + 2 * ROUNDING),  # a different latency
        dict(ttft=0.3383364 + 2 * ROUNDING),
        dict(concurrency=8),  # another point of the sweep with the same figures
        dict(isl=8192),
        dict(precision="bf16"),
        dict(engine="vllm"),
        dict(system="b300_sxm"),
        dict(ttft=None),  # one copy records a TTFT, the other none
    ],
)
def test_rows_that_differ_in_the_deployment_or_beyond_rounding_are_two_runs(change):
    assert not same_run(_row(), _row("b", **change))


def test_a_deepseek_r1_run_named_deepseek_v3_by_a_copy_is_the_same_run_and_other_models_are_not():
    """The database dump names InferenceX's DeepSeek-R1 runs DeepSeek-V3 (SAME_MODEL); any other two names stay
    two runs, however equal their figures."""
    r1 = _row(model="deepseek-ai/DeepSeek-R1")
    assert same_run(r1, _row("dump", model="deepseek-ai/DeepSeek-V3"))
    assert same_run(_row("dump", model="deepseek-ai/DeepSeek-V3"), r1)
    assert not same_run(r1, _row("k", model="moonshotai/Kimi-K2.5"))
    assert not same_run(_row(), _row("m", model="MiniMaxAI/MiniMax-M2.5"))


def test_rows_both_without_a_ttft_match_on_the_rest():
    assert same_run(_row(ttft=None), _row("b", ttft=None))


def test_the_copies_share_mtp_the_release_and_the_radix_cache_off_and_keep_their_own_layout():
    inferencex = _row("ix", speculative="mtp", release="0.5.9", radix_cache=False)
    gap = _row("gap", tpot=6.33e-3, ttft=0.33834, tp=16, moe_ep=4)
    out = merged([gap, inferencex])
    assert [r.id for r in out] == ["gap", "ix"]
    assert {r.speculative for r in out} == {"mtp"}
    assert {r.release for r in out} == {"0.5.9"}
    assert {r.radix_cache for r in out} == {False}
    assert (out[0].tp, out[0].moe_ep) == (16, 4) and (out[1].tp, out[1].moe_ep) == (4, 1)


def test_unknown_speculation_wins_over_none_and_mtp_over_unknown():
    assert {r.speculative for r in merged([_row(), _row("b", speculative="unknown")])} == {"unknown"}
    assert {r.speculative for r in merged([_row(speculative="unknown"), _row("b", speculative="mtp")])} == {"mtp"}


def test_copies_recording_two_releases_keep_their_own():
    out = merged([_row(release="0.5.9"), _row("b", release="0.5.10")])
    assert [r.release for r in out] == ["0.5.9", "0.5.10"]


def test_groups_keep_the_file_order_and_every_row():
    rows = [_row("a"), _row("other", concurrency=8), _row("a-copy", tpot=6.33e-3, ttft=0.33834), _row("c", tpot=9e-3)]
    groups = run_groups(rows)
    assert [[r.id for r in g] for g in groups] == [["a", "a-copy"], ["other"], ["c"]]
    assert sum(map(len, groups)) == len(rows)


def test_a_check_takes_the_first_copy_it_can_express_else_the_first_reason():
    rows = (_row("a", tp=16), _row("b"), _row("c"))

    def plan(r):
        return "tp 16 on 8 GPUs" if r.tp == 16 else {"tp": r.tp}

    assert first_expressible(rows, plan) == (rows[1], {"tp": 4})
    assert first_expressible(rows[:1], plan) == (rows[0], "tp 16 on 8 GPUs")


@needs_tables
def test_the_measured_runs_hold_every_row_once():
    runs = measured_runs()
    rows = measured.silicon_rows()
    assert sum(map(len, runs)) == len(rows)
    assert sorted(r.id for g in runs for r in g) == sorted(r.id for r in rows)
    assert len(runs) < len(rows)  # the exports and gap analyses repeat runs


@needs_tables
def test_the_gap_analysis_copy_of_a_qwen35_mtp_run_reads_as_mtp_with_its_release_and_radix_cache_off():
    gap = "qwen3_5_397b_gap_analysis_qwen3_5_397b_gap_analysis_b200_sxm_sglang_fp8_agg_1024x1024_c4_tp4_ep1_16"
    group = next(g for g in measured_runs() if any(r.id == gap for r in g))
    ids = {r.id for r in group}
    assert "2026_03_25_qwen3_5_397b_b200_sxm_sglang_fp8_agg_1024x1024_c4_tp4_0_ep1_0_463" in ids
    mine = next(r for r in group if r.id == gap)
    raw = next(r for r in measured.silicon_rows() if r.id == gap)
    assert (raw.speculative, raw.release, raw.radix_cache) == ("none", "0.5.9", True)  # what the copy records
    assert (mine.speculative, mine.release, mine.radix_cache) == ("mtp", "0.5.9", False)


@needs_tables
def test_the_dumps_deepseek_v3_rows_are_copies_of_the_exports_deepseek_r1_runs():
    """dsr1_b200_sglang_fp4_agg_1024x1024_c4_cfg88 (the 2026-04-27 dump, "DeepSeek-V3") holds the run the
    2026-04-06 export names DeepSeek-R1: one group, counted once (it was counted twice: 391 runs so)."""
    dump = "dsr1_b200_sglang_fp4_agg_1024x1024_c4_cfg88"
    group = next(g for g in measured_runs() if any(r.id == dump for r in g))
    assert {r.model for r in group} == {"deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-R1"}
    assert "2026_04_06_deepseek_r1_b200_sxm_sglang_fp4_agg_1024x1024_c4_tp4_ep1_38" in {r.id for r in group}
    mixed = [g for g in measured_runs() if len({r.model for r in g}) > 1]
    assert len(mixed) == 391 and all({r.model for r in g} <= set(SAME_MODEL) | set(SAME_MODEL.values()) for g in mixed)


@needs_tables
def test_validate_silicon_counts_copies_once_with_their_own_reason():
    from demos.fidelity import silicon

    checks, skipped = silicon.silicon_rows()
    runs = measured_runs()
    assert skipped[COPIES] == sum(len(g) - 1 for g in runs)
    ids = {c.id for c in checks}
    for g in runs:
        assert len(ids & {r.id for r in g}) <= 1  # no run checked twice through two of its copies
