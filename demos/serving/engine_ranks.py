"""Each engine's rank scheduler at its defaults (``make_rank``) and its router (``make_router``): the rules are
``demos.serving.schedulers`` (vLLM's, TensorRT-LLM's, the routers) and ``demos.serving.sglang_rank``."""

from __future__ import annotations

from demos.serving.schedulers import RankScheduler, Router, TRTLLMRank, VLLMRank
from demos.serving.sglang_rank import SGLangRank

__all__ = ["ENGINE_DEFAULTS", "make_rank", "make_router"]

ENGINE_DEFAULTS = {
    "vllm": {"router": "least_loaded"},
    "trtllm": {"router": "least_loaded", "max_num_batched_tokens": 8192, "max_num_seqs": 2048},
    "sglang": {"router": "round_robin", "max_prefill_tokens": 16384},
}


def make_rank(
    engine: str, kv_tokens: int, *, hbm_gb: float, dp: int, max_seqs: int | None, radix_cache: bool = True
) -> RankScheduler:
    """The rank scheduler of ``engine`` (vllm, sglang, trtllm) at its defaults for a GPU of ``hbm_gb`` GB
    and ``dp`` attention DP ranks; ``max_seqs``: the request cap per rank (None: the engine's default);
    ``radix_cache``: SGLang's, which picks its admission rule (``SGLangRank``)."""
    big = hbm_gb >= 160
    if engine == "vllm":
        return VLLMRank(kv_tokens, max_num_batched_tokens=16384 if big else 8192, max_num_seqs=max_seqs or 1024)
    if engine == "trtllm":
        d = ENGINE_DEFAULTS["trtllm"]
        return TRTLLMRank(
            kv_tokens, max_num_batched_tokens=d["max_num_batched_tokens"], max_num_seqs=max_seqs or d["max_num_seqs"]
        )
    if engine == "sglang":
        chunk = max(1, (16384 if big else 8192) // dp)
        return SGLangRank(
            kv_tokens,
            chunked_prefill_size=chunk,
            max_prefill_tokens=ENGINE_DEFAULTS["sglang"]["max_prefill_tokens"],
            max_running=max_seqs or 1 << 30,  # its default follows the pool: the KV cache bounds it here
            radix_cache=radix_cache,
        )
    raise ValueError(f"engine must be vllm, sglang or trtllm, got {engine!r}")


def make_router(engine: str, ranks: int) -> Router:
    return Router(ENGINE_DEFAULTS[engine]["router"], ranks)
