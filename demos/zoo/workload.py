"""``Workload``: one step of a real model on a real cluster, as the generic transformer runs it.

A workload is pure data: the model (``demos.zoo.models.ModelSpec``), the cluster (``demos.zoo.hardware.ClusterSpec``:
GPU, nodes, GPUs per node, EP degree), the phase, and the step's shape on one rank:

* ``phase`` "decode": ``tokens`` requests each generate one token, each attending to ``context`` cached
  tokens; "prefill": the rank runs ``tokens`` prompt tokens, in requests of ``context`` tokens each
  (the last one shorter), each token attending causally to the tokens before it in its request.
* ``attention_tp``: the attention tensor-parallel group (docs/clusters.md, "Attention tensor
  parallelism"). 1 (the default): data-parallel attention, every rank runs attention for its own
  ``tokens`` with a full copy of the non-expert weights. N > 1: N ranks of one NVLink domain run
  attention together for the group's ``tokens`` (each with ``heads / N`` query heads), and each rank's
  MoE block holds its slice of them, ``moe_tokens``. Either way ``tokens`` is what each rank's
  attention sees, and the routed experts are sharded ``ep`` ways.
* ``moe_tp``: 1 (the default), each expert whole on one rank; N > 1, MoE tensor parallelism: where one
  attention TP group of N is the whole EP group (no all-to-all), every rank holds every routed expert with
  ``1 / N`` of its intermediate width and computes every routed copy of the group's tokens at that width
  (the engines' plain ``--tensor-parallel-size`` without expert parallelism), its sums all-reduced as the
  replicated path's are.
* ``redundant_slots``: 0 (the default), ``ceil(routed experts / ep)`` expert slots a rank, the spare ones holding
  copies of the busiest experts as EPLB places them (routing spreads over the slots evenly); R > 0, ``routed +
  R`` slots placed without EPLB, as SGLang's ``--ep-num-redundant-experts R`` does by default
  (``demos.zoo.expert_placement``: slot ``p`` holds expert ``p mod routed``), so the busiest rank holds only
  single-copy experts and takes more than the mean share of the routed load; ``ep`` must divide the slots.
* ``schedule``: "ll" (DeepEP low-latency kernels, the decode default) or "ht" (DeepEP normal kernels,
  the prefill default). ``comm_sms``: SMs the normal kernels take from compute while they run (default
  20; the low-latency kernels take none).
* ``mechanisms``: the factors of the overlap mechanisms the cost model charges
  (``demos.zoo.overlap_costs.Mechanisms``; all 1 by default, each set by a ``--what-if`` knob).
* ``imbalance``: the busiest rank's expert load over the mean (1.0: balanced, as EPLB aims for), or
  "auto": the fluctuation of uniform routing, ``1 + sqrt(2 ln(ep) / (tokens x top_k))`` (the expected
  maximum of ``ep`` nearly-Poisson loads of mean ``tokens x top_k``; a first-principles estimate, not fitted), or
  "power-law": the busiest rank under aiconfigurator-core's skewed routing (``demos.zoo.routing_skew``).

Every bad value raises ``ConfigError`` naming the field (``demos.errors``), so the command line
can name the flag.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from demos.errors import ConfigError, field_ref
from demos.vocabulary import Phase, Schedule
from demos.zoo.expert_placement import placement_imbalance, uniform_fluctuation
from demos.zoo.hardware import DEFAULT_COMM_SMS, ClusterSpec, Routing, get_gpu, oversized_host
from demos.zoo.hardware.cluster import rack_hosts
from demos.zoo.models import ModelSpec
from demos.zoo.overlap_costs import Mechanisms
from demos.zoo.routing_skew import POWER_LAW, power_law_imbalance

__all__ = [
    "IMBALANCE_MODELS",
    "PHASES",
    "WORKLOAD_SCHEDULES",
    "Workload",
    "auto_imbalance",
    "cluster_for",
    "default_schedule",
]

PHASES = Phase.choices()
IMBALANCE_MODELS = ("auto", POWER_LAW)
"""The named routing models ``Workload.imbalance`` takes besides a number (module docstring)."""
WORKLOAD_SCHEDULES = Schedule.choices()


def default_schedule(phase: str) -> Schedule:
    """The schedule each phase runs as DeepEP deploys it: low-latency for decode, normal for prefill."""
    return Schedule.LL if phase == Phase.DECODE else Schedule.HT


def auto_imbalance(tokens: int, top_k: int, ep: int) -> float:
    """The busiest of ``ep`` ranks' expert load over the mean under uniform routing of ``tokens`` tokens
    per rank to ``top_k`` experts each (module docstring). 1.0 for one rank or no tokens."""
    return uniform_fluctuation(tokens * top_k, ep)


def _int(name: str, value: object, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"{field_ref(name)} must be an int >= {low}, got {value!r}")
    return value


@dataclass(frozen=True)
class Workload:
    """One rank's step of ``spec`` on ``cluster`` (module docstring). ``ubatches`` is how many ubatches a
    DBO step splits it into (the no-DBO step is one)."""

    spec: ModelSpec
    cluster: ClusterSpec
    phase: Phase = Phase.DECODE
    tokens: int = 128
    context: int = 2048
    schedule: Schedule | None = None
    ubatches: int = 2
    imbalance: float | str = 1.0
    comm_sms: int | None = None
    attention_tp: int = 1
    mechanisms: Mechanisms = Mechanisms()
    moe_tp: int = 1
    redundant_slots: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.spec, ModelSpec):
            raise ConfigError(f"{field_ref('model')} must be a ModelSpec, got {type(self.spec).__name__}")
        if not isinstance(self.cluster, ClusterSpec):
            raise ConfigError(f"{field_ref('gpu')}: the cluster must be a ClusterSpec, got {type(self.cluster)}")
        if self.phase not in PHASES:
            raise ConfigError(f"{field_ref('phase')} must be one of {', '.join(PHASES)}, got {self.phase!r}")
        object.__setattr__(self, "phase", Phase(self.phase))
        _int("tokens", self.tokens, 1)
        _int("context", self.context, 1)
        _int("ubatches", self.ubatches, 1)
        if self.ubatches > self.tokens:
            raise ConfigError(
                f"{field_ref('ubatches')} ({self.ubatches}) must not exceed {field_ref('tokens')} ({self.tokens})"
            )
        sched = default_schedule(self.phase) if self.schedule is None else self.schedule
        if sched not in WORKLOAD_SCHEDULES:
            raise ConfigError(f"{field_ref('schedule')} must be one of {', '.join(WORKLOAD_SCHEDULES)}, got {sched!r}")
        sched = Schedule(sched)
        object.__setattr__(self, "schedule", sched)
        imb = self.imbalance
        if imb not in IMBALANCE_MODELS:
            if isinstance(imb, bool) or not isinstance(imb, (int, float)) or not math.isfinite(imb) or imb < 1:
                models = " or ".join(repr(m) for m in IMBALANCE_MODELS)
                raise ConfigError(f"{field_ref('imbalance')} must be a number >= 1, {models}, got {imb!r}")
        sms = self.comm_sms
        if sched == Schedule.LL and sms not in (None, 0):
            raise ConfigError(
                f"{field_ref('comm_sms')} {sms!r}: DeepEP's low-latency kernels (schedule ll) take no SMs from compute"
            )
        if sms is None:
            sms = DEFAULT_COMM_SMS if sched == Schedule.HT else 0
        gpu = self.cluster.gpu
        if isinstance(sms, bool) or not isinstance(sms, int) or not 0 <= sms < gpu.sm_count:
            raise ConfigError(
                f"{field_ref('comm_sms')} must be an int in [0, {gpu.sm_count}) on {gpu.name}, got {sms!r}"
            )
        if sched == Schedule.HT and sms == 0 and self.cluster.ep > 1:
            raise ConfigError(f"{field_ref('comm_sms')}: DeepEP's normal kernels (schedule ht) need at least 1 SM")
        object.__setattr__(self, "comm_sms", sms)
        self._check_attention_tp()
        mtp = _int("moe_tp", self.moe_tp, 1)
        if mtp > 1 and not (mtp == self.attention_tp == self.cluster.ep):
            raise ConfigError(
                f"{field_ref('moe_tp')} {mtp}: MoE tensor parallelism is modelled over one attention TP group that "
                f"is the whole EP group ({field_ref('attention_tp')} = {field_ref('ep')} = {mtp}); got "
                f"{field_ref('attention_tp')} {self.attention_tp}, {field_ref('ep')} {self.cluster.ep}"
            )
        self._check_redundant_slots()
        if not isinstance(self.mechanisms, Mechanisms):
            raise ConfigError(f"{field_ref('what_if')}: mechanisms must be Mechanisms, got {self.mechanisms!r}")

    def _check_attention_tp(self) -> None:
        """``attention_tp`` divides the EP group's ranks within one NVLink domain (a TP group stays on
        NVLink, and so within the EP group) and the attention heads; GQA's KV heads split over it or, when
        fewer, are replicated evenly (vLLM's rule)."""
        tp = _int("attention_tp", self.attention_tp, 1)
        c, a = self.cluster, self.spec.attention
        if c.ranks_per_domain % tp:
            raise ConfigError(
                f"{field_ref('attention_tp')} {tp} must divide the {c.ranks_per_domain} GPUs the EP group "
                f"({field_ref('ep')} {c.ep}) has in one NVLink domain: a TP group stays on NVLink"
            )
        if a.heads % tp:
            raise ConfigError(
                f"{field_ref('attention_tp')} {tp} must divide the attention heads of {self.spec.name} ({a.heads})"
            )
        kv = getattr(a, "kv_heads", None)
        if kv is not None and (kv % tp if kv >= tp else tp % kv):
            raise ConfigError(
                f"{field_ref('attention_tp')} {tp}: the {kv} KV heads of {self.spec.name} neither split evenly "
                "over it nor replicate evenly"
            )

    def _check_redundant_slots(self) -> None:
        """``redundant_slots`` (module docstring): an MoE model's, each expert whole on a rank, ``ep`` dividing
        the slots (SGLang asserts it)."""
        r = _int("redundant_slots", self.redundant_slots, 0)
        if not r:
            return
        moe = self.spec.moe
        if moe is None:
            raise ConfigError(f"{field_ref('redundant_slots')} {r}: {self.spec.name} is dense, it has no experts")
        if self.moe_tp > 1:
            raise ConfigError(
                f"{field_ref('redundant_slots')} {r}: under MoE tensor parallelism ({field_ref('moe_tp')} "
                f"{self.moe_tp}) every rank holds every expert"
            )
        if (moe.routed_experts + r) % self.cluster.ep:
            raise ConfigError(
                f"{field_ref('redundant_slots')} {r}: {field_ref('ep')} {self.cluster.ep} must divide the "
                f"{moe.routed_experts} routed experts plus the redundant slots ({moe.routed_experts + r})"
            )

    @property
    def alltoall(self) -> bool:
        """Whether the MoE block moves tokens over the EP group with DeepEP's all-to-all: EP > 1 and more
        than one attention group in it. With one (attention TP = EP, no data parallelism), every rank
        holds the group's tokens, its experts take the copies routed to them, and the MoE output is
        all-reduced: vLLM turns its all-to-all kernels on only with DP > 1, and TRT-LLM's attention TP
        runs the same way (docs/clusters.md, "Attention tensor parallelism")."""
        return self.cluster.ep > 1 and self.attention_tp < self.cluster.ep

    @property
    def moe_replicated(self) -> bool:
        """Attention TP over the whole EP group (``attention_tp`` > 1 without ``alltoall``): every rank's
        MoE block holds the group's tokens, and its sums are all-reduced."""
        return self.attention_tp > 1 and not self.alltoall

    def moe_tokens(self, t: int) -> int:
        """Tokens each rank's MoE block holds for a ubatch of ``t`` tokens of its attention TP group:
        ``ceil(t / attention_tp)`` with an all-to-all (the group's tokens reduce-scattered over it, padded
        to a multiple of it as vLLM pads them); ``t`` without attention TP, or without an all-to-all
        (``alltoall``: every rank holds the group's tokens)."""
        if self.moe_replicated:
            return t
        return -(-t // self.attention_tp)

    def routed_tokens(self, t: int) -> float:
        """Tokens whose ``top_k`` copies each rank's experts receive on average, for a ubatch of ``t``
        tokens of its attention TP group: ``moe_tokens(t)``, or ``t / attention_tp`` without an
        all-to-all (the group's copies spread over its ``attention_tp`` ranks; a fraction when ``t`` is
        smaller than the group)."""
        if self.moe_tp > 1:  # every rank computes every copy, at 1 / moe_tp of each expert's width
            return float(t)
        if self.moe_replicated:
            return t / self.attention_tp
        return self.moe_tokens(t)

    @property
    def tokens_per_gpu(self) -> float:
        """The step's tokens per GPU: ``tokens / attention_tp`` (each of the group's tokens is one
        token of output, computed by ``attention_tp`` GPUs together)."""
        return self.tokens / self.attention_tp

    @property
    def gpu(self):
        return self.cluster.gpu

    @property
    def requests(self) -> float:
        """Requests the rank runs: ``tokens`` in decode; ``tokens / context`` in prefill (a fraction: the
        last request may be partial)."""
        return float(self.tokens) if self.phase == Phase.DECODE else self.tokens / self.context

    @property
    def experts_per_rank(self) -> int:
        """Expert slots per rank: ``ceil(routed_experts / ep)``, or ``(routed_experts + redundant_slots) / ep``
        (0 for a dense model); under MoE tensor parallelism every routed expert, each ``expert_intermediate``
        wide."""
        moe = self.spec.moe
        if moe is not None and self.moe_tp > 1:
            return moe.routed_experts
        if moe is not None and self.redundant_slots:
            return (moe.routed_experts + self.redundant_slots) // self.cluster.ep
        return 0 if moe is None else -(-moe.routed_experts // self.cluster.ep)

    @property
    def expert_intermediate(self) -> int:
        """Each expert slot's intermediate width on a rank: the whole, or ``1 / moe_tp`` of it (rounded up)."""
        moe = self.spec.moe
        return 0 if moe is None else -(-moe.intermediate_size // self.moe_tp)

    @property
    def physical_experts(self) -> int:
        """Expert slots over the EP group, ``experts_per_rank x ep``: when ``ep`` does not divide the
        routed experts, the spare slots hold redundant copies of the busiest experts, as EPLB deploys
        (DeepSeek-V3 at EP 72: 256 + 32 = 288 = 4 x 72), and routing spreads over the slots evenly; with
        ``redundant_slots`` they are placed without EPLB (``imbalance_at``)."""
        if self.moe_tp > 1:
            return self.experts_per_rank
        return self.experts_per_rank * self.cluster.ep

    @property
    def redundant_experts(self) -> int:
        moe = self.spec.moe
        return 0 if moe is None else self.physical_experts - moe.routed_experts

    def imbalance_at(self, tokens: int) -> float:
        """The expert-load imbalance of a ubatch of ``tokens`` tokens in each rank's MoE block (``moe_tokens``):
        a number as given; a routing model's (module docstring) over the trivial placement of
        ``redundant_slots`` where there are any (``demos.zoo.expert_placement``)."""
        if self.moe_tp > 1:  # every rank computes every expert's slice: no rank has more copies than another
            return 1.0
        if self.imbalance not in IMBALANCE_MODELS:
            return float(self.imbalance)
        moe, ep, r = self.spec.moe, self.cluster.ep, self.redundant_slots
        k = moe.top_k if moe is not None else 1
        if self.imbalance == POWER_LAW and moe is not None and tokens > 0:
            return power_law_imbalance(max(1, round(tokens)), k, moe.routed_experts, ep, redundant=r)
        if r:  # the trivial placement's heaviest share, then uniform routing's fluctuation
            return placement_imbalance(tokens, k, moe.routed_experts, r, ep)
        return auto_imbalance(tokens, k, ep)

    def routing(self, tokens: int) -> Routing:
        """The routing of ``tokens`` tokens per rank's MoE block (uniform, no domain limit: docs/clusters.md)."""
        moe = self.spec.moe
        if moe is None:
            raise ConfigError(f"{field_ref('model')} {self.spec.name} is dense: it routes nothing")
        return Routing(self.physical_experts, moe.top_k, imbalance=self.imbalance_at(tokens))

    def with_(self, **changes) -> "Workload":
        """A copy with ``changes`` (checked again)."""
        return replace(self, **changes)


def cluster_for(gpu: str, nodes: int, gpus_per_node: int | None, ep: int | None, network: str = "ib") -> ClusterSpec:
    """The cluster of ``nodes`` hosts of ``gpus_per_node`` (None: the GPU's server, at most that) ``gpu``
    GPUs with EP ``ep`` (None: every GPU), errors as ``ConfigError`` naming the flag (a host typed larger
    than the GPU's server, a GB200 rack as one host of 72, is one, with what to pass instead)."""
    try:
        g = get_gpu(gpu)
    except ValueError as e:
        raise ConfigError(f"{field_ref('gpu')}: {e}") from None
    _int("nodes", nodes, 1)
    per = g.gpus_per_node if gpus_per_node is None else _int("gpus_per_node", gpus_per_node, 1)
    racks = rack_hosts(g, nodes, per)
    if racks is not None:  # a rack typed as a node, as users name it: its hosts (docs/clusters.md)
        nodes, per = racks
    oversized = oversized_host(g, nodes, per, lambda f, v: f"{field_ref(f)} {v}")
    if oversized is not None:
        raise ConfigError(oversized)
    world = nodes * per
    e = world if ep is None else _int("ep", ep, 1)
    if e > world or world % e:
        raise ConfigError(
            f"{field_ref('ep')} {e} must divide the {world} GPUs of the cluster ({nodes} x {per} {g.name})"
        )
    try:
        return ClusterSpec(nodes=nodes, gpus_per_node=per, ep=e, gpu=g, network=network)
    except ValueError as err:
        msg = str(err)
        if msg.startswith("ClusterSpec.network"):  # ClusterSpec's own check, its field the flag
            raise ConfigError(field_ref("network") + msg[len("ClusterSpec.network") :]) from None
        raise ConfigError(f"{field_ref('ep')}: {msg.replace('ClusterSpec.', '')}") from None
