"""What ``predict()`` returns: a ``Prediction``, the typed form of what ``python -m demos.predict``
prints and writes (docs/predict.md, "Outputs"; docs/python.md, "Predicting from Python").

* ``SweptPoint``: one swept point, the fields of a record of the JSON's ``points``.
* ``Setting``: the best ``ubatches`` and ``comm_sms`` of one mode (the JSON's ``best``).
* ``Recommendation``: what to pass to vLLM and SGLang, why, and the reason of each mode.
* ``Prediction``: the setup, the points, the crossover per mode (``demos.prediction.answer.Crossover``),
  the recommendation, the best settings and what the prediction rests on. ``to_dict()`` is exactly the
  dict ``--json`` writes, ``text()`` exactly what the command prints; ``write_csv``, ``write_plot`` and
  ``write_trace`` write the command's other files.

For the toy (``predict("toy", profile=...)``) the setup fields of a real cluster (``gpu``, ``nodes``,
``gpus_per_node``, ``ep``, ``context``, ``imbalance``) are None, ``what_if`` and ``best`` are empty,
``profile`` names the calibrated profile, and the recommendation's ``enable`` and ``threshold`` are
None: no serving-engine flags follow from the toy.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from demos.errors import ConfigError, field_ref
from demos.prediction.answer import Crossover
from demos.prediction.outputs import NOT_MODELLED, format_prediction, write_csv, write_plot

__all__ = ["Prediction", "Recommendation", "Setting", "SweptPoint"]


@dataclass(frozen=True)
class SweptPoint:
    """One swept point: ``tokens`` per GPU, ``mode`` ("graph" or "eager"), DBO's ``ubatches`` and the
    ``comm_sms`` it ran with; the steps without and with DBO (seconds) and the ``speedup``; tokens/s per
    GPU and per node without and with DBO; the share of the hideable all-to-all the DBO step hid
    (``hidden_fraction``); whether the step fits in HBM with and without DBO and its memory (None for
    the toy); ``stages``: seconds per stage of the no-DBO step (attention, dispatch, mlp, combine,
    other); ``moe_layer_s`` and ``dense_layer_s``: the device seconds of each op of one MoE and one
    dense layer of the no-DBO step (``demos.zoo.breakdown``; None for the toy, and where the model has
    no layer of that kind); ``step_sbo_s``: the step with single-batch overlap (None where not swept or not
    applicable); ``overlap``: the fastest of the strategies compared at this point ("none", "dbo", "sbo";
    None for the toy)."""

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
    overlap: str | None
    stages: dict[str, float]
    moe_layer_s: dict[str, float] | None = None
    dense_layer_s: dict[str, float] | None = None

    def as_dict(self) -> dict[str, Any]:
        """The record as the JSON's ``points`` holds it."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        for key in ("stages", "moe_layer_s", "dense_layer_s"):
            out[key] = None if out[key] is None else dict(out[key])
        return out


@dataclass(frozen=True)
class Setting:
    """The DBO ``ubatches`` and ``comm_sms`` of one mode with the best geometric-mean speedup."""

    ubatches: int
    comm_sms: int

    def as_dict(self) -> dict[str, Any]:
        return {"ubatches": self.ubatches, "comm_sms": self.comm_sms}


@dataclass(frozen=True)
class Recommendation:
    """What to pass for ``phase``, from the crossover of ``mode`` (the mode vLLM runs that phase in):
    ``enable`` (None for the toy), the token ``threshold`` (None unless enabled), the ``vllm`` and
    ``sglang`` lines (serve commands, one line each or several with ``#`` comment lines) and the main
    ``reason``; ``reasons``: the one-line reason of every swept mode; ``notes``: what each placeholder of
    the lines and each setting means; ``engines``: the engine release each line is for; ``memory``: what
    the memory model leaves of the answer (where DBO pays and fits, and the gain there; "" for the toy)."""

    phase: str
    mode: str
    enable: bool | None
    threshold: int | None
    vllm: str
    sglang: str
    reason: str
    reasons: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    engines: dict[str, str] = field(default_factory=dict)
    memory: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The JSON's ``recommendation`` (the per-mode reasons are its ``reasons``)."""
        keys = ("phase", "mode", "reason", "enable", "threshold", "vllm", "sglang")
        out = {k: getattr(self, k) for k in keys}
        return {**out, "notes": list(self.notes), "engines": dict(self.engines), "memory": self.memory}


