"""Redundant expert slots placed without EPLB: the busiest rank's share of the routed load.

SGLang's ``--ep-num-redundant-experts R`` deploys ``E + R`` expert slots over ``ep`` ranks (``E`` the routed
experts; it asserts that ``ep`` divides them), ``(E + R) / ep`` a rank. Which expert each slot holds is the
expert location: without ``--enable-eplb`` and without ``--init-expert-location`` (its default "trivial",
``eplb/expert_location.py``, ``ExpertLocationMetadata.init_trivial``) slot ``p`` holds expert ``p mod E``, in
order, rank ``r`` slots ``r x s .. r x s + s - 1``. So the first ``R`` experts have two copies and the other
``E - R`` one, and a rank whose slots all hold single-copy experts takes ``s / E`` of the routed token copies
where the mean rank takes ``1 / ep``: DeepSeek-V3's 256 experts with 32 redundant slots over 32 ranks put 9
single-copy experts on 24 of the ranks, 9/8 of the mean load, and every rank computes 9 experts' weights
where 8 would do. A token routed to a two-copy expert goes to one copy (its ``static`` dispatch: the copy on
the same GPU or node, else a fixed fair choice); the copies' ranks are the lighter ones, whichever it picks.

``trivial_shares`` gives each rank's expected share of the routed copies; ``placement_imbalance`` the busiest
rank's expected load over the mean under uniform routing: the heaviest share ``f`` (times ``ep``) with the
fluctuation of ``n`` ranks at that share, ``f x (1 + sqrt(2 ln(n) / (f x mean)))``, ``mean`` the copies a
rank takes on average (``demos.zoo.workload.auto_imbalance``'s estimate at the heavier mean). NVIDIA's
``srt-slurm`` decode recipes for DeepSeek-R1 under SGLang with data-parallel attention set 32 such slots
(docs/clusters.md, "Redundant expert slots without EPLB"); ``demos.zoo.workload.Workload.redundant_slots``
takes them.
"""

from __future__ import annotations

import functools
import math

__all__ = ["heaviest_share", "placement_imbalance", "slot_experts", "trivial_shares", "uniform_fluctuation"]


def slot_experts(experts: int, redundant: int) -> tuple[int, ...]:
    """The expert each of the ``experts + redundant`` slots holds under the trivial placement: ``p mod experts``."""
    return tuple(p % experts for p in range(experts + redundant))


@functools.lru_cache(maxsize=256)
def trivial_shares(experts: int, redundant: int, ep: int) -> tuple[float, ...]:
    """Each of ``ep`` ranks' expected share of the routed token copies (summing to 1) when ``experts`` experts
    fill ``experts + redundant`` slots trivially (module docstring), routing uniform over the experts and a
    many-copy expert's load split evenly over its copies. ``ep`` must divide the slots."""
    if experts < 1 or redundant < 0 or ep < 1:
        raise ValueError(
            f"trivial_shares needs experts >= 1, redundant >= 0, ep >= 1; got {experts}, {redundant}, {ep}"
        )
    slots = experts + redundant
    if slots % ep:
        raise ValueError(f"ep {ep} must divide the {slots} expert slots")
    held = slot_experts(experts, redundant)
    copies = [0] * experts
    for e in held:
        copies[e] += 1
    per = slots // ep
    return tuple(sum(1.0 / (experts * copies[e]) for e in held[r * per : (r + 1) * per]) for r in range(ep))


@functools.lru_cache(maxsize=256)
def heaviest_share(experts: int, redundant: int, ep: int) -> tuple[float, int]:
    """``(f, n)``: the heaviest rank's share of the routed copies over the mean rank's (``trivial_shares``), and the
    ranks that hold it."""
    shares = trivial_shares(experts, redundant, ep)
    top = max(shares)
    return top * ep, sum(1 for s in shares if s >= top * (1 - 1e-12))


def uniform_fluctuation(mean: float, ranks: int) -> float:
    """The expected busiest of ``ranks`` nearly-Poisson loads of mean ``mean`` over the mean, ``1 + sqrt(2 ln(ranks) /
    mean)``: uniform routing's (``demos.zoo.workload.auto_imbalance``); 1.0 for one rank or no load."""
    if ranks <= 1 or mean <= 0:
        return 1.0
    return 1.0 + math.sqrt(2.0 * math.log(ranks) / mean)


def placement_imbalance(tokens: float, top_k: int, experts: int, redundant: int, ep: int) -> float:
    """The busiest of ``ep`` ranks' expected routed load over the mean when each rank's MoE block holds
    ``tokens`` tokens routed uniformly to ``top_k`` experts placed trivially over ``experts + redundant`` slots
    (module docstring); the heaviest share alone for no tokens, 1.0 for one rank."""
    if ep <= 1:
        return 1.0
    f, heavy = heaviest_share(experts, redundant, ep)
    return f * uniform_fluctuation(tokens * top_k * f, heavy)
