"""The pinned releases (``VLLM_VERSION``, ``SGLANG_VERSION``, ``Engines``) and what was read from them
(the package docstring): every flag the lines can print (``VLLM_FLAGS``, ``SGLANG_FLAGS``), the values some
of those flags take, the ``model_type``s each engine overlaps or balances experts for, and vLLM's DBO
thresholds."""

from __future__ import annotations

from dataclasses import dataclass

from demos.vocabulary import Phase, Schedule

VLLM_VERSION = "0.34.0"
SGLANG_VERSION = "0.5.23"

VLLM_FLAGS = frozenset(
    {
        # vllm/engine/arg_utils.py 0.34.0, EngineArgs.add_cli_args: the ParallelConfig group
        "--distributed-executor-backend",
        "--pipeline-parallel-size",
        "--master-addr",
        "--master-port",
        "--nnodes",
        "--node-rank",
        "--tensor-parallel-size",
        "--data-parallel-size",
        "--data-parallel-rank",
        "--data-parallel-start-rank",
        "--data-parallel-size-local",
        "--data-parallel-address",
        "--data-parallel-rpc-port",
        "--data-parallel-backend",
        "--data-parallel-hybrid-lb",
        "--data-parallel-external-lb",
        "--enable-expert-parallel",
        "--all2all-backend",
        "--enable-dbo",
        "--ubatch-size",
        "--dbo-decode-token-threshold",
        "--dbo-prefill-token-threshold",
        "--dp-sync-interval",
        "--disable-nccl-for-dp-synchronization",
        "--enable-eplb",
        "--eplb-config",
        "--expert-placement-strategy",
        "--enable-elastic-ep",
        # the ModelConfig group
        "--model",
        "--trust-remote-code",
        "--quantization",
        # the CacheConfig group
        "--gpu-memory-utilization",
        "--kv-cache-dtype",
        # the SchedulerConfig group
        "--max-num-seqs",
        # vllm/entrypoints/common/cli_args.py 0.34.0, make_arg_parser
        "--headless",
        "--api-server-count",
    }
)
"""The vLLM 0.34.0 flags read (the package docstring); every flag ``serve_lines`` prints is one of them."""

VLLM_DEEPEP_BACKENDS = {Schedule.LL: "deepep_low_latency", Schedule.HT: "deepep_high_throughput"}
"""``--all2all-backend`` per schedule: values of ``All2AllBackend`` (vllm/config/parallel.py 0.34.0)."""

VLLM_DBO_BACKENDS = {
    "cuda": ("deepep_low_latency", "deepep_high_throughput", "nixl_ep"),
    "rocm": ("deepep_low_latency", "deepep_high_throughput", "nixl_ep", "allgather_reducescatter"),
}
"""The ``--all2all-backend`` values vLLM 0.34.0 runs DBO with, per platform (``VllmConfig.__post_init__`` asserts
them under micro-batching): not ``mori`` on ROCm, not ``deepep_v2``."""

SGLANG_FLAGS = frozenset(
    {
        # python/sglang/srt/arg_groups/fields/parallel.py 0.5.23: field names, then their aliases
        "--tp-size",
        "--tensor-parallel-size",
        "--dp-size",
        "--data-parallel-size",
        "--attn-dp-size",
        "--attention-data-parallel-size",
        "--moe-dp-size",
        "--ep-size",
        "--expert-parallel-size",
        "--ep",
        "--moe-dense-tp-size",
        "--nnodes",
        "--node-rank",
        "--dist-init-addr",
        "--nccl-init-addr",
        # .../fields/exec_.py 0.5.23
        "--moe-a2a-backend",
        "--deepep-mode",
        "--enable-two-batch-overlap",
        "--enable-single-batch-overlap",
        "--tbo-token-distribution-threshold",
        "--enable-eplb",
        "--ep-num-redundant-experts",
        # .../fields/schedule.py 0.5.23
        "--mem-fraction-static",
        "--max-running-requests",
        # .../fields/model.py and .../fields/serving.py 0.5.23
        "--model-path",
        "--model",
        "--trust-remote-code",
        "--quantization",
        "--kv-cache-dtype",
        "--host",
        "--port",
        # python/sglang/srt/server_args.py 0.5.23, registered there (deprecated for --attn-dp-size)
        "--enable-dp-attention",
    }
)
"""The SGLang 0.5.23 flags read (the package docstring); every flag ``serve_lines`` prints is one of them."""

