"""The CUDA graphs one vLLM 0.34.0 rank captured (``VllmGraphs``) and the graph a batch replays
(``dispatch``, Model Runner V2's ``CudaGraphManager``); the rule that uses them is
``demos.serving.split_rules._vllm``.

CUDA graph sizes (``VllmGraphs.defaults``): ``vllm/config/vllm.py``, ``VllmConfig._set_cudagraph_sizes``
and ``_split_cudagraph_capture_sizes``; ``vllm/config/compilation.py``, ``decode_cudagraph_capture_shapes``,
``prefill_cudagraph_capture_grid`` and ``decode_cudagraph_capture_grid``. Defaults: mode
FULL_AND_PIECEWISE (FULL graphs for uniform decodes by request count, PIECEWISE graphs for the rest by token
count); ``max_num_seqs`` 1024 and ``max_num_batched_tokens`` 8192 (``vllm/engine/arg_utils.py``: the API
server's defaults on a GPU of 70 GiB or more that is not an A100, so H100/H200); off SM100 the capture
ceiling is 512 tokens: sizes 1, 2, 4, every 8 to 248, every 16 from 256 to 512, the same list for
decode (in requests at query length 1) and prefill (in tokens).
"""

from __future__ import annotations

import bisect
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from demos.serving.split_rules._plan import NUM_UBATCHES, CudaGraph, check_count

# CUDA graph levels as vLLM orders them (CUDAGraphMode NONE=0, PIECEWISE=1, FULL=2; ranks take the minimum).
GRAPH_NONE, GRAPH_PIECEWISE, GRAPH_FULL = 0, 1, 2
KIND_OF_LEVEL = {GRAPH_NONE: CudaGraph.NONE, GRAPH_PIECEWISE: CudaGraph.PIECEWISE, GRAPH_FULL: CudaGraph.FULL}

# vLLM's graph modes: (graphs of uniform decodes, graphs of the other batches); a mode with one routine
# for every batch (full, piecewise) captures token-keyed graphs only.
VLLM_MODES = {
    "full_and_piecewise": (GRAPH_FULL, GRAPH_PIECEWISE),
    "full_decode_only": (GRAPH_FULL, GRAPH_NONE),
    "full": (None, GRAPH_FULL),
    "piecewise": (None, GRAPH_PIECEWISE),
    "none": (None, GRAPH_NONE),
}


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
        if self.mode not in VLLM_MODES:
            raise ValueError(f"mode must be one of {', '.join(VLLM_MODES)}, got {self.mode!r}")
        check_count(self.max_num_seqs, "max_num_seqs", 1)
        check_count(self.decode_query_len, "decode_query_len", 1)
        for name in ("decode_requests", "token_sizes"):
            sizes = tuple(sorted(set(getattr(self, name))))
            for s in sizes:
                check_count(s, name, 1)
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
        check_count(max_num_seqs, "max_num_seqs", 1)
        check_count(max_num_batched_tokens, "max_num_batched_tokens", 1)
        check_count(num_speculative_tokens, "num_speculative_tokens", 0)
        if mode not in VLLM_MODES:
            raise ValueError(f"mode must be one of {', '.join(VLLM_MODES)}, got {mode!r}")
        q = 1 + num_speculative_tokens
        if VLLM_MODES[mode] == (None, GRAPH_NONE):
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
        decode_level, mixed_level = VLLM_MODES[mode]
        token_sizes = {n * q for n in decode} if decode_level is not None else set()
        if mixed_level != GRAPH_NONE:
            token_sizes |= set(prefill)
        # The manager caps decode graphs again at the widest graph recorded (decode_cudagraph_capture_max_tokens).
        widest = max(token_sizes, default=0)
        decode = _reachable_decode_requests(decode, max_num_seqs, min(widest, budget or widest), q)
        if decode_level is None:
            return cls(mode, (), tuple(prefill), max_num_seqs, q)
        return cls(mode, tuple(decode), tuple(prefill) if mixed_level != GRAPH_NONE else (), max_num_seqs, q)


