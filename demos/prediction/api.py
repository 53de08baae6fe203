"""``predict(model, ...)``: the prediction ``python -m demos.predict`` prints, from Python.

Its keyword arguments are the command's flags, with underscores and the same defaults
(``--gpus-per-node`` is ``gpus_per_node``; the output flags are ``Prediction``'s ``to_dict``,
``write_csv``, ``write_plot`` and ``write_trace``). Every argument is checked before any work: a bad
one raises ``ConfigError`` (``demos.errors``), one line naming the keyword (``str(e)``; the command
renders the same error with the flag's spelling). The command calls this function and nothing else to
get its answer, so both give the same figures, byte for byte.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any, Callable, Sequence

from demos.errors import ConfigError, field_ref
from demos.prediction.answer import best_setting, crossover, memory_advice, overlap_ranges, reason_of, recommend
from demos.prediction.arguments import as_float, int_tuple, modes_of, overlap_names, ubatches_is_2, what_if_factors
from demos.prediction.engines import Deployment, ServedModel, served_model
from demos.prediction.outputs import point_record
from demos.prediction.result import ClusterSetup, Prediction, Setting, SweptPoint
from demos.prediction.sweep import DEFAULT_TOKENS, PointResult, Sweep, default_mode, run_sweep, sweep_kernels
from demos.prediction.trust import checked_line
from demos.prediction.workload import (
    WorkloadRun,
    check_workload,
    one_step_hint,
    run_workload,
    serving_command,
    verdict,
)
from demos.vocabulary import KernelSource, Mode, Phase, Schedule
from demos.zoo.attention import attention_kind
from demos.zoo.engine_allreduce import tp_collectives_source
from demos.zoo.loading import TOY, load_model, workload_for
from demos.zoo.memory import ServingLimits, memory_estimate, serving_limits
from demos.zoo.models import CompressedAttention, ModelSpec, SparseMLAAttention
from demos.zoo.rooflines import FITTED_WITH, family_fit, gpu_fit
from demos.zoo.workload import WORKLOAD_SCHEDULES

__all__ = ["TOY_TOKENS", "predict"]

TOY_TOKENS = (8, 32, 128, 512, 2048)
"""The toy's default tokens: the grid ``demos.validate`` runs on the CPU."""

Progress = Callable[[int, int, str], None]


