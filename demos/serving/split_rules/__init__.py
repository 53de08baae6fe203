"""Each engine's per-step rule for running a step as two micro-batches, read from the pinned releases:
vLLM 0.34.0 (``vllm-0.34.0-cp38-abi3-manylinux_2_28_x86_64.whl``) and SGLang 0.5.23
(``sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl``). The rules are written here in our own code; every
function names the engine file and function it follows. docs/serving-split-rules.md says the same in words.

A step is one ``RankBatch`` per data-parallel rank (an idle rank has an empty batch). Each rule returns a
``SplitDecision`` (``*_decision``) or a ``StepPlan`` (``*_plan``: the decision plus what each rank runs: its
token count with padding, whether it replays a CUDA graph, and its two micro-batches' real work).

The rules, one part each (a part's docstring says its engine's rule in full, naming the engine files
it follows): ``_vllm`` (vLLM 0.34.0's DBO rule, ``vllm_dbo_plan``, its older rule and its micro-batches),
``_vllm_graphs`` (the CUDA graphs a vLLM rank captured, ``VllmGraphs``, and which one a batch replays),
``_sglang`` (SGLang 0.5.23's two-batch overlap, ``sglang_tbo_plan``, and its micro-batches) and ``_plan``
(what they share: ``StepPlan``, ``CudaGraph``, the argument checks).
"""

from __future__ import annotations

from demos.serving.split_rules._engine import split_rule
from demos.serving.split_rules._plan import NUM_UBATCHES as NUM_UBATCHES
from demos.serving.split_rules._plan import CudaGraph, StepPlan
from demos.serving.split_rules._sglang import (
    SGLANG_TOKEN_DISTRIBUTION_THRESHOLD as SGLANG_TOKEN_DISTRIBUTION_THRESHOLD,
)
from demos.serving.split_rules._sglang import (
    sglang_decode_graph_bs,
    sglang_split,
    sglang_split_index,
    sglang_tbo_decision,
    sglang_tbo_plan,
)
from demos.serving.split_rules._vllm import VLLM_DECODE_THRESHOLD as VLLM_DECODE_THRESHOLD
from demos.serving.split_rules._vllm import VLLM_PREFILL_THRESHOLD as VLLM_PREFILL_THRESHOLD
from demos.serving.split_rules._vllm import vllm_dbo_decision, vllm_dbo_plan, vllm_legacy_dbo_decision, vllm_split
from demos.serving.split_rules._vllm_graphs import VllmGraphs

__all__ = [
    "CudaGraph",
    "StepPlan",
    "VllmGraphs",
    "sglang_decode_graph_bs",
    "sglang_split",
    "sglang_split_index",
    "sglang_tbo_decision",
    "sglang_tbo_plan",
    "split_rule",
    "vllm_dbo_decision",
    "vllm_dbo_plan",
    "vllm_legacy_dbo_decision",
    "vllm_split",
]
