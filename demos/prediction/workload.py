"""``predict(..., workload=SPEC)``: the serving run beside the one-step sweep (docs/predict.md, "A
workload").

Without a workload the threshold the vLLM line sets is the crossover of one forward step, and the answer
says so (``Recommendation.threshold_basis`` "one_step", with the ``python -m demos.serving`` line that
would decide it per step: ``serving_command``). With one, ``run_workload`` runs
``demos.serving.api.simulate`` (the serving package's one run: nothing of it is copied here) with
predict's model, cluster, precision and kernel arguments, and ``verdict`` reads its ``best``: the vLLM
line then takes the run's best decode threshold by throughput, or stays without DBO where DBO at that
threshold served fewer output tokens per second than the run without.

This is the one module of ``demos.prediction`` that imports ``demos.serving`` (docs/design.md,
"Packages"); ``demos.serving.api`` is imported inside ``run_workload``, since it imports
``demos.prediction.engines`` and so this package's ``__init__``.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from typing import Any, Callable

from demos.errors import ConfigError, field_ref
from demos.prediction.answer import MARGINAL, WorkloadVerdict
from demos.serving.workloads import WorkloadSpec
from demos.vocabulary import Overlap

__all__ = [
    "DEFAULT_REQUESTS",
    "ENGINES",
    "SERVING",
    "WorkloadRun",
    "check_workload",
    "one_step_hint",
    "run_workload",
    "serving_command",
    "verdict",
]

SERVING = "python -m demos.serving"
DEFAULT_REQUESTS = 100
"""The requests a workload run measures when ``requests`` is not given: a few seconds of simulation on a
small deployment (``python -m demos.serving``'s own default is 1000)."""
ENGINES = ("vllm", "sglang", "trtllm")
"""The engines whose scheduler and split rule a workload run can take (``demos.serving.api.ENGINES``)."""
DEFAULTS: dict[str, Any] = {
    "engine": "vllm",
    "gpu": "h100",
    "nodes": 1,
    "gpus_per_node": None,
    "network": "ib",
    "ep": None,
    "attention_tp": 1,
    "moe_tp": 1,
    "imbalance": "auto",
    "weights": None,
    "kv_cache_dtype": None,
    "kernels": "roofline",
}
"""``python -m demos.serving``'s defaults for the arguments a prediction passes on: a flag left at its
default is left out of the printed line."""
ARRIVALS = {"concurrency", "isl", "osl", "rate", "trace", "trace_format", "warmup"}
"""``simulate``'s arguments that a SPEC sets: an error naming one is the workload's."""
PLACEHOLDER = ["--concurrency", "<C>", "--isl", "<ISL>", "--osl", "<OSL>"]


@dataclass(frozen=True)
class WorkloadRun:
    """A prediction's serving run: ``spec`` (the workload asked), ``command`` (the ``python -m
    demos.serving`` line that runs it again) and ``run`` (``demos.serving.api.ServingRun``).
    ``as_dict()`` is the JSON's ``workload``: ``spec``, ``command`` and the serving run's own JSON
    (``runs``, ``best``, ... as ``python -m demos.serving --json`` writes them)."""

    spec: WorkloadSpec
    command: str
    run: Any

    def as_dict(self) -> dict[str, Any]:
        return {"spec": str(self.spec), "command": self.command, **self.run.to_dict()}


def check_workload(workload: Any, engine: Any, requests: Any) -> tuple[WorkloadSpec, str, int] | None:
    """``workload`` (a SPEC or a ``WorkloadSpec``), ``engine`` and ``requests``, checked before any work:
    the spec, the engine and the requests to run, or None without a workload (``engine`` and ``requests``
    then refused: they only shape a workload run). Bad input is one ``ConfigError`` naming its argument."""
    if workload is None:
        for name, value in (("engine", engine), ("requests", requests)):
            if value is not None:
                raise ConfigError(f"{field_ref(name)} shapes a workload run: give {field_ref('workload')} too")
        return None
    if isinstance(workload, WorkloadSpec):
        spec = workload
    else:
        try:
            spec = WorkloadSpec.parse(workload)
        except ValueError as e:
            raise ConfigError(f"{field_ref('workload')}: {e}") from None
    engine = DEFAULTS["engine"] if engine is None else engine
    if engine not in ENGINES:
        raise ConfigError(f"{field_ref('engine')} must be one of {', '.join(ENGINES)}, got {engine!r}")
    n = DEFAULT_REQUESTS if requests is None else requests
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"{field_ref('requests')} must be a positive integer, got {requests!r}")
    return spec, engine, n