def predict(
    model: str | os.PathLike | ModelSpec,
    *,
    gpu: Any = "h100",
    nodes: int = 1,
    gpus_per_node: int | None = None,
    ep: int | None = None,
    attention_tp: int = 1,
    moe_tp: int = 1,
    network: str = "ib",
    phase: str = Phase.DECODE,
    context: int = 2048,
    imbalance: float | str = "auto",
    comm_sms: int | Sequence[int] | None = None,
    schedule: str | None = None,
    tokens: int | Sequence[int] | None = None,
    ubatches: int | Sequence[int] = (2,),
    mode: str | None = None,
    what_if: Mapping[str, float] | Sequence[tuple[str, float]] | None = None,
    profile: Any = None,
    progress: Progress | None = None,
    kernels: str = KernelSource.ROOFLINE,
    weights: str | None = None,
    kv_cache_dtype: str | None = None,
    overlap: str | Sequence[str] | None = None,
    workload: Any = None,
    engine: str | None = None,
    requests: int | None = None,
) -> Prediction:
    """Sweep ``model`` on the cluster and answer whether DBO pays, from which tokens per GPU, and what
    to pass to vLLM and SGLang (docs/predict.md).

    ``model``: a preset name, a path to a HuggingFace config.json, a ``ModelSpec``, or "toy" (the toy
    MoE on ``profile``, a profile ``python -m demos.calibrate`` wrote, on validate's grid). ``gpu``: a
    GPU name (``demos.zoo.hardware.GPUS``: NVIDIA and AMD) or a ``GpuSpec``; ``gpus_per_node`` and ``ep``: None
    for the GPU's node and every GPU. ``attention_tp``: GPUs of one NVLink domain that run attention
    together (tensor parallel, heads / attention_tp heads each) before each runs the MoE on its share of
    their tokens; 1 (the default) is data-parallel attention (docs/clusters.md). ``moe_tp``: MoE tensor
    parallelism, every routed expert on every GPU at ``1 / moe_tp`` of its width, over one attention TP group
    that is the whole EP group (``moe_tp = attention_tp = ep``; the engines' TP MoE, no expert parallelism);
    1 (the default) shards the experts by EP. ``network``: the scale-out network, "ib" (the default), "roce",
    "efa" or "efa-gda" (docs/clusters.md, "Networks"). ``tokens``: the tokens
    per GPU to sweep, what each GPU's attention sees (the whole group's batch under attention TP; None:
    the phase's default); ``ubatches`` and ``comm_sms``: one value or a list to sweep; ``mode``: "graph",
    "eager", "both" or None (graph for decode, eager for prefill); ``imbalance``: a number >= 1, "auto" or
    "power-law"; ``what_if``: ``{knob: factor}`` (or pairs) with knobs link, rdma, nvlink, gemm, hbm, host and
    the overlap mechanisms ll_sm, tile, contention (0 turns one off; docs/predict.md). ``weights`` ("bf16",
    "fp8", "fp4") and ``kv_cache_dtype`` ("bf16", "fp8"): the precision, overriding the model's (None: as
    the config says; ``demos.zoo.models.with_precision``). ``overlap``: the strategies to compare, among
    "none", "dbo", "sbo" (one or a list; None: every one that applies, ``OVERLAPS``).
    ``kernels``: where kernel times come from, "roofline" (the curves fitted per GPU family) or
    "measured" (the tables, where they have the shape; needs the measured extra; docs/kernels.md).
    ``workload``: a serving workload, as a SPEC string (``"closed:64:1k:1k"``, ``"poisson:RATE:ISL:OSL"``,
    ``"trace:PATH"``) or a ``demos.serving.workloads.WorkloadSpec``: it is run through ``engine``'s
    scheduler and split rule ("vllm", the default, "sglang" or "trtllm"), ``requests`` measured (default
    ``DEFAULT_REQUESTS``), by ``demos.serving.api.simulate`` on the same model and cluster, and vLLM's
    line takes that run's best threshold (``demos.prediction.workload``; decode only).
    ``progress(done, total, what)`` is called after each point (and each 50 requests of a workload run).
    The toy takes ``profile``, ``phase``,
    ``mode``, ``schedule`` and ``tokens`` (default ``TOY_TOKENS``); it refuses ``gpus_per_node``, ``ep``,
    ``comm_sms``, ``what_if``, ``nodes`` and ``attention_tp`` other than 1 and ``ubatches`` other than 2,
    ``kernels`` other than "roofline", and does not read ``gpu``, ``context`` or ``imbalance``."""
    if progress is not None and not callable(progress):
        raise ConfigError(f"{field_ref('progress')} must be a callable (done, total, what) or None, got {progress!r}")
    modes = modes_of(mode, phase)
    phase = Phase(phase)
    if isinstance(model, str) and model == TOY:
        if isinstance(attention_tp, bool) or attention_tp != 1:
            raise ConfigError(f"{field_ref('attention_tp')} applies to real models, not to {field_ref('model')} toy")
        if isinstance(moe_tp, bool) or moe_tp != 1:
            raise ConfigError(f"{field_ref('moe_tp')} applies to real models, not to {field_ref('model')} toy")
        for name, value, unset in (
            ("kernels", kernels, KernelSource.ROOFLINE),
            ("weights", weights, None),
            ("kv_cache_dtype", kv_cache_dtype, None),
            ("overlap", overlap, None),
            ("workload", workload, None),
            ("engine", engine, None),
            ("requests", requests, None),
        ):
            if value != unset:
                raise ConfigError(f"{field_ref(name)} applies to real models, not to {field_ref('model')} toy")
        return _predict_toy(
            profile,
            phase=phase,
            modes=modes,
            tokens=tokens,
            schedule=schedule,
            real={"gpus_per_node": gpus_per_node, "ep": ep, "comm_sms": comm_sms},
            nodes=nodes,
            ubatches=ubatches,
            what_if=what_if,
            progress=progress,
        )
    if profile is not None:
        raise ConfigError(
            f"{field_ref('profile')} is the toy's calibrated device: use it with {field_ref('model')} toy"
        )
    asked = check_workload(workload, engine, requests)
    if asked is not None and phase != Phase.DECODE:
        raise ConfigError(
            f"{field_ref('workload')} searches vLLM's decode threshold over a serving run: it takes "
            f"{field_ref('phase')} decode, not {phase}"
        )
    spec = load_model(model)
    toks = int_tuple("tokens", tokens, DEFAULT_TOKENS[phase], "token count")
    ubs = int_tuple("ubatches", ubatches, (2,), "ubatch count")
    sms = (None,) if comm_sms is None else int_tuple("comm_sms", comm_sms, (None,), "SM count", low=None)
    base = workload_for(
        spec,
        gpu=gpu,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        ep=ep,
        phase=phase,
        context=context,
        imbalance=as_float(imbalance),
        comm_sms=sms[0],
        schedule=schedule,
        tokens=max(toks),
        ubatches=ubs[0],
        attention_tp=attention_tp,
        weights=weights,
        kv_cache_dtype=kv_cache_dtype,
        moe_tp=moe_tp,
        network=network,
    )
    sweep = Sweep(base, toks, modes, ubs, sms, what_if_factors(what_if), kernels, overlap_names(overlap))
    _check_fits(sweep)
    model_id, served = served_model(model, spec, base.spec)
    # the serving run takes the same model, cluster, precision and kernels (its defaults are predict's)
    args = dict(
        gpu=gpu,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        network=network,
        ep=ep,
        attention_tp=attention_tp,
        moe_tp=moe_tp,
        imbalance=as_float(imbalance),
        weights=weights,
        kv_cache_dtype=kv_cache_dtype,
        kernels=kernels,
    )
    ran, hint = None, one_step_hint(model, args)
    if asked is not None:  # before the sweep: the run's own checks come before any work too
        ran = run_workload(model, asked[0], engine=asked[1], requests=asked[2], args=args, progress=progress)
        if verdict(ran) is None:
            hint = (
                f"{serving_command(model, args, asked[0], asked[2])} (vLLM's rule; this run took {asked[1]}'s, "
                "which has no DBO threshold)"
            )
    return _predict_sweep(sweep, model_id, served, progress, ran, hint)


