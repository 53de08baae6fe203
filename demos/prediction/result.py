"""What ``predict()`` returns: a ``Prediction``, the typed form of what ``python -m demos.predict``
prints and writes (docs/predict.md, "Outputs"; docs/python.md, "Predicting from Python").

* ``SweptPoint``: one swept point, the fields of a record of the JSON's ``points``.
* ``Setting``: the best ``ubatches`` and ``comm_sms`` of one mode (the JSON's ``best``).
* ``Recommendation`` (``demos.prediction.answer``): what to pass to vLLM and SGLang, why, and the reason
  of each mode.
* ``ClusterSetup``: what a real model's prediction was asked and assumed (the cluster, the context, the
  imbalance, the what-if factors, the precision, the kernel source, the overlap strategies compared) and
  how far a prediction of its kind was checked; ``ToySetup``: the calibrated profile the toy ran on.
* ``Prediction``: the question (model, phase, schedule), its setup (one of the two), the points, the
  crossover per mode (``demos.prediction.answer.Crossover``), the recommendation, the best settings,
  what the prediction rests on, and the serving run of a workload where one was asked. ``to_dict()`` is
  exactly the dict ``--json`` writes, ``text()`` exactly what the command prints; ``write_csv``,
  ``write_plot`` and ``write_trace`` write the command's other files.

For the toy (``predict("toy", profile=...)``) the setup is a ``ToySetup``, ``best`` is empty and the
recommendation's ``enable`` and ``threshold`` are None: no serving-engine flags follow from the toy.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from demos.errors import ConfigError, field_ref
from demos.prediction.answer import Crossover, Recommendation
from demos.prediction.outputs import NOT_MODELLED, format_prediction, write_csv, write_plot

__all__ = ["ClusterSetup", "Prediction", "Setting", "SweptPoint", "ToySetup"]


@dataclass(frozen=True)
class SweptPoint:
    """One swept point: ``tokens`` per GPU, ``mode`` ("graph" or "eager"), DBO's ``ubatches`` and the
    ``comm_sms`` it ran with; the steps without and with DBO (seconds) and the ``speedup``; tokens/s per
    GPU and per node without and with DBO; the share of the hideable all-to-all the DBO step hid
    (``hidden_fraction``); whether the step fits in HBM with and without DBO and its memory (None for
    the toy); ``stages``: seconds per stage of the no-DBO step (attention, dispatch, mlp, combine,
    other); ``moe_layer_s`` and ``dense_layer_s``: the device seconds of each op of one MoE and one
    dense layer of the no-DBO step (``demos.zoo.breakdown``; None for the toy, and where the model has
    no layer of that kind); ``attention_kinds_s``: a hybrid model's attention seconds per layer of each
    attention kind, with its layer count (None for a model of one kind, and for the toy); ``step_sbo_s``: the
    step with single-batch overlap and ``step_fused_s`` the step with DeepGEMM's fused MoE kernel (None where
    not swept or not applicable); ``overlap``: the fastest of the strategies compared at this point ("none",
    "dbo", "sbo", "fused"; None for the toy)."""

    tokens: int
    mode: str
    ubatches: int
    comm_sms: int
    step_no_dbo_s: float
    step_dbo_s: float
    speedup: float
    tokens_per_s_gpu_no_dbo: float
    tokens_per_s_gpu_dbo: float
    tokens_per_s_node_no_dbo: float
    tokens_per_s_node_dbo: float
    hidden_fraction: float | None
    fits: bool | None
    fits_without_dbo: bool | None
    memory_total_bytes: float | None
    step_sbo_s: float | None
    step_fused_s: float | None
    overlap: str | None
    stages: dict[str, float]
    moe_layer_s: dict[str, float] | None = None
    dense_layer_s: dict[str, float] | None = None
    attention_kinds_s: dict[str, dict[str, float]] | None = None

    def as_dict(self) -> dict[str, Any]:
        """The record as the JSON's ``points`` holds it."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        for key in ("stages", "moe_layer_s", "dense_layer_s"):
            out[key] = None if out[key] is None else dict(out[key])
        if out["attention_kinds_s"] is not None:
            out["attention_kinds_s"] = {k: dict(v) for k, v in out["attention_kinds_s"].items()}
        return out


@dataclass(frozen=True)
class Setting:
    """The DBO ``ubatches`` and ``comm_sms`` of one mode with the best geometric-mean speedup."""

    ubatches: int
    comm_sms: int

    def as_dict(self) -> dict[str, Any]:
        return {"ubatches": self.ubatches, "comm_sms": self.comm_sms}


_TOY_ORDER = ("phase", "mode", "enable", "threshold", "reason", "vllm", "sglang")
"""The toy's ``recommendation`` has always listed its keys in this order: kept, so that its --json is
the same, byte for byte."""


@dataclass(frozen=True)
class ClusterSetup:
    """What a real model's prediction was asked and assumed: the cluster (``gpu``, ``nodes``,
    ``gpus_per_node``, ``ep``, ``attention_tp``, ``moe_tp``, ``network``), ``context`` and ``imbalance``;
    ``what_if``: the factors applied; ``precision``: the dtype of each part (``weights``, ``experts``,
    ``dispatch``, ``combine``, ``kv_cache``; ``--weights``, ``--kv-cache-dtype``); ``kernels``: ``{"source":
    "roofline" or "measured", "fallbacks": {op: why}}``, each op the measured source timed on the roofline instead, and
    why; ``overlaps``: the strategies compared, and ``overlap``: per mode, the runs of swept token counts
    over which one strategy is the fastest, ``[{"overlap", "from", "to"}]`` (``to`` None: to the largest
    swept count and beyond); ``checked``: how far a prediction of this kind has been checked
    (``demos.prediction.trust``)."""

    gpu: str
    nodes: int
    gpus_per_node: int
    ep: int
    attention_tp: int
    moe_tp: int
    context: int
    imbalance: float | str
    what_if: dict[str, float]
    precision: dict[str, str]
    kernels: dict[str, Any]
    overlaps: tuple[str, ...]
    overlap: dict[str, list[dict[str, Any]]]
    checked: str
    network: str = "ib"