ATOM_VERSION = "v0.1.5"
ATOM_COMMIT = "b0071c550ba3c99b1e9218debb91a6f81550da9a"
"""AMD's engine ATOM, the release tag its line is read from (ROCm/ATOM at this commit): ``python -m
atom.entrypoints.openai_server`` and the flags of ``atom/model_engine/arg_utils.py`` (``EngineArgs.add_cli_args``):
``--model``, ``-tp``/``--tensor-parallel-size``, ``--enable-dp-attention``, ``--enable-expert-parallel``,
``--enable-tbo [prefill|all]`` (prefill only without a value), ``--all2all-backend [high-throughput|low-latency]``
(MoRI's kernels: low-latency is its CU-free AsyncLL), ``--kv_cache_dtype {bf16,fp8}``, ``--max-num-seqs``,
``--gpu-memory-utilization``; no multi-node flags (its server runs on one host). ``recipes/TBO.md`` at this tag:
TBO needs ``--enable-dp-attention`` and ``MORI_SHMEM_MODE=ISOLATION`` with expert parallelism; its benchmark
configs set ``GPU_MAX_HW_QUEUES=5``."""

ATOM_FLAGS = frozenset(
    (
        "--model",
        "-tp",
        "--enable-dp-attention",
        "--enable-expert-parallel",
        "--enable-tbo",
        "--all2all-backend",
        "--kv_cache_dtype",
        "--max-num-seqs",
        "--gpu-memory-utilization",
    )
)
"""The ATOM flags its line can print (``ATOM_VERSION``'s ``arg_utils.py``)."""

SGLANG_DEEPEP_MODES = {Schedule.LL: "low_latency", Schedule.HT: "normal"}
"""``--deepep-mode`` per schedule: its choices are auto, normal, low_latency (fields/exec_.py 0.5.23)."""

_DEEPSEEK_V2_CLASSES = frozenset({"deepseek_v2", "deepseek_v3", "kimi_k2", "deepseek_v32", "glm_moe_dsa"})
"""The ``model_type``s both engines serve with DeepseekV2ForCausalLM or a subclass of it, and so with its
decoder layer, its MoE and its expert-placement hooks: DeepSeek-V2/V3, Kimi K2, DeepSeek-V3.2
(``DeepseekV32ForCausalLM(DeepseekV2ForCausalLM)``, SGLang's ``models/deepseek_v2.py``; vLLM serves it from
its own ``deepseek_v2.py``) and GLM-5 (``GlmMoeDsaForCausalLM(DeepseekV2ForCausalLM)``, SGLang's
``models/glm4_moe.py`` and vLLM's ``deepseek_v2.py``). The two sparse-MLA subclasses were read as quoted,
with file and line, in public write-ups of those sources (the stored snapshots reachable from here did not
hold the files), not in the tagged releases."""

SGLANG_TBO_MODEL_TYPES = _DEEPSEEK_V2_CLASSES | {"kimi_k25", "qwen3_moe"}
"""The ``model_type``s whose decoder layers SGLang 0.5.23's two-batch overlap splits: DeepseekV2DecoderLayer
(DeepSeek-V2/V3 and Kimi K2, which it serves as DeepseekV3ForCausalLM, DeepSeek-V3.2 and GLM-5, served by
subclasses of DeepseekV2ForCausalLM: ``_DEEPSEEK_V2_CLASSES``, and Kimi-K2.5, whose
``models/kimi_k25.py`` wraps a DeepseekV3ForCausalLM as its language model) and Qwen3MoeDecoderLayer, among
the families the predictor loads (``batch_overlap/operations_strategy.py``, ``init_new_tbo``: no branch for
MiniMaxM2DecoderLayer, whose ``models/minimax_m2.py`` defines TBO operations the strategy does not call, nor
for gpt-oss's layer)."""

