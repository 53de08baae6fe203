"""Each engine's per-step rule for running a step as two micro-batches, read from the pinned releases:
vLLM 0.34.0 (``vllm-0.34.0-cp38-abi3-manylinux_2_28_x86_64.whl``) and SGLang 0.5.23
(``sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl``). The rules are written here in our own code; every
function names the engine file and function it follows. docs/serving-split-rules.md says the same in words.

A step is one ``RankBatch`` per data-parallel rank (an idle rank has an empty batch). Each rule returns a
``SplitDecision`` (``*_decision``) or a ``StepPlan`` (``*_plan``: the decision plus what each rank runs: its
token count with padding, whether it replays a CUDA graph, and its two micro-batches' real work).

vLLM 0.34.0 (``vllm_dbo_plan``): Model Runner V1 is gone from this release (``vllm/platforms/interface.py``,
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

CUDA graph sizes (``VllmGraphs.defaults``): ``vllm/config/vllm.py``, ``VllmConfig._set_cudagraph_sizes``
and ``_split_cudagraph_capture_sizes``; ``vllm/config/compilation.py``, ``decode_cudagraph_capture_shapes``,
``prefill_cudagraph_capture_grid`` and ``decode_cudagraph_capture_grid``. Defaults: mode
FULL_AND_PIECEWISE (FULL graphs for uniform decodes by request count, PIECEWISE graphs for the rest by token
count); ``max_num_seqs`` 1024 and ``max_num_batched_tokens`` 8192 (``vllm/engine/arg_utils.py``: the API
server's defaults on a GPU of 70 GiB or more that is not an A100, so H100/H200); off SM100 the capture
ceiling is 512 tokens: sizes 1, 2, 4, every 8 to 248, every 16 from 256 to 512, the same list for
decode (in requests at query length 1) and prefill (in tokens).

SGLang 0.5.23 (``sglang_tbo_plan``): ``python/sglang/srt/batch_overlap/two_batch_overlap.py``,
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
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from demos.serving.batch import RankBatch, SplitDecision, SplitReason
from demos.vocabulary import Word

__all__ = [
    "CudaGraph",
    "StepPlan",
    "VllmGraphs",
    "sglang_decode_graph_bs",
    "sglang_split",
    "sglang_split_index",
    "sglang_tbo_decision",
    "sglang_tbo_plan",
    "vllm_dbo_decision",
    "vllm_dbo_plan",
    "vllm_legacy_dbo_decision",
    "vllm_split",
]

NUM_UBATCHES = 2
"""Both engines run two micro-batches (vLLM's ``ParallelConfig.num_ubatches`` is 2 with ``--enable-dbo``)."""

VLLM_DECODE_THRESHOLD = 32
VLLM_PREFILL_THRESHOLD = 512
"""``ParallelConfig.dbo_decode_token_threshold`` / ``dbo_prefill_token_threshold`` (vllm/config/parallel.py)."""

SGLANG_TOKEN_DISTRIBUTION_THRESHOLD = 0.48
"""``--tbo-token-distribution-threshold`` (python/sglang/srt/arg_groups/fields/exec_.py)."""

# CUDA graph levels as vLLM orders them (CUDAGraphMode NONE=0, PIECEWISE=1, FULL=2; ranks take the minimum).
_NONE, _PIECEWISE, _FULL = 0, 1, 2


class CudaGraph(Word):
    """How a rank runs its step: a FULL CUDA graph (the whole forward), PIECEWISE graphs (the forward
    between attention layers; vLLM only), or none (eager, kernel by kernel)."""

    FULL = "full"
    PIECEWISE = "piecewise"
    NONE = "none"


_KIND = {_NONE: CudaGraph.NONE, _PIECEWISE: CudaGraph.PIECEWISE, _FULL: CudaGraph.FULL}

# vLLM's graph modes: (graphs of uniform decodes, graphs of the other batches); a mode with one routine
# for every batch (full, piecewise) captures token-keyed graphs only.
_VLLM_MODES = {
    "full_and_piecewise": (_FULL, _PIECEWISE),
    "full_decode_only": (_FULL, _NONE),
    "full": (None, _FULL),
    "piecewise": (None, _PIECEWISE),
    "none": (None, _NONE),
}


@dataclass(frozen=True)
class StepPlan:
    """What a step runs on every rank, one entry per rank in each tuple.

    ``decision``: the engine's ``SplitDecision`` for the step. ``run_tokens``: the tokens each rank runs,
    padding and a vLLM idle rank's dummy tokens included. ``graph_kinds``: each rank's ``CudaGraph`` (full,
    piecewise, or none: eager). ``halves``: each rank's two micro-batches' real work when the
    step splits (padding is not work; an idle rank's halves are empty), None when it does not.
    """

    decision: SplitDecision
    run_tokens: tuple[int, ...]
    graph_kinds: tuple[CudaGraph, ...]
    halves: tuple[tuple[RankBatch, RankBatch], ...] | None = None


def _check_ranks(ranks: Sequence[RankBatch]) -> tuple[RankBatch, ...]:
    ranks = tuple(ranks)
    if not ranks or not all(isinstance(r, RankBatch) for r in ranks):
        raise ValueError(f"ranks must be a non-empty sequence of RankBatch, one per data-parallel rank, got {ranks!r}")
    return ranks


def _count(value: object, what: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{what} must be an integer >= {low}, got {value!r}")
    return value


# --- vLLM 0.34.0: the CUDA graphs a rank captured ------------------------------------------------------


def _walk_grid(limit: int, stride_of) -> list[int]:
    """Sizes from 1 to ``limit``: after each size the next multiple of the largest power of two not above
    ``stride_of(size)``; ``limit`` itself last (vllm/config/compilation.py, ``_walk_grid``)."""
    if limit <= 0:
        return []
    sizes, size = [], 1
    while size < limit:
        sizes.append(size)
        stride = 2 ** max(0, math.floor(math.log2(max(1.0, stride_of(size)))))
        size = (size // stride + 1) * stride
    return sizes + [limit]


def _prefill_grid(max_tokens: int) -> list[int]:
    """vllm/config/compilation.py, ``prefill_cudagraph_capture_grid`` (balanced performance mode)."""
    return _walk_grid(max_tokens, lambda t: min(t, max(8, t / 4), 0.07 * max(t, 4096)))


def _decode_grid(max_requests: int) -> list[int]:
    """vllm/config/compilation.py, ``decode_cudagraph_capture_grid``."""
    return _walk_grid(max_requests, lambda n: 0.65 * n ** (2 / 3))


def _reachable_decode_requests(sizes: Sequence[int], max_reqs: int, max_tokens: int, q: int) -> list[int]:
    """The request counts captured at query length ``q``: sizes up to the first one at or above the limit
    (``min(max_reqs, max_tokens // q)``), that one cut to the limit (``decode_cudagraph_capture_shapes``)."""
    sizes = sorted(set(sizes))
    limit = min(max_reqs, max_tokens // q)
    if limit < 1:
        return []
    kept = sizes[: bisect.bisect_left(sizes, limit) + 1]
    return sorted({min(n, limit) for n in kept})


@dataclass(frozen=True)
class VllmGraphs:
    """The CUDA graphs one vLLM 0.34.0 rank captured (Model Runner V2, ``CudaGraphManager``).

    ``mode``: ``--compilation-config`` ``cudagraph_mode`` in lower case (full_and_piecewise, the default;
    full_decode_only, full, piecewise, none). ``decode_requests``: the request counts of the FULL graphs of
    uniform decodes (captured only by the modes with a separate decode routine). ``token_sizes``: the token
    counts of the graphs of every other batch (PIECEWISE under full_and_piecewise and piecewise, FULL under
    full). ``max_num_seqs``: the scheduler's request cap (a FULL token-keyed graph holds up to
    ``min(tokens, max_num_seqs)`` requests). ``decode_query_len``: 1 + speculative tokens.
    """

    mode: str = "full_and_piecewise"
    decode_requests: tuple[int, ...] = ()
    token_sizes: tuple[int, ...] = ()
    max_num_seqs: int = 1024
    decode_query_len: int = 1

    def __post_init__(self) -> None:
        if self.mode not in _VLLM_MODES:
            raise ValueError(f"mode must be one of {', '.join(_VLLM_MODES)}, got {self.mode!r}")
        _count(self.max_num_seqs, "max_num_seqs", 1)
        _count(self.decode_query_len, "decode_query_len", 1)
        for name in ("decode_requests", "token_sizes"):
            sizes = tuple(sorted(set(getattr(self, name))))
            for s in sizes:
                _count(s, name, 1)
            object.__setattr__(self, name, sizes)

    @classmethod
    def defaults(
        cls,
        *,
        mode: str = "full_and_piecewise",
        max_num_seqs: int = 1024,
        max_num_batched_tokens: int = 8192,
        num_speculative_tokens: int = 0,
        sm100: bool = False,
    ) -> VllmGraphs:
        """The graphs vLLM 0.34.0 captures when no capture size is given (``VllmConfig._set_cudagraph_sizes``
        and ``_split_cudagraph_capture_sizes``). Off SM100: a ceiling of ``min(2 * max_num_seqs * q, 512)``
        tokens (``q`` = 1 + speculative tokens) within ``max_num_batched_tokens``; sizes 1, 2, 4, every 8
        below 256, every 16 from 256, plus ``max_num_batched_tokens`` when it fits and, at q = 1,
        ``max_num_seqs`` when it fits (at q > 1 whole-request decode sizes); the same sizes serve prefill
        (tokens) and decode (requests, rounded up to whole requests). On SM100 (B200/GB200): the prefill
        grid to 8192 tokens and the decode grid to ``max_num_seqs`` requests within 8192 tokens."""
        _count(max_num_seqs, "max_num_seqs", 1)
        _count(max_num_batched_tokens, "max_num_batched_tokens", 1)
        _count(num_speculative_tokens, "num_speculative_tokens", 0)
        if mode not in _VLLM_MODES:
            raise ValueError(f"mode must be one of {', '.join(_VLLM_MODES)}, got {mode!r}")
        q = 1 + num_speculative_tokens
        if _VLLM_MODES[mode] == (None, _NONE):
            return cls(mode, (), (), max_num_seqs, q)
        ceiling = 1024 if sm100 else 512
        cap = min(max_num_seqs * q * 2, ceiling)
        decode_sizes: list[int] = []
        if q > 1:
            most = min(max_num_seqs, ceiling)
            counts = sorted({n for n in (1, 2, 4) if n <= most} | set(range(8, min(most + 1, 256), 8)))
            counts = sorted(set(counts) | set(range(256, most + 1, 16)) | {most})
            decode_sizes = sorted({n * q for n in counts if n * q <= cap})
        elif max_num_seqs <= cap:
            decode_sizes = [max_num_seqs]
        cap = min(max_num_batched_tokens, cap)
        shared = {n for n in (1, 2, 4) if n <= cap}
        if cap >= 8:
            shared |= set(range(8, min(cap + 1, 256), 8))
        if cap >= 256:
            shared |= set(range(256, cap + 1, 16))
        if max_num_batched_tokens <= cap:
            shared.add(max_num_batched_tokens)
        shared |= {s for s in decode_sizes if s <= max_num_batched_tokens}
        shared_sorted = sorted(shared)
        shared_max = shared_sorted[-1]
        if sm100:
            budget = 8192
            prefill = _prefill_grid(min(8192, max_num_batched_tokens))
            requests = _decode_grid(max_num_seqs)
        else:
            budget = None
            prefill = shared_sorted
            requests = sorted({min(-(-s // q), max_num_seqs) for s in shared_sorted if -(-s // q) * q <= shared_max})
        decode_max_tokens = min(max_num_batched_tokens, budget or max_num_batched_tokens)
        decode = _reachable_decode_requests(requests, max_num_seqs, decode_max_tokens, q)
        decode_level, mixed_level = _VLLM_MODES[mode]
        token_sizes = {n * q for n in decode} if decode_level is not None else set()
        if mixed_level != _NONE:
            token_sizes |= set(prefill)
        # The manager caps decode graphs again at the widest graph recorded (decode_cudagraph_capture_max_tokens).
        widest = max(token_sizes, default=0)
        decode = _reachable_decode_requests(decode, max_num_seqs, min(widest, budget or widest), q)
        if decode_level is None:
            return cls(mode, (), tuple(prefill), max_num_seqs, q)
        return cls(mode, tuple(decode), tuple(prefill) if mixed_level != _NONE else (), max_num_seqs, q)


class _Desc(NamedTuple):
    """One captured graph (vLLM's ``BatchExecutionDescriptor``), or an eager run (level 0)."""

    level: int
    tokens: int
    reqs: int | None  # None: a PIECEWISE graph takes any number of requests
    uniform: int | None  # the query length of a uniform-decode graph; None: any batch
    ubatches: int = 1


@functools.lru_cache(maxsize=64)
def _captured(graphs: VllmGraphs, ubatch_threshold: int | None):
    """The graphs a rank captured: uniform-decode lookup tables keyed by (query length, micro-batches),
    entry n the smallest graph holding n requests; and the token-keyed graphs by size. A graph gets a split
    twin when micro-batching is on (``ubatch_threshold``: the decode threshold) and it is a FULL graph of
    whole requests at or above that threshold (``CudaGraphManager._maybe_ubatch_twin``). Returned as a
    ``_Captured``: what ``_dispatch`` looks up every step, built once."""
    decode_level, mixed_level = _VLLM_MODES[graphs.mode]
    q = graphs.decode_query_len

    def twin(d: _Desc) -> _Desc | None:
        if ubatch_threshold is None or d.level != _FULL or d.reqs is None:
            return None
        u, rest = divmod(d.tokens, d.reqs)
        if rest or d.uniform not in (None, u) or d.tokens < NUM_UBATCHES or d.tokens < ubatch_threshold:
            return None
        return d._replace(ubatches=NUM_UBATCHES, uniform=u)

    tables: dict[tuple[int, int], list[_Desc]] = {}
    if decode_level == _FULL:
        groups: dict[tuple[int, int], list[_Desc]] = {}
        for n in graphs.decode_requests:
            d = _Desc(_FULL, n * q, n, q)
            for x in (d, twin(d)):
                if x is not None:
                    groups.setdefault((x.uniform, x.ubatches), []).append(x)
        for key, descs in groups.items():
            table: list[_Desc] = []
            for d in sorted(descs, key=lambda d: d.tokens):
                table.extend([d] * (d.reqs + 1 - len(table)))
            tables[key] = table
    keyed: list[_Desc] = []
    if mixed_level != _NONE:
        for t in graphs.token_sizes:
            d = _Desc(mixed_level, t, None if mixed_level == _PIECEWISE else min(t, graphs.max_num_seqs), None)
            keyed += [x for x in (d, twin(d)) if x is not None]
    sizes = tuple(d.tokens for d in keyed)
    same: dict[int, tuple[_Desc, ...]] = {}
    for d in keyed:
        same[d.tokens] = same.get(d.tokens, ()) + (d,)
    return _Captured(tables, sizes, same, {})


class _Captured(NamedTuple):
    """A rank's captured graphs as ``_dispatch`` reads them (``_captured``), and its answers so far."""

    tables: dict[tuple[int, int], list[_Desc]]
    sizes: tuple[int, ...]  # the token-keyed graphs' sizes, in order
    same: dict[int, tuple[_Desc, ...]]  # the token-keyed graphs by size
    memo: dict[tuple, _Desc]  # (reqs, tokens, uniform, ubatches) -> the graph (a pure function of them)


_MEMO_MOST = 1 << 16


def _dispatch(
    graphs: VllmGraphs, ubatch_threshold: int | None, reqs: int, tokens: int, uniform: int | None, ubatches: int
) -> _Desc:
    """The graph a batch replays, else an eager run at its own count (``CudaGraphManager.dispatch``): a
    uniform decode first tries the smallest decode graph of its query length that holds
    ``ceil(tokens / q)`` requests, then the smallest token-keyed graph at or above ``tokens`` that fits
    (requests, query length, micro-batch count)."""
    return _dispatch_in(_captured(graphs, ubatch_threshold), reqs, tokens, uniform, ubatches)


def _dispatch_in(cap: _Captured, reqs: int, tokens: int, uniform: int | None, ubatches: int) -> _Desc:
    """``_dispatch`` in graphs already looked up (``_captured``: a step looks them up once, not per rank)."""
    key = (reqs, tokens, uniform, ubatches)
    d = cap.memo.get(key)
    if d is None:
        if len(cap.memo) >= _MEMO_MOST:
            cap.memo.clear()
        d = cap.memo[key] = _lookup(cap, reqs, tokens, uniform, ubatches)
    return d


def _lookup(cap: _Captured, reqs: int, tokens: int, uniform: int | None, ubatches: int) -> _Desc:
    """``_dispatch``'s answer, looked up in ``cap``."""
    candidates: list[_Desc] = []
    if tokens > 0:
        i = bisect.bisect_left(cap.sizes, tokens)
        if i < len(cap.sizes):
            candidates = list(cap.same[cap.sizes[i]])
        if uniform is not None:
            table = cap.tables.get((uniform, ubatches), [])
            n = -(-tokens // uniform)
            if n < len(table):
                candidates.insert(0, table[n])
    for d in candidates:
        if (
            (d.uniform is None or d.uniform == uniform)
            and (d.reqs is None or d.reqs >= reqs)
            and d.tokens >= tokens
            and d.ubatches == ubatches
        ):
            return d
    return _Desc(_NONE, tokens, reqs, None, ubatches)


# --- vLLM 0.34.0: a rank's batch as the runner sees it -------------------------------------------------


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
    _count(decode_threshold, "decode_threshold", 0)
    _count(prefill_threshold, "prefill_threshold", 0)
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
    ranks = _check_ranks(ranks)
    _count(num_speculative_tokens, "num_speculative_tokens", 0)
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
        d = _dispatch(graphs, None, v.reqs, v.tokens, v.uniform, 1)
        reason = SplitReason.NO_DATA_PARALLEL if enabled else SplitReason.DISABLED
        padded = d.tokens if d.level != _NONE else None
        return StepPlan(SplitDecision(False, reason, padded, d.level != _NONE), (d.tokens,), (_KIND[d.level],))
    ubatch_threshold = decode_threshold if enabled else None
    cap = _captured(graphs, ubatch_threshold)
    tokens = [v.tokens for v in views]
    lo, hi, reqs = min(tokens), max(tokens), max(v.reqs for v in views)
    same_uniform = all(v.uniform == views[0].uniform for v in views)
    synced_uniform = views[0].uniform if same_uniform else None
    if enabled:
        uniform_decode = same_uniform and views[0].uniform == q
        if lo >= (decode_threshold if uniform_decode else prefill_threshold):
            d = _dispatch_in(cap, reqs, hi, synced_uniform, NUM_UBATCHES)
            if d.level != _NONE and NUM_UBATCHES * lo < d.tokens:
                d = _Desc(_NONE, hi, reqs, None, NUM_UBATCHES)  # a rank's second half would be padding only
            split_uniform = d.uniform if d.level == _FULL else synced_uniform
            halves = tuple(
                (RankBatch(), RankBatch())
                if r.idle
                else vllm_split(r, d.tokens, uniform=split_uniform, num_speculative_tokens=num_speculative_tokens)
                for r in ranks
            )
            decision = SplitDecision(True, SplitReason.SPLIT, d.tokens, d.level != _NONE)
            return StepPlan(decision, (d.tokens,) * len(ranks), (_KIND[d.level],) * len(ranks), halves)
        reason = SplitReason.IDLE_RANK if any(v.idle for v in views) else SplitReason.BELOW_THRESHOLD
    else:
        reason = SplitReason.DISABLED
    level = min(_dispatch_in(cap, v.reqs, v.tokens, v.uniform, 1).level for v in views)
    if level == _NONE:
        return StepPlan(SplitDecision(False, reason), tuple(tokens), (CudaGraph.NONE,) * len(ranks))
    d = _dispatch_in(cap, reqs, hi, synced_uniform, 1)
    return StepPlan(
        SplitDecision(False, reason, d.tokens, d.level != _NONE),
        (d.tokens,) * len(ranks),
        (_KIND[d.level],) * len(ranks),
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
    ranks = _check_ranks(ranks)
    decode_threshold, prefill_threshold = _vllm_thresholds(enabled, decode_threshold, prefill_threshold, 1)
    if all(r.idle for r in ranks):
        return SplitDecision(False, SplitReason.EMPTY_STEP)
    if len(ranks) == 1:
        return SplitDecision(False, SplitReason.NO_DATA_PARALLEL if enabled else SplitReason.DISABLED)
    if not enabled:
        return SplitDecision(False, SplitReason.DISABLED)
    real = [1 if r.idle else r.tokens for r in ranks]
    padded = list(real) if padded is None else [_count(p, "padded", 0) for p in padded]
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
    q = 1 + _count(num_speculative_tokens, "num_speculative_tokens", 0)
    order = (
        [(True, q, c) for c in batch.decode] + [(False, c, k) for c, k in batch.prefill]
        if keep_order
        else _vllm_order(batch, q)
    )
    total = sum(n for _, n, _ in order)
    padded = total if padded_tokens is None else _count(padded_tokens, "padded_tokens", total)
    if split_point is None:
        split_point = padded // NUM_UBATCHES
        if uniform is not None and uniform > 1 and padded // (uniform * NUM_UBATCHES) > 0:
            split_point = padded // (uniform * NUM_UBATCHES) * uniform
    _count(split_point, "split_point", 0)
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


# --- SGLang 0.5.23 ------------------------------------------------------------------------------------

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
        _count(batch_size, "batch_size", 0)
        return batch_size // 2, batch_size // 2
    lens = [_count(n, "extend_lens", 0) for n in extend_lens]
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
        cut = bs // 2 if graph_bs is None else min(bs, _count(graph_bs, "graph_bs", bs) // 2)
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
    _count(max_bs, "max_bs", 1)
    _count(attn_tp_size, "attn_tp_size", 1)
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
    ranks = _check_ranks(ranks)
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
