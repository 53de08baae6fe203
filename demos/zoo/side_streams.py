"""Which engines run a MoE layer's shared experts on a second stream, beside its router and routed experts.

Without an all-to-all (EP 1, or attention TP over the whole EP group) each of the three engines forks a
second CUDA stream at a decode step's MoE layer, runs the shared experts on one and the router with the
routed experts on the other, and joins them before the sum; read in their sources:

* **vLLM** (0.15.1 ``FusedMoE`` and 0.17.0 ``DefaultMoERunner``, ``_maybe_setup_shared_experts_stream``; 0.11.0
  has none): every model whose shared
  experts it runs apart from the routed experts' kernel, on CUDA, when the step's rows at the layer are at
  most ``VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD`` (256 by default), the stream forked before the router;
  not on its chunked data-parallel path (the low-latency all-to-all);
* **SGLang** (0.5.9, ``get_is_capture_mode``: while it captures a CUDA graph, so on decode batches):
  DeepSeek's MoE (``DeepseekV2MoE.forward_normal_dual_stream``: DeepSeek-V3/R1, Kimi-K2 and K2.5, DeepSeek-V3.2,
  GLM-5) unless the shared expert is fused into the routed experts' kernel as one more expert
  (``determine_num_fused_shared_experts``: a ``DeepseekV3ForCausalLM`` or ``GlmMoeDsaForCausalLM`` config with
  256 routed experts and one shared, expert parallelism 1, no DeepEP), and Qwen's
  (``Qwen2MoeSparseMoeBlock.forward_normal_dual_stream``: Qwen3.5);
* **TensorRT-LLM** (``Deepseekv3MoE.forward``: ``maybe_execute_in_parallel`` on its ``MoeShared`` auxiliary
  stream, which it takes only while capturing a CUDA graph): its DeepSeek-V3 model class, which serves
  DeepSeek-V3/R1 and Kimi-K2 and K2.5.

``shared_beside(engine, w, tokens)`` says whether a step of workload ``w`` on ``engine`` (None: no engine
named, the predictor's own step) runs them so at ``tokens`` tokens a rank; the plan then launches them
first, on a side stream (``demos.zoo.plan``, ``demos.zoo.moe``), whose kernels the virtual backend runs
beside the compute engine's, taking only their bytes' share of the device from them
(``dbo.streams.virtual``). Where it says no, the shared experts run in series with the routed ones, as before.

Guesses, stated: the steps taken for CUDA-graph steps are the decode steps (``Phase.DECODE``; the engines
capture decode batches up to their graph limits and run prefill eagerly); vLLM's prefill steps of at most
256 tokens, which would fork the stream too, are left in series; SGLang's fusion is read with its default
MoE kernel (its FlashInfer TRT-LLM MoE kernel turns the fusion off, and a recipe that names it runs the
shared expert beside instead); TensorRT-LLM's other model classes and the families not named above are
left in series (not read).
"""

from __future__ import annotations

from demos.vocabulary import Phase
from demos.zoo.workload import Workload

__all__ = ["SGLANG_FUSABLE", "SIDE_MODEL_TYPES", "VLLM_SIDE_TOKENS", "shared_beside", "sglang_fuses_shared"]

VLLM_SIDE_TOKENS = 256
"""vLLM's ``VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD`` default: the most rows a step's MoE layer holds for
its shared experts to run on their own stream."""

SIDE_MODEL_TYPES = {
    "sglang": frozenset({"deepseek_v3", "kimi_k2", "kimi_k25", "deepseek_v32", "glm_moe_dsa", "qwen3_5_moe"}),
    "trtllm": frozenset({"deepseek_v3", "kimi_k2", "kimi_k25"}),
}
"""The model types (``ModelSpec.model_type``) whose MoE block runs the shared experts beside the routed
experts in SGLang and TensorRT-LLM (module docstring); vLLM's runner does it for every model."""

SGLANG_FUSABLE = frozenset({"deepseek_v3", "glm_moe_dsa"})
"""The model types whose architecture SGLang fuses the shared expert into the routed experts' kernel for (a
``DeepseekV3ForCausalLM`` config with 256 routed experts, or GLM-5's; Kimi's configs name the same class but
have 384)."""


def sglang_fuses_shared(w: Workload) -> bool:
    """Whether SGLang runs ``w``'s shared expert as one more expert inside the routed experts' kernel: one shared
    expert of a fusable architecture (``SGLANG_FUSABLE``) with 256 routed, and expert parallelism 1 (the experts
    tensor-parallel over the ranks), which a step without an all-to-all has."""
    m = w.spec.moe
    experts_split = w.cluster.ep // w.moe_tp  # ranks the experts are divided among
    return (
        w.spec.model_type in SGLANG_FUSABLE
        and m is not None
        and m.routed_experts == 256
        and m.shared_experts == 1
        and experts_split == 1
    )


def shared_beside(engine: str | None, w: Workload, tokens: int) -> bool:
    """Whether ``engine`` runs the shared experts of a step of ``w`` at ``tokens`` tokens a rank on a stream of
    their own beside the router and routed experts (module docstring)."""
    m = w.spec.moe
    if engine is None or m is None or not m.shared_experts or w.alltoall or w.phase != Phase.DECODE:
        return False
    if engine == "vllm":
        return w.moe_tokens(tokens) <= VLLM_SIDE_TOKENS
    if w.spec.model_type not in SIDE_MODEL_TYPES.get(engine, ()):
        return False
    return not (engine == "sglang" and sglang_fuses_shared(w))