def _check_fits(sweep: Sweep) -> None:
    """One line, before any run, when the model fits nowhere: the step without DBO at the smallest swept
    count exceeds the GPU's usable HBM (workspace aside, which only adds)."""
    w = sweep.workload(min(sweep.tokens), 1, sweep.comm_sms[0])
    mem = memory_estimate(w)
    if not mem.fits_without_dbo:
        c = w.cluster
        raise ConfigError(
            f"{field_ref('model')} {w.spec.name} does not fit on {c.nodes} x {c.gpus_per_node} {w.gpu.name} at EP "
            f"{c.ep}: {mem.total_without_dbo / 1e9:.1f} GB per GPU at {w.tokens} tokens per GPU (weights "
            f"{mem.weights / 1e9:.1f} GB) against {mem.usable / 1e9:.1f} GB usable; use more GPUs (--nodes, --ep) "
            "or smaller weights (--weights)"
        )


def _limits(sweep: Sweep, results: Sequence[PointResult], best: dict[str, Setting]) -> ServingLimits:
    """The memory model's limits (``demos.zoo.memory.serving_limits``) at the best setting of the mode the
    lines are written for, its workspace as measured at that setting's largest swept count."""
    mode = default_mode(sweep.base.phase)
    mode = mode if mode in best else next(iter(best))
    ub, sms = best[mode].ubatches, best[mode].comm_sms
    top = max((r for r in results if (r.mode, r.ubatches, r.comm_sms) == (mode, ub, sms)), key=lambda r: r.tokens)
    return serving_limits(sweep.workload(top.tokens, ub, sms), top.point.slot_bytes, top.tokens)


