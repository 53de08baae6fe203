"""One deployment of ranks set up for a serving run (``prepare``): its workload, its data-parallel ranks,
what one rank's KV cache holds, its step pricer and the CUDA graphs vLLM would capture; a pool of fresh
rank schedulers from it (``RankSetup.pool``). ``demos.serving.api.simulate`` prepares one, a disaggregated
run (``demos.serving.coupled``) one per side."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from demos.errors import ConfigError, field_ref
from demos.serving import split_rules
from demos.serving.engine_ranks import make_rank, make_router
from demos.serving.run import Pool, PoolKind
from demos.serving.step_times import StepPricer, kv_capacity_tokens
from demos.vocabulary import Phase
from demos.zoo.engine_allreduce import allreduce_kernel
from demos.zoo.loading import workload_for

__all__ = ["RankSetup", "prepare"]


@dataclass(frozen=True)
class RankSetup:
    """A deployment set up (``prepare``): ``base`` the workload (model, cluster, attention TP, precision),
    ``dp`` its data-parallel ranks, ``kv`` the tokens one rank's KV cache holds, ``step_tokens`` the
    engine's token budget per step, ``pricer``, ``graphs`` (vLLM's captured CUDA graphs at that budget)."""

    engine: str
    base: Any
    dp: int
    hbm_gb: float
    max_seqs: int | None
    step_tokens: int
    kv: int
    pricer: StepPricer
    graphs: Any

    def pool(self, kind: PoolKind, *, radix_cache: bool = True) -> Pool:
        """A pool of ``kind`` of fresh rank schedulers, one per data-parallel rank, and the engine's router;
        ``radix_cache``: SGLang's (its admission rule, ``demos.serving.sglang_rank.SGLangRank``)."""
        ranks = [
            make_rank(
                self.engine, self.kv, hbm_gb=self.hbm_gb, dp=self.dp, max_seqs=self.max_seqs, radix_cache=radix_cache
            )
            for _ in range(self.dp)
        ]
        return Pool(kind, ranks, make_router(self.engine, self.dp), self.engine, self.base.cluster.world)


def prepare(
    native: Any,
    engine: str,
    phase: Phase,
    *,
    gpu: Any,
    nodes: int,
    gpus_per_node: int | None,
    ep: int | None,
    attention_tp: int,
    imbalance: Any,
    weights: str | None,
    kv_cache_dtype: str | None,
    kernels: str,
    max_seqs: int | None,
    pricers: dict | None,
    moe_tp: int = 1,
    network: str = "ib",
    release: str | None = None,
    redundant_slots: int = 0,
) -> RankSetup:
    """The ``RankSetup`` of ``native`` served by ``engine`` in ``phase`` on the cluster the flags name (as
    ``predict`` takes them). ``pricers``: a dict the step pricers are kept in by deployment, so runs of one
    deployment share their grid points (None: a pricer of its own). ``moe_tp``: MoE tensor parallelism over
    the attention TP group (``demos.zoo.workload.Workload.moe_tp``; no flag yet). ``release``: the engine's, whose
    all-reduce kernel the steps take (``demos.zoo.engine_allreduce``; None: the pinned one). ``redundant_slots``:
    expert slots placed without EPLB (``demos.zoo.workload.Workload.redundant_slots``; no flag yet). A model that
    leaves no room for a KV cache is a ``ConfigError``."""
    base = workload_for(
        native,
        gpu=gpu,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        ep=ep,
        phase=phase,
        context=2048,
        imbalance=imbalance,
        comm_sms=None,
        schedule=None,
        tokens=64,
        ubatches=2,
        attention_tp=attention_tp,
        weights=weights,
        kv_cache_dtype=kv_cache_dtype,
        moe_tp=moe_tp,
        network=network,
        redundant_slots=redundant_slots,
    )
    c = base.cluster
    dp = c.world // base.attention_tp
    hbm_gb = base.gpu.memory_total / 1e9
    budget = make_rank(engine, 1, hbm_gb=hbm_gb, dp=dp, max_seqs=max_seqs)
    step_tokens = getattr(budget, "budget", None) or getattr(budget, "chunk", 8192)
    kv = kv_capacity_tokens(base, step_tokens, getattr(budget, "max_seqs", 0) or 0)
    if kv < 1:
        raise ConfigError(
            f"{field_ref('model')} {native.name} leaves no room for a KV cache on {c.nodes} x {c.gpus_per_node} "
            f"{base.gpu.name} at EP {c.ep}: use more GPUs (--nodes, --ep) or smaller weights (--weights)"
        )
    allreduce = allreduce_kernel(engine, release, base)
    key = (base, kernels, engine, allreduce)
    pricer = pricers.get(key) if pricers is not None else None
    if pricer is None:
        pricer = StepPricer(base, kernels, engine=engine, allreduce=allreduce)
        if pricers is not None:
            pricers[key] = pricer
    graphs = split_rules.VllmGraphs.defaults(
        max_num_seqs=getattr(budget, "max_seqs", 1024),
        max_num_batched_tokens=step_tokens,
        sm100=base.gpu.family == "blackwell",
    )
    return RankSetup(engine, base, dp, hbm_gb, max_seqs, step_tokens, kv, pricer, graphs)
