"""demos.serving.split_rules: each engine's per-step split rule (vLLM 0.34.0 DBO, SGLang 0.5.23 two-batch
overlap). Cases ported from the engines' own unit tests name the upstream file and function; the rest are
the cases issue 44 names and the places where the pinned wheels differ from what was expected of them."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from demos.serving.batch import RankBatch, SplitDecision, SplitReason
from demos.serving.split_rules import (
    StepPlan,
    VllmGraphs,
    sglang_decode_graph_bs,
    sglang_split,
    sglang_split_index,
    sglang_tbo_decision,
    sglang_tbo_plan,
    vllm_dbo_decision,
    vllm_dbo_plan,
    vllm_legacy_dbo_decision,
    vllm_split,
)

EAGER = VllmGraphs(mode="none")  # no CUDA graphs: the upstream DP tests run with cudagraph_manager=None


def decode(n: int, ctx: int = 100) -> RankBatch:
    """A rank decoding ``n`` requests."""
    return RankBatch(decode=(ctx,) * n)


def prefill(*chunks: int) -> RankBatch:
    """A rank computing prompt chunks of these sizes, nothing cached."""
    return RankBatch(prefill=tuple((c, 0) for c in chunks))


IDLE = RankBatch()


def tokens(b: RankBatch) -> int:
    return b.tokens


# --- vLLM 0.34.0: the vote ----------------------------------------------------------------------------
# Ported from vllm-project/vllm tests/v1/worker/test_gpu_ubatch_slicing.py, whose `_sync_dp` runs the
# wheel's `sync_cudagraph_and_dp_padding` with every rank eager, DECODE_THRESHOLD = 32 and
# PREFILL_THRESHOLD = 128; a uniform token count of 0 there is a batch that is not a uniform decode
# (here: a prompt chunk), 1 a uniform decode (here: decodes).


def sync_dp(counts: list[int], uniform: list[int] | None = None, *, enabled: bool = True) -> StepPlan:
    ranks = [decode(n) if u == 1 else prefill(n) for n, u in zip(counts, uniform or [0] * len(counts))]
    return vllm_dbo_plan(ranks, enabled=enabled, decode_threshold=32, prefill_threshold=128, graphs=EAGER)


def test_every_dp_rank_must_agree_to_microbatch():
    # test_gpu_ubatch_slicing.py::test_every_dp_rank_must_agree_to_microbatch
    assert sync_dp([256, 256]).decision.split
    assert sync_dp([256, 100]).decision == SplitDecision(False, SplitReason.BELOW_THRESHOLD)
    assert sync_dp([100, 256]).decision == SplitDecision(False, SplitReason.BELOW_THRESHOLD)


def test_decode_threshold_only_applies_when_every_rank_is_a_uniform_decode():
    # test_gpu_ubatch_slicing.py::test_decode_threshold_only_applies_when_every_rank_is_a_uniform_decode
    assert sync_dp([64, 64], [1, 1]).decision.split
    assert not sync_dp([64, 64], [1, 0]).decision.split


def test_microbatching_pads_all_ranks_to_the_largest():
    # test_gpu_ubatch_slicing.py::test_microbatching_pads_all_ranks_to_the_largest
    plan = sync_dp([200, 256])
    assert plan.decision == SplitDecision(True, SplitReason.SPLIT, 256, False)
    assert plan.run_tokens == (256, 256)


def test_microbatching_survives_a_rank_that_cannot_fill_it():
    # test_gpu_ubatch_slicing.py::test_microbatching_survives_a_rank_that_cannot_fill_it: 128 real tokens,
    # split at 512 // 2, so that rank's second micro-batch is padding only; the step still splits.
    plan = sync_dp([128, 512])
    assert plan.decision == SplitDecision(True, SplitReason.SPLIT, 512, False)
    assert plan.halves[0] == (prefill(128), IDLE)


def test_microbatching_off_when_a_rank_does_not_allow_it():
    # test_gpu_ubatch_slicing.py::test_microbatching_off_when_a_rank_does_not_allow_it: a rank allows it
    # exactly when its micro-batch runner exists, which --enable-dbo decides for every rank at once.
    assert sync_dp([256, 256], enabled=False).decision == SplitDecision(False, SplitReason.DISABLED)


def test_thresholds_below_the_microbatch_count_are_rejected():
    # test_gpu_ubatch_slicing.py::test_thresholds_below_the_microbatch_count_are_rejected
    with pytest.raises(ValueError, match="number of micro-batches"):
        vllm_dbo_decision([decode(8), decode(8)], enabled=True, decode_threshold=1)
    with pytest.raises(ValueError, match="number of micro-batches"):
        vllm_legacy_dbo_decision([decode(8), decode(8)], enabled=True, prefill_threshold=1)
    # Without DBO the thresholds are not checked (ParallelConfig checks them only with micro-batching on).
    assert not vllm_dbo_decision([decode(8), decode(8)], enabled=False, decode_threshold=1).split


@pytest.mark.parametrize(("n", "split"), [(31, False), (32, True), (33, True)])
def test_the_decode_threshold_is_reached_at_equality(n, split):
    """check_ubatch_thresholds: num_tokens >= threshold (the smallest rank's count)."""
    d = vllm_dbo_decision([decode(n), decode(64)], enabled=True, graphs=EAGER)
    assert d.split is split
    assert d.reason == (SplitReason.SPLIT if split else SplitReason.BELOW_THRESHOLD)


@pytest.mark.parametrize(("n", "split"), [(511, False), (512, True)])
def test_the_prefill_threshold_is_reached_at_equality(n, split):
    assert vllm_dbo_decision([prefill(n), prefill(600)], enabled=True, graphs=EAGER).split is split


def test_one_rank_below_threshold_vetoes_the_group():
    """Issue 44: the vote. The smallest rank is held to the threshold, so one small rank keeps all from
    splitting, whatever the others carry."""
    assert not vllm_dbo_decision([decode(512), decode(512), decode(31), decode(512)], enabled=True).split
    assert vllm_dbo_decision([decode(512), decode(512), decode(32), decode(512)], enabled=True).split


def test_a_prompt_on_one_rank_puts_the_whole_group_on_the_prefill_threshold():
    """Unlike the per-rank vote of coordinate_batch_across_dp, 0.34.0's threshold is chosen for the group:
    a decode rank of 400 tokens clears 32 on its own but is held to 512 when another rank prefills."""
    ranks = [decode(400), prefill(600)]
    assert vllm_dbo_decision(ranks, enabled=True).reason == SplitReason.BELOW_THRESHOLD
    assert vllm_legacy_dbo_decision(ranks, enabled=True).split


# --- vLLM 0.34.0: idle ranks, data parallel 1 -----------------------------------------------------------


def test_an_idle_rank_vetoes():
    """Issue 44: an idle rank runs a dummy decode of 1 (+ speculative) tokens and votes with it. In 0.34.0 the
    thresholds cannot go below 2 x that, so the dummy always vetoes (the 'unless the decode threshold is at
    most its dummy tokens' case cannot be configured)."""
    d = vllm_dbo_decision([decode(256), IDLE], enabled=True, decode_threshold=2, prefill_threshold=2)
    assert d.reason == SplitReason.IDLE_RANK
    # Speculative decoding: 1 + 1 dummy tokens; thresholds 2 are raised to 4 (2 x the query length).
    d = vllm_dbo_decision(
        [decode(256), IDLE], enabled=True, decode_threshold=2, prefill_threshold=2, num_speculative_tokens=1
    )
    assert d.reason == SplitReason.IDLE_RANK
    assert vllm_legacy_dbo_decision([decode(256), IDLE], enabled=True, decode_threshold=2).reason == (
        SplitReason.IDLE_RANK
    )


def test_speculative_thresholds_are_raised_to_twice_the_query_length():
    # query length 3 (two draft tokens): threshold 2 is raised to 6; two ranks of 2 decodes run 6 tokens each
    ranks = [decode(2), decode(2)]
    assert vllm_dbo_decision(ranks, enabled=True, decode_threshold=2, num_speculative_tokens=2).split
    assert not vllm_dbo_decision(
        [decode(1), decode(2)], enabled=True, decode_threshold=2, num_speculative_tokens=2
    ).split


def test_an_idle_rank_is_padded_with_the_group_when_graphs_run():
    plan = vllm_dbo_plan([decode(100), IDLE], enabled=True)
    assert plan.decision == SplitDecision(False, SplitReason.IDLE_RANK, 104, True)
    assert plan.graph_kinds == ("full", "full")


def test_data_parallel_1_never_splits():
    """Issue 44: no micro-batch runner without a DP group (maybe_build_ubatch_runner)."""
    for batch in (decode(512), prefill(8192)):
        d = vllm_dbo_decision([batch], enabled=True, decode_threshold=2, prefill_threshold=2)
        assert not d.split and d.reason == SplitReason.NO_DATA_PARALLEL
    # ...but the step still replays the decode graph its batch fits
    assert vllm_dbo_decision([decode(100)], enabled=True) == SplitDecision(
        False, SplitReason.NO_DATA_PARALLEL, 104, True
    )
    assert vllm_dbo_decision([decode(100)], enabled=False).reason == SplitReason.DISABLED


def test_no_work_anywhere_is_an_empty_step():
    assert vllm_dbo_decision([IDLE, IDLE], enabled=True) == SplitDecision(False, SplitReason.EMPTY_STEP)
    assert sglang_tbo_decision([IDLE, IDLE], enabled=True) == SplitDecision(False, SplitReason.EMPTY_STEP)


# --- vLLM 0.34.0: CUDA graphs of split and non-split steps ------------------------------------------------
# Ported from the V2 DBO tests of the RFC author's branch (specture724/vllm,
# tests/v1/worker/test_gpu_ubatch_slicing.py), whose graphs were decode graphs of 128 and 256 requests
# (FULL, uniform query length 1) with or without split twins. In 0.34.0 a graph has a split twin exactly
# when it is a FULL graph of whole requests at or above the decode threshold, so the graphs below are
# those the branch's test built.


def test_microbatched_step_replays_its_own_cudagraph():
    # specture724/vllm test_gpu_ubatch_slicing.py::test_microbatched_step_replays_its_own_cudagraph
    graphs = VllmGraphs(mode="full_decode_only", decode_requests=(256,))
    plan = vllm_dbo_plan([decode(200), decode(250)], enabled=True, graphs=graphs)
    assert plan.decision == SplitDecision(True, SplitReason.SPLIT, 256, True)  # padded past the largest 250
    assert plan.graph_kinds == ("full", "full")
    # the same shape without DBO lands on the plain graph
    assert vllm_dbo_decision([decode(200), decode(250)], enabled=False, graphs=graphs) == SplitDecision(
        False, SplitReason.DISABLED, 256, True
    )


def test_microbatched_step_runs_eager_without_a_matching_graph():
    # specture724/vllm test_gpu_ubatch_slicing.py::test_microbatched_step_runs_eager_without_a_matching_graph:
    # a mixed (not uniform) batch has no split graph and runs split eager at the largest rank's count.
    graphs = VllmGraphs(mode="full_decode_only", decode_requests=(256,))
    mixed = [RankBatch(decode=(5,) * 100, prefill=((100, 0),)), RankBatch(decode=(5,) * 150, prefill=((100, 0),))]
    d = vllm_dbo_decision(mixed, enabled=True, prefill_threshold=128, graphs=graphs)
    assert d == SplitDecision(True, SplitReason.SPLIT, 250, False)


def test_cudagraph_padding_that_empties_a_half_drops_the_graph_not_the_split():
    # specture724/vllm test_gpu_ubatch_slicing.py::test_microbatching_skipped_when_cudagraph_padding_empties_it.
    # The branch gave up on micro-batching here; the 0.34.0 wheel (sync_cudagraph_and_dp_padding: "If one
    # rank has an empty second microbatch, run without CUDA graphs") splits eager at the largest count.
    graphs = VllmGraphs(mode="full_decode_only", decode_requests=(128, 256))
    assert vllm_dbo_decision([decode(120), decode(250)], enabled=True, graphs=graphs) == SplitDecision(
        True, SplitReason.SPLIT, 250, False
    )
    # The same ranks replay the split graph when they fit the smaller capture size.
    assert vllm_dbo_decision([decode(120), decode(128)], enabled=True, graphs=graphs) == SplitDecision(
        True, SplitReason.SPLIT, 128, True
    )


def test_the_empty_ubatch_case_splits_eager_in_0_34_and_was_abandoned_before():
    """Issue 44's case: rank loads [100, 3] with threshold 2. 0.34.0 (Model Runner V2) splits and runs eager,
    the 3-token rank's second micro-batch empty; coordinate_batch_across_dp (still shipped, no longer called
    with micro-batching) abandoned the split: is_last_ubatch_empty(3, 100, 2) is 100 // 2 >= 3."""
    ranks = [decode(100), decode(3)]
    plan = vllm_dbo_plan(ranks, enabled=True, decode_threshold=2, prefill_threshold=2)
    assert plan.decision == SplitDecision(True, SplitReason.SPLIT, 100, False)
    assert plan.halves[1] == (decode(3), IDLE)
    assert vllm_legacy_dbo_decision(ranks, enabled=True, decode_threshold=2) == SplitDecision(
        False, SplitReason.EMPTY_UBATCH
    )
    # the legacy test is max_padded // 2 >= min_real: 6 real tokens against 12 padded is empty, 7 is not
    assert vllm_legacy_dbo_decision(
        [decode(6), decode(6)], enabled=True, decode_threshold=2, padded=[12, 12]
    ).reason == (SplitReason.EMPTY_UBATCH)
    assert vllm_legacy_dbo_decision([decode(7), decode(7)], enabled=True, decode_threshold=2, padded=[12, 12]) == (
        SplitDecision(True, SplitReason.SPLIT, 12)
    )


def test_a_split_step_that_is_not_a_uniform_decode_runs_eager():
    """Issue 44: split graphs exist only for FULL graphs of uniform decodes, so a prompt step splits eager
    (unpadded beyond the largest rank), while the same ranks not splitting replay PIECEWISE graphs."""
    ranks = [prefill(300), prefill(400)]
    plan = vllm_dbo_plan(ranks, enabled=True, prefill_threshold=256)
    assert plan.decision == SplitDecision(True, SplitReason.SPLIT, 400, False)
    assert plan.graph_kinds == ("none", "none")
    plan = vllm_dbo_plan(ranks, enabled=False)
    assert plan.decision == SplitDecision(False, SplitReason.DISABLED, 400, True)
    assert plan.graph_kinds == ("piecewise", "piecewise")


def test_a_uniform_decode_split_replays_the_split_graph():
    plan = vllm_dbo_plan([decode(100), decode(60)], enabled=True)
    assert plan.decision == SplitDecision(True, SplitReason.SPLIT, 104, True)
    assert plan.graph_kinds == ("full", "full")
    # halves at 104 // 2 = 52: the 60-request rank keeps 52 and 8
    assert [tokens(h) for h in plan.halves[1]] == [52, 8]


def test_non_split_steps_take_the_lowest_graph_mode_of_any_rank():
    # a rank above the largest captured size (512) runs eager, so every rank does, unpadded
    plan = vllm_dbo_plan([decode(100), prefill(600)], enabled=False)
    assert plan.decision == SplitDecision(False, SplitReason.DISABLED)
    assert plan.run_tokens == (100, 600)
    # decodes beside a prompt: PIECEWISE at the capture size of the largest rank
    plan = vllm_dbo_plan([decode(100), prefill(300)], enabled=False)
    assert plan.decision == SplitDecision(False, SplitReason.DISABLED, 304, True)
    assert plan.graph_kinds == ("piecewise", "piecewise")


def test_piecewise_graphs_refuse_dbo():
    with pytest.raises(ValueError, match="PIECEWISE"):
        vllm_dbo_decision([decode(64), decode(64)], enabled=True, graphs=VllmGraphs(mode="piecewise"))


def test_default_graph_sizes():
    """VllmConfig._set_cudagraph_sizes off SM100 at the API server's defaults on H100/H200 (1024 requests,
    8192 batched tokens): 1, 2, 4, every 8 to 248, every 16 from 256 to 512, for decode and prefill alike."""
    g = VllmGraphs.defaults()
    want = (1, 2, 4, *range(8, 256, 8), *range(256, 513, 16))
    assert g.mode == "full_and_piecewise"
    assert g.decode_requests == want and g.token_sizes == want
    # a smaller request cap: the ceiling is 2 x max_num_seqs and max_num_seqs itself is captured
    small = VllmGraphs.defaults(max_num_seqs=100)
    assert small.token_sizes[-1] == 200 and 100 in small.token_sizes and small.decode_requests[-1] == 100
    # speculative decoding with one draft token: decode graphs by whole requests of 2 tokens, up to 256
    assert VllmGraphs.defaults(num_speculative_tokens=1).decode_requests[-1] == 256
    # SM100: the grids of compilation.py, whose docstrings count 54 prefill sizes at 8192 tokens and 64
    # decode sizes at 1024 requests
    wide = VllmGraphs.defaults(sm100=True, max_num_batched_tokens=16384)
    assert len(wide.token_sizes) == 54 and wide.token_sizes[-1] == 8192
    assert len(wide.decode_requests) == 64 and wide.decode_requests[-1] == 1024
    assert VllmGraphs.defaults(mode="full_decode_only").token_sizes == ()
    assert VllmGraphs.defaults(mode="none") == VllmGraphs(mode="none")


# --- vLLM 0.34.0: a step's two micro-batches ------------------------------------------------------------


def test_prefill_split_across_ubatches():
    # vllm-project/vllm tests/v1/attention/test_attention_splitting.py::test_prefill_split_across_ubatches:
    # seq_lens [32, 40], query_lens [8, 8] (so 24 and 32 cached), split at 12 and at 4. The cut request's
    # first part ends at context + its tokens there; its second part's sequence is the original one.
    batch = RankBatch(prefill=((8, 24), (8, 32)))
    first, second = vllm_split(batch, split_point=12)
    assert first == RankBatch(prefill=((8, 24), (4, 32)))  # 2 requests
    assert second == RankBatch(prefill=((4, 36),))  # 1 request, seq 36 + 4 = 40
    first, second = vllm_split(batch, split_point=4)
    assert first == RankBatch(prefill=((4, 24),))  # 1 request, seq 28
    assert second == RankBatch(prefill=((4, 28), (8, 32)))  # 2 requests, seqs 32 and 40


# vllm-project/vllm tests/v1/worker/test_gpu_ubatch_slicing.py::test_slicing_matches_v1_split_attn_metadata,
# its BATCHES as (query_lens, seq_lens) in batch order; a one-token query after cached tokens is written as a
# one-token prompt chunk (it runs as a decode) so the order stays the test's (keep_order). Expected: each
# micro-batch's (query, cached) per request, from the split at half the tokens the test pins.
SLICING = {
    "uniform_decode": ([1] * 8, [128 + 4 * i for i in range(8)]),
    "split_request": ([1, 1, 10, 1, 1], [64, 96, 512, 32, 48]),
    "aligned_prefills": ([6, 2, 4, 4], [6, 130, 260, 4]),
    "split_first_and_last": ([3, 9, 3], [70, 300, 41]),
    "trailing_prefill_spans_boundary": ([2, 20], [64, 300]),
}
SLICED = {
    "uniform_decode": ([(1, 127), (1, 131), (1, 135), (1, 139)], [(1, 143), (1, 147), (1, 151), (1, 155)]),
    "split_request": ([(1, 63), (1, 95), (5, 502)], [(5, 507), (1, 31), (1, 47)]),
    "aligned_prefills": ([(6, 0), (2, 128)], [(4, 256), (4, 0)]),
    "split_first_and_last": ([(3, 67), (4, 291)], [(5, 295), (3, 38)]),
    "trailing_prefill_spans_boundary": ([(2, 62), (9, 280)], [(11, 289)]),
}


@pytest.mark.parametrize("name", list(SLICING))
def test_slicing_matches_v1_split_attn_metadata(name):
    query, seq = SLICING[name]
    batch = RankBatch(prefill=tuple((q, s - q) for q, s in zip(query, seq)))
    first, second = vllm_split(batch, keep_order=True)
    assert (list(first.prefill), list(second.prefill)) == SLICED[name]


def test_trailing_microbatch_absorbs_cudagraph_padding():
    # test_gpu_ubatch_slicing.py::test_trailing_microbatch_absorbs_cudagraph_padding: 6 decodes padded to 8,
    # split at 4: "two real decodes plus two padded rows" in the last micro-batch.
    first, second = vllm_split(decode(6, ctx=63), 8)
    assert (len(first.decode), len(second.decode)) == (4, 2)


def test_all_padding_microbatch_has_no_work_to_do():
    # test_gpu_ubatch_slicing.py::test_all_padding_microbatch_has_no_work_to_do: 6 decodes padded to 16,
    # split at 8, past every real token.
    first, second = vllm_split(decode(6, ctx=63), 16)
    assert first == decode(6, ctx=63) and second.idle


def test_dummy_batch_can_be_microbatched():
    # test_gpu_ubatch_slicing.py::test_dummy_batch_can_be_microbatched: one request of 32 tokens spans both
    # micro-batches, 16 tokens in each.
    first, second = vllm_split(prefill(32))
    assert first == RankBatch(prefill=((16, 0),)) and second == RankBatch(prefill=((16, 16),))


def test_the_runner_orders_decodes_then_prompts_by_size():
    """sort_batch_req_ids: decode-length requests first, then by ascending query length."""
    batch = RankBatch(decode=(7, 8), prefill=((50, 0), (10, 5)))
    first, second = vllm_split(batch)  # 62 tokens, split at 31: 2 decodes, the 10 chunk, 19 of the 50
    assert first == RankBatch(decode=(7, 8), prefill=((10, 5), (19, 0)))
    assert second == RankBatch(prefill=((31, 19),))


def test_speculative_uniform_batches_split_on_a_request_boundary():
    """create_ubatch_slices: a uniform batch of q > 1 tokens per request splits at whole requests."""
    first, second = vllm_split(decode(5), 10, uniform=2, num_speculative_tokens=1)
    assert (len(first.decode), len(second.decode)) == (2, 3)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(1, 3000), max_size=8),
    st.lists(st.tuples(st.integers(1, 3000), st.integers(0, 5000)), max_size=6),
    st.integers(0, 4000),
)
def test_vllm_halves_hold_every_real_token_once(decodes, chunks, extra):
    batch = RankBatch(decode=tuple(decodes), prefill=tuple(chunks))
    padded = batch.tokens + extra
    first, second = vllm_split(batch, padded)
    assert first.tokens + second.tokens == batch.tokens
    assert first.tokens == min(batch.tokens, padded // 2)
    assert sorted(first.decode + second.decode) == sorted(batch.decode)


# --- SGLang 0.5.23: where a rank splits -----------------------------------------------------------------
# Ported from sgl-project/sglang test/manual/test_two_batch_overlap.py,
# TestTwoBatchOverlapUnitTest::test_compute_split_seq_and_token_index (default distribution threshold 0.48).


@pytest.mark.parametrize(("bs", "expect"), [(0, 0), (100, 50), (99, 49)])
def test_compute_split_seq_index_decode(bs, expect):
    assert sglang_split_index(batch_size=bs) == (expect, expect)


@pytest.mark.parametrize(
    ("lens", "expect"),
    [
        ([], (0, 0)),
        ([42], (0, 21)),
        ([42, 999], (1, 520)),
        ([999, 42], (0, 520)),
        ([498, 502], (1, 498)),
        ([4096, 4096, 4096, 4096], (2, 8192)),
        ([4095, 4096, 4096, 4096, 1], (2, 8191)),
        ([1, 4095, 4096, 4096, 4096], (3, 8192)),
        ([4097, 4096, 4096, 4095, 1], (2, 8193)),
        ([1, 1, 1, 1, 99999], (4, 50001)),
        ([99999, 1, 1, 1, 1], (0, 50001)),
    ],
)
def test_compute_split_seq_and_token_index_extend(lens, expect):
    assert sglang_split_index(lens) == expect


def test_two_chunk_split_off_at_threshold_zero():
    """--tbo-token-distribution-threshold 0 turns the two-chunk split off: balanced boundaries only."""
    assert sglang_split_index([42], token_distribution_threshold=0.0) == (0, 0)
    assert sglang_split_index([42, 999], token_distribution_threshold=0.0) == (1, 42)


def test_a_two_chunk_split_cuts_one_prompt_in_half():
    first, second = sglang_split(RankBatch(prefill=((42, 0),)))
    assert first == RankBatch(prefill=((21, 0),)) and second == RankBatch(prefill=((21, 21),))
    first, second = sglang_split(RankBatch(prefill=((42, 0), (999, 10))))
    assert first == RankBatch(prefill=((42, 0), (478, 10))) and second == RankBatch(prefill=((521, 488),))


def test_an_idle_rank_splits_into_two_empty_halves():
    # sglang test_two_batch_overlap.py::test_eager_prepare_preserves_zero_parent_cpu_count: an idle parent
    # gives two children of zero tokens.
    assert sglang_split(IDLE) == (IDLE, IDLE)


def test_a_mixed_batch_lists_its_decodes_after_its_prompts():
    first, second = sglang_split(RankBatch(decode=(9, 9), prefill=((10, 0),)))
    assert (first, second) == (RankBatch(prefill=((6, 0),)), RankBatch(decode=(9, 9), prefill=((4, 6),)))


# --- SGLang 0.5.23: the agreement ------------------------------------------------------------------------


def test_mode_disagreement_keeps_the_group_whole():
    """Issue 44: one rank decodes, another extends; the decode rank then runs eager too (decode graphs are
    captured only split)."""
    plan = sglang_tbo_plan([decode(64), prefill(512)], enabled=True)
    assert plan.decision == SplitDecision(False, SplitReason.MODE_DISAGREEMENT)
    assert plan.graph_kinds == ("none", "none")
    assert not sglang_tbo_decision([decode(64), RankBatch(decode=(1,), prefill=((5, 0),))], enabled=True).split


def test_idle_ranks_are_not_counted_in_the_agreement():
    plan = sglang_tbo_plan([decode(64), IDLE, decode(3)], enabled=True)
    assert plan.decision == SplitDecision(True, SplitReason.SPLIT, None, True)
    assert plan.run_tokens == (64, 2, 4)  # each rank at its own captured batch size (even sizes with TBO)
    assert sglang_tbo_decision([prefill(700), IDLE], enabled=True).split


def test_a_decode_batch_of_one_splits():
    """Issue 44 expected 'a batch of 1 cannot split'; 0.5.23 has no such check: compute_split_seq_index gives
    1 // 2 = 0, which is not None, so the rank can run TBO. Eager, its first micro-batch is empty; replaying
    the graph of batch size 2 (the smallest even one), the request is in the first half and padding in the
    second."""
    one = decode(1, ctx=500)
    plan = sglang_tbo_plan([one, decode(64)], enabled=True)
    assert plan.decision.split and plan.decision.reason == SplitReason.SPLIT
    assert plan.halves[0] == (one, IDLE) and plan.run_tokens[0] == 2
    plan = sglang_tbo_plan([one, decode(64)], enabled=True, cuda_graph=False)
    assert plan.decision == SplitDecision(True, SplitReason.SPLIT)
    assert plan.halves[0] == (IDLE, one)


def test_tbo_has_no_token_threshold_and_runs_at_data_parallel_1():
    assert sglang_tbo_decision([decode(2)], enabled=True).split
    assert sglang_tbo_decision([prefill(3)], enabled=True).split


def test_low_latency_deepep_cannot_split_an_extend_batch():
    """prepare_all_gather: an extend batch through DeepEP's low-latency kernels cannot run TBO; auto picks
    normal for an extend batch."""
    d = sglang_tbo_decision([prefill(512), prefill(512)], enabled=True, deepep_mode="low_latency")
    assert d == SplitDecision(False, SplitReason.CANNOT_SPLIT)
    assert sglang_tbo_decision([prefill(512), prefill(512)], enabled=True, deepep_mode="auto").split
    assert sglang_tbo_decision([decode(8), decode(8)], enabled=True, deepep_mode="low_latency").split
    assert sglang_tbo_decision(
        [prefill(512), prefill(512)], enabled=True, deepep_mode="low_latency", moe_a2a=False
    ).split


def test_sglang_without_tbo_runs_plain_decode_graphs():
    plan = sglang_tbo_plan([decode(1), decode(5)], enabled=False)
    assert plan.decision == SplitDecision(False, SplitReason.DISABLED, None, True)
    assert plan.run_tokens == (1, 8)  # without TBO the size 1 is captured
    # gathered batch sizes: every rank pads to the largest rank's batch
    plan = sglang_tbo_plan([decode(1), decode(5)], enabled=True, gathered_bs=True)
    assert plan.decision == SplitDecision(True, SplitReason.SPLIT, 8, True)


def test_a_decode_batch_past_the_largest_graph_runs_eager():
    plan = sglang_tbo_plan([decode(600), decode(8)], enabled=True)
    assert plan.graph_kinds == ("none", "full") and not plan.decision.graph
    assert plan.halves[0] == (decode(300), decode(300))


def test_sglang_decode_graph_sizes():
    """generate_decode_cuda_graph_batch_sizes, then get_batch_sizes_to_capture's alignment."""
    plain = sglang_decode_graph_bs(two_batch_overlap=False)
    assert plain[:7] == (1, 2, 4, 8, 12, 16, 24) and plain[-3:] == (480, 496, 512)
    assert sglang_decode_graph_bs()[:3] == (2, 4, 8)
    assert sglang_decode_graph_bs(max_bs=256)[-1] == 256


# --- bad values -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda: vllm_dbo_decision([], enabled=True),
        lambda: vllm_dbo_decision([(1, 2)], enabled=True),
        lambda: vllm_dbo_decision([decode(2)], enabled=True, num_speculative_tokens=1, graphs=VllmGraphs()),
        lambda: VllmGraphs(mode="fast"),
        lambda: vllm_split(decode(4), 3),
        lambda: sglang_tbo_decision([decode(2)], enabled=True, deepep_mode="fast"),
        lambda: sglang_tbo_decision([decode(2)], enabled=True, token_distribution_threshold=0.6),
        lambda: sglang_split_index([3], batch_size=2),
        lambda: vllm_legacy_dbo_decision([decode(4), decode(4)], enabled=True, padded=[3, 4]),
    ],
)
def test_bad_values_are_refused(call):
    with pytest.raises(ValueError):
        call()