class GraphDesc(NamedTuple):
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
    whole requests at or above that threshold (``CudaGraphManager._maybe_ubatch_twin``)."""
    decode_level, mixed_level = VLLM_MODES[graphs.mode]
    q = graphs.decode_query_len

    def twin(d: GraphDesc) -> GraphDesc | None:
        if ubatch_threshold is None or d.level != GRAPH_FULL or d.reqs is None:
            return None
        u, rest = divmod(d.tokens, d.reqs)
        if rest or d.uniform not in (None, u) or d.tokens < NUM_UBATCHES or d.tokens < ubatch_threshold:
            return None
        return d._replace(ubatches=NUM_UBATCHES, uniform=u)

    tables: dict[tuple[int, int], list[GraphDesc]] = {}
    if decode_level == GRAPH_FULL:
        groups: dict[tuple[int, int], list[GraphDesc]] = {}
        for n in graphs.decode_requests:
            d = GraphDesc(GRAPH_FULL, n * q, n, q)
            for x in (d, twin(d)):
                if x is not None:
                    groups.setdefault((x.uniform, x.ubatches), []).append(x)
        for key, descs in groups.items():
            table: list[GraphDesc] = []
            for d in sorted(descs, key=lambda d: d.tokens):
                table.extend([d] * (d.reqs + 1 - len(table)))
            tables[key] = table
    keyed: list[GraphDesc] = []
    if mixed_level != GRAPH_NONE:
        for t in graphs.token_sizes:
            d = GraphDesc(mixed_level, t, None if mixed_level == GRAPH_PIECEWISE else min(t, graphs.max_num_seqs), None)
            keyed += [x for x in (d, twin(d)) if x is not None]
    sizes = tuple(d.tokens for d in keyed)
    same: dict[int, tuple[GraphDesc, ...]] = {}
    for d in keyed:
        same[d.tokens] = same.get(d.tokens, ()) + (d,)
    return Captured(tables, sizes, same, {})


class Captured(NamedTuple):
    """A rank's captured graphs as ``dispatch`` reads them (``captured``), and its answers so far."""

    tables: dict[tuple[int, int], list[GraphDesc]]
    sizes: tuple[int, ...]  # the token-keyed graphs' sizes, in order
    same: dict[int, tuple[GraphDesc, ...]]  # the token-keyed graphs by size
    memo: dict[tuple, GraphDesc]  # (reqs, tokens, uniform, ubatches) -> the graph (a pure function of them)


_MEMO_MOST = 1 << 16


def captured(graphs: VllmGraphs, ubatch_threshold: int | None) -> Captured:
    """The graphs a rank captured (``_captured``, built once per graphs and threshold): a step looks
    them up once, not once per rank."""
    return _captured(graphs, ubatch_threshold)


def dispatch(
    graphs: VllmGraphs, ubatch_threshold: int | None, reqs: int, tokens: int, uniform: int | None, ubatches: int
) -> GraphDesc:
    """The graph a batch replays, else an eager run at its own count (``CudaGraphManager.dispatch``): a
    uniform decode first tries the smallest decode graph of its query length that holds
    ``ceil(tokens / q)`` requests, then the smallest token-keyed graph at or above ``tokens`` that fits
    (requests, query length, micro-batch count)."""
    return dispatch_in(_captured(graphs, ubatch_threshold), reqs, tokens, uniform, ubatches)


def dispatch_in(cap: Captured, reqs: int, tokens: int, uniform: int | None, ubatches: int) -> GraphDesc:
    """``dispatch`` in graphs already looked up (``captured``), its answers memoised."""
    key = (reqs, tokens, uniform, ubatches)
    d = cap.memo.get(key)
    if d is None:
        if len(cap.memo) >= _MEMO_MOST:
            cap.memo.clear()
        d = cap.memo[key] = _lookup(cap, reqs, tokens, uniform, ubatches)
    return d


def _lookup(cap: Captured, reqs: int, tokens: int, uniform: int | None, ubatches: int) -> GraphDesc:
    """``dispatch``'s answer, looked up in ``cap``."""
    candidates: list[GraphDesc] = []
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
    return GraphDesc(GRAPH_NONE, tokens, reqs, None, ubatches)
