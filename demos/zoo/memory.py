"""What one GPU holds for a workload, with and without DBO: ``memory_estimate(workload, slot_bytes)``.

Per GPU (data-parallel attention, experts sharded ``ep`` ways; under attention TP ``N`` the TP-sharded
weights are 1/N per GPU, as vLLM shards them: the attention projections except MLA's replicated
``q_a``/``kv_a`` down-projections, the dense and shared-expert MLPs, the vocab-parallel embedding and
LM head; the router and norms stay whole; a GQA cache holds ``max(1, kv_heads / N)`` KV heads, an MLA
cache the whole latent of the group's requests):

* ``weights``: every non-expert parameter (attention, norms, dense MLPs, shared experts, router) at
  ``precision.weights``, the embedding and LM head in BF16, and this rank's ``experts_per_rank`` routed
  experts of every MoE layer at ``precision.experts`` (redundant slots included);
* ``kv_cache``: the cache of the step's requests, ``context`` tokens each in decode (``tokens`` of them
  in prefill), at ``precision.kv_cache`` (MLA: latent plus RoPE key; GQA: keys and values of the KV heads);
* ``activations``: the step's hidden states and the per-ubatch persistent buffers the model keeps
  (MoE input and output, shared-expert output, the received tokens), BF16;
* ``workspace``: the workspace manager's slots, one per ubatch, at the sizes the run grew them to
  (``slot_bytes``; with DBO two slots where one would do);
* ``comm_buffers``: DeepEP's buffers. Low-latency: ``demos.zoo.hardware.ll_buffer_bytes`` for the ubatch's
  tokens, one per ubatch (vLLM keeps an all-to-all handle per ubatch). Normal: DeepEP's default 1 GB of
  NVLink buffer plus 1 GB of RDMA buffer per handle (a deployment choice; an assumption here).

``fits``: the total within the GPU's HBM capacity, less a reserve of 10% for the CUDA context,
allocator fragmentation and the CUDA graphs' pools (a guess, said so in docs/models.md).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from demos.vocabulary import Phase, Schedule
from demos.zoo.hardware import ll_buffer_bytes
from demos.zoo.models import count_params
from demos.zoo.models.params import expert_params
from demos.zoo.models.spec import MLAAttention
from demos.zoo.overlap_costs import ubatch_sizes
from demos.zoo.workload import Workload

__all__ = ["MemoryEstimate", "RESERVE", "kv_bytes_per_token", "kv_cache_bytes", "memory_estimate"]

RESERVE = 0.10
_NORMAL_BUFFERS = 2e9  # DeepEP's default num_nvl_bytes + num_rdma_bytes per handle


def kv_bytes_per_token(w: Workload) -> float:
    """KV-cache bytes one token of context takes over all layers."""
    s = w.spec
    a = s.attention
    kv_heads = max(1, a.kv_heads // w.attention_tp) if not isinstance(a, MLAAttention) else 0
    width = a.kv_cache_width if isinstance(a, MLAAttention) else 2 * kv_heads * a.head_dim
    return width * s.precision.bytes_of("kv_cache") * s.num_layers


def kv_cache_bytes(w: Workload) -> float:
    """The step's KV cache: per request its ``context`` tokens in decode (its prompt in prefill), a
    sliding-window layer at most its window."""
    s = w.spec
    a = s.attention
    per_layer = kv_bytes_per_token(w) / s.num_layers
    if w.phase == Phase.DECODE:
        requests, length = float(w.tokens), float(w.context)
    else:
        requests, length = w.requests, float(min(w.context, w.tokens))
    held = 0.0
    for i in range(s.num_layers):
        window = None if isinstance(a, MLAAttention) else a.window_of(i)
        held += min(length, window) if window else length
    return requests * held * per_layer


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
        replicated = s.num_layers * H * ((a.q_lora_rank or 0) + a.kv_lora_rank + a.qk_rope_head_dim)
    attention = replicated + (c.attention - replicated) / tp
    non_expert = attention + c.norms + (c.dense_mlp + c.shared_experts) / tp + c.router
    table = (c.embedding + c.lm_head) * 2.0 / tp
    experts = w.experts_per_rank * s.moe_layers * expert_params(s) * eb if s.moe is not None else 0.0
    weights = non_expert * wb + table + experts
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
            comm = n * ll_buffer_bytes(per, H, w.physical_experts)
            one_comm = ll_buffer_bytes(w.tokens, H, w.physical_experts)
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
        capacity=w.gpu.hbm_capacity,
        dbo_extra=max(0.0, extra_slots + extra_act + comm - one_comm),
        ubatches=n,
    )
