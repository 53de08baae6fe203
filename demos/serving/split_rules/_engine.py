"""The per-step split rule of an engine for one overlap strategy (``split_rule``): what a serving run calls
every step to decide whether it runs split."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from demos.serving.batch import RankBatch, SplitDecision
from demos.serving.split_rules._sglang import sglang_tbo_decision
from demos.serving.split_rules._vllm import vllm_dbo_decision
from demos.vocabulary import Overlap


def split_rule(
    engine: str, overlap: Any, decode_threshold: int, prefill_threshold: int, graphs: Any
) -> Callable[[Sequence[RankBatch]], SplitDecision]:
    """The rule of ``engine`` (vllm, sglang, trtllm) for ``overlap``: vLLM's DBO vote with its thresholds,
    SGLang's two-batch overlap, and for TensorRT-LLM (no DBO split) vLLM's rule with DBO off, which still
    decides the CUDA graph a step replays. ``graphs``: the CUDA graphs vLLM captured (built once per run:
    the rule reads them every step)."""
    on = overlap == Overlap.DBO
    if engine == "vllm":
        return lambda b: vllm_dbo_decision(
            b, enabled=on, decode_threshold=decode_threshold, prefill_threshold=prefill_threshold, graphs=graphs
        )
    if engine == "sglang":
        return lambda b: sglang_tbo_decision(b, enabled=on)
    return lambda b: vllm_dbo_decision(b, enabled=False, graphs=graphs)