SGLANG_TBO_PREFILL_ONLY_MODEL_TYPES = frozenset({"deepseek_v4", "deepseek_ref"})
"""The ``model_type``s whose decoder layers SGLang 0.5.23's two-batch overlap splits in prefill only:
DeepSeek-V4's (``deepseek_ref`` is how SGLang's FP8 copies name it), whose operations strategy has its
prefill split (two yields a layer, around the dispatch and the combine) and no decode one (issue 45, read
from the public discussion of ``batch_overlap/operations_strategy.py``, not from the tagged file)."""

SGLANG_SBO_MODEL_TYPES = _DEEPSEEK_V2_CLASSES | {"kimi_k25"}
"""The ``model_type``s whose MoE runs SGLang 0.5.23's single-batch overlap (``compute_overlap_args`` is
called in ``models/deepseek_v2.py`` only: Kimi-K2.5's text model is that file's, and DeepSeek-V3.2's and
GLM-5's models are its subclasses)."""

SGLANG_MEGAMOE_MODEL_TYPES = _DEEPSEEK_V2_CLASSES | {
    "kimi_k25",
    "deepseek_v4",
    "deepseek_ref",
    "kimi_k3",
    "glm4_moe",
    "qwen3_moe",
    "qwen3_next",
    "qwen3_5_moe",
    "minimax_m3",
}
"""The ``model_type``s whose MoE SGLang 0.5.23 runs with DeepGEMM's fused kernel (``--moe-a2a-backend
megamoe``): the model files that call it (``models/deepseek_v2.py``, which Kimi-K2.5's language model is,
``deepseek_v4.py``, ``kimi_k3.py``, ``glm4_moe.py``, ``qwen3_moe.py``, ``minimax_m3.py``) and the Qwen3-Next and
Qwen3.5 MoE architectures its ``mega_moe_hook.py`` lists among those without a fallback. It refuses the flag with
``--enable-two-batch-overlap`` or ``--enable-single-batch-overlap`` (``check_mega_moe_compat``), needs an SM90
GPU (block-FP8 experts) or an SM100 one (MXFP4 or NVFP4 experts), and runs at most
``SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK`` (8192) tokens a rank, falling back to its normal MoE
above that where the architecture has a fallback (read in the 0.5.23 wheel)."""

VLLM_MEGAMOE_MODEL_TYPES = {"deepseek_v4", "kimi_k3", "minimax_m3"}
"""The ``model_type``s vLLM 0.34.0 runs with DeepGEMM's fused kernel (``--moe-backend deep_gemm_mega_moe``,
``NATIVE_MEGA_MOE_BACKENDS``): its ``models/deepseek_v4/nvidia``, ``kimi_k3/nvidia`` and ``minimax_m3/nvidia``
model files (DeepSeek-V4's needs ``--enable-expert-parallel`` and FP4 experts); SM100 GPUs (read in the 0.34.0
wheel)."""

EPLB_MODEL_TYPES = {
    "vllm": _DEEPSEEK_V2_CLASSES | {"qwen3_moe", "glm4_moe", "mixtral"},
    "sglang": _DEEPSEEK_V2_CLASSES | {"kimi_k25", "qwen3_moe", "glm4_moe", "gpt_oss", "minimax_m2"},
}
"""The ``model_type``s each engine balances experts for, among the families the predictor loads. vLLM 0.34.0:
the model classes that implement its ``MixtureOfExperts`` interface (``model_executor/models/``; its EPLB
registers nothing for ``GptOssForCausalLM``, ``v1/worker/gpu/eplb_utils.py``; ``KimiK25ForConditionalGeneration``
and ``MiniMaxM2ForCausalLM`` do not implement it). SGLang 0.5.23: the model files that read
``ep_num_redundant_experts`` (``models/deepseek_v2.py``, which Kimi-K2.5's language model is, ``qwen3_moe.py``,
``glm4_moe.py``, ``gpt_oss.py``, ``minimax_m2.py``; not ``mixtral.py``)."""

