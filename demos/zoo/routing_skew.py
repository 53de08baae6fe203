"""The busiest expert-parallel rank's load under skewed routing: ``--imbalance power-law``.

A step of expert parallelism waits for its busiest rank, whose expert load (token copies) over the mean is the
workload's ``imbalance`` (``demos.zoo.workload``). Its default, "auto", is the fluctuation of uniform routing:
every expert equally likely, about 1.07 for 163 tokens a rank, top-8, over 32 ranks. Trained routers are not
uniform: some experts are hot for a workload, which is why the engines balance expert placement (EPLB) and
aiconfigurator-core times its MoE kernels under skewed routing. Its collector draws each expert's share of a
step's ``T x top_k`` token copies (``T`` the EP group's tokens) from a power law, ``x^-alpha`` on ``[1, 0.8 T]``
(on ``[0.01, 2]`` when there are fewer copies than experts), rounded to whole copies, and its predictions take
``alpha`` 1.01 for DeepSeek-family models (``power_law_1.01``: ``sdk/models/deepseek.py``; the same for
Qwen3, Nemotron-H and MiniMax-M3). ``power_law_imbalance`` is the busiest of ``ep`` ranks' load over the mean,
each rank holding ``experts / ep`` of the experts in a random placement, averaged over ``SAMPLES`` draws of a
fixed seed (deterministic): 2.0 at 4 tokens a rank, 2.6 at 163 over 32 ranks (DeepSeek-V3's 256 experts, top
8); 1.4 over 8 ranks.

That skew is aiconfigurator's assumption, not a measurement of a served model's routing (none here measures
one), and it stands for no balancing: EPLB's redundant experts lower it (``--imbalance`` takes a number for a
measured or balanced load); redundant slots placed without EPLB (``redundant``, ``demos.zoo.expert_placement``)
share a two-copy expert's draw over its copies. docs/clusters.md, "Expert-load imbalance under a skewed
router", says where it moves the checks.
"""

from __future__ import annotations

import functools

import numpy as np

from demos.zoo.expert_placement import slot_experts

__all__ = ["POWER_LAW", "POWER_LAW_ALPHA", "SAMPLES", "power_law_imbalance"]

POWER_LAW = "power-law"
"""The ``imbalance`` value that names this routing model (``Workload.imbalance``, ``--imbalance``)."""

POWER_LAW_ALPHA = 1.01
"""The exponent aiconfigurator-core's predictions take for DeepSeek-family MoE (module docstring)."""

SAMPLES = 64
"""Draws averaged per (tokens, top_k, experts, ep): the mean's spread is about 2% at 32 ranks."""

_SEED = 0


@functools.lru_cache(maxsize=4096)
def power_law_imbalance(
    tokens: int, top_k: int, experts: int, ep: int, alpha: float = POWER_LAW_ALPHA, redundant: int = 0
) -> float:
    """The busiest of ``ep`` ranks' routed token copies over the mean when each rank's MoE block holds ``tokens``
    tokens routed to ``top_k`` of ``experts`` experts with power-law popularity ``alpha`` (module docstring);
    1.0 for one rank or no tokens. ``redundant``: expert slots beyond the experts, placed trivially
    (``demos.zoo.expert_placement``: slot ``p`` holds expert ``p mod experts``, a two-copy expert's load split
    over its copies); ``ep`` must divide the slots."""
    if ep <= 1 or tokens <= 0:
        return 1.0
    total = tokens * ep
    lo, hi = (1.0, 0.8 * total) if total * top_k > experts else (0.01, 2.0)
    rng = np.random.default_rng(_SEED)
    u = rng.random((SAMPLES, experts))
    a = 1.0 - alpha
    popularity = ((hi**a - lo**a) * u + lo**a) ** (1.0 / a)
    copies = np.round(popularity / popularity.sum(axis=1, keepdims=True) * total * top_k)
    if redundant:
        held = np.array(slot_experts(experts, redundant))
        copies = copies[:, held] / np.bincount(held, minlength=experts)[held]
    ranks = np.stack([part.sum(axis=1) for part in np.array_split(copies, ep, axis=1)], axis=1)
    mean = ranks.mean(axis=1)
    busiest = np.divide(ranks.max(axis=1), mean, out=np.ones_like(mean), where=mean > 0)
    return max(1.0, float(busiest.mean()))
