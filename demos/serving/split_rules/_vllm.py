"""vLLM 0.34.0 (``vllm_dbo_plan``): Model Runner V1 is gone from this release (``vllm/platforms/interface.py``,
``validate_environ``: ``VLLM_USE_V2_MODEL_RUNNER`` other than 1 is refused, "Model Runner V1 has been
removed"; no ``vllm/v1/worker/gpu_model_runner.py`` ships), so Model Runner V2 is the only GPU runner and
its rule is the one modelled: ``vllm/v1/worker/gpu/dp_utils.py``, ``sync_cudagraph_and_dp_padding``.

* DBO needs a micro-batch runner, built only with ``--enable-dbo`` and data parallel > 1
  (``vllm/v1/worker/gpu/ubatch_utils.py``, ``maybe_build_ubatch_runner``): data parallel 1 never splits.
* Every rank sends its token count, its uniform-decode query length (0 when the batch is not a uniform
  decode), its CUDA graph mode and its permission to split; all ranks see all of them (one all-reduce).
* The step splits when every rank permits it and the *smallest* rank's token count reaches the threshold
  (``vllm/v1/worker/ubatch_utils.py``, ``check_ubatch_thresholds``: ``>=``). The decode threshold applies
  only when every rank runs a uniform decode of the same query length (1 + speculative tokens), the
  prefill threshold otherwise, for the whole group.
* A split step runs every rank at the largest rank's token count, rounded up to a captured split CUDA
  graph when one exists (``vllm/v1/worker/gpu/cudagraph_utils.py``, ``CudaGraphManager.dispatch`` with
  ``num_ubatches=2``); those exist only for FULL graphs of uniform decodes at or above the decode
  threshold (``CudaGraphManager._maybe_ubatch_twin``). When the smallest rank's tokens would not reach
  the padded count's second half (``2 * min < padded``) the graph is dropped, not the split: the step
  runs split and eager at the largest rank's count, and a rank's empty second micro-batch runs as a dummy.
* An idle rank runs a dummy uniform decode of one request of 1 + speculative tokens
  (``vllm/v1/worker/gpu_worker.py``, ``Worker.execute_dummy_batch``, driven by ``vllm/v1/engine/core.py``,
  ``DPEngineCoreProc.run_busy_loop``) and enters the vote with it; thresholds below 2 are refused
  (``vllm/config/parallel.py``, ``ParallelConfig._verify_args``) and with speculative decoding they are
  raised to twice the query length (``vllm/config/vllm.py``, ``_raise_dbo_thresholds_for_spec_decode``),
  so an idle rank always keeps the group from splitting.
* A step that does not split still agrees on CUDA graphs: the lowest graph mode any rank wants
  (none < piecewise < full) runs everywhere; if that is a graph, every rank is padded to the captured
  size that holds the largest rank's tokens, else every rank runs eager at its own count.

The older rule in ``vllm/v1/worker/dp_utils.py``, ``coordinate_batch_across_dp`` (each rank votes with its
own count and kind, the split is *abandoned* when ``is_last_ubatch_empty``), still ships in 0.34.0 but no
GPU path calls it with micro-batching allowed (``forward_context.py`` and the CPU runner call it with
``allow_microbatching=False``); ``vllm_legacy_dbo_decision`` keeps it for comparison with earlier releases.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from demos.serving.batch import RankBatch, SplitDecision, SplitReason
from demos.serving.split_rules._plan import NUM_UBATCHES, CudaGraph, StepPlan, check_count, check_ranks
from demos.serving.split_rules._vllm_graphs import (
    GRAPH_FULL,
    GRAPH_NONE,
    KIND_OF_LEVEL,
    GraphDesc,
    VllmGraphs,
    captured,
    dispatch,
    dispatch_in,
)

VLLM_DECODE_THRESHOLD = 32
VLLM_PREFILL_THRESHOLD = 512
"""``ParallelConfig.dbo_decode_token_threshold`` / ``dbo_prefill_token_threshold`` (vllm/config/parallel.py)."""


class _VllmRank(NamedTuple):
    tokens: int  # scheduled tokens (an idle rank: its dummy batch's)
    reqs: int
    uniform: int | None  # the common query length of a uniform decode, else None
    idle: bool


def _vllm_rank(batch: RankBatch, q: int) -> _VllmRank:
    """A rank's token count, request count and uniform-decode query length (``GPUModelRunner.
    gather_batch_req_state`` and ``vllm/v1/worker/utils.py``, ``get_uniform_decode_token_count``): a batch
    is a uniform decode when no request prefills (a one-token prompt chunk after cached tokens runs as a
    decode) and every request has the same query length. A decode request schedules ``q`` tokens. An idle
    rank runs the dummy batch: one request of ``q`` tokens, a uniform decode."""
    if batch.idle:
        return _VllmRank(q, 1, q, True)
    if not batch.prefill:  # a decode only: the same as below, without its lists
        return _VllmRank(q * len(batch.decode), len(batch.decode), q, False)
    lens = [q] * len(batch.decode) + [c for c, _ in batch.prefill]
    eligible = all(c == 1 and cached > 0 for c, cached in batch.prefill)
    uniform = lens[0] if eligible and all(n == lens[0] for n in lens) else None
    return _VllmRank(sum(lens), len(lens), uniform, False)


def _vllm_thresholds(enabled: bool, decode_threshold: int, prefill_threshold: int, q: int) -> tuple[int, int]:
    """The thresholds as vLLM 0.34.0 accepts them: at least 2 (``ParallelConfig._verify_args``, a
    ``ValueError`` there), then raised to 2 x the decode query length (``VllmConfig.
    _raise_dbo_thresholds_for_spec_decode``, a warning there). Checked only with DBO on, as there."""
    check_count(decode_threshold, "decode_threshold", 0)
    check_count(prefill_threshold, "prefill_threshold", 0)
    if not enabled:
        return decode_threshold, prefill_threshold
    if min(decode_threshold, prefill_threshold) < NUM_UBATCHES:
        raise ValueError(
            f"vLLM 0.34.0 refuses DBO thresholds below the number of micro-batches ({NUM_UBATCHES}), got "
            f"decode_threshold={decode_threshold}, prefill_threshold={prefill_threshold}"
        )
    return max(decode_threshold, NUM_UBATCHES * q), max(prefill_threshold, NUM_UBATCHES * q)


def vllm_dbo_plan(
    ranks: Sequence[RankBatch],
    *,
    enabled: bool,
    decode_threshold: int = VLLM_DECODE_THRESHOLD,
    prefill_threshold: int = VLLM_PREFILL_THRESHOLD,
    num_speculative_tokens: int = 0,
    graphs: VllmGraphs | None = None,
) -> StepPlan:
    """vLLM 0.34.0's step across its data-parallel ranks (module docstring; ``vllm/v1/worker/gpu/dp_utils.py``,
    ``sync_cudagraph_and_dp_padding``, and ``dispatch_cg_and_sync_dp`` for data parallel 1).

    ``ranks``: one ``RankBatch`` per data-parallel rank. ``enabled``: ``--enable-dbo``. The thresholds are
    ``--dbo-decode-token-threshold`` / ``--dbo-prefill-token-threshold`` (below 2 refused, raised to twice
    the decode query length with speculative decoding). ``graphs``: the captured CUDA graphs
    (``VllmGraphs.defaults()`` for the speculative tokens given when None). A ``ValueError`` for a bad value.
    """
    ranks = check_ranks(ranks)
    check_count(num_speculative_tokens, "num_speculative_tokens", 0)
    q = 1 + num_speculative_tokens
    if graphs is None:
        graphs = VllmGraphs.defaults(num_speculative_tokens=num_speculative_tokens)
    if not isinstance(graphs, VllmGraphs) or graphs.decode_query_len != q:
        raise ValueError(f"graphs must be a VllmGraphs of decode query length {q}, got {graphs!r}")
    if enabled and graphs.mode == "piecewise":
        raise ValueError(
            "vLLM 0.34.0 refuses DBO with PIECEWISE CUDA graphs (VllmConfig._get_dbo_unsupported_features)"
        )
    decode_threshold, prefill_threshold = _vllm_thresholds(enabled, decode_threshold, prefill_threshold, q)
    if all(r.idle for r in ranks):
        # No rank has work: the engines pause their busy loop, no dummy batch runs.
        return StepPlan(SplitDecision(False, SplitReason.EMPTY_STEP), (0,) * len(ranks), (CudaGraph.NONE,) * len(ranks))
    views = [_vllm_rank(r, q) for r in ranks]
    if len(ranks) == 1:
        # Data parallel 1: no micro-batch runner, no agreement; the rank replays the graph its batch fits.
        v = views[0]
        d = dispatch(graphs, None, v.reqs, v.tokens, v.uniform, 1)
        reason = SplitReason.NO_DATA_PARALLEL if enabled else SplitReason.DISABLED
        padded = d.tokens if d.level != GRAPH_NONE else None
        return StepPlan(
            SplitDecision(False, reason, padded, d.level != GRAPH_NONE), (d.tokens,), (KIND_OF_LEVEL[d.level],)
        )
    ubatch_threshold = decode_threshold if enabled else None
    cap = captured(graphs, ubatch_threshold)
    tokens = [v.tokens for v in views]
    lo, hi, reqs = min(tokens), max(tokens), max(v.reqs for v in views)
    same_uniform = all(v.uniform == views[0].uniform for v in views)
    synced_uniform = views[0].uniform if same_uniform else None
    if enabled:
        uniform_decode = same_uniform and views[0].uniform == q
        if lo >= (decode_threshold if uniform_decode else prefill_threshold):
            d = dispatch_in(cap, reqs, hi, synced_uniform, NUM_UBATCHES)
            if d.level != GRAPH_NONE and NUM_UBATCHES * lo < d.tokens:
                d = GraphDesc(GRAPH_NONE, hi, reqs, None, NUM_UBATCHES)  # a rank's second half would be padding only
            split_uniform = d.uniform if d.level == GRAPH_FULL else synced_uniform
            halves = tuple(
                (RankBatch(), RankBatch())
                if r.idle
                else vllm_split(r, d.tokens, uniform=split_uniform, num_speculative_tokens=num_speculative_tokens)
                for r in ranks
            )
            decision = SplitDecision(True, SplitReason.SPLIT, d.tokens, d.level != GRAPH_NONE)
            return StepPlan(decision, (d.tokens,) * len(ranks), (KIND_OF_LEVEL[d.level],) * len(ranks), halves)
        reason = SplitReason.IDLE_RANK if any(v.idle for v in views) else SplitReason.BELOW_THRESHOLD
    else:
        reason = SplitReason.DISABLED
    level = min(dispatch_in(cap, v.reqs, v.tokens, v.uniform, 1).level for v in views)
    if level == GRAPH_NONE:
        return StepPlan(SplitDecision(False, reason), tuple(tokens), (CudaGraph.NONE,) * len(ranks))
    d = dispatch_in(cap, reqs, hi, synced_uniform, 1)
    return StepPlan(
        SplitDecision(False, reason, d.tokens, d.level != GRAPH_NONE),
        (d.tokens,) * len(ranks),
        (KIND_OF_LEVEL[d.level],) * len(ranks),
    )


def vllm_dbo_decision(
    ranks: Sequence[RankBatch],
    *,
    enabled: bool,
    decode_threshold: int = VLLM_DECODE_THRESHOLD,
    prefill_threshold: int = VLLM_PREFILL_THRESHOLD,
    num_speculative_tokens: int = 0,
    graphs: VllmGraphs | None = None,
) -> SplitDecision:
    """vLLM 0.34.0's decision for a step (``vllm_dbo_plan``'s ``decision``; module docstring)."""
    return vllm_dbo_plan(
        ranks,
        enabled=enabled,
        decode_threshold=decode_threshold,
        prefill_threshold=prefill_threshold,
        num_speculative_tokens=num_speculative_tokens,
        graphs=graphs,
    ).decision


def vllm_legacy_dbo_decision(
    ranks: Sequence[RankBatch],
    *,
    enabled: bool,
    decode_threshold: int = VLLM_DECODE_THRESHOLD,
    prefill_threshold: int = VLLM_PREFILL_THRESHOLD,
    padded: Sequence[int] | None = None,
) -> SplitDecision:
    """The rule of ``vllm/v1/worker/dp_utils.py``, ``coordinate_batch_across_dp`` (with ``_synchronize_dp_ranks``
    and ``_post_process_ubatch``), which vLLM 0.34.0 still ships but no GPU path calls with micro-batching
    allowed; kept to compare with the releases whose Model Runner V1 called it. Not the default rule.

    Each rank votes with its *own* count and kind (``check_ubatch_thresholds``: a uniform decode against the
    decode threshold, else the prefill threshold); an idle rank votes with a one-token decode; all must vote
    yes; then the split is abandoned when ``is_last_ubatch_empty(min real, max padded, 2)``, that is
    ``max_padded // 2 >= min_real`` (``SplitReason.EMPTY_UBATCH``). ``padded``: each rank's count after its
    CUDA graph padding (default: unpadded). ``graph`` is always False: which graph ran was the removed
    runner's choice."""
    ranks = check_ranks(ranks)
    decode_threshold, prefill_threshold = _vllm_thresholds(enabled, decode_threshold, prefill_threshold, 1)
    if all(r.idle for r in ranks):
        return SplitDecision(False, SplitReason.EMPTY_STEP)
    if len(ranks) == 1:
        return SplitDecision(False, SplitReason.NO_DATA_PARALLEL if enabled else SplitReason.DISABLED)
    if not enabled:
        return SplitDecision(False, SplitReason.DISABLED)
    real = [1 if r.idle else r.tokens for r in ranks]
    padded = list(real) if padded is None else [check_count(p, "padded", 0) for p in padded]
    if len(padded) != len(ranks) or any(p < t for p, t in zip(padded, real)):
        raise ValueError(f"padded must hold one count per rank, each at least its real tokens, got {padded!r}")
    votes = [
        t >= (decode_threshold if (r.idle or r.uniform_decode) else prefill_threshold) for r, t in zip(ranks, real)
    ]
    if not all(votes):
        idle_veto = any(r.idle and not v for r, v in zip(ranks, votes))
        return SplitDecision(False, SplitReason.IDLE_RANK if idle_veto else SplitReason.BELOW_THRESHOLD)
    if (max(padded) // NUM_UBATCHES) * (NUM_UBATCHES - 1) >= min(real):
        return SplitDecision(False, SplitReason.EMPTY_UBATCH)
    return SplitDecision(True, SplitReason.SPLIT, max(padded))


# --- vLLM 0.34.0: a split step's two micro-batches ----------------------------------------------------


def _vllm_order(batch: RankBatch, q: int) -> list[tuple[str, int, int]]:
    """The runner's request order (``GPUModelRunner`` V2, ``sort_batch_req_ids``): decode-length requests
    first, then the rest by ascending query length (a stable sort). Entries: (is a decode, tokens, context)."""
    decodes = [(True, q, ctx) for ctx in batch.decode]
    prefills = sorted(((False, c, cached) for c, cached in batch.prefill), key=lambda e: (e[1] != q, e[1]))
    return decodes + prefills


def vllm_split(
    batch: RankBatch,
    padded_tokens: int | None = None,
    *,
    uniform: int | None = None,
    split_point: int | None = None,
    num_speculative_tokens: int = 0,
    keep_order: bool = False,
) -> tuple[RankBatch, RankBatch]:
    """A vLLM 0.34.0 rank's two micro-batches (``vllm/v1/worker/gpu/ubatch_utils.py``, ``create_ubatch_slices``,
    over ``vllm/v1/worker/ubatch_utils.py``, ``maybe_create_ubatch_slices``): the tokens split at half the
    padded count (``padded_tokens``, default the batch's own), or, for a uniform batch of ``uniform`` > 1
    tokens per request (speculative verification), on the request boundary nearest below it; the second
    micro-batch ends at the last real token (padding is not work). A prompt chunk across the split is cut in
    two: its second part continues after the first (``cached`` grows by the first part). ``split_point``
    overrides the point (``maybe_create_ubatch_slices``' own argument). Requests in the runner's order
    (decodes, then prompt chunks by ascending size) unless ``keep_order`` (decodes, then prompt chunks as
    given). A decode request of several tokens cut by the split stays whole in the first micro-batch (our
    ``RankBatch`` has no partial decode)."""
    if not isinstance(batch, RankBatch):
        raise ValueError(f"batch must be a RankBatch, got {batch!r}")
    q = 1 + check_count(num_speculative_tokens, "num_speculative_tokens", 0)
    order = (
        [(True, q, c) for c in batch.decode] + [(False, c, k) for c, k in batch.prefill]
        if keep_order
        else _vllm_order(batch, q)
    )
    total = sum(n for _, n, _ in order)
    padded = total if padded_tokens is None else check_count(padded_tokens, "padded_tokens", total)
    if split_point is None:
        split_point = padded // NUM_UBATCHES
        if uniform is not None and uniform > 1 and padded // (uniform * NUM_UBATCHES) > 0:
            split_point = padded // (uniform * NUM_UBATCHES) * uniform
    check_count(split_point, "split_point", 0)
    halves: tuple[tuple[list, list], tuple[list, list]] = (([], []), ([], []))
    start = 0
    for is_decode, n, ctx in order:
        end = start + n
        if is_decode:
            halves[0 if start < split_point else 1][0].append(ctx)
        elif end <= split_point:
            halves[0][1].append((n, ctx))
        elif start >= split_point:
            halves[1][1].append((n, ctx))
        else:
            first = split_point - start
            halves[0][1].append((first, ctx))
            halves[1][1].append((n - first, ctx + first))
        start = end
    return RankBatch(*halves[0]), RankBatch(*halves[1])