VLLM_DBO_REFUSED_MODEL_TYPES = {
    "kimi_k25": "multimodal (KimiK25ForConditionalGeneration has a vision tower)",
    "qwen3_5_moe": (
        "multimodal and hybrid (Qwen3_5MoeForConditionalGeneration has a vision tower and Gated DeltaNet layers)"
    ),
    "qwen3_next": "hybrid (Qwen3NextForCausalLM's Gated DeltaNet layers: ModelConfig.is_hybrid)",
    "kimi_k3": "multimodal and hybrid (KimiK3ForConditionalGeneration has a vision tower and KDA layers)",
    "kimi_linear": "hybrid (KimiLinearForCausalLM's KDA layers: ModelConfig.is_hybrid)",
}
"""The ``model_type``s whose model vLLM 0.34.0 refuses DBO for, and why (the package docstring):
``VllmConfig._get_dbo_unsupported_features`` lists "dual batch overlap with multimodal models" for any model
with a multimodal config (``--language-model-only`` keeps one) and "... with hybrid models" for any
``is_hybrid`` model, and ``_validate_model_runner`` raises on either (``config/vllm.py``, 0.34.0)."""

KV_CACHE_FLAGS = {"vllm": "fp8", "sglang": "fp8_e4m3"}
"""``--kv-cache-dtype`` for an FP8 (E4M3) cache: vLLM's ``fp8`` is E4M3 (``CacheDType``), SGLang names it."""

SGLANG_FP8_KV_DEFAULT = {"deepseek_v4": 0, "deepseek_v32": 10, "glm_moe_dsa": 10}
"""``model_type`` -> the compute capability's major version from which SGLang, left at ``--kv-cache-dtype
auto``, keeps the model's KV cache in FP8 E4M3 (0: on every GPU): DeepSeek-V4's on every CUDA and ROCm device
(``_deepseek_v4_kv_cache_dtype``), DeepSeek sparse attention's (DeepSeek-V3.2, GLM-5) from SM 10, Blackwell
(``_dsa_kv_cache_dtype_default``; ``srt/arg_groups/overrides.py`` in 0.5.23, ``ServerArgs.
_set_default_dsa_kv_cache_dtype`` in 0.5.14). vLLM keeps ``auto`` at the model's dtype."""

SM_MAJOR = {"hopper": 9, "blackwell": 10, "cdna3": 9, "cdna4": 9}
"""A GPU family -> the major version ``torch.cuda.get_device_capability()`` reports (ROCm: 9 on gfx94x, gfx95x)."""


def sglang_kv_default(model_type: str | None, family: str) -> str:
    """The KV cache dtype ("fp8" or "bf16") SGLang gives ``model_type`` on a GPU of ``family`` when the line
    sets none (``SGLANG_FP8_KV_DEFAULT``)."""
    since = SGLANG_FP8_KV_DEFAULT.get(model_type or "")
    return "fp8" if since is not None and SM_MAJOR.get(family, 0) >= since else "bf16"


VLLM_DEFAULT_THRESHOLDS = {Phase.DECODE: 32, Phase.PREFILL: 512}
"""``ParallelConfig.dbo_decode_token_threshold`` / ``dbo_prefill_token_threshold`` defaults (0.34.0)."""
VLLM_MIN_THRESHOLD = 2
"""vLLM 0.34.0 refuses DBO thresholds below the number of micro-batches, 2 (ParallelConfig's check)."""


@dataclass(frozen=True)
class Engines:
    """The engine releases the lines are written and checked for: the pinned ones (the package docstring); any
    other is refused, since no other release's flags were read."""

    vllm: str = VLLM_VERSION
    sglang: str = SGLANG_VERSION

    def __post_init__(self) -> None:
        for name, pinned in (("vllm", VLLM_VERSION), ("sglang", SGLANG_VERSION)):
            if getattr(self, name) != pinned:
                raise ValueError(
                    f"engines.{name}: the lines are checked against {pinned} only, got {getattr(self, name)!r}"
                )

    def as_dict(self) -> dict[str, str]:
        return {"vllm": self.vllm, "sglang": self.sglang}