_TOY_ORDER = ("phase", "mode", "enable", "threshold", "reason", "vllm", "sglang")
"""The toy's ``recommendation`` has always listed its keys in this order: kept, so that its --json is
the same, byte for byte."""


@dataclass(frozen=True)
class Prediction:
    """A prediction (module docstring). ``title``: the report's first line; ``model``: the model's
    name ("toy" for the toy); ``schedule``: "ll" or "ht"; ``what_if``: the factors applied;
    ``points``: every swept point in the order it ran; ``crossovers``: per mode, where DBO starts to
    pay (``Crossover.tokens`` None: nowhere in the sweep); ``best``: per mode, the best setting;
    ``sources`` and ``not_modelled``: what the prediction rests on and what it leaves out; ``kernels``
    (real models): ``{"source": "roofline" or "measured", "fallbacks": {op: why}}``, each op the
    measured source timed on the roofline instead, and why; ``overlaps`` (real models): the strategies
    compared, and ``overlap``: per mode, the runs of swept token counts over which one strategy is the
    fastest, ``[{"overlap", "from", "to"}]`` (``to`` None: to the largest swept count and beyond);
    ``precision`` (real models): the dtype of each part the prediction assumed (``weights``, ``experts``,
    ``dispatch``, ``combine``, ``kv_cache``; ``--weights``, ``--kv-cache-dtype``); ``checked`` (real
    models): how far a prediction of this kind has been checked
    (``demos.prediction.trust``)."""

    title: str
    model: str
    phase: str
    schedule: str
    points: tuple[SweptPoint, ...]
    crossovers: dict[str, Crossover]
    recommendation: Recommendation
    best: dict[str, Setting]
    sources: tuple[str, ...]
    gpu: str | None = None
    nodes: int | None = None
    gpus_per_node: int | None = None
    ep: int | None = None
    attention_tp: int | None = None
    context: int | None = None
    imbalance: float | str | None = None
    what_if: dict[str, float] = field(default_factory=dict)
    profile: str | None = None
    kernels: dict[str, Any] | None = None
    precision: dict[str, str] | None = None
    overlaps: tuple[str, ...] = ()
    overlap: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    not_modelled: tuple[str, ...] = NOT_MODELLED
    checked: str | None = None
    _sweep: Any = field(default=None, repr=False, compare=False)
    _results: tuple[Any, ...] = field(default=(), repr=False, compare=False)

    @property
    def is_toy(self) -> bool:
        """Whether this is the toy swept with a calibrated profile (``profile`` set)."""
        return self.profile is not None

    @property
    def modes(self) -> tuple[str, ...]:
        """The swept modes, in the order they ran."""
        return tuple(self.crossovers)

    def _setup(self) -> dict[str, Any]:
        if self.is_toy:
            keys = ("title", "model", "profile", "schedule", "phase")
        else:
            keys = ("title", "model", "gpu", "nodes", "gpus_per_node", "ep", "attention_tp", "phase", "context")
            keys += ("schedule",)
            keys += ("imbalance", "what_if", "precision", "kernels")
        out = {k: getattr(self, k) for k in keys}
        if "what_if" in out:
            out["what_if"] = dict(self.what_if)
        if out.get("precision") is not None:
            out["precision"] = dict(self.precision)
        if out.get("kernels") is not None:
            out["kernels"] = {"source": self.kernels["source"], "fallbacks": dict(self.kernels["fallbacks"])}
        return out

    def to_dict(self) -> dict[str, Any]:
        """Exactly the dict ``python -m demos.predict --json`` writes (docs/predict.md, "Outputs"); the
        command adds ``plot_path`` and ``trace_path`` when it wrote those files."""
        rec = self.recommendation.as_dict()
        if self.is_toy:
            rec = {k: rec[k] for k in _TOY_ORDER}
        return {
            **self._setup(),
            "points": [p.as_dict() for p in self.points],
            "crossover": {m: (None if c.tokens is None else c.as_dict()) for m, c in self.crossovers.items()},
            "reasons": dict(self.recommendation.reasons),
            "best": {m: b.as_dict() for m, b in self.best.items()},
            **({} if self.is_toy else {"overlaps": list(self.overlaps), "overlap": self._overlap()}),
            "recommendation": rec,
            "sources": list(self.sources),
            "not_modelled": list(self.not_modelled),
            **({} if self.is_toy else {"checked": self.checked}),
        }

    def _overlap(self) -> dict[str, list[dict[str, Any]]]:
        return {m: [dict(x) for x in ranges] for m, ranges in self.overlap.items()}

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