def _sources(sweep: Sweep) -> tuple[str, ...]:
    w = sweep.base
    fit, family = gpu_fit(w.gpu), family_fit(w.gpu.family)  # the GPU's own curves, or its family's
    tp = (tp_collectives_source(fit.custom_all_reduce is not None),) if w.attention_tp > 1 else ()
    sparse = (
        "; the sparse attention's decode indexer on the curves fitted to its measured kernels (docs/models.md)"
        if isinstance(w.spec.attention, SparseMLAAttention)
        else ""
    )
    if isinstance(w.spec.attention, CompressedAttention):
        sparse = (
            "; DeepSeek-V4's attention core timed on the MLA curve and its prefill indexer's scores on the FP8 "
            "GEMM curve (extrapolations checked against its measured decode modules, docs/models.md)"
        )
    linear = getattr(w.spec.attention, "linear", None)
    kind = None if linear is None else attention_kind(linear).label
    tables = f"GEMM, MLA and {kind} tables" if kind else "GEMM and MLA tables"
    if w.spec.hc_mult > 1:
        tables = tables.replace(" and MLA", ", MLA and hyper-connection")
    on = " and ".join(fit.fitted_on)
    whose = on if fit is not family else f"{on}, the {w.gpu.family} family's"
    kernels = (
        f"kernel times: curves fitted to the measured {tables} of {whose} "
        f"({FITTED_WITH}; demos/zoo/rooflines.json, docs/kernels.md){sparse}"
    )
    if w.gpu.vendor == "amd":
        kernels = (
            f"kernel times: the {w.gpu.family} GEMM, MoE and one-node all-to-all curves fitted to AMD's measured "
            "tables (aiter's tuned GEMM and fused-MoE tables, MoRI's tuning tables; demos/zoo/vendor_data), the "
            "attention and other curves Hopper's over this GPU's datasheet (a guess: no AMD table measures them; "
            f"docs/kernels.md){sparse}"
        )
    a2a = {
        "efa": "all-to-all: UCCL-EP's p5en tables over EFA with CPU proxies, 5 fitted parameters (docs/clusters.md)",
        "efa-gda": "all-to-all: DeepEP V2's p6-b200 tables over EFA, GPU-initiated, 3 fitted parameters "
        "(docs/clusters.md)",
    }.get(w.cluster.network)
    if a2a is None:
        a2a = (
            "all-to-all: MoRI's MI355X tuning tables, 5 fitted parameters (docs/clusters.md)"
            if w.gpu.vendor == "amd"
            else "all-to-all: DeepEP's H800 tables, 4 fitted parameters (docs/clusters.md)"
        )
    return tp + (
        f"model: {w.spec.source}",
        f"GPU {w.gpu.name}: {w.gpu.source}",
        kernels,
        a2a,
        "host: per-launch, handoff and sync costs measured on our H200 host (docs/fidelity.md)",
    )


