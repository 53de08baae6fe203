"""What every split rule of ``demos.serving.split_rules`` shares: both engines run two micro-batches
(``NUM_UBATCHES``), how a rank runs its step (``CudaGraph``), what a step runs on every rank (``StepPlan``),
and the checks of a rule's arguments (``check_ranks``, ``check_count``), each a one-line ``ValueError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from demos.serving.batch import RankBatch, SplitDecision
from demos.vocabulary import Word

NUM_UBATCHES = 2
"""Both engines run two micro-batches (vLLM's ``ParallelConfig.num_ubatches`` is 2 with ``--enable-dbo``)."""


class CudaGraph(Word):
    """How a rank runs its step: a FULL CUDA graph (the whole forward), PIECEWISE graphs (the forward
    between attention layers; vLLM only), or none (eager, kernel by kernel)."""

    FULL = "full"
    PIECEWISE = "piecewise"
    NONE = "none"


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


def check_ranks(ranks: Sequence[RankBatch]) -> tuple[RankBatch, ...]:
    ranks = tuple(ranks)
    if not ranks or not all(isinstance(r, RankBatch) for r in ranks):
        raise ValueError(f"ranks must be a non-empty sequence of RankBatch, one per data-parallel rank, got {ranks!r}")
    return ranks


def check_count(value: object, what: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{what} must be an integer >= {low}, got {value!r}")
    return value
