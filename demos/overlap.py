"""``python -m demos.overlap``: the toy MoE model with and without DBO, and what the overlap buys.

A run: build the model (demos.model) over a modelled link (demos.comm); warm up without and with
DBO (the workspace grows); lock the workspace; calibrate the link (``--comm-ratio``); time
``--steps`` steps without DBO (``UBatchOrchestrator(num_ubatches=1)``), then ``--steps`` steps
with DBO (``num_ubatches=--ubatches``); compare the outputs; report. docs/overlap.md explains
every line of the report.

``run_overlap(OverlapConfig(...))`` does the same from Python and returns the report as a dict
(the keys ``--json`` writes); ``format_report(report)`` renders it as text.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import torch

import dbo
import workspace
from dbo.costs import get_link, get_profile
from dbo.trace import Tracer

from .comm import TRANSFER_OPS, ModelledLinkTransport
from .model import SCHEDULES, YIELDS_PER_LAYER, ModelConfig, ToyMoE, parse_kernel_name
from .timeline import engine_sums, fmt_seconds, layer_window, overlap_seconds, plot_timeline, render_ascii

__all__ = ["OverlapConfig", "ConfigError", "run_overlap", "format_report", "main", "build_parser", "TOLERANCE"]

BACKEND_CHOICES = ("auto", "threads", "virtual", "cuda")
TOLERANCE = {"float32": 1e-5, "float64": 1e-12, "bfloat16": 1e-2, "float16": 1e-3}
"""Largest allowed max|DBO - no DBO| relative to max|no DBO| per dtype (the run prints it)."""
META_AUTO_BYTES = 1 << 30  # virtual: weights above 1 GiB -> meta tensors (math skipped)
REAL_LIMIT_BYTES = 4 << 30  # other backends: refuse weights above 4 GiB


class ConfigError(ValueError):
    """A bad option; its message is one line saying which and why."""


@dataclass
class OverlapConfig:
    """Everything ``python -m demos.overlap`` takes (see ``--help`` for each field)."""

    backend: str = "auto"
    schedule: str = "ht"
    layers: int = 8
    tokens: int = 512
    hidden: int = 384
    experts: int = 8
    topk: int = 2
    ubatches: int = 2
    expert_ffn: int | None = None
    shared_ffn: int | None = None
    context: int | None = None
    shared_chunk: int = 256
    ep: int | None = None
    comm_ratio: float | None = None
    link: str | None = None
    profile: str | None = None
    meta: bool | None = None
    dtype: str = "auto"
    steps: int = 5
    warmup: int = 1
    seed: int = 0
    torch_threads: int | None = None
    stream_layout: str = "shared"
    timeline_width: int = 72
    json_path: str | None = None
    trace_path: str | None = None
    plot_path: str | None = None


@dataclass
class _Resolved:
    backend: str
    profile: str
    link: str
    comm_ratio: float | None
    meta: bool
    dtype: torch.dtype
    ep: int
    model: ModelConfig
    torch_threads: int | None = None
    notes: list[str] = field(default_factory=list)


def _positive_int(name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ConfigError(f"--{name.replace('_', '-')} must be a positive integer, got {v!r}")
    return v


def resolve(cfg: OverlapConfig) -> _Resolved:
    """Check ``cfg`` and fill in the automatic choices; ConfigError (one line) on a bad option."""
    if cfg.backend not in BACKEND_CHOICES:
        raise ConfigError(f"unknown backend {cfg.backend!r}; choose one of {', '.join(BACKEND_CHOICES)}")
    if cfg.schedule not in SCHEDULES:
        raise ConfigError(f"unknown schedule {cfg.schedule!r}; choose one of {', '.join(SCHEDULES)}")
    for name in ("layers", "tokens", "hidden", "experts", "topk", "ubatches", "steps", "shared_chunk", "timeline_width"):
        _positive_int(name, getattr(cfg, name))
    for name in ("expert_ffn", "shared_ffn", "context", "ep", "torch_threads"):
        if getattr(cfg, name) is not None:
            _positive_int(name, getattr(cfg, name))
    if isinstance(cfg.warmup, bool) or not isinstance(cfg.warmup, int) or cfg.warmup < 1:
        raise ConfigError(f"--warmup must be a positive integer, got {cfg.warmup!r}")
    if cfg.topk > cfg.experts:
        raise ConfigError(f"--topk ({cfg.topk}) must not exceed --experts ({cfg.experts})")
    if cfg.tokens < cfg.ubatches:
        raise ConfigError(
            f"--tokens ({cfg.tokens}) is fewer than --ubatches ({cfg.ubatches}): every ubatch needs at least one token"
        )
    if cfg.comm_ratio is not None:
        r = cfg.comm_ratio
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r) or r <= 0:
            raise ConfigError(f"--comm-ratio must be a positive number, got {r!r}")
    if cfg.stream_layout not in dbo.STREAM_LAYOUTS:
        raise ConfigError(f"unknown stream layout {cfg.stream_layout!r}; choose one of {', '.join(dbo.STREAM_LAYOUTS)}")
    for kind, name, getter in (("profile", cfg.profile, get_profile), ("link", cfg.link, get_link)):
        if name is not None:
            try:
                getter(name)
            except (ValueError, TypeError) as e:
                raise ConfigError(f"--{kind}: {e}") from None
    backend = cfg.backend
    if backend == "auto":
        backend = "cuda" if torch.cuda.is_available() else "threads"
    elif backend == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--backend cuda needs a CUDA GPU, and torch.cuda.is_available() is False here; use threads or virtual")
    if cfg.dtype not in ("auto", "float32", "bfloat16", "float16", "float64"):
        raise ConfigError(f"unknown dtype {cfg.dtype!r}; choose auto, float32, bfloat16, float16 or float64")
    ep = cfg.ep if cfg.ep is not None else max(1, cfg.experts // 8)
    probe = ModelConfig(
        layers=cfg.layers, tokens=cfg.tokens, hidden=cfg.hidden, experts=cfg.experts, topk=cfg.topk,
        expert_ffn=cfg.expert_ffn, shared_ffn=cfg.shared_ffn, context=cfg.context, shared_chunk=cfg.shared_chunk,
        ep=ep, seed=cfg.seed,
        dtype=torch.float32 if cfg.dtype == "auto" else getattr(torch, cfg.dtype),
    )
    try:
        probe.validate()
    except ValueError as e:
        raise ConfigError(str(e)) from None
    notes = []
    big = probe.weight_bytes()
    if cfg.meta and backend != "virtual":
        raise ConfigError("--meta skips the math, which only the virtual backend can time; add --backend virtual")
    if cfg.meta is None:
        meta = backend == "virtual" and big > META_AUTO_BYTES
        if meta:
            notes.append(f"the weights would take {big / 2**30:.0f} GiB in float32: meta tensors, math skipped")
    else:
        meta = bool(cfg.meta)
    if not meta and big > REAL_LIMIT_BYTES:
        raise ConfigError(
            f"this model needs {big / 2**30:.1f} GiB of weights; simulate it with --backend virtual (meta tensors)"
        )
    if cfg.dtype == "auto":
        dtype = torch.bfloat16 if meta else torch.float32
    else:
        dtype = getattr(torch, cfg.dtype)
    comm_ratio = cfg.comm_ratio if cfg.comm_ratio is not None else (None if cfg.link is not None else 1.0)
    device = "meta" if meta else ("cuda" if backend == "cuda" else "cpu")
    model = ModelConfig(
        layers=cfg.layers, tokens=cfg.tokens, hidden=cfg.hidden, experts=cfg.experts, topk=cfg.topk,
        expert_ffn=cfg.expert_ffn, shared_ffn=cfg.shared_ffn, context=cfg.context, shared_chunk=cfg.shared_chunk,
        ep=ep, dtype=dtype, device=device, seed=cfg.seed,
    ).resolved()
    threads = cfg.torch_threads if cfg.torch_threads is not None else (1 if backend in ("threads", "virtual") else None)
    return _Resolved(
        backend=backend,
        profile=cfg.profile or ("h200" if backend == "cuda" else "cpu"),
        link=cfg.link or "nvlink",
        comm_ratio=comm_ratio,
        meta=meta,
        dtype=dtype,
        ep=ep,
        model=model,
        torch_threads=threads,
        notes=notes,
    )


# --- the run -------------------------------------------------------------------------------------


class _Runner:
    def __init__(self, cfg: OverlapConfig, res: _Resolved):
        self.cfg, self.res = cfg, res
        self.tracer = Tracer(enabled=True)
        self.orchestrators: list = []
        self.backend = dbo.get_backend(res.backend, profile=res.profile, link=res.link, tracer=None)
        try:
            self.transport = ModelledLinkTransport(res.link)
            self.manager = workspace.init_workspace_manager(res.model.device, num_ubatches=cfg.ubatches)
            self.model = ToyMoE(res.model, self.transport, num_slots=cfg.ubatches, schedule=cfg.schedule)
            # the DBO orchestrator first, so that its streams get the plain names ("compute", "comm")
            self.orch_n = dbo.UBatchOrchestrator(cfg.ubatches, backend=self.backend, stream_layout=cfg.stream_layout)
            self.orchestrators.append(self.orch_n)
            self.orch1 = dbo.UBatchOrchestrator(1, backend=self.backend, stream_layout=cfg.stream_layout)
            self.orchestrators.append(self.orch1)
        except BaseException:
            self.close()
            raise
        self.full = [range(0, cfg.tokens)]
        self.split = dbo.split_tokens(cfg.tokens, cfg.ubatches)

    def close(self) -> None:
        for o in self.orchestrators:
            o.close()
        self.backend.close()

    def step(self, dbo_on: bool, traced: bool) -> tuple[float, list]:
        """One step; returns (seconds on the backend clock, its kernel records if traced)."""
        orch, inputs = (self.orch_n, self.split) if dbo_on else (self.orch1, self.full)
        self.backend.tracer = self.tracer if traced else None
        first = len(self.tracer.records)
        t0 = self.backend.now()
        orch.run(self.model.forward, inputs)
        t1 = self.backend.now()
        self.backend.tracer = None
        return t1 - t0, (self.tracer.records[first:] if traced else [])

    def calibrate(self, ratio: float) -> dict:
        """Scale the link bandwidth so that the no-DBO step's comm time is ``ratio`` x its compute.

        Measures a no-DBO step's compute C, its transfers (modelled part and measured overhead:
        copies, sleep slack) and its other comm kernels; then picks the bandwidth that makes the
        comm total ``ratio * C``. Off virtual, a second round with the new link (median of 3
        steps) corrects for overheads that depend on the transfer times.
        """
        tr = self.transport
        rounds = [1] if self.res.backend == "virtual" else [1, 3]
        for steps in rounds:
            samples = []
            for _ in range(steps):
                tr.log.clear()
                tr.logging = True
                _, recs = self.step(False, traced=True)
                tr.logging = False
                samples.append(
                    (
                        sum(r.duration for r in recs if r.kind == "compute"),
                        sum(r.duration for r in recs if r.kind == "comm" and _op(r) in TRANSFER_OPS),
                        sum(r.duration for r in recs if r.kind == "comm" and _op(r) not in TRANSFER_OPS),
                    )
                )
            compute, transfers, other_comm = (statistics.median(x[i] for x in samples) for i in range(3))
            nbytes = sum(b for _, b, _ in tr.log)
            modelled = sum(s for _, _, s in tr.log)
            overhead = max(0.0, transfers - modelled)
            budget = ratio * compute - other_comm - overhead - len(tr.log) * tr.link.latency
            if nbytes == 0:
                raise ConfigError("--comm-ratio: the model made no transfers to calibrate")
            if budget <= 0:
                raise ConfigError(
                    f"--comm-ratio {ratio:g} is too small: the link's latency and fixed costs alone exceed "
                    f"{ratio:g} x the compute time ({fmt_seconds(compute)} per step)"
                )
            tr.scale_bandwidth(nbytes / budget / tr.base_link.bandwidth)
        self.tracer.clear()
        return {"target_ratio": ratio, "bandwidth_factor": tr.link.bandwidth / tr.base_link.bandwidth, "steps": sum(rounds)}


def _op(rec) -> str | None:
    p = parse_kernel_name(rec.name)
    return p[0] if p else None


def run_overlap(config: OverlapConfig | None = None, *, details: dict | None = None, **overrides: Any) -> dict:
    """Run the demo and return the report (see docs/overlap.md). ``overrides`` replace fields of
    ``config``. Raises ConfigError for a bad option. Writes ``json_path`` / ``trace_path`` /
    ``plot_path`` when set.

    ``details``: a dict to receive what the report summarises: ``records_no_dbo`` and
    ``records_dbo`` (the kernel records of the last timed step of each kind) and ``window``
    (the timeline's layer window).
    """
    cfg = config if config is not None else OverlapConfig()
    if overrides:
        cfg = OverlapConfig(**{**asdict(cfg), **overrides})
    res = resolve(cfg)
    wall0 = time.perf_counter()
    old_threads = torch.get_num_threads()
    if res.torch_threads is not None:
        torch.set_num_threads(res.torch_threads)
    runner = None
    try:
        runner = _Runner(cfg, res)
        report = _run(runner, cfg, res, details if details is not None else {})
    finally:
        if runner is not None:
            runner.close()
        workspace.reset_workspace_manager()
        torch.set_num_threads(old_threads)
    report["wall_s"] = time.perf_counter() - wall0
    if cfg.json_path:
        with open(cfg.json_path, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
    return report


def _run(r: _Runner, cfg: OverlapConfig, res: _Resolved, details: dict) -> dict:
    m = r.manager
    # 1. warmup: the workspace grows to the largest request (no DBO: all tokens in slot 0)
    for _ in range(cfg.warmup):
        r.step(False, traced=False)
        r.step(True, traced=False)
    warm = m.stats()
    m.lock()
    allocations_at_lock = m.stats()["allocations"]
    # 2. calibrate the link
    calibration = r.calibrate(res.comm_ratio) if res.comm_ratio is not None else None
    # 3. timed steps without DBO, then with DBO
    t_no, recs_no = [], []
    for _ in range(cfg.steps):
        s, recs = r.step(False, traced=True)
        t_no.append(s)
        recs_no.append(recs)
    ref = None if res.meta else r.model.hidden.detach().to("cpu", copy=True)
    t_dbo, recs_dbo = [], []
    for _ in range(cfg.steps):
        s, recs = r.step(True, traced=True)
        t_dbo.append(s)
        recs_dbo.append(recs)
    out = None if res.meta else r.model.hidden.detach().to("cpu", copy=True)
    stats = m.stats()
    slot_sizes = m.slot_sizes()

    # 4. figures
    time_no, time_dbo = statistics.median(t_no), statistics.median(t_dbo)
    sums = [engine_sums(x) for x in recs_no]
    compute_s = statistics.median(s["compute"] for s in sums)
    comm_s = statistics.median(s["comm"] for s in sums)
    overlapped_s = statistics.median(overlap_seconds(x) for x in recs_no)
    hideable = max(0.0, min(compute_s, comm_s) - overlapped_s)
    bound = time_no - hideable
    hidden_fraction = (time_no - time_dbo) / hideable if hideable > 0 else None
    dbo_sums = engine_sums(recs_dbo[-1])
    if ref is None:
        max_abs_diff = ref_max = None
        passed = None
    else:
        diff = (out.to(torch.float64) - ref.to(torch.float64)).abs()
        max_abs_diff = float(diff.max().item()) if diff.numel() else 0.0
        ref_max = float(ref.abs().max().item()) if ref.numel() else 0.0
        nonfinite = not (torch.isfinite(out).all().item() and torch.isfinite(ref).all().item())
    dtype_name = str(res.dtype).replace("torch.", "")
    rtol = TOLERANCE.get(dtype_name, 1e-2)
    tol_abs = None if ref_max is None else rtol * max(ref_max, 1.0)
    if ref is not None:
        passed = (not nonfinite) and max_abs_diff <= tol_abs
    window = layer_window(recs_dbo[-1], cfg.layers)
    details.update(records_no_dbo=list(recs_no[-1]), records_dbo=list(recs_dbo[-1]), window=window)
    timeline = render_ascii(recs_dbo[-1], window, width=cfg.timeline_width)
    link = r.transport.describe()

    report: dict[str, Any] = {
        "backend": res.backend,
        "schedule": cfg.schedule,
        "num_ubatches": cfg.ubatches,
        "time_no_dbo_s": time_no,
        "time_dbo_s": time_dbo,
        "speedup": time_no / time_dbo if time_dbo > 0 else None,
        "bound_s": bound,
        "hidden_fraction": hidden_fraction,
        "max_abs_diff": max_abs_diff,
        "allocations_after_lock": stats["allocations"] - allocations_at_lock,
        "slot_sizes": slot_sizes,
        "config": {
            "backend": res.backend,
            "schedule": cfg.schedule,
            "yields_per_layer": YIELDS_PER_LAYER[cfg.schedule],
            "layers": cfg.layers,
            "tokens": cfg.tokens,
            "hidden": cfg.hidden,
            "experts": cfg.experts,
            "topk": cfg.topk,
            "ubatches": cfg.ubatches,
            "expert_ffn": res.model.expert_ffn,
            "shared_ffn": res.model.shared_ffn,
            "context": res.model.context,
            "heads": res.model.heads,
            "shared_chunk": cfg.shared_chunk,
            "ep": res.ep,
            "dtype": dtype_name,
            "meta": res.meta,
            "profile": res.profile,
            "link": res.link,
            "comm_ratio": res.comm_ratio,
            "steps": cfg.steps,
            "warmup": cfg.warmup,
            "seed": cfg.seed,
            "torch_threads": torch.get_num_threads(),
            "stream_layout": cfg.stream_layout,
        },
        "link": link,
        "calibration": calibration,
        "compute_s": compute_s,
        "comm_s": comm_s,
        "comm_ratio_measured": comm_s / compute_s if compute_s > 0 else None,
        "hideable_s": hideable,
        "overlapped_no_dbo_s": overlapped_s,
        "compute_dbo_s": dbo_sums["compute"],
        "comm_dbo_s": dbo_sums["comm"],
        "times_no_dbo_s": t_no,
        "times_dbo_s": t_dbo,
        "tolerance": {"relative": rtol, "absolute": tol_abs, "dtype": dtype_name},
        "outputs_match": passed,
        "max_abs_ref": ref_max,
        "workspace": {
            "slot_sizes": slot_sizes,
            "grows": stats["grows"],
            "grows_in_warmup": warm["grows"],
            "allocations": stats["allocations"],
            "allocations_after_lock": stats["allocations"] - allocations_at_lock,
            "manager_allocations_after_lock": stats["allocations_after_lock"],
            "locked": stats["locked"],
        },
        "timeline_layer": window.layer,
        "timeline": timeline,
        "notes": list(res.notes),
    }
    if cfg.trace_path:
        _write_trace(r, res, recs_no[-1], recs_dbo[-1], cfg.trace_path)
        report["trace_path"] = cfg.trace_path
    if cfg.plot_path:
        msg = plot_timeline(
            recs_dbo[-1], window, cfg.plot_path,
            f"DBO ({cfg.schedule}, {cfg.ubatches} ubatches, {res.backend}): layer {window.layer}",
        )
        if msg is None:
            report["plot_path"] = cfg.plot_path
        else:
            report["notes"].append(msg)
            report["plot_error"] = msg
    return report


def _write_trace(r: _Runner, res: _Resolved, recs_no: list, recs_dbo: list, path: str) -> None:
    """The last no-DBO step and the last DBO step as a Chrome trace. Off virtual, also the host
    spans and handoffs of that stretch (on virtual the host clock stands still during a step)."""
    out = Tracer()
    for rec in list(recs_no) + list(recs_dbo):
        out.kernel(rec.stream, rec.name, rec.kind, rec.ubatch, rec.start, rec.end)
    if res.backend != "virtual":
        lo = min(x.start for x in recs_no)
        hi = max(x.end for x in recs_dbo)
        for s in r.tracer.spans:
            if s.start >= lo and s.end <= hi:
                out.span(s.track, s.name, s.start, s.end, **s.args)
        for h in r.tracer.handoffs:
            if lo <= h.t_src <= hi:
                out.handoff(h.src, h.dst, h.t_src, h.t_dst)
    out.to_chrome(path)


# --- text report ---------------------------------------------------------------------------------


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:.1f}%"


def _mb(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"


def format_report(rep: dict) -> str:
    """The report as text (docs/overlap.md explains each line)."""
    c = rep["config"]
    link = rep["link"]
    lines = []
    lines.append(f"dbo-sim overlap demo: toy MoE, schedule {c['schedule']} ({c['yields_per_layer']} yields per layer), backend {c['backend']}")
    lines.append(
        f"config     layers {c['layers']}, tokens {c['tokens']}, hidden {c['hidden']}, experts {c['experts']} (top-{c['topk']}), "
        f"ubatches {c['ubatches']}"
    )
    lines.append(
        f"           expert ffn {c['expert_ffn']}, shared ffn {c['shared_ffn']}, context {c['context']}, heads {c['heads']}, "
        f"dtype {c['dtype']}{' (meta: math skipped)' if c['meta'] else ''}, profile {c['profile']}, ep {c['ep']}, "
        f"torch threads {c['torch_threads']}"
    )
    bw = link["bandwidth_Bps"]
    how = (
        f"bandwidth scaled so that comm = {c['comm_ratio']:g} x compute"
        if c["comm_ratio"] is not None
        else "as given (no --comm-ratio)"
    )
    lines.append(
        f"link       {link['base_link']}: latency {fmt_seconds(link['latency_s'])}, {bw / 1e9:.3g} GB/s ({how}); "
        f"dispatch in {link['wire_dtype']}"
    )
    ratio = rep["comm_ratio_measured"]
    lines.append(
        f"per step   compute {fmt_seconds(rep['compute_s'])}, comm {fmt_seconds(rep['comm_s'])} (ratio {ratio:.2f}) "
        f"in the no-DBO kernels; per layer {fmt_seconds(rep['compute_s'] / c['layers'])} + {fmt_seconds(rep['comm_s'] / c['layers'])}"
        if ratio is not None
        else f"per step   compute {fmt_seconds(rep['compute_s'])}, comm {fmt_seconds(rep['comm_s'])}"
    )
    lines.append(f"no DBO     {fmt_seconds(rep['time_no_dbo_s'])} per step (median of {c['steps']})")
    sp = rep["speedup"]
    lines.append(
        f"DBO        {fmt_seconds(rep['time_dbo_s'])} per step (median of {c['steps']}), speedup {sp:.2f}x"
        if sp is not None
        else f"DBO        {fmt_seconds(rep['time_dbo_s'])} per step"
    )
    lines.append(
        f"bound      {fmt_seconds(rep['bound_s'])} = no-DBO step - hideable; hideable = min(compute, comm) - "
        f"already overlapped without DBO = {fmt_seconds(min(rep['compute_s'], rep['comm_s']))} - "
        f"{fmt_seconds(rep['overlapped_no_dbo_s'])} = {fmt_seconds(rep['hideable_s'])}"
    )
    lines.append(f"hidden     {_pct(rep['hidden_fraction'])} of the hideable time (no-DBO - DBO) / (no-DBO - bound)")
    tol = rep["tolerance"]
    if rep["max_abs_diff"] is None:
        lines.append("outputs    max |DBO - no DBO|: n/a (meta tensors: no math)")
    else:
        verdict = "PASS" if rep["outputs_match"] else "FAIL"
        lines.append(
            f"outputs    max |DBO - no DBO| = {rep['max_abs_diff']:.3g} "
            f"(tolerance {tol['relative']:g} x max(1, max|out|) = {tol['absolute']:.3g} for {tol['dtype']}): {verdict}"
        )
    w = rep["workspace"]
    sizes = w["slot_sizes"]
    same = len(set(sizes)) == 1
    plural = "s" if len(sizes) != 1 else ""
    size_txt = f"{len(sizes)} slot{plural} x {_mb(sizes[0])}" if same and sizes else ", ".join(_mb(s) for s in sizes)
    lines.append(
        f"workspace  {size_txt}, grew {w['grows']} times (all in warmup: {w['grows'] == w['grows_in_warmup']}), "
        f"allocations after lock: {w['allocations_after_lock']}"
    )
    lines.append(f"timeline   layer {rep['timeline_layer']} of the last DBO step; digit = ubatch owning the kernel, '.' = idle")
    lines.extend(rep["timeline"])
    for note in rep.get("notes", []):
        lines.append(f"note       {note}")
    if rep.get("trace_path"):
        lines.append(f"trace      {rep['trace_path']} (open in https://ui.perfetto.dev or chrome://tracing)")
    if rep.get("plot_path"):
        lines.append(f"plot       {rep['plot_path']}")
    return "\n".join(lines)


# --- command line --------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors and no usage dump."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


def _float_arg(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    d = OverlapConfig()
    p = _Parser(
        prog="python -m demos.overlap",
        description=(
            "Run a toy MoE transformer with and without DBO (dual-batch overlap) and report the step times, "
            "the speedup, how much of the hideable communication was hidden, whether the outputs match, the "
            "workspace, and an ASCII timeline of one layer. docs/overlap.md explains the output."
        ),
    )
    a = p.add_argument
    a("--backend", default=d.backend, choices=BACKEND_CHOICES,
      help="stream backend: threads (real math and wall-clock time on the CPU, transfers sleep), virtual "
           "(deterministic virtual clock from the cost model), cuda (a GPU), auto (cuda if available, else threads). Default auto")
    a("--schedule", default=d.schedule, choices=SCHEDULES,
      help="where each MoE layer yields: ll = low-latency style (one stream, send + recv hook, 2 yields per layer), "
           "ht = high-throughput style (compute + comm streams, 3 yields per layer). Default ht")
    a("--layers", type=int, default=d.layers, help=f"transformer layers (default {d.layers})")
    a("--tokens", type=int, default=d.tokens, help=f"tokens in the batch, split evenly into the ubatches (default {d.tokens})")
    a("--hidden", type=int, default=d.hidden, help=f"hidden size (default {d.hidden})")
    a("--experts", type=int, default=d.experts, help=f"routed experts per layer (default {d.experts})")
    a("--topk", type=int, default=d.topk, help=f"experts per token, at most --experts (default {d.topk})")
    a("--ubatches", type=int, default=d.ubatches, help=f"ubatches with DBO, at most --tokens (default {d.ubatches})")
    a("--expert-ffn", type=int, default=None, help="intermediate size of a routed expert (default: --hidden)")
    a("--shared-ffn", type=int, default=None, help="intermediate size of the shared expert (default: 2 x expert ffn)")
    a("--context", type=int, default=None, help="cached context tokens every token attends to (default: --hidden / 2)")
    a("--shared-chunk", type=int, default=d.shared_chunk, help=f"tokens per shared-expert chunk (default {d.shared_chunk})")
    a("--ep", type=int, default=None,
      help="expert-parallel group size assumed by the cost model: each rank reads the weights of experts/ep experts "
           "(default: experts/8, at least 1)")
    a("--comm-ratio", type=_float_arg, default=None, metavar="R",
      help="scale the link bandwidth so that a layer's communication takes R x its compute, measured on the chosen "
           "backend from a no-DBO step (default 1; with --link, the link is used as given unless --comm-ratio is set)")
    a("--link", default=None, help="link profile of the modelled transfers: nvlink, ib400, loopback (default nvlink, rescaled)")
    a("--profile", default=None, help="device profile for modelled compute on virtual: cpu, h200 (default cpu)")
    a("--meta", action="store_true", default=None,
      help="meta tensors: shapes only, math skipped (virtual only; automatic there when the weights exceed 1 GiB)")
    a("--dtype", default=d.dtype, choices=("auto", "float32", "bfloat16", "float16", "float64"),
      help="compute dtype (default auto: float32, bfloat16 with meta tensors)")
    a("--steps", type=int, default=d.steps, help=f"timed steps without DBO and again with DBO (default {d.steps})")
    a("--warmup", type=int, default=d.warmup, help=f"warmup steps of each kind before the workspace is locked (default {d.warmup})")
    a("--seed", type=int, default=d.seed, help=f"seed of the weights and inputs (default {d.seed})")
    a("--torch-threads", type=int, default=None,
      help="torch intra-op threads during the run (default 1 on threads and virtual, so compute and the comm "
           "workers do not fight for cores; unchanged on cuda)")
    a("--stream-layout", default=d.stream_layout, choices=dbo.STREAM_LAYOUTS,
      help="shared (default, as vLLM: one compute and one comm stream for all ubatches) or per-ubatch streams")
    a("--width", dest="timeline_width", type=int, default=d.timeline_width, help="columns of the ASCII timeline (default 72)")
    a("--json", dest="json_path", default=None, metavar="PATH", help="write the report as JSON to PATH")
    a("--trace", dest="trace_path", default=None, metavar="PATH", help="write a Chrome trace of the last no-DBO and DBO steps to PATH")
    a("--plot", dest="plot_path", default=None, metavar="PATH", help="draw the timeline of one DBO layer to PATH (needs matplotlib: pip install 'dbo-sim[plot]')")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (0 ok, 2 bad arguments, 1 failure)."""
    parser = build_parser()
    try:
        ns = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    cfg = OverlapConfig(**vars(ns))
    try:
        rep = run_overlap(cfg)
    except ConfigError as e:
        sys.stderr.write(f"{parser.prog}: error: {e}\n")
        return 2
    print(format_report(rep))
    if cfg.json_path:
        print(f"json       {cfg.json_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
