"""What one GPU holds for a workload, with and without DBO: ``memory_estimate(workload, slot_bytes)``.

Per GPU (data-parallel attention, experts sharded ``ep`` ways; under attention TP ``N`` the TP-sharded
weights are 1/N per GPU, as vLLM shards them: the attention projections except MLA's replicated
``q_a``/``kv_a`` down-projections, the dense and shared-expert MLPs, the vocab-parallel embedding and
LM head; the router and norms stay whole; a GQA cache holds ``max(1, kv_heads / N)`` KV heads, an MLA
cache the whole latent of the group's requests):

* ``weights``: every non-expert parameter (attention, norms, dense MLPs, shared experts, router) at
  ``precision.weights``, save the dense and shared MLPs at ``precision.store("mlp")`` and attention's output
  projections at ``precision.store("attention_out")`` (``attention_out_params``), the embedding and LM
  head in BF16, and this rank's ``experts_per_rank`` routed experts of every MoE layer at
  ``precision.experts`` (redundant slots included);
* ``kv_cache``: the cache of the step's requests, ``context`` tokens each in decode (``tokens`` of them
  in prefill), at ``precision.kv_cache`` (MLA: latent plus RoPE key, and a sparse MLA's FP8 indexer key
  with its scale; GQA: keys and values of the KV heads, and a block-sparse layer's BF16 index key), and
  in a hybrid model each request's Gated DeltaNet states, the same at any context
  (``state_bytes_per_request``); DeepSeek-V4 holds per layer a
  sliding window of ``sliding_window`` entries and its compressor's FP32 state per request, whatever the
  context (``state_bytes_per_request``), and one compressed entry per ``ratio`` tokens (at ratio 4 with
  the indexer's key beside it), which grows with it;
* ``activations``: the step's hidden states and the per-ubatch persistent buffers the model keeps
  (MoE input and output, shared-expert output, the received tokens), BF16;
* ``workspace``: the workspace manager's slots, one per ubatch, at the sizes the run grew them to
  (``slot_bytes``; with DBO two slots where one would do);
* ``comm_buffers``: DeepEP's buffers. Low-latency: ``demos.zoo.hardware.ll_buffer_bytes`` for the ubatch's
  tokens, one per ubatch (vLLM keeps an all-to-all handle per ubatch). Normal: DeepEP's default 1 GB of
  NVLink buffer plus 1 GB of RDMA buffer per handle (a deployment choice; an assumption here).

``fits``: the total within the GPU's HBM capacity, less a reserve of 10% for the CUDA context,
allocator fragmentation and the CUDA graphs' pools (a guess, said so in docs/models.md).

``serving_limits(workload, slot_bytes, measured_at)``: where the step stops fitting, what a serving engine
is capped at (``ServingLimits``): the largest tokens per GPU whose step fits, without and with DBO (decode:
the requests each attention group holds at ``context``; prefill: the prompt tokens of one step), the HBM
share a step may use (``1 - RESERVE``) and the weights and KV cache at that count over the capacity, the
rest being the step's activations, workspace and comm buffers and the reserve. The workspace slots
measured at ``measured_at`` tokens are scaled in proportion to the tokens (the zoo's scratch buffers are
per-token; an estimate).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from demos.vocabulary import Phase, Schedule
from demos.zoo.hardware import ll_buffer_bytes
from demos.zoo.models import count_params
from demos.zoo.models.linear_spec import linear_of
from demos.zoo.models.params import (
    attention_out_params,
    compressed_head_params,
    indexer_params,
    routed_expert_params,
)
from demos.zoo.models.spec import CompressedAttention, GQAAttention, MLAAttention, SparseMLAAttention
from demos.zoo.overlap_costs import ubatch_sizes
from demos.zoo.workload import Workload

__all__ = [
    "MemoryEstimate",
    "RESERVE",
    "ServingLimit",
    "ServingLimits",
    "kv_bytes_per_token",
    "kv_cache_bytes",
    "memory_estimate",
    "state_bytes_per_request",
    "serving_limits",
]

RESERVE = 0.10
_NORMAL_BUFFERS = 2e9  # DeepEP's default num_nvl_bytes + num_rdma_bytes per handle


def _kv_layers(w: Workload) -> list[int]:
    """The layers that cache keys and values (a hybrid model's linear layers hold a state instead)."""
    return [i for i in range(w.spec.num_layers) if linear_of(w.spec.attention, i) is None]


def _compressed_bytes(w: Workload) -> tuple[float, float]:
    """DeepSeek-V4's cache of one request on one rank over all layers: (bytes per token of context: one
    compressed entry per ``ratio`` tokens, with the indexer's key at ratio 4; bytes whatever the context:
    each layer's window of ``sliding_window`` entries and its compressors' FP32 states, ``coff x ratio``
    rows of ``compressor_width`` values). The one latent head is whole on every rank, as MLA's."""
    a, kvb = w.spec.attention, w.spec.precision.bytes_of("kv_cache")
    per_token = fixed = 0.0
    for r in a.compress_ratios:
        fixed += a.sliding_window * a.head_dim * kvb
        if not r:
            continue
        per_token += (a.head_dim * kvb + (a.index_key_bytes if r == 4 else 0)) / r
        dims = (a.head_dim, a.index_head_dim) if r == 4 else (a.head_dim,)
        for d in dims:
            width = a.compressor_width(r, d)
            fixed += (width // d) * r * width * 4.0
    return per_token, fixed


def kv_bytes_per_token(w: Workload) -> float:
    """KV-cache bytes one token of context takes over all layers (a sparse MLA's indexer keys included; a
    hybrid model's linear layers none: ``state_bytes_per_request``; DeepSeek-V4's compressed entries)."""
    s = w.spec
    a = s.attention
    if isinstance(a, CompressedAttention):
        return _compressed_bytes(w)[0]
    kv_heads = max(1, a.kv_heads // w.attention_tp) if not isinstance(a, MLAAttention) else 0
    width = a.kv_cache_width if isinstance(a, MLAAttention) else 2 * kv_heads * a.head_dim
    index = a.index_key_bytes if isinstance(a, SparseMLAAttention) else 0
    layers = _kv_layers(w)
    blocks = 0.0  # a block-sparse layer's index key (BF16) beside its keys and values
    if isinstance(a, GQAAttention) and a.block_sparse is not None:
        blocks = sum(a.is_block_sparse(i) for i in layers) * a.block_sparse.index_head_dim * 2.0
    return (width * s.precision.bytes_of("kv_cache") + index) * len(layers) + blocks


def state_bytes_per_request(w: Workload) -> float:
    """Bytes one request holds on one rank whatever its context: a hybrid model's Gated DeltaNet or KDA
    states (FP32) and conv states (in the cache's dtype), its heads split by attention TP; DeepSeek-V4's windows
    and compressor states (``_compressed_bytes``); 0 for other models."""
    a = w.spec.attention
    if isinstance(a, CompressedAttention):
        return _compressed_bytes(w)[1]
    if getattr(a, "linear", None) is None:
        return 0.0
    linear_layers = w.spec.num_layers - len(_kv_layers(w))
    nv = max(1, a.linear.value_heads // w.attention_tp)
    return linear_layers * a.linear.state_bytes(nv, conv_bytes=w.spec.precision.bytes_of("kv_cache"))


def kv_cache_bytes(w: Workload) -> float:
    """The step's KV cache: per request its ``context`` tokens in decode (its prompt in prefill), a
    sliding-window layer at most its window; plus each request's linear-attention states
    (``state_bytes_per_request``), which do not grow with the context."""
    s = w.spec
    a = s.attention
    if w.phase == Phase.DECODE:
        requests, length = float(w.tokens), float(w.context)
    else:
        requests, length = w.requests, float(min(w.context, w.tokens))
    if isinstance(a, CompressedAttention):  # its windows held whole from the first token (an upper bound)
        per_token, fixed = _compressed_bytes(w)
        return requests * (length * per_token + fixed)
    layers = _kv_layers(w)
    per_layer = kv_bytes_per_token(w) / len(layers)
    held = 0.0
    for i in layers:
        window = None if isinstance(a, MLAAttention) else a.window_of(i)
        held += min(length, window) if window else length
    return requests * (held * per_layer + state_bytes_per_request(w))


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per GPU by part (module docstring), the capacity, and the DBO figures: ``dbo_extra`` is what
    the DBO step holds beyond the one-ubatch step (its extra workspace slots and comm buffers)."""

    weights: float
    kv_cache: float
    activations: float
    workspace: float
    comm_buffers: float
    capacity: float
    dbo_extra: float
    ubatches: int

    @property
    def total(self) -> float:
        return self.weights + self.kv_cache + self.activations + self.workspace + self.comm_buffers

    @property
    def total_without_dbo(self) -> float:
        return self.total - self.dbo_extra

    @property
    def usable(self) -> float:
        return self.capacity * (1 - RESERVE)

    @property
    def fits(self) -> bool:
        return self.total <= self.usable

    @property
    def fits_without_dbo(self) -> bool:
        return self.total_without_dbo <= self.usable

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(
            total=self.total,
            total_without_dbo=self.total_without_dbo,
            usable=self.usable,
            fits=self.fits,
            fits_without_dbo=self.fits_without_dbo,
        )
        return d


def memory_estimate(w: Workload, slot_bytes: list[int] | None = None) -> MemoryEstimate:
    """The ``MemoryEstimate`` of ``w`` on its cluster's GPU; ``slot_bytes``: the workspace slots' sizes
    (None: none measured, counted as 0)."""
    s, p = w.spec, w.spec.precision
    c = count_params(s)
    wb, eb = p.bytes_of("weights"), p.bytes_of("experts")
    tp = w.attention_tp
    a, H = s.attention, s.hidden_size
    replicated = 0
    if isinstance(a, MLAAttention):  # q_a and kv_a down-projections, replicated under TP (vLLM: disable_tp)
        mla_layers = len(_kv_layers(w))  # a hybrid model's MLA layers only
        replicated = mla_layers * H * ((a.q_lora_rank or 0) + a.kv_lora_rank + a.qk_rope_head_dim)
        replicated += mla_layers * indexer_params(s)  # a sparse MLA's indexer, whole on every rank (assumed)
    elif isinstance(a, CompressedAttention):  # wq_a, wkv, the compressors and the indexer, whole (assumed)
        replicated = c.attention - s.num_layers * compressed_head_params(H, a)
    out = attention_out_params(s)  # sharded with the heads (every kind's output projection is)
    attention = replicated + (c.attention - replicated - out) / tp
    non_expert = attention + c.norms + c.router + c.latent
    mlp = (c.dense_mlp + c.shared_experts) / tp
    table = (c.embedding + c.lm_head) * 2.0 / tp
    share = w.experts_per_rank / w.moe_tp  # MoE tensor parallelism: every expert, a 1 / moe_tp slice of each
    experts = share * s.moe_layers * routed_expert_params(s) * eb if s.moe is not None else 0.0
    weights = non_expert * wb + out / tp * p.bytes_of("attention_out") + mlp * p.bytes_of("mlp") + table + experts
    kv = kv_cache_bytes(w)
    per_ubatch_rows = w.tokens  # the buffers hold the whole batch per ubatch id (they are reused)
    k = s.moe.top_k if s.moe is not None else 0
    activations = 2.0 * w.tokens * H * 2 + w.ubatches * per_ubatch_rows * H * 2 * (4 + k)
    slots = [float(b) for b in (slot_bytes or [])]
    workspace = sum(slots)
    n = w.ubatches
    comm = 0.0
    one_comm = 0.0
    if s.moe is not None and w.alltoall:
        if w.schedule == Schedule.LL:
            per = max(ubatch_sizes(w.tokens, n, w.mechanisms.split))  # each ubatch's buffers fit the largest
            comm = n * ll_buffer_bytes(per, s.routed_width, w.physical_experts)  # rows as the all-to-all carries them
            one_comm = ll_buffer_bytes(w.tokens, s.routed_width, w.physical_experts)
        else:
            comm, one_comm = n * _NORMAL_BUFFERS, _NORMAL_BUFFERS
    extra_slots = workspace - (max(slots) if slots else 0.0)
    extra_act = (w.ubatches - 1) * per_ubatch_rows * H * 2 * (4 + k)
    return MemoryEstimate(
        weights=weights,
        kv_cache=kv,
        activations=activations,
        workspace=workspace,
        comm_buffers=comm,
        capacity=w.gpu.memory_total,
        dbo_extra=max(0.0, extra_slots + extra_act + comm - one_comm),
        ubatches=n,
    )


@dataclass(frozen=True)
class ServingLimit:
    """The largest step that fits (module docstring): ``tokens`` per GPU (0: none fits) and
    ``static_fraction``, the weights and KV cache there over the HBM capacity: the usable share less the
    step's activations, workspace and comm buffers (0.0 when none fits). The search starts at the
    workload's ubatches, the least count it can split."""

    tokens: int
    static_fraction: float


@dataclass(frozen=True)
class ServingLimits:
    """``without_dbo`` and ``with_dbo``: the ``ServingLimit`` of each step; ``utilization``: the share of
    HBM a step may use, ``1 - RESERVE``."""

    without_dbo: ServingLimit
    with_dbo: ServingLimit
    utilization: float = 1 - RESERVE

    def of(self, dbo: bool) -> ServingLimit:
        return self.with_dbo if dbo else self.without_dbo


_MOST_TOKENS = 1 << 24


def serving_limits(w: Workload, slot_bytes: list[int] | None = None, measured_at: int | None = None) -> ServingLimits:
    """The ``ServingLimits`` of ``w`` (its tokens aside: each count is searched) with its workspace slots
    ``slot_bytes`` measured at ``measured_at`` tokens, scaled to each count (module docstring)."""
    slots = [float(b) for b in (slot_bytes or [])]
    at = measured_at or w.tokens

    def estimate(tokens: int) -> MemoryEstimate:
        return memory_estimate(w.with_(tokens=tokens), [b * tokens / at for b in slots])

    def limit(dbo: bool) -> ServingLimit:
        def fits(n: int) -> bool:
            m = estimate(n)
            return m.fits if dbo else m.fits_without_dbo

        lo = w.ubatches  # the least count a workload of w's ubatches takes
        if not fits(lo):
            return ServingLimit(0, 0.0)
        hi = 2 * lo
        while hi <= _MOST_TOKENS and fits(hi):
            lo, hi = hi, hi * 2
        hi = min(hi, _MOST_TOKENS + 1)
        while hi - lo > 1:  # fits(lo), not fits(hi) (or hi past the search)
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid)
        m = estimate(lo)
        held = m.total if dbo else m.total_without_dbo
        static = m.usable - (held - m.weights - m.kv_cache)
        return ServingLimit(lo, static / m.capacity)

    return ServingLimits(limit(False), limit(True))
