"""What one data-parallel rank runs in one step, and the engine's decision on splitting it.

``RankBatch``: the step's work on one rank: ``decode``, the context length (tokens already cached) of each
request that generates one token this step; ``prefill``, one ``(chunk, cached)`` pair per request whose
prompt is computed this step (``chunk`` prompt tokens after ``cached`` tokens already in its cache: a
chunked prefill continues where it left off). A rank with neither is idle this step.

``SplitDecision``: what the engine does with a step across its data-parallel ranks: whether it runs as two
micro-batches (``split``), the reason (``SplitReason``; ``SPLIT`` when it does), the token count every rank
is padded to (vLLM pads every rank to the largest; None where nothing is padded), and whether the step
replays a CUDA graph (``graph``) or runs eager.

Only the standard library and the vocabulary are imported here, so the rules and the schedulers can be
tested without the predictor.
"""

from __future__ import annotations

from dataclasses import dataclass

from demos.vocabulary import Word

__all__ = ["RankBatch", "SplitDecision", "SplitReason"]


class SplitReason(Word):
    """Why a step ran split or did not (the run's ``not_split`` counts these)."""

    SPLIT = "split"
    DISABLED = "disabled"  # the overlap is off (or the engine has none for this model)
    NO_DATA_PARALLEL = "no_data_parallel"  # vLLM: data parallel 1 runs no DBO
    BELOW_THRESHOLD = "below_threshold"  # a rank's tokens under the engine's threshold
    IDLE_RANK = "idle_rank"  # a rank with nothing scheduled votes no (its dummy step is below threshold)
    EMPTY_UBATCH = "empty_ubatch"  # vLLM: the least-loaded rank would leave its second micro-batch empty
    MODE_DISAGREEMENT = "mode_disagreement"  # SGLang: the ranks' forward modes differ
    CANNOT_SPLIT = "cannot_split"  # SGLang: an extend batch under DeepEP's low-latency mode cannot split
    EMPTY_STEP = "empty_step"  # no rank has work


@dataclass(frozen=True)
class RankBatch:
    """One rank's work in one step (module docstring)."""

    decode: tuple[int, ...] = ()
    prefill: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "decode", tuple(self.decode))
        object.__setattr__(self, "prefill", tuple(tuple(p) for p in self.prefill))
        if any(isinstance(c, bool) or not isinstance(c, int) or c < 0 for c in self.decode):
            raise ValueError(f"decode must be context lengths >= 0, got {self.decode!r}")
        for p in self.prefill:
            if len(p) != 2 or any(isinstance(x, bool) or not isinstance(x, int) for x in p) or p[0] < 1 or p[1] < 0:
                raise ValueError(f"prefill must be (chunk >= 1, cached >= 0) pairs, got {self.prefill!r}")

    @classmethod
    def trusted(cls, decode: tuple[int, ...], prefill: tuple[tuple[int, int], ...]) -> RankBatch:
        """A batch of values the caller guarantees (a scheduler's own counts), built without the checks:
        the serving loop builds one per rank per step."""
        b = object.__new__(cls)
        object.__setattr__(b, "decode", decode)
        object.__setattr__(b, "prefill", prefill)
        return b

    @property
    def tokens(self) -> int:
        """The tokens the rank schedules this step: one per decode request plus every prefill chunk's."""
        if not self.prefill:  # most steps: read per rank several times a step
            return len(self.decode)
        return len(self.decode) + sum(c for c, _ in self.prefill)

    @property
    def idle(self) -> bool:
        return not self.decode and not self.prefill

    @property
    def uniform_decode(self) -> bool:
        """Every request of the step decodes one token (no prefill chunk): vLLM's "uniform decode"."""
        return bool(self.decode) and not self.prefill

    @property
    def requests(self) -> int:
        return len(self.decode) + len(self.prefill)


@dataclass(frozen=True)
class SplitDecision:
    """The engine's decision for one step across its ranks (module docstring)."""

    split: bool
    reason: SplitReason
    padded_tokens: int | None = None
    graph: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.reason, SplitReason):  # a rule passes a member: one a step, no parse
            object.__setattr__(self, "reason", SplitReason.parse(self.reason, "reason"))
        if self.split != (self.reason == SplitReason.SPLIT):
            raise ValueError(f"split ({self.split}) and reason ({self.reason}) disagree")
