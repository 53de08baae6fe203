"""What the lines are written for (the package docstring): the ``Deployment`` (the model's repository,
the cluster, the attention TP group, the phase, the schedule, the engine releases), the model it serves as
the prediction ran it (``ServedModel``, found by ``served_model``) and the experts' placement
(``ExpertBalance``)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from demos.prediction.engines._releases import Engines
from demos.vocabulary import Phase, Schedule
from demos.zoo.memory import ServingLimits
from demos.zoo.models import checkpoints, kv_cache_name, weights_name

WEIGHT_NAMES = ("bf16", "fp8", "fp4", "int4")
KV_CACHE_NAMES = ("bf16", "fp8")


@dataclass(frozen=True)
class ServedModel:
    """The model as the prediction ran it (the package docstring): ``weights`` and ``native`` (the ``--weights``
    names of the predicted weights and of the checkpoint ``Deployment.model_id`` names; None: as predicted),
    ``kv_cache`` (the ``--kv-cache-dtype`` name), ``checkpoints`` (the published repositories by weights name,
    as ``demos.zoo.models.checkpoints`` gives them) and ``model_type`` (the config's; None: not known, every
    overlap taken as supported). A bad field is a ``ValueError`` naming it."""

    weights: str = "bf16"
    native: str | None = None
    kv_cache: str = "bf16"
    checkpoints: tuple[tuple[str, str], ...] = ()
    model_type: str | None = None

    def __post_init__(self) -> None:
        for name, value, choices in (
            ("weights", self.weights, WEIGHT_NAMES),
            ("native", self.native or self.weights, WEIGHT_NAMES),
            ("kv_cache", self.kv_cache, KV_CACHE_NAMES),
        ):
            if value not in choices:
                raise ValueError(f"served.{name} must be one of {', '.join(choices)}, got {value!r}")
        cps = dict(self.checkpoints) if not isinstance(self.checkpoints, str) else None
        if cps is None or any(k not in WEIGHT_NAMES or not isinstance(v, str) or not v for k, v in cps.items()):
            raise ValueError(f"served.checkpoints must map weights names to repository ids, got {self.checkpoints!r}")
        object.__setattr__(self, "checkpoints", tuple(sorted(cps.items())))


@dataclass(frozen=True)
class ExpertBalance:
    """How the experts are placed (the package docstring): ``redundant`` expert slots beyond the routed experts
    over the EP group, and the ``imbalance`` the prediction assumed when given as a number (None: not given,
    or ``auto``)."""

    redundant: int = 0
    imbalance: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.redundant, bool) or not isinstance(self.redundant, int) or self.redundant < 0:
            raise ValueError(f"experts.redundant must be an integer >= 0, got {self.redundant!r}")
        i = self.imbalance
        if i is not None and (isinstance(i, bool) or not isinstance(i, (int, float)) or not i >= 1):
            raise ValueError(f"experts.imbalance must be a number >= 1 or None, got {i!r}")


@dataclass(frozen=True)
class Deployment:
    """What the engine lines are written for (the package docstring): ``model_id`` (a Hugging Face repo id, or
    None for ``<MODEL>``), ``world`` GPUs on ``nodes`` nodes of ``gpus_per_node``, the experts over ``ep``
    of them (or, ``moe_tp`` > 1, every expert on each of them at a slice of its width), attention tensor
    parallel over ``attention_tp``, the ``phase`` (decode or prefill), the
    ``schedule`` (ll: DeepEP low-latency, ht: normal), the ``engines``' releases and the GPUs' ``vendor``
    ("nvidia": DeepEP's all-to-all; "amd": MoRI's, and ATOM's line beside the two) and the scale-out
    ``network`` (``demos.zoo.hardware.cluster.NETWORKS``: on "efa-gda" DeepEP V2's backend). A bad field is a
    ``ValueError`` naming it."""

    model_id: str | None
    world: int
    ep: int
    gpus_per_node: int
    nodes: int
    attention_tp: int
    phase: Phase
    schedule: Schedule
    engines: Engines = field(default_factory=Engines)
    served: ServedModel = field(default_factory=ServedModel)
    limits: ServingLimits | None = None
    experts: ExpertBalance = field(default_factory=ExpertBalance)
    moe_tp: int = 1
    vendor: str = "nvidia"
    network: str = "ib"

    def __post_init__(self) -> None:
        if self.vendor not in ("nvidia", "amd"):
            raise ValueError(f"vendor must be nvidia or amd, got {self.vendor!r}")
        for name in ("world", "ep", "gpus_per_node", "nodes", "attention_tp", "moe_tp"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if self.world != self.nodes * self.gpus_per_node:
            raise ValueError(
                f"world ({self.world}) must be nodes x gpus_per_node ({self.nodes} x {self.gpus_per_node})"
            )
        if self.world % self.ep or self.world % self.attention_tp:
            raise ValueError(f"ep ({self.ep}) and attention_tp ({self.attention_tp}) must divide the {self.world} GPUs")
        if self.moe_tp > 1 and not self.moe_tp == self.attention_tp == self.ep:
            raise ValueError(
                f"moe_tp ({self.moe_tp}) is one attention TP group that is the EP group: attention_tp and ep"
            )
        object.__setattr__(self, "phase", Phase.parse(self.phase, "phase"))
        object.__setattr__(self, "schedule", Schedule.parse(self.schedule, "schedule"))
        for name, kind in (("engines", Engines), ("served", ServedModel), ("experts", ExpertBalance)):
            if not isinstance(getattr(self, name), kind):
                raise ValueError(f"{name} must be {kind.__name__}, got {getattr(self, name)!r}")
        if self.limits is not None and not isinstance(self.limits, ServingLimits):
            raise ValueError(f"limits must be ServingLimits or None, got {self.limits!r}")

    @classmethod
    def of(
        cls,
        workload: Any,
        model_id: str | None,
        *,
        served: ServedModel | None = None,
        limits: ServingLimits | None = None,
    ) -> Deployment:
        """The deployment of a ``demos.zoo.workload.Workload``: its cluster, attention TP, phase and schedule,
        its redundant expert slots and its imbalance when a number; ``served`` and ``limits`` as given."""
        c = workload.cluster
        imbalance = workload.imbalance if isinstance(workload.imbalance, (int, float)) else None
        return cls(
            model_id,
            c.world,
            c.ep,
            c.gpus_per_node,
            c.nodes,
            workload.attention_tp,
            workload.phase,
            workload.schedule,
            served=served or ServedModel(),
            limits=limits,
            experts=ExpertBalance(workload.redundant_experts, imbalance),
            moe_tp=getattr(workload, "moe_tp", 1),
            vendor=c.gpu.vendor,
            network=c.network,
        )


def served_model(given: Any, native: Any, predicted: Any) -> tuple[str | None, ServedModel]:
    """What the engine lines serve of ``given`` (the model as the user named it: a preset, an alias, a path
    or a ``ModelSpec``), loaded as ``native`` and predicted as ``predicted`` (``ModelSpec``s): the model's
    own repository and ``ServedModel`` (the weights and KV cache predicted, the checkpoint's own weights,
    the published checkpoints, the architecture). A preset
    or alias (by name or as its ``ModelSpec``) has its repository and checkpoints
    (``demos.zoo.models.checkpoints``: an alias has its own, DeepSeek-R1 is not DeepSeek-V3); a model folder
    (a HuggingFace snapshot) is served from that folder as given; a config.json or another spec has neither
    (the lines then hold a placeholder the user fills: the folder with the weights)."""
    source = native.source
    repo = None
    if source.startswith("huggingface.co/") and " " in source:
        repo = source[len("huggingface.co/") :].split(" ", 1)[0]
    elif isinstance(given, (str, os.PathLike)) and os.path.isdir(given):
        repo = os.fspath(given)
    nat = weights_name(native.precision)
    found: dict[str, str] = {}
    if repo is not None:
        names = ((given,) if isinstance(given, str) else ()) + (native.name,)
        found = next((c for c in map(checkpoints, names) if c), {})
    served = ServedModel(
        weights=weights_name(predicted.precision),
        native=nat,
        kv_cache=kv_cache_name(predicted.precision),
        checkpoints=tuple(found.items()),
        model_type=native.model_type,
    )
    return found.get(nat, repo), served
