"""``python -m demos.overlap``: the toy MoE model with and without DBO, and what the overlap buys.

A run: build the model (demos.model) over a modelled link (demos.comm); warm up without and with
DBO (the workspace grows); lock the workspace; calibrate the link (``--comm-ratio``); time
``--steps`` steps without DBO (``UBatchOrchestrator(num_ubatches=1)``), then ``--steps`` steps
with DBO (``num_ubatches=--ubatches``); compare the outputs; report. docs/overlap.md explains
every line of the report.

``run_overlap(OverlapConfig(...))`` does the same from Python and returns the report as a dict
(the keys ``--json`` writes); ``format_report(report)`` renders it as text.

``--world-size N`` (N > 1) runs the same on N ranks over torch.distributed instead of the
modelled link (demos.distributed launches them; demos.comm.DistributedTransport moves the
tokens): each rank holds a shard of the batch and owns experts / N experts; rank 0 reports, and
the outputs are compared with a single-process run of the whole batch. docs/distributed.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Sequence

import torch

import dbo
import workspace
from dbo.costs import get_link, get_profile
from dbo.trace import Tracer

from .moe.comm import TRANSFER_OPS, DistributedTransport, ModelledLinkTransport
from .moe.model import SCHEDULES, YIELDS_PER_LAYER, ModelConfig, ToyMoE, parse_kernel_name
from .timeline import engine_sums, fmt_seconds, layer_window, overlap_seconds, plot_timeline, render_ascii

__all__ = [
    "OverlapConfig",
    "ConfigError",
    "run_overlap",
    "reference_outputs",
    "format_report",
    "main",
    "build_parser",
    "TOLERANCE",
]

BACKEND_CHOICES = ("auto", "threads", "virtual", "cuda")
TOLERANCE = {"float32": 1e-5, "float64": 1e-12, "bfloat16": 1e-2, "float16": 1e-3}
"""Largest allowed max|DBO - no DBO| relative to max|no DBO| per dtype (the run prints it)."""
META_AUTO_BYTES = 1 << 30  # virtual: weights above 1 GiB -> meta tensors (math skipped)
REAL_LIMIT_BYTES = 4 << 30  # other backends: refuse weights above 4 GiB
LAUNCHERS = ("spawn", "env")


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
    stream_layout: str = "per-ubatch"
    timeline_width: int = 72
    json_path: str | None = None
    trace_path: str | None = None
    plot_path: str | None = None
    world_size: int = 1
    dist_timeout: float = 60.0
    launcher: str = "spawn"
    """How ranks start when ``world_size`` > 1: "spawn" (this process launches them on this host)
    or "env" (this process is one rank started by torchrun; env:// rendezvous)."""


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
    world_size: int = 1
    dist_backend: str | None = None  # "gloo" / "nccl" when distributed

    @property
    def distributed(self) -> bool:
        return self.dist_backend is not None


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
    ws = cfg.world_size
    if isinstance(ws, bool) or not isinstance(ws, int) or ws < 1:
        raise ConfigError(f"--world-size must be a positive integer, got {ws!r}")
    if cfg.launcher not in LAUNCHERS:
        raise ConfigError(f"unknown launcher {cfg.launcher!r}; choose one of {', '.join(LAUNCHERS)}")
    dt = cfg.dist_timeout
    if isinstance(dt, bool) or not isinstance(dt, (int, float)) or not math.isfinite(dt) or dt <= 0:
        raise ConfigError(f"--dist-timeout must be a positive number of seconds, got {dt!r}")
    distributed = ws > 1 or cfg.launcher == "env"
    backend = cfg.backend
    if distributed:
        _check_distributed(cfg)
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        enough = gpus >= 1 if cfg.launcher == "env" else gpus >= ws
        if backend == "auto":
            backend = "cuda" if enough else "threads"
        elif backend == "cuda" and not enough:
            raise ConfigError(
                f"--backend cuda with --world-size {ws} needs one GPU per rank ({ws}), found {gpus}; use --backend threads (gloo)"
            )
    if backend == "auto":
        backend = "cuda" if torch.cuda.is_available() else "threads"
    elif backend == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--backend cuda needs a CUDA GPU, and torch.cuda.is_available() is False here; use threads or virtual")
    if cfg.dtype not in ("auto", "float32", "bfloat16", "float16", "float64"):
        raise ConfigError(f"unknown dtype {cfg.dtype!r}; choose auto, float32, bfloat16, float16 or float64")
    ep = cfg.ep if cfg.ep is not None else (ws if distributed else max(1, cfg.experts // 8))
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
    if distributed:
        comm_ratio = None  # the link is real: nothing to calibrate
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
        world_size=ws,
        dist_backend=("nccl" if backend == "cuda" else "gloo") if distributed else None,
    )


def _check_distributed(cfg: OverlapConfig) -> None:
    """The options a run on several ranks (``--world-size`` > 1) cannot take."""
    ws = cfg.world_size
    if cfg.backend == "virtual":
        raise ConfigError(
            f"--world-size {ws} runs real ranks with real transfers, which the virtual clock cannot time; "
            "use --backend threads (gloo) or cuda (nccl)"
        )
    if cfg.meta:
        raise ConfigError("--meta skips the math; real ranks exchange real tokens: drop --meta with --world-size")
    if cfg.comm_ratio is not None or cfg.link is not None:
        raise ConfigError(
            "--comm-ratio and --link shape the modelled link; with --world-size > 1 the transfers are real "
            "(torch.distributed all-to-all), so drop them"
        )
    if cfg.experts % ws:
        raise ConfigError(f"--experts ({cfg.experts}) must be a multiple of --world-size ({ws}): each rank owns experts/{ws}")
    if cfg.ep is not None and cfg.ep != ws:
        raise ConfigError(f"--ep is the number of ranks with --world-size; got --ep {cfg.ep} with --world-size {ws}")
    if cfg.tokens < ws * cfg.ubatches:
        raise ConfigError(
            f"--tokens ({cfg.tokens}) is fewer than --world-size x --ubatches ({ws} x {cfg.ubatches}): "
            "every ubatch of every rank needs at least one token"
        )


# --- the run -------------------------------------------------------------------------------------


class _Runner:
    """The model, its transport, the workspace and the two orchestrators of one process.

    ``transport``: the all-to-all (default: the modelled link of ``res.link``); ``rows``: the rows
    of the batch this process runs (default: all of them; a rank of a distributed run passes its
    shard); ``before_step``: called before each step's clock starts (ranks meet at a barrier);
    ``on_dbo_step``: called in the last ubatch's thread at the start of each DBO step (a fault seam).
    """

    def __init__(
        self,
        cfg: OverlapConfig,
        res: _Resolved,
        *,
        transport: Any = None,
        rows: range | None = None,
        before_step: Any = None,
        on_dbo_step: Any = None,
    ):
        self.cfg, self.res = cfg, res
        self.tracer = Tracer(enabled=True)
        self.orchestrators: list = []
        self.before_step = before_step
        self.on_dbo_step = on_dbo_step
        self.rows = rows if rows is not None else range(0, cfg.tokens)
        self.backend = dbo.get_backend(res.backend, profile=res.profile, link=res.link, tracer=None)
        try:
            self.transport = transport if transport is not None else ModelledLinkTransport(res.link)
            self.manager = workspace.init_workspace_manager(res.model.device, num_ubatches=cfg.ubatches)
            self.model = ToyMoE(res.model, self.transport, num_slots=cfg.ubatches, schedule=cfg.schedule)
            # the DBO orchestrator first, so that with shared streams its streams get the plain names
            # ("compute", "comm"); per-ubatch they are "compute0", "comm0", ..., and the no-DBO ones
            # get the plain names
            self.orch_n = dbo.UBatchOrchestrator(cfg.ubatches, backend=self.backend, stream_layout=cfg.stream_layout)
            self.orchestrators.append(self.orch_n)
            self.orch1 = dbo.UBatchOrchestrator(1, backend=self.backend, stream_layout=cfg.stream_layout)
            self.orchestrators.append(self.orch1)
        except BaseException:
            self.close()
            raise
        start = self.rows.start
        self.full = [self.rows]
        self.split = [range(start + r.start, start + r.stop) for r in dbo.split_tokens(len(self.rows), cfg.ubatches)]
        self._dbo_forward = self.model.forward if on_dbo_step is None else self._forward_with_seam

    def _forward_with_seam(self, rows: range) -> Any:
        if dbo.dbo_current_ubatch_id() == self.cfg.ubatches - 1:
            self.on_dbo_step()
        return self.model.forward(rows)

    def output(self) -> torch.Tensor:
        """This process's rows of the final hidden states (a CPU copy)."""
        return self.model.hidden[self.rows.start : self.rows.stop].detach().to("cpu", copy=True)

    def close(self) -> None:
        for o in self.orchestrators:
            o.close()
        self.backend.close()

    def step(self, dbo_on: bool, traced: bool) -> tuple[float, list]:
        """One step; returns (seconds on the backend clock, its kernel records if traced)."""
        orch, inputs = (self.orch_n, self.split) if dbo_on else (self.orch1, self.full)
        fn = self._dbo_forward if dbo_on else self.model.forward
        self.backend.tracer = self.tracer if traced else None
        first = len(self.tracer.records)
        if self.before_step is not None:
            self.before_step()
        t0 = self.backend.now()
        orch.run(fn, inputs)
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
    ``records_dbo`` (the kernel records of the last timed step of each kind), ``window`` (the
    timeline's layer window), ``output_no_dbo`` and ``output_dbo`` (the final hidden states of the
    whole batch, CPU tensors; None with meta tensors) and, with ``world_size`` > 1,
    ``output_reference`` (the single-process run they are compared with).

    With ``world_size`` > 1 the ranks run in other processes (docs/distributed.md); a failed rank
    raises ``demos.distributed.DistributedError``. With ``launcher="env"`` (under torchrun) this
    process is one rank: rank 0 returns the report, the other ranks return None.
    """
    cfg = config if config is not None else OverlapConfig()
    if overrides:
        cfg = OverlapConfig(**{**asdict(cfg), **overrides})
    res = resolve(cfg)
    wall0 = time.perf_counter()
    if res.distributed:
        out = _run_distributed(cfg, res)
        if out is None:  # not rank 0 (torchrun)
            return None  # type: ignore[return-value]
        report, extra = out
        if details is not None:
            details.update(extra)
    else:
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
    return _report(r, cfg, res, _measure(r, cfg, res), details)


def _measure(r: _Runner, cfg: OverlapConfig, res: _Resolved) -> dict:
    """Warm up, lock the workspace, calibrate the link, time the steps; the raw measurements."""
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
    sent0 = getattr(r.transport, "bytes_to_peers", 0)
    t_no, recs_no = [], []
    for _ in range(cfg.steps):
        s, recs = r.step(False, traced=True)
        t_no.append(s)
        recs_no.append(recs)
    sent = getattr(r.transport, "bytes_to_peers", 0) - sent0
    ref = None if res.meta else r.output()
    t_dbo, recs_dbo = [], []
    for _ in range(cfg.steps):
        s, recs = r.step(True, traced=True)
        t_dbo.append(s)
        recs_dbo.append(recs)
    out = None if res.meta else r.output()
    return dict(
        warm=warm, allocations_at_lock=allocations_at_lock, calibration=calibration,
        t_no=t_no, recs_no=recs_no, t_dbo=t_dbo, recs_dbo=recs_dbo, ref=ref, out=out,
        stats=m.stats(), slot_sizes=m.slot_sizes(), bytes_to_peers_per_step=sent / max(1, cfg.steps),
    )


def _figures(meas: dict) -> dict:
    """C, M, O of the no-DBO steps (medians) and the last DBO step's engine sums, from the records."""
    sums = [engine_sums(x) for x in meas["recs_no"]]
    return dict(
        compute_s=statistics.median(s["compute"] for s in sums),
        comm_s=statistics.median(s["comm"] for s in sums),
        overlapped_s=statistics.median(overlap_seconds(x) for x in meas["recs_no"]),
        dbo_sums=engine_sums(meas["recs_dbo"][-1]),
    )


def _compare(out: torch.Tensor | None, ref: torch.Tensor | None, rtol: float) -> tuple[float | None, float | None, bool | None]:
    """(max |out - ref|, max |ref|, passed) with tolerance ``rtol x max(1, max|ref|)``."""
    if out is None or ref is None:
        return None, None, None
    if out.shape != ref.shape:
        return math.inf, None, False
    diff = (out.to(torch.float64) - ref.to(torch.float64)).abs()
    max_abs_diff = float(diff.max().item()) if diff.numel() else 0.0
    ref_max = float(ref.abs().max().item()) if ref.numel() else 0.0
    nonfinite = not (torch.isfinite(out).all().item() and torch.isfinite(ref).all().item())
    return max_abs_diff, ref_max, (not nonfinite) and max_abs_diff <= rtol * max(ref_max, 1.0)


def _report(r: _Runner, cfg: OverlapConfig, res: _Resolved, meas: dict, details: dict, fig: dict | None = None) -> dict:
    """The report from the measurements (``fig``: C, M, O figures to use instead of this process's)."""
    t_no, t_dbo, recs_no, recs_dbo = meas["t_no"], meas["t_dbo"], meas["recs_no"], meas["recs_dbo"]
    ref, out, stats, slot_sizes, warm = meas["ref"], meas["out"], meas["stats"], meas["slot_sizes"], meas["warm"]
    allocations_at_lock = meas["allocations_at_lock"]
    fig = fig if fig is not None else _figures(meas)

    # 4. figures
    time_no, time_dbo = statistics.median(t_no), statistics.median(t_dbo)
    compute_s, comm_s, overlapped_s, dbo_sums = fig["compute_s"], fig["comm_s"], fig["overlapped_s"], fig["dbo_sums"]
    hideable = max(0.0, min(compute_s, comm_s) - overlapped_s)
    bound = time_no - hideable
    hidden_fraction = (time_no - time_dbo) / hideable if hideable > 0 else None
    dtype_name = str(res.dtype).replace("torch.", "")
    rtol = TOLERANCE.get(dtype_name, 1e-2)
    max_abs_diff, ref_max, passed = _compare(out, ref, rtol)
    tol_abs = None if ref_max is None else rtol * max(ref_max, 1.0)
    window = layer_window(recs_dbo[-1], cfg.layers)
    details.update(
        records_no_dbo=list(recs_no[-1]), records_dbo=list(recs_dbo[-1]), window=window, output_no_dbo=ref, output_dbo=out
    )
    timeline = render_ascii(recs_dbo[-1], window, width=cfg.timeline_width)
    link = r.transport.describe()

    report: dict[str, Any] = {
        "backend": res.backend,
        "schedule": cfg.schedule,
        "num_ubatches": cfg.ubatches,
        "world_size": res.world_size,
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
            "link": res.link if not res.distributed else None,
            "comm_ratio": res.comm_ratio,
            "steps": cfg.steps,
            "warmup": cfg.warmup,
            "seed": cfg.seed,
            "torch_threads": torch.get_num_threads(),
            "stream_layout": cfg.stream_layout,
            "world_size": res.world_size,
            "dist_backend": res.dist_backend,
            "dist_timeout": cfg.dist_timeout if res.distributed else None,
            "launcher": cfg.launcher if res.distributed else None,
        },
        "link": link,
        "calibration": meas["calibration"],
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


# --- several ranks (docs/distributed.md) ------------------------------------------------------------


def reference_outputs(config: OverlapConfig | None = None, **overrides: Any) -> torch.Tensor:
    """The final hidden states of the *whole* batch computed by one process without DBO over the
    modelled link: what a run on several ranks must reproduce (same model, same seed). A CPU
    tensor of shape (tokens, hidden). Uses the process-global workspace manager (and resets it)."""
    cfg = config if config is not None else OverlapConfig()
    if overrides:
        cfg = OverlapConfig(**{**asdict(cfg), **overrides})
    dtype = torch.float32 if cfg.dtype == "auto" else getattr(torch, cfg.dtype)
    device = "cuda" if cfg.backend == "cuda" or (cfg.backend == "auto" and cfg.world_size > 1 and torch.cuda.is_available()) else "cpu"
    mc = ModelConfig(
        layers=cfg.layers, tokens=cfg.tokens, hidden=cfg.hidden, experts=cfg.experts, topk=cfg.topk,
        expert_ffn=cfg.expert_ffn, shared_ffn=cfg.shared_ffn, context=cfg.context, shared_chunk=cfg.shared_chunk,
        dtype=dtype, device=device, seed=cfg.seed,
    ).resolved()
    threads = cfg.torch_threads if cfg.torch_threads is not None else (1 if device == "cpu" else None)
    old_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    workspace.init_workspace_manager(device, num_ubatches=1)
    try:
        model = ToyMoE(mc, ModelledLinkTransport(), num_slots=1, schedule=cfg.schedule)
        with dbo.UBatchOrchestrator(1, backend="inline") as orch:
            orch.run(model.forward, [range(0, mc.tokens)])
        return model.hidden.detach().to("cpu", copy=True)
    finally:
        workspace.reset_workspace_manager()
        torch.set_num_threads(old_threads)


def _run_distributed(cfg: OverlapConfig, res: _Resolved) -> tuple[dict, dict] | None:
    from .moe import distributed

    rank_cfg = replace(cfg, json_path=None)  # the launching process writes the JSON
    if cfg.launcher == "env":
        return distributed.run_from_env(_overlap_rank, (rank_cfg,), backend=res.dist_backend, timeout=cfg.dist_timeout)
    return distributed.launch(
        _overlap_rank, (rank_cfg,), world_size=res.world_size, backend=res.dist_backend, timeout=cfg.dist_timeout
    )


def _overlap_rank(info: Any, cfg: OverlapConfig) -> tuple[dict, dict] | None:
    """One rank of a distributed run (``info``: demos.distributed.RankInfo). Every rank runs its
    shard; rank 0 gathers the measurements and outputs, checks them against a single-process run
    and returns ``(report, details)``; the other ranks return None."""
    from .moe.distributed import shard_range

    res = resolve(cfg)
    if res.world_size != info.world_size:
        raise ConfigError(f"--world-size {res.world_size} but this run has {info.world_size} ranks")
    W = info.world_size
    old_threads = torch.get_num_threads()
    if res.torch_threads is not None:
        torch.set_num_threads(res.torch_threads)
    if res.backend == "cuda":
        res = replace(res, model=replace(res.model, device=str(info.device)))
    runner = None
    try:
        groups = info.ubatch_groups(cfg.ubatches)
        rows = info.shard(cfg.tokens)
        transport = DistributedTransport(
            groups, rank=info.rank, world_size=W, experts=cfg.experts,
            max_tokens=max(len(shard_range(cfg.tokens, W, q)) for q in range(W)),
            serialize=res.backend == "threads" and cfg.stream_layout == "per-ubatch", fault=info.on_collective,
        )
        trace_cfg = cfg if info.rank == 0 else replace(cfg, trace_path=None, plot_path=None)
        runner = _Runner(trace_cfg, res, transport=transport, rows=rows, before_step=info.barrier, on_dbo_step=info.on_step)
        meas = _measure(runner, trace_cfg, res)
        fig = _figures(meas)
        mine = dict(
            rank=info.rank, rows=[rows.start, rows.stop], pid=os.getpid(),
            t_no=meas["t_no"], t_dbo=meas["t_dbo"], fig={k: v for k, v in fig.items()},
            allocations_after_lock=meas["stats"]["allocations"] - meas["allocations_at_lock"],
            bytes_to_peers_per_step=meas["bytes_to_peers_per_step"], ref=meas["ref"], out=meas["out"],
        )
        everyone = info.gather_object(mine)
        if info.rank != 0:
            return None
        return _distributed_report(runner, trace_cfg, res, meas, everyone, info)
    finally:
        if runner is not None:
            runner.close()
        workspace.reset_workspace_manager()
        torch.set_num_threads(old_threads)


def _distributed_report(r: _Runner, cfg: OverlapConfig, res: _Resolved, meas: dict, ranks: list[dict], info: Any) -> tuple[dict, dict]:
    """Rank 0: the report over all ranks. A step takes as long as its slowest rank; C, M and O
    are the means over ranks of each rank's medians; outputs are the ranks' rows in rank order."""
    steps = len(meas["t_no"])
    agg = dict(meas)
    agg["t_no"] = [max(x["t_no"][i] for x in ranks) for i in range(steps)]
    agg["t_dbo"] = [max(x["t_dbo"][i] for x in ranks) for i in range(steps)]
    agg["ref"] = torch.cat([x["ref"] for x in ranks])
    agg["out"] = torch.cat([x["out"] for x in ranks])
    fig = dict(
        compute_s=statistics.fmean(x["fig"]["compute_s"] for x in ranks),
        comm_s=statistics.fmean(x["fig"]["comm_s"] for x in ranks),
        overlapped_s=statistics.fmean(x["fig"]["overlapped_s"] for x in ranks),
        dbo_sums={k: statistics.fmean(x["fig"]["dbo_sums"][k] for x in ranks) for k in ("compute", "comm")},
    )
    details: dict = {}
    report = _report(r, cfg, res, agg, details, fig)
    report["allocations_after_lock"] = max(x["allocations_after_lock"] for x in ranks)
    report["workspace"]["allocations_after_lock"] = report["allocations_after_lock"]
    report["dist_backend"] = res.dist_backend
    report["ranks"] = [
        {
            "rank": x["rank"],
            "rows": x["rows"],
            "pid": x["pid"],
            "time_no_dbo_s": statistics.median(x["t_no"]),
            "time_dbo_s": statistics.median(x["t_dbo"]),
            "compute_s": x["fig"]["compute_s"],
            "comm_s": x["fig"]["comm_s"],
            "overlapped_no_dbo_s": x["fig"]["overlapped_s"],
            "allocations_after_lock": x["allocations_after_lock"],
            "bytes_to_peers_per_step": x["bytes_to_peers_per_step"],
        }
        for x in ranks
    ]
    # the single-process reference: same model, same seed, the whole batch, no DBO, modelled link
    # (this rank's own workspace manager is done: the reference installs its own)
    workspace.reset_workspace_manager()
    reference = reference_outputs(replace(cfg, backend=res.backend))
    rtol = report["tolerance"]["relative"]
    d_no, _, ok_no = _compare(agg["ref"], reference, rtol)
    d_dbo, _, ok_dbo = _compare(agg["out"], reference, rtol)
    report["reference"] = {
        "what": "one process, the whole batch, no DBO, modelled link, same seed",
        "max_abs_diff_no_dbo": d_no,
        "max_abs_diff_dbo": d_dbo,
        "match": bool(ok_no and ok_dbo),
    }
    report["outputs_match"] = bool(report["outputs_match"] and ok_no and ok_dbo)
    details["output_reference"] = reference
    return report, details


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
    ws = rep.get("world_size", 1)
    ranks_txt = f", {ws} ranks ({c.get('dist_backend')}, one process group per ubatch)" if ws > 1 else ""
    lines.append(
        f"dbo-sim overlap demo: toy MoE, schedule {c['schedule']} ({c['yields_per_layer']} yields per layer), "
        f"backend {c['backend']}{ranks_txt}"
    )
    per_rank = ""
    if ws > 1 and rep.get("ranks"):
        sizes = sorted({r["rows"][1] - r["rows"][0] for r in rep["ranks"]})
        per_rank = f" ({'/'.join(str(x) for x in sizes)} per rank, {c['experts'] // ws} experts per rank)"
    lines.append(
        f"config     layers {c['layers']}, tokens {c['tokens']}{per_rank}, hidden {c['hidden']}, experts {c['experts']} "
        f"(top-{c['topk']}), ubatches {c['ubatches']}"
    )
    lines.append(
        f"           expert ffn {c['expert_ffn']}, shared ffn {c['shared_ffn']}, context {c['context']}, heads {c['heads']}, "
        f"dtype {c['dtype']}{' (meta: math skipped)' if c['meta'] else ''}, profile {c['profile']}, ep {c['ep']}, "
        f"torch threads {c['torch_threads']}"
    )
    bw = link["bandwidth_Bps"]
    if bw is None:  # a real link: torch.distributed
        sent = [r["bytes_to_peers_per_step"] for r in rep.get("ranks", [])]
        sent_txt = f"; {statistics.fmean(sent) / 2**20:.2f} MiB per rank and no-DBO step to other ranks" if sent else ""
        lines.append(
            f"link       real: all_to_all_single over {link.get('dist_backend')} between {ws} ranks (not modelled, not "
            f"calibrated); dispatch in {link['wire_dtype']}{sent_txt}"
        )
    else:
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
    slowest = ", slowest rank per step" if ws > 1 else ""
    lines.append(f"no DBO     {fmt_seconds(rep['time_no_dbo_s'])} per step (median of {c['steps']}{slowest})")
    sp = rep["speedup"]
    lines.append(
        f"DBO        {fmt_seconds(rep['time_dbo_s'])} per step (median of {c['steps']}{slowest}), speedup {sp:.2f}x"
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
    ref = rep.get("reference")
    if ref is not None:
        verdict = "PASS" if ref["match"] else "FAIL"
        lines.append(
            f"reference  max |ranks' rows - one process, whole batch, same seed| = {ref['max_abs_diff_no_dbo']:.3g} (no DBO), "
            f"{ref['max_abs_diff_dbo']:.3g} (DBO): {verdict}"
        )
    if ws > 1 and rep.get("ranks"):
        lines.append(
            "ranks      "
            + "; ".join(
                f"{r['rank']}: no DBO {fmt_seconds(r['time_no_dbo_s'])}, DBO {fmt_seconds(r['time_dbo_s'])}, "
                f"comm {fmt_seconds(r['comm_s'])}"
                for r in rep["ranks"]
            )
        )
    w = rep["workspace"]
    sizes = w["slot_sizes"]
    same = len(set(sizes)) == 1
    plural = "s" if len(sizes) != 1 else ""
    size_txt = f"{len(sizes)} slot{plural} x {_mb(sizes[0])}" if same and sizes else ", ".join(_mb(s) for s in sizes)
    if ws > 1:
        size_txt += " (rank 0)"
    lines.append(
        f"workspace  {size_txt}, grew {w['grows']} times (all in warmup: {w['grows'] == w['grows_in_warmup']}), "
        f"allocations after lock: {w['allocations_after_lock']}{' (most on any rank)' if ws > 1 else ''}"
    )
    on_rank = " on rank 0" if ws > 1 else ""
    lines.append(
        f"timeline   layer {rep['timeline_layer']} of the last DBO step{on_rank}; digit = ubatch owning the kernel, '.' = idle"
    )
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
      help="torch intra-op threads during the run (default 1 on threads and virtual: the comm executor and the "
           "ubatch threads need a core too; unchanged on cuda)")
    a("--stream-layout", default=d.stream_layout, choices=dbo.STREAM_LAYOUTS,
      help="per-ubatch (default: each ubatch on its own compute and comm streams) or shared "
           "(as vLLM: one compute and one comm stream for all ubatches)")
    a("--width", dest="timeline_width", type=int, default=d.timeline_width, help="columns of the ASCII timeline (default 72)")
    a("--json", dest="json_path", default=None, metavar="PATH", help="write the report as JSON to PATH")
    a("--trace", dest="trace_path", default=None, metavar="PATH", help="write a Chrome trace of the last no-DBO and DBO steps to PATH")
    a("--plot", dest="plot_path", default=None, metavar="PATH", help="draw the timeline of one DBO layer to PATH (needs matplotlib: pip install 'dbo-sim[plot]')")
    a("--world-size", type=int, default=None, metavar="N",
      help="run on N ranks over torch.distributed instead of the modelled link: this command starts them on this host "
           "(gloo on the CPU, nccl when every rank has a GPU); each rank holds tokens/N tokens and experts/N experts, and "
           "rank 0 reports. Under torchrun it is this process's WORLD_SIZE (default 1; docs/distributed.md)")
    a("--dist-timeout", type=_float_arg, default=d.dist_timeout, metavar="S",
      help=f"seconds a collective may wait for the other ranks before the run fails (default {d.dist_timeout:g})")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (0 ok, 2 bad arguments, 1 failure)."""
    parser = build_parser()
    try:
        ns = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    from .moe.distributed import DistributedError, in_torchrun

    opts = vars(ns)
    if in_torchrun():  # started by torchrun: this process is one rank (env:// rendezvous)
        world = int(os.environ["WORLD_SIZE"])
        if opts["world_size"] not in (None, world):
            sys.stderr.write(f"{parser.prog}: error: --world-size {opts['world_size']} but torchrun started {world} ranks\n")
            return 2
        opts.update(world_size=world, launcher="env")
    elif opts["world_size"] is None:
        opts["world_size"] = 1
    cfg = OverlapConfig(**opts)
    try:
        rep = run_overlap(cfg)
    except ConfigError as e:
        sys.stderr.write(f"{parser.prog}: error: {e}\n")
        return 2
    except DistributedError as e:
        from .moe.distributed import describe_exit

        sys.stderr.write(f"{parser.prog}: error: {e}\n")
        if e.exitcodes:
            sys.stderr.write("ranks: " + "; ".join(f"{r} {describe_exit(c)}" for r, c in enumerate(e.exitcodes)) + "\n")
        if e.remote_traceback:
            sys.stderr.write(f"--- traceback of rank {e.rank} ---\n{e.remote_traceback}")
        return 1
    except BaseException:
        if cfg.launcher != "env":
            raise
        # one rank under torchrun: say why, then leave at once (a collective may still be stuck on
        # the backend's comm executor thread); torchrun sees the non-zero status and stops the other ranks
        import traceback

        sys.stderr.write(f"{parser.prog}: rank {os.environ.get('RANK')} failed:\n{traceback.format_exc()}")
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(1)
    if rep is None:  # a rank other than 0 under torchrun: rank 0 reports
        return 0
    print(format_report(rep))
    if cfg.json_path:
        print(f"json       {cfg.json_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