@dataclass(frozen=True)
class ToySetup:
    """What the toy's prediction ran on: ``profile``, the calibrated profile's name."""

    profile: str


@dataclass(frozen=True)
class Prediction:
    """A prediction (module docstring). ``title``: the report's first line; ``model``: the model's
    name ("toy" for the toy); ``phase`` and ``schedule`` ("ll" or "ht"); ``setup``: a ``ClusterSetup``
    (a real model) or a ``ToySetup`` (the toy); ``points``: every swept point in the order it ran;
    ``crossovers``: per mode, where DBO starts to pay (``Crossover.tokens`` None: nowhere in the sweep);
    ``best``: per mode, the best setting; ``sources`` and ``not_modelled``: what the prediction rests on and
    what it leaves out; ``workload``: the serving run of the workload asked (``predict(workload=)``,
    ``demos.prediction.workload.WorkloadRun``), None without one."""

    title: str
    model: str
    phase: str
    schedule: str
    setup: ClusterSetup | ToySetup
    points: tuple[SweptPoint, ...]
    crossovers: dict[str, Crossover]
    recommendation: Recommendation
    best: dict[str, Setting]
    sources: tuple[str, ...]
    not_modelled: tuple[str, ...] = NOT_MODELLED
    workload: Any = None
    _sweep: Any = field(default=None, repr=False, compare=False)
    _results: tuple[Any, ...] = field(default=(), repr=False, compare=False)

    @property
    def is_toy(self) -> bool:
        """Whether this is the toy swept with a calibrated profile (its setup a ``ToySetup``)."""
        return isinstance(self.setup, ToySetup)

    @property
    def modes(self) -> tuple[str, ...]:
        """The swept modes, in the order they ran."""
        return tuple(self.crossovers)

    def _setup(self) -> dict[str, Any]:
        head = {"title": self.title, "model": self.model}
        if isinstance(self.setup, ToySetup):
            return {**head, "profile": self.setup.profile, "schedule": self.schedule, "phase": self.phase}
        c = self.setup
        cluster = ("gpu", "nodes", "gpus_per_node", "network", "ep", "attention_tp", "moe_tp")
        return {
            **head,
            **{k: getattr(c, k) for k in cluster},
            "phase": self.phase,
            "context": c.context,
            "schedule": self.schedule,
            "imbalance": c.imbalance,
            "what_if": dict(c.what_if),
            "precision": dict(c.precision),
            "kernels": {"source": c.kernels["source"], "fallbacks": dict(c.kernels["fallbacks"])},
        }

    def to_dict(self) -> dict[str, Any]:
        """Exactly the dict ``python -m demos.predict --json`` writes (docs/predict.md, "Outputs"); the
        command adds ``plot_path`` and ``trace_path`` when it wrote those files."""
        rec = self.recommendation.as_dict()
        c = self.setup
        if self.is_toy:
            rec = {k: rec[k] for k in _TOY_ORDER}
        return {
            **self._setup(),
            "points": [p.as_dict() for p in self.points],
            "crossover": {m: (None if x.tokens is None else x.as_dict()) for m, x in self.crossovers.items()},
            "reasons": dict(self.recommendation.reasons),
            "best": {m: b.as_dict() for m, b in self.best.items()},
            **({} if self.is_toy else {"overlaps": list(c.overlaps), "overlap": _overlap(c.overlap)}),
            "recommendation": rec,
            **({} if self.is_toy else {"workload": None if self.workload is None else self.workload.as_dict()}),
            "sources": list(self.sources),
            "not_modelled": list(self.not_modelled),
            **({} if self.is_toy else {"checked": c.checked}),
        }

    def text(self, detail: bool = False) -> str:
        """Exactly the report the command prints on stdout (without the final newline); ``detail``: with
        ``--detail``'s per-op table of one layer per point."""
        return format_prediction(self.to_dict(), detail=detail)

    def write_csv(self, path: str) -> None:
        """``--csv PATH``: one row per point."""
        write_csv(self.to_dict(), path)

    def write_plot(self, path: str) -> str | None:
        """``--plot PATH.png``: step time and speedup against tokens per GPU; returns None, or a note
        (nothing written) when matplotlib is missing."""
        return write_plot(self.to_dict(), path)

    def write_trace(self, path: str, tokens: int | None = None) -> str:
        """``--trace PATH`` (``--trace-tokens`` is ``tokens``): one point's no-DBO and DBO steps, eager,
        as a Perfetto trace; by default the point from which DBO pays. Real models only."""
        if self.is_toy:
            raise ConfigError(f"{field_ref('trace')} applies to real models, not to {field_ref('model')} toy")
        from demos.prediction.trace import write_trace

        return write_trace(self.to_dict(), self._sweep, self._results, path, tokens)


def _overlap(overlap: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    return {m: [dict(x) for x in ranges] for m, ranges in overlap.items()}