def _model_arg(model: Any) -> str:
    """``model`` as ``--model`` takes it: the name or path given, a ``ModelSpec`` by its name."""
    if isinstance(model, (str, os.PathLike)):
        return os.fspath(model)
    return getattr(model, "name", str(model))


def _value(name: str, value: Any) -> str:
    if name == "gpu":
        return (value if isinstance(value, str) else value.name).lower()
    return f"{value:g}" if isinstance(value, float) else str(value)


def serving_command(model: Any, args: dict[str, Any], spec: WorkloadSpec | None, requests: int | None) -> str:
    """The ``python -m demos.serving`` line of the same model and ``args`` (the cluster, precision and
    kernel arguments the prediction took, and the engine), each left out at serving's default; the
    workload's flags, or ``<C>``, ``<ISL>`` and ``<OSL>`` placeholders without one."""
    words = [*SERVING.split(), "--model", _model_arg(model)]
    for name, value in args.items():
        if value != DEFAULTS[name] and not (name == "gpu" and _value(name, value) == DEFAULTS[name]):
            words += [f"--{name.replace('_', '-')}", _value(name, value)]
    words += PLACEHOLDER if spec is None else spec.flags()
    if requests is not None:
        words += ["--requests", str(requests)]
    return " ".join(w if w in PLACEHOLDER else shlex.quote(w) for w in words)


def one_step_hint(model: Any, args: dict[str, Any]) -> str:
    """What ``basis`` says to run where the answer rests on one step: the serving line with placeholders,
    or ``--workload`` on this command."""
    return f"{serving_command(model, args, None, None)}, or this prediction with --workload closed:<C>:<ISL>:<OSL>"


def run_workload(
    model: Any,
    spec: WorkloadSpec,
    *,
    engine: str,
    requests: int,
    args: dict[str, Any],
    progress: Callable[[int, int, str], None] | None = None,
) -> WorkloadRun:
    """``demos.serving.api.simulate`` of ``spec`` with ``engine``'s scheduler and split rule on the same
    model and ``args`` (predict's gpu, nodes, gpus_per_node, ep, attention_tp, imbalance, weights,
    kv_cache_dtype, kernels), ``requests`` measured; every overlap the engine has for the model, and for
    vLLM the search of its best decode threshold. Its checks are ``simulate``'s (one ``ConfigError``)."""
    from demos.serving.api import simulate  # here: demos.serving.api imports demos.prediction.engines

    tick = None if progress is None else (lambda d, t, w: progress(d, t, f"serving run, {w}"))
    try:
        run = simulate(model, engine=engine, requests=requests, progress=tick, **args, **spec.arrivals())
    except ConfigError as e:
        if set(e.fields) & ARRIVALS:  # serving's own names for the arrivals are not this command's flags
            said = str(e).removeprefix(f"trace {spec.trace}: ")  # the trace's path is the spec's
            raise ConfigError(f"{field_ref('workload')} {spec}: {said}") from None
        raise
    cluster = {k: v for k, v in args.items() if k != "engine"}
    return WorkloadRun(spec, serving_command(model, {"engine": engine, **cluster}, spec, requests), run)


def verdict(w: WorkloadRun) -> WorkloadVerdict | None:
    """What ``w``'s run says of vLLM's DBO (``WorkloadVerdict``): its best decode threshold by throughput,
    and whether DBO at it served more output tokens per second than without (a gain below
    ``demos.prediction.answer.MARGINAL`` is called marginal, as the memory line calls one); None where the
    run has no threshold search (another engine's rule)."""
    run, best = w.run, w.run.best
    none = next((r for r in run.runs if r.overlap == Overlap.NONE), None)
    if not best or none is None:
        return None
    top = best["by_throughput"]
    t, tok, base = top["decode_threshold"], top["output_tokens_per_s"], none.output_tokens_per_s
    gain = tok / base - 1 if base > 0 else 0.0
    enable = tok > base
    head = (
        f"the serving run of {w.spec} ({run.engine}'s rule, {run.runs[0].requests} requests): DBO at "
        f"--dbo-decode-token-threshold {t}, its best by throughput, serves {tok:,.0f} output tok/s against "
        f"{base:,.0f} without ({gain:+.1%}{', marginal' if 0 < gain < MARGINAL - 1 else ''})"
    )
    return WorkloadVerdict(t, enable, head if enable else f"{head}: DBO does not pay for this workload")
