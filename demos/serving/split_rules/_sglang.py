"""SGLang 0.5.23 (``sglang_tbo_plan``): ``python/sglang/srt/batch_overlap/two_batch_overlap.py``,
``TboDPAttentionPreparer`` (``prepare_all_gather`` and ``compute_output``), gathered by
``python/sglang/srt/managers/scheduler_components/dp_attn.py``, ``prepare_mlp_sync_batch_raw``.

* No token threshold. Each rank computes where it would split (``compute_split_seq_index``) and whether it
  can; the only rank that cannot is one running an extend (prefill or mixed) batch through DeepEP's
  low-latency mode (``--deepep-mode low_latency``; ``auto`` resolves an extend batch to normal).
* The ranks' forward modes must agree, idle ranks not counted (``_compute_global_forward_mode``); with no
  data-parallel attention the one rank decides alone (``MLPSyncBatchInfo.finalize_local``), so TBO runs at
  data parallel 1 too.
* A decode batch splits by requests at ``bs // 2``: a batch of one request *does* split, its first
  micro-batch empty (eager) or holding it while the second holds padding (graph at the padded size 2).
* An extend batch splits at the request boundary that balances tokens (``_split_array_by_balanced_sum``);
  when that leaves one side under ``--tbo-token-distribution-threshold`` (0.48) of the tokens it cuts
  one request at half the tokens instead ("two-chunk", ``_is_two_chunk_split_enabled``).
* With TBO on, decode CUDA graphs are captured only split (``TboCudaGraphRunnerPlugin``,
  ``capture_one_batch_size``; ``model_executor/runner/decode_cuda_graph_runner.py``,
  ``DecodeCudaGraphRunner.can_run_graph`` requires the step to split): a decode step that does not split
  runs eager; the breakable prefill CUDA graph is off with TBO (``arg_groups/cuda_graph_hook.py``,
  ``disable_breakable_cudagraph_if_incompatible``), so prompt steps run eager here.
* Single-batch overlap (``--enable-single-batch-overlap``, ``batch_overlap/single_batch_overlap.py``) has
  no per-step rule: it is a server flag applied inside every MoE forward that has tokens.

"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from demos.serving.batch import RankBatch, SplitDecision, SplitReason
from demos.serving.split_rules._plan import CudaGraph, StepPlan, check_count, check_ranks
from demos.vocabulary import Word

SGLANG_TOKEN_DISTRIBUTION_THRESHOLD = 0.48
"""``--tbo-token-distribution-threshold`` (python/sglang/srt/arg_groups/fields/exec_.py)."""

_SGLANG_DEEPEP_MODES = ("auto", "normal", "low_latency")


class _Forward(Word):
    """A rank's forward mode (SGLang's ``ForwardMode``, the ones a ``RankBatch`` can be)."""

    IDLE = "idle"
    DECODE = "decode"
    EXTEND = "extend"
    MIXED = "mixed"


def _split_balanced(lens: Sequence[int]) -> int:
    """The request boundary that best balances tokens: boundaries tried left to right while the
    imbalance does not grow, ties going right (``_split_array_by_balanced_sum``)."""
    total, left, best, best_diff = sum(lens), 0, 0, None
    for i in range(1, len(lens)):
        left += lens[i - 1]
        diff = abs(total - 2 * left)
        if best_diff is not None and diff > best_diff:
            break
        best, best_diff = i, diff
    return best


def _split_half(lens: Sequence[int]) -> int:
    """The request holding token ``total // 2`` (the first whose running sum passes it; 0 for none:
    ``_split_array_by_cum_less_than_half``)."""
    half, left = sum(lens) // 2, 0
    for i, n in enumerate(lens):
        left += n
        if left > half:
            return i
    return 0


def _two_chunk(lens: Sequence[int], threshold: float) -> bool:
    """Whether the extend batch cuts one request at half its tokens (``_is_two_chunk_split_enabled``): the
    balanced boundary leaves one side under ``threshold`` of the tokens, and the first micro-batch would
    not hold more requests than ``total // 2`` tokens."""
    total = sum(lens)
    left = sum(lens[: _split_balanced(lens)])
    if not (left < total * threshold or left > total * (1 - threshold)):
        return False
    return _split_half(lens) + 1 <= total // 2


def sglang_split_index(
    extend_lens: Sequence[int] | None = None,
    *,
    batch_size: int | None = None,
    token_distribution_threshold: float = SGLANG_TOKEN_DISTRIBUTION_THRESHOLD,
) -> tuple[int, int]:
    """SGLang 0.5.23's split of one rank's batch: (first request of the second micro-batch, first token of
    the second micro-batch) (``two_batch_overlap.py``, ``compute_split_seq_index`` and
    ``compute_split_token_index``). A decode batch (``batch_size`` requests of one token): ``bs // 2``. An
    extend batch (``extend_lens``, each request's new tokens in batch order): the balanced boundary, or with
    two-chunk the request holding token ``total // 2`` cut there (token index ``total // 2``)."""
    if not 0 <= token_distribution_threshold <= 0.5:
        raise ValueError(f"token_distribution_threshold must be within [0, 0.5], got {token_distribution_threshold!r}")
    if (extend_lens is None) == (batch_size is None):
        raise ValueError("give either extend_lens (an extend batch) or batch_size (a decode batch)")
    if batch_size is not None:
        check_count(batch_size, "batch_size", 0)
        return batch_size // 2, batch_size // 2
    lens = [check_count(n, "extend_lens", 0) for n in extend_lens]
    if _two_chunk(lens, token_distribution_threshold):
        return _split_half(lens), sum(lens) // 2
    i = _split_balanced(lens)
    return i, sum(lens[:i])


