"""Cluster and routing model: where a rank's routed tokens go under expert parallelism.

The layout: attention runs data-parallel on every rank (or tensor-parallel over groups within an NVLink
domain: ``demos.zoo.workload.Workload.attention_tp``, whose collectives ``demos.zoo.hardware.collectives``
times); the routed experts are sharded ``ep`` ways, ``experts / ep`` per rank, over one EP group of
``ep`` consecutive ranks. Ranks fill NVLink domains in order (HGX: a node of 8; GB200 NVL72: a rack of
72), so an EP group spans ``domains`` domains of ``ranks_per_domain`` ranks each. A routed copy (one
token sent to one of its top-k experts) stays on its rank, goes over NVLink to another rank of the same
domain, or goes over RDMA to another domain.

Routing is uniform: each token picks ``top_k`` distinct experts uniformly at random. With a domain
limit (``Routing.max_domains``, DeepSeek-V3's node-limited routing: each token's experts lie in at
most M nodes) a token picks M domains, uniformly, and the experts within them; because the M domains
are chosen by their best-scoring experts, each of them holds at least one of the token's experts (a
modelling choice, checked against a Monte-Carlo of DeepEP's test routing in tests/zoo/hardware/test_gpus.py).

Everything here is an expectation per token of the sending rank. ``Routing.imbalance`` (the busiest
rank's expert load over the mean, >= 1) is carried along for the all-to-all model to scale the
busiest rank's traffic by; it does not change the shares.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from dbo.costs import check_number
from demos.zoo.hardware.gpus import GpuSpec, get_gpu

NETWORKS = ("ib", "roce", "efa", "efa-gda")
"""Scale-out networks (``ClusterSpec.network``): InfiniBand and RoCE, where the GPU initiates RDMA (IBGDA; MoRI
on AMD), AWS EFA through CPU proxy threads (UCCL-EP, NVSHMEM's host proxy), and EFA with GPU-initiated RDMA
(DeepEP V2 over NCCL GIN, August 2026)."""

__all__ = ["NETWORKS", "ClusterSpec", "Routing", "Traffic", "host_layout", "oversized_host", "rack_hosts"]


def _count(what: str, v: object, low: int = 1) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise ValueError(f"{what} must be an int >= {low}, got {v!r}")
    return v


def _miss(pool: int, hit: int, picks: int) -> float:
    """Probability that ``picks`` distinct draws from ``pool`` items avoid ``hit`` given items."""
    if picks > pool - hit:
        return 0.0
    p = 1.0
    for i in range(picks):
        p *= (pool - hit - i) / (pool - i)
    return p


def host_layout(gpu: GpuSpec, gpus: int) -> tuple[int, int]:
    """(hosts, GPUs per host): the fewest hosts of ``gpu`` (each at most its ``gpus_per_node``) that hold
    ``gpus`` GPUs in equal shares (72 GB200: 18 hosts of 4; 16 H100: 2 of 8; 12 H100: 2 of 6)."""
    hosts = -(-gpus // gpu.gpus_per_node)
    while gpus % hosts:
        hosts += 1
    return hosts, gpus // hosts


def rack_hosts(gpu: GpuSpec, nodes: int, gpus_per_node: int) -> tuple[int, int] | None:
    """``(hosts, GPUs per host)`` when ``nodes`` "hosts" of ``gpus_per_node`` GPUs are whole racks of an NVLink
    domain wider than one host, typed a rack a node (``--gpus-per-node 72`` on GB200 or GB300 NVL72: 18 hosts of
    4), as users name the rack; None for anything else (a host typed larger than its server that is not whole
    racks stays ``oversized_host``'s refusal)."""
    server, dom = gpu.gpus_per_node, gpu.nvlink_domain
    if gpus_per_node <= server or dom <= server or gpus_per_node % dom:
        return None
    world = nodes * gpus_per_node
    return world // server, server


def oversized_host(gpu: GpuSpec, nodes: int, gpus_per_node: int, spell: Callable[[str, int], str]) -> str | None:
    """None when one host of ``gpu`` can hold ``gpus_per_node`` GPUs (at most its server's
    ``gpus_per_node``); else why not and what to pass instead, one line, each field with its value spelled
    by ``spell(field, value)`` (``--gpus-per-node 72`` on the command line, ``gpus_per_node=72`` in Python).
    A node is a host: a typed rack (GB200 NVL72: 72 GPUs over 18 trays of 4) is refused, not taken for one
    host, whose all-to-all and launch lines would be those of one machine (docs/clusters.md, "Hosts and
    NVLink domains")."""
    server = gpu.gpus_per_node
    if gpus_per_node <= server:
        return None
    world = nodes * gpus_per_node
    hosts, per = host_layout(gpu, world)
    typed = (spell("nodes", nodes) + " " if nodes > 1 else "") + spell("gpus_per_node", gpus_per_node)
    dom = gpu.nvlink_domain
    if dom > server and per == server and world % dom == 0:
        racks = world // dom
        what = f"{'a whole' if racks == 1 else f'{racks} whole'} NVL{dom} rack{'s' if racks > 1 else ''}"
        what += f" of {dom // server} hosts of {server}"
        target = "one rack" if racks == 1 else f"{racks} racks"
    else:
        what, target = f"{hosts} hosts of {per}", f"{world} GPUs"
    use = spell("nodes", hosts) + (f" ({server} GPUs per node)" if per == server else " " + spell("gpus_per_node", per))
    return f"{typed} is {what} (one {gpu.name} host holds {server} GPUs): use {use} for {target}"


@dataclass(frozen=True)
class Routing:
    """The MoE router: ``experts`` routed experts, ``top_k`` distinct ones per token, at most
    ``max_domains`` NVLink domains per token (None: no limit; must be <= top_k), and the
    ``imbalance`` of the expert load (busiest rank over the mean, >= 1; 1: perfectly balanced)."""

    experts: int
    top_k: int
    max_domains: int | None = None
    imbalance: float = 1.0

    def __post_init__(self) -> None:
        _count("Routing.experts", self.experts)
        _count("Routing.top_k", self.top_k)
        if self.top_k > self.experts:
            raise ValueError(f"Routing.top_k ({self.top_k}) must not exceed experts ({self.experts})")
        if self.max_domains is not None:
            _count("Routing.max_domains", self.max_domains)
            if self.max_domains > self.top_k:
                raise ValueError(f"Routing.max_domains ({self.max_domains}) must not exceed top_k ({self.top_k})")
        if check_number("Routing.imbalance", self.imbalance) < 1:
            raise ValueError(f"Routing.imbalance must be >= 1 (busiest rank over the mean), got {self.imbalance!r}")


@dataclass(frozen=True)
class Traffic:
    """Expected traffic of one token of a sending rank (see ``ClusterSpec.traffic``).

    ``copies_*``: its routed copies (one per chosen expert; they sum to top_k) that stay on the
    rank (``local``), go to another rank of its NVLink domain (``nvlink``) or to another domain
    (``rdma``). ``ranks_*``: the distinct destination ranks it touches, split the same way.
    ``domains``: the distinct NVLink domains it touches (its own included), ``remote_domains``:
    those other than its own. ``imbalance``: the routing's, for scaling the busiest rank."""

    copies_local: float
    copies_nvlink: float
    copies_rdma: float
    ranks_local: float
    ranks_nvlink: float
    ranks_rdma: float
    domains: float
    remote_domains: float
    imbalance: float

    @property
    def copies(self) -> float:
        return self.copies_local + self.copies_nvlink + self.copies_rdma

    @property
    def ranks(self) -> float:
        return self.ranks_local + self.ranks_nvlink + self.ranks_rdma

    @property
    def shares(self) -> tuple[float, float, float]:
        """(local, nvlink, rdma): the shares of the routed copies (tokens x top-k); they sum to 1."""
        n = self.copies
        return self.copies_local / n, self.copies_nvlink / n, self.copies_rdma / n


@dataclass(frozen=True)
class ClusterSpec:
    """``nodes`` hosts of ``gpus_per_node`` GPUs of model ``gpu`` (a ``GpuSpec`` or a built-in
    name), with the routed experts sharded ``ep`` ways (``ep`` <= nodes x gpus_per_node, dividing it).
    A node is one host (a machine: an HGX H100 of 8, a GB200 compute tray of 4), so ``gpus_per_node``
    is at most the GPU's ``gpus_per_node``; a rack of several hosts is ``nodes`` of them
    (``oversized_host`` says what to pass instead).

    ``nvlink_domain``: GPUs per NVLink domain; None takes the GPU's: its ``nvlink_domain`` when that
    spans several nodes (GB200 NVL72: 72), else the node capped by it (HGX: 8). A domain is whole
    nodes or a part of one node; the EP group fills whole domains (or lies within one).

    ``network``: the scale-out network between domains, one of ``NETWORKS`` ("ib", "roce": RDMA the GPU
    initiates; "efa": AWS EFA through CPU proxy threads; "efa-gda": EFA with GPU-initiated RDMA), which picks
    the all-to-all's fitted parameters (``demos.zoo.hardware.alltoall.comm_params``)."""

    nodes: int
    gpus_per_node: int
    ep: int
    gpu: GpuSpec | str
    nvlink_domain: int | None = None
    network: str = "ib"

    def __post_init__(self) -> None:
        _count("ClusterSpec.nodes", self.nodes)
        _count("ClusterSpec.gpus_per_node", self.gpus_per_node)
        _count("ClusterSpec.ep", self.ep)
        object.__setattr__(self, "gpu", get_gpu(self.gpu))
        if self.network not in NETWORKS:
            raise ValueError(f"ClusterSpec.network must be one of {', '.join(NETWORKS)}, got {self.network!r}")
        if self.network.startswith("efa") and self.gpu.vendor != "nvidia":
            raise ValueError(
                f"ClusterSpec.network {self.network}: EFA serves NVIDIA GPUs (AWS's instances), not {self.gpu.name}"
            )
        oversized = oversized_host(self.gpu, self.nodes, self.gpus_per_node, lambda f, v: f"{f}={v}")
        if oversized is not None:
            raise ValueError(f"ClusterSpec: {oversized}")
        dom = self.nvlink_domain
        if dom is None:
            g = self.gpu
            dom = g.nvlink_domain if g.nvlink_domain > g.gpus_per_node else min(self.gpus_per_node, g.nvlink_domain)
        _count("ClusterSpec.nvlink_domain", dom)
        if dom % self.gpus_per_node and self.gpus_per_node % dom:
            raise ValueError(
                f"ClusterSpec.nvlink_domain ({dom}) must be whole nodes of {self.gpus_per_node} GPUs or divide a node"
            )
        object.__setattr__(self, "nvlink_domain", dom)
        world = self.world
        if self.ep > world or world % self.ep:
            raise ValueError(f"ClusterSpec.ep ({self.ep}) must divide the {world} GPUs of the cluster")
        if self.ep > dom and self.ep % dom:
            raise ValueError(f"ClusterSpec.ep ({self.ep}) must fill whole NVLink domains of {dom} GPUs")

    @property
    def world(self) -> int:
        """GPUs in the cluster."""
        return self.nodes * self.gpus_per_node

    @property
    def ranks_per_domain(self) -> int:
        """EP ranks that share one NVLink domain (the ``d`` of the shares)."""
        return min(self.ep, self.nvlink_domain)

    @property
    def scaleup_bandwidth(self) -> float:
        """Per-direction bytes/s a rank moves to the other EP ranks of its NVLink domain at once
        (``GpuSpec.scaleup_bandwidth`` of their count: a full mesh uses one link per peer)."""
        return self.gpu.scaleup_bandwidth(max(1, self.ranks_per_domain - 1))

    @property
    def domains(self) -> int:
        """NVLink domains one EP group spans (1: all its traffic stays on NVLink)."""
        return self.ep // self.ranks_per_domain

    def traffic(self, routing: Routing) -> Traffic:
        """The expected traffic of one token under ``routing`` (whose experts must shard evenly ``ep``
        ways). Copies split exactly as 1 : d-1 : ep-d over ep (d = ranks per domain); distinct ranks
        and domains follow from drawing top_k experts without replacement (see the module docstring)."""
        if not isinstance(routing, Routing):
            raise TypeError(f"routing must be a Routing, got {type(routing).__name__}")
        ep, d, n_dom = self.ep, self.ranks_per_domain, self.domains
        e, k = routing.experts, routing.top_k
        if e % ep:
            raise ValueError(f"{e} experts do not shard evenly over ep={ep} ranks")
        per_rank, per_domain = e // ep, e // n_dom
        g = n_dom if routing.max_domains is None else min(routing.max_domains, n_dom)
        if g >= n_dom:
            domains = n_dom * (1 - _miss(e, per_domain, k))
            ranks = ep * (1 - _miss(e, per_rank, k))
        else:
            # g chosen domains, one expert of each guaranteed, the other k - g spread over the rest.
            rest = g * per_domain - g
            miss_rank = (1 - per_rank / per_domain) * _miss(rest, per_rank, k - g)
            domains = float(g)
            ranks = ep * (g / n_dom) * (1 - miss_rank)
        return Traffic(
            copies_local=k / ep,
            copies_nvlink=k * (d - 1) / ep,
            copies_rdma=k * (ep - d) / ep,
            ranks_local=ranks / ep,
            ranks_nvlink=ranks * (d - 1) / ep,
            ranks_rdma=ranks * (ep - d) / ep,
            domains=domains,
            remote_domains=domains * (n_dom - 1) / n_dom,
            imbalance=float(routing.imbalance),
        )