def _predict_sweep(
    sweep: Sweep,
    model_id: str | None,
    served: ServedModel,
    progress: Progress | None,
    ran: WorkloadRun | None = None,
    hint: str = "",
) -> Prediction:
    """Run the checked ``sweep``: the points, then the crossover, reason, best setting, strategy runs and
    memory advice of each mode (each from the points of its best setting); ``ran``: the workload's serving
    run, whose verdict vLLM's line takes; ``hint``: the serving run to suggest where none was run (or where
    it ran another engine's rule)."""
    kt = sweep_kernels(sweep)
    results = run_sweep(sweep, progress, kt)
    w = sweep.base
    c, pr = w.cluster, w.spec.precision
    points = tuple(SweptPoint(**point_record(r, c.gpus_per_node, sweep.overlaps)) for r in results)
    cross, reasons, best, ranges, memory = {}, {}, {}, {}, {}
    for mode in sweep.modes:
        ub, sms = best_setting(results, mode)
        best[mode] = Setting(ub, sms)
        pts = [r for r in results if (r.mode, r.ubatches, r.comm_sms) == (mode, ub, sms)]
        cross[mode] = crossover(pts)
        reasons[mode] = reason_of(pts, cross[mode])
        records = [p.as_dict() for p in points if (p.mode, p.ubatches, p.comm_sms) == (mode, ub, sms)]
        ranges[mode] = overlap_ranges(records)
        memory[mode] = memory_advice(records, cross[mode])
    deployment = Deployment.of(w, model_id, served=served, limits=_limits(sweep, results, best))
    said = None if ran is None else verdict(ran)
    rec = recommend(
        deployment, cross, reasons, default_mode=default_mode(w.phase), memory=memory, workload=said, serving=hint
    )
    what = ", ".join(f"{k} x{v:g}" for k, v in sweep.what_if.items())
    return Prediction(
        title=f"{w.spec.name} {w.phase} on {c.nodes} x {c.gpus_per_node} {w.gpu.name}"
        + ("" if c.network == "ib" else f" over {c.network}")
        + f", EP {c.ep}"
        + (f", attention TP {w.attention_tp}" if w.attention_tp > 1 else "")
        + (f", MoE TP {w.moe_tp}" if w.moe_tp > 1 else "")
        + f", context {w.context}, imbalance {w.imbalance}"
        + (f", what-if {what}" if what else "")
        + f"; weights {pr.weights}, experts {pr.experts}, KV cache {pr.kv_cache}",
        model=w.spec.name,
        phase=w.phase,
        schedule=w.schedule,
        setup=ClusterSetup(
            gpu=w.gpu.name,
            nodes=c.nodes,
            gpus_per_node=c.gpus_per_node,
            ep=c.ep,
            attention_tp=w.attention_tp,
            moe_tp=w.moe_tp,
            context=w.context,
            imbalance=w.imbalance,
            what_if=dict(sweep.what_if),
            precision=dict(dataclasses.asdict(pr)),
            kernels={"source": kt.source, "fallbacks": dict(kt.fallbacks)},
            overlaps=tuple(sweep.overlaps),
            overlap=ranges,
            checked=checked_line(w.gpu.name.rstrip("*"), w.gpu.family, w.phase),
            network=c.network,
        ),
        points=points,
        crossovers=cross,
        recommendation=rec,
        best=best,
        sources=_sources(sweep),
        workload=ran,
        _sweep=sweep,
        _results=tuple(results),
    )


def _predict_toy(
    profile: Any,
    *,
    phase: str,
    modes: tuple[str, ...],
    tokens: Any,
    schedule: Any,
    real: dict[str, Any],
    nodes: Any,
    ubatches: Any,
    what_if: Any,
    progress: Progress | None,
) -> Prediction:
    """``predict("toy", profile=...)``: the checks of the toy's arguments, then ``demos.prediction.toy``."""
    from dbo.costs import get_profile

    if profile is None:
        raise ConfigError(
            f"{field_ref('model')} toy needs {field_ref('profile')} PATH.json "
            "(a profile python -m demos.calibrate wrote)"
        )
    for name, value in real.items():
        if value is not None:
            raise ConfigError(f"{field_ref(name)} describes a real cluster; the toy runs on {field_ref('profile')}")
    for name, unset in (("what_if", not what_if), ("nodes", nodes == 1), ("ubatches", ubatches_is_2(ubatches))):
        if not unset:
            raise ConfigError(f"{field_ref(name)} applies to real models, not to {field_ref('model')} toy")
    from demos.prediction.toy import toy_prediction  # imports demos.toy, which registers its "h200" profile

    try:
        device = get_profile(profile)
    except (ValueError, TypeError, OSError) as e:
        raise ConfigError(f"{field_ref('profile')} {profile}: {e}") from None
    sched = schedule or Schedule.LL
    if sched not in WORKLOAD_SCHEDULES:
        raise ConfigError(f"{field_ref('schedule')} must be one of {', '.join(WORKLOAD_SCHEDULES)}, got {sched!r}")
    sched = Schedule(sched)
    if sched == Schedule.HT and Mode.GRAPH in modes:
        raise ConfigError(
            f"{field_ref('mode')} graph: the toy's ht schedule cannot be captured (its host sync); "
            f"use {field_ref('mode')} eager"
        )
    toks = int_tuple("tokens", tokens, TOY_TOKENS, "token count")
    named = profile if isinstance(profile, (str, os.PathLike)) else device.name
    return toy_prediction(device, os.fspath(named), toks, sched, modes, phase, progress)