def _sglang_mode(batch: RankBatch) -> _Forward:
    """A rank's forward mode: idle, decode, extend (prompt chunks only) or mixed (prompt chunks and decodes
    in one batch, which SGLang forms with ``--enable-mixed-chunk``)."""
    if batch.idle:
        return _Forward.IDLE
    if not batch.prefill:
        return _Forward.DECODE
    return _Forward.MIXED if batch.decode else _Forward.EXTEND


def sglang_split(
    batch: RankBatch,
    *,
    graph_bs: int | None = None,
    token_distribution_threshold: float = SGLANG_TOKEN_DISTRIBUTION_THRESHOLD,
) -> tuple[RankBatch, RankBatch]:
    """An SGLang 0.5.23 rank's two micro-batches (``TboForwardBatchPreparer.prepare_raw`` and
    ``filter_batch``): a decode batch by requests at ``bs // 2``, or at ``graph_bs // 2`` of the padded batch
    when it replays a CUDA graph of ``graph_bs`` (``compute_split_indices_for_cuda_graph_replay``; the
    padding is not work); an extend batch at ``sglang_split_index``, the request across the two-chunk cut
    continuing in the second micro-batch after its first part. A mixed batch lists its prompt chunks first,
    then its decodes as one-token extends (``ScheduleBatch.mix_with_running``)."""
    if not isinstance(batch, RankBatch):
        raise ValueError(f"batch must be a RankBatch, got {batch!r}")
    mode = _sglang_mode(batch)
    if mode is _Forward.IDLE:
        return RankBatch(), RankBatch()
    if mode is _Forward.DECODE:
        bs = len(batch.decode)
        cut = bs // 2 if graph_bs is None else min(bs, check_count(graph_bs, "graph_bs", bs) // 2)
        return RankBatch(decode=batch.decode[:cut]), RankBatch(decode=batch.decode[cut:])
    items = [(False, c, k) for c, k in batch.prefill] + [(True, 1, ctx) for ctx in batch.decode]
    _, cut = sglang_split_index([n for _, n, _ in items], token_distribution_threshold=token_distribution_threshold)
    halves: tuple[tuple[list, list], tuple[list, list]] = (([], []), ([], []))
    start = 0
    for is_decode, n, ctx in items:
        end = start + n
        if is_decode:
            halves[0 if start < cut else 1][0].append(ctx)
        elif end <= cut:
            halves[0][1].append((n, ctx))
        elif start >= cut:
            halves[1][1].append((n, ctx))
        else:
            halves[0][1].append((cut - start, ctx))
            halves[1][1].append((end - cut, ctx + cut - start))
        start = end
    return RankBatch(*halves[0]), RankBatch(*halves[1])


def sglang_decode_graph_bs(
    *, max_bs: int = 512, two_batch_overlap: bool = True, attn_tp_size: int = 1
) -> tuple[int, ...]:
    """The decode batch sizes SGLang 0.5.23 captures CUDA graphs for (``arg_groups/cuda_graph_hook.py``,
    ``generate_decode_cuda_graph_batch_sizes``, then ``model_executor/runner/base_cuda_graph_runner.py``,
    ``get_batch_sizes_to_capture``): 1, 2, 4, 8, 12, every 8 from 16 to 256, every 16 from 272 below 512,
    every 32 from 512, and ``max_bs``; with two-batch overlap only the multiples of 2 (times the attention
    TP size where the gathered buffer needs it). ``max_bs``: on an H200 (``arg_groups/memory_hook.py``) 256
    below TP 4, else 512 (the default here: data-parallel attention with DeepEP runs at TP >= 4)."""
    check_count(max_bs, "max_bs", 1)
    check_count(attn_tp_size, "attn_tp_size", 1)
    sizes = {1, 2, 4, 8, 12} | set(range(16, 257, 8)) | set(range(272, 512, 16)) | set(range(512, max_bs + 1, 32))
    sizes = {s for s in sizes if s <= max_bs} | {max_bs}
    align = (2 if two_batch_overlap else 1) * attn_tp_size
    return tuple(s for s in sorted(sizes) if s % align == 0)


def sglang_tbo_plan(
    ranks: Sequence[RankBatch],
    *,
    enabled: bool,
    deepep_mode: str = "auto",
    moe_a2a: bool = True,
    token_distribution_threshold: float = SGLANG_TOKEN_DISTRIBUTION_THRESHOLD,
    cuda_graph: bool = True,
    graph_bs: Sequence[int] | None = None,
    gathered_bs: bool = False,
) -> StepPlan:
    """SGLang 0.5.23's step across its attention data-parallel ranks (module docstring;
    ``TboDPAttentionPreparer.prepare_all_gather`` / ``compute_output``, ``prepare_mlp_sync_batch_raw``).

    ``enabled``: ``--enable-two-batch-overlap``. ``deepep_mode``: ``--deepep-mode`` (auto, normal,
    low_latency); ``moe_a2a``: an expert all-to-all backend is set (``--moe-a2a-backend`` not none; TBO
    without one needs data-parallel attention). ``cuda_graph``: decode CUDA graphs are on (DeepEP normal
    mode turns them off). ``graph_bs``: the captured decode batch sizes (``sglang_decode_graph_bs`` for
    ``enabled`` when None). ``gathered_bs``: every rank pads to the largest rank's batch
    (``require_mlp_tp_gather``, when the attention DP size is below the TP size), else each its own. The
    decision's ``padded_tokens`` is the common padded count when there is one, else None (each rank's in
    ``run_tokens``). Decode graphs only: prompt steps run eager (prefill CUDA graphs are not modelled)."""
    ranks = check_ranks(ranks)
    if deepep_mode not in _SGLANG_DEEPEP_MODES:
        raise ValueError(f"deepep_mode must be one of {', '.join(_SGLANG_DEEPEP_MODES)}, got {deepep_mode!r}")
    if not 0 <= token_distribution_threshold <= 0.5:
        raise ValueError(f"token_distribution_threshold must be within [0, 0.5], got {token_distribution_threshold!r}")
    buckets = tuple(sorted(graph_bs)) if graph_bs is not None else sglang_decode_graph_bs(two_batch_overlap=enabled)
    if not buckets or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in buckets):
        raise ValueError(f"graph_bs must be positive batch sizes, got {graph_bs!r}")
    n = len(ranks)
    modes = [_sglang_mode(r) for r in ranks]
    if all(m is _Forward.IDLE for m in modes):
        return StepPlan(SplitDecision(False, SplitReason.EMPTY_STEP), (0,) * n, (CudaGraph.NONE,) * n)
    busy = [m for m in modes if m is not _Forward.IDLE]
    agree = all(m == busy[0] for m in busy)
    # An extend batch cannot split through DeepEP's low-latency kernels (auto resolves extend to normal).
    blocked = moe_a2a and deepep_mode == "low_latency"
    can_split = [not (blocked and m in (_Forward.EXTEND, _Forward.MIXED)) for m in modes]
    if not enabled:
        reason = SplitReason.DISABLED
    elif not agree:
        reason = SplitReason.MODE_DISAGREEMENT
    elif not all(can_split):
        reason = SplitReason.CANNOT_SPLIT
    else:
        reason = SplitReason.SPLIT
    split = reason == SplitReason.SPLIT
    # Decode graphs: every rank decodes or idles (a min-reduced vote), and with TBO on the step splits.
    graph_step = cuda_graph and all(m in (_Forward.DECODE, _Forward.IDLE) for m in modes) and (split or not enabled)
    sizes = [len(r.decode) for r in ranks]
    run: list[int] = []
    kinds: list[CudaGraph] = []
    for r, bs in zip(ranks, sizes):
        want = max(sizes) if gathered_bs else bs
        if graph_step and want <= buckets[-1]:
            run.append(buckets[bisect.bisect_left(buckets, want)])
            kinds.append(CudaGraph.FULL)
        else:
            run.append(r.tokens)
            kinds.append(CudaGraph.NONE)
    graph = all(k is CudaGraph.FULL for k in kinds)
    padded = run[0] if graph and gathered_bs else None
    halves = None
    if split:
        halves = tuple(
            sglang_split(
                r,
                graph_bs=p if k is CudaGraph.FULL else None,
                token_distribution_threshold=token_distribution_threshold,
            )
            for r, p, k in zip(ranks, run, kinds)
        )
    return StepPlan(SplitDecision(split, reason, padded, graph), tuple(run), tuple(kinds), halves)


def sglang_tbo_decision(
    ranks: Sequence[RankBatch],
    *,
    enabled: bool,
    deepep_mode: str = "auto",
    moe_a2a: bool = True,
    token_distribution_threshold: float = SGLANG_TOKEN_DISTRIBUTION_THRESHOLD,
    cuda_graph: bool = True,
    graph_bs: Sequence[int] | None = None,
    gathered_bs: bool = False,
) -> SplitDecision:
    """SGLang 0.5.23's decision for a step (``sglang_tbo_plan``'s ``decision``; module docstring)."""
    return sglang_tbo_plan(
        ranks,
        enabled=enabled,
        deepep_mode=deepep_mode,
        moe_a2a=moe_a2a,
        token_distribution_threshold=token_distribution_threshold,
        cuda_graph=cuda_graph,
        graph_bs=graph_bs,
        gathered_bs=gathered_bs,
    ).decision
