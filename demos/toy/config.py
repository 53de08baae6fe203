"""What one overlap run takes (``OverlapConfig``), its checks, and the automatic choices (``resolve``).

A bad value raises ``ConfigError``: one line that names the config fields involved. ``str(e)``
spells them as the fields (``topk``); ``e.render(name_of)`` spells each through ``name_of``, which
is how the command line names its flags (``--topk``) without this module knowing about flags.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

import torch

import dbo
from dbo.costs import get_link, get_profile
from demos.errors import ConfigError, field_ref
from demos.toy.footprint import choose_meta
from demos.toy.model import SCHEDULES, ModelConfig
from demos.vocabulary import Schedule

__all__ = [
    "BACKEND_CHOICES",
    "DTYPE_CHOICES",
    "LAUNCHERS",
    "TOLERANCE",
    "ConfigError",
    "OverlapConfig",
    "Resolved",
    "resolve",
    "model_config",
    "max_spawned_ranks",
    "MIN_TIMELINE_WIDTH",
    "RANKS_PER_CPU",
    "field_ref",
]

BACKEND_CHOICES = ("auto", "threads", "virtual", "cuda")
DTYPE_CHOICES = ("auto", "float32", "bfloat16", "float16", "float64")
LAUNCHERS = ("spawn", "env")
TOLERANCE = {"float32": 1e-5, "float64": 1e-12, "bfloat16": 1e-2, "float16": 1e-3}
"""Largest allowed max|DBO - no DBO| relative to max|no DBO| per dtype (the report prints it)."""
MIN_TIMELINE_WIDTH = 40
"""Fewer columns cannot hold the timeline's time scale (five labels) or show a layer's kernels."""
RANKS_PER_CPU = 4
"""At most this many ranks per CPU core when this command starts the ranks itself (launcher
"spawn"): each rank is a process with a model, ubatch threads and a comm executor; beyond this,
a run only measures the host's time slicing (and takes minutes)."""
HEAD_DIM = ModelConfig.head_dim  # attention head size: hidden is a multiple of it (or at most one head)


@dataclass
class OverlapConfig:
    """Everything one overlap run takes (``python -m demos.overlap --help`` explains each)."""

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
    graph: bool = False
    """Capture the no-DBO and the DBO step once each and time their replays (``ll`` only)."""
    sanitize: bool = False
    """Run every step under workspace.sanitizer and dbo.races (docs/races.md); single process only."""
    pin_engines: bool = True
    """threads backend, one process: the compute and the comm executor keep to CPUs of their own
    (``ThreadsBackend(pin_engines=True)``, docs/streams.md); ignored on other backends and ranks."""


@dataclass
class Resolved:
    """The automatic choices of an ``OverlapConfig``, filled in and checked."""

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

    @property
    def dtype_name(self) -> str:
        return str(self.dtype).replace("torch.", "")

    @property
    def modelled_profile(self) -> str | None:
        """The profile the step times come from (its name); None off virtual, where none is read."""
        return str(getattr(self.profile, "name", self.profile)) if self.backend == "virtual" else None


def model_config(cfg: OverlapConfig, *, ep: int, dtype: torch.dtype, device: str) -> ModelConfig:
    """The toy model's shapes for ``cfg`` (the one place an OverlapConfig becomes a ModelConfig)."""
    return ModelConfig(
        layers=cfg.layers,
        tokens=cfg.tokens,
        hidden=cfg.hidden,
        experts=cfg.experts,
        topk=cfg.topk,
        expert_ffn=cfg.expert_ffn,
        shared_ffn=cfg.shared_ffn,
        context=cfg.context,
        shared_chunk=cfg.shared_chunk,
        ep=ep,
        dtype=dtype,
        device=device,
        seed=cfg.seed,
    )


def _positive_int(name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ConfigError(f"{field_ref(name)} must be a positive integer, got {v!r}")
    return v


def _positive_number(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and v > 0


def _check_fields(cfg: OverlapConfig) -> None:
    """The checks of single fields and simple relations between them."""
    if cfg.backend not in BACKEND_CHOICES:
        raise ConfigError(f"unknown backend {cfg.backend!r}; choose one of {', '.join(BACKEND_CHOICES)}")
    if cfg.schedule not in SCHEDULES:
        raise ConfigError(f"unknown schedule {cfg.schedule!r}; choose one of {', '.join(SCHEDULES)}")
    for name in (
        "layers",
        "tokens",
        "hidden",
        "experts",
        "topk",
        "ubatches",
        "steps",
        "shared_chunk",
        "timeline_width",
    ):
        _positive_int(name, getattr(cfg, name))
    for name in ("expert_ffn", "shared_ffn", "context", "ep", "torch_threads"):
        if getattr(cfg, name) is not None:
            _positive_int(name, getattr(cfg, name))
    _positive_int("warmup", cfg.warmup)
    if cfg.timeline_width < MIN_TIMELINE_WIDTH:
        raise ConfigError(
            f"{field_ref('timeline_width')} must be at least {MIN_TIMELINE_WIDTH} columns (the time scale needs them), "
            f"got {cfg.timeline_width}"
        )
    if cfg.ep is not None and cfg.ep > cfg.experts:
        raise ConfigError(
            f"{field_ref('ep')} ({cfg.ep}) must not exceed {field_ref('experts')} ({cfg.experts}): "
            "each rank of the group holds at least one expert"
        )
    if cfg.topk > cfg.experts:
        raise ConfigError(f"{field_ref('topk')} ({cfg.topk}) must not exceed {field_ref('experts')} ({cfg.experts})")
    if cfg.hidden > HEAD_DIM and cfg.hidden % HEAD_DIM:
        raise ConfigError(
            f"{field_ref('hidden')} {cfg.hidden} does not split into attention heads of {HEAD_DIM}: give a multiple "
            f"of {HEAD_DIM}, or at most {HEAD_DIM} for one head of that size"
        )
    if cfg.tokens < cfg.ubatches:
        raise ConfigError(
            f"{field_ref('tokens')} ({cfg.tokens}) is fewer than {field_ref('ubatches')} ({cfg.ubatches}): "
            "every ubatch needs at least one token"
        )
    if cfg.comm_ratio is not None and not _positive_number(cfg.comm_ratio):
        raise ConfigError(f"{field_ref('comm_ratio')} must be a positive number, got {cfg.comm_ratio!r}")
    if cfg.stream_layout not in dbo.STREAM_LAYOUTS:
        raise ConfigError(f"unknown stream layout {cfg.stream_layout!r}; choose one of {', '.join(dbo.STREAM_LAYOUTS)}")
    for kind, name, getter in (("profile", cfg.profile, get_profile), ("link", cfg.link, get_link)):
        if name is not None:
            try:
                getter(name)
            except (ValueError, TypeError) as e:
                raise ConfigError(f"{field_ref(kind)} {getattr(name, 'name', name)}: {e}") from None
    _positive_int("world_size", cfg.world_size)
    if cfg.launcher not in LAUNCHERS:
        raise ConfigError(f"unknown launcher {cfg.launcher!r}; choose one of {', '.join(LAUNCHERS)}")
    if not _positive_number(cfg.dist_timeout):
        raise ConfigError(f"{field_ref('dist_timeout')} must be a positive number of seconds, got {cfg.dist_timeout!r}")
    if cfg.dtype not in DTYPE_CHOICES:
        raise ConfigError(f"unknown dtype {cfg.dtype!r}; choose auto, float32, bfloat16, float16 or float64")
    _check_graph(cfg)


def _check_graph(cfg: OverlapConfig) -> None:
    if cfg.graph and cfg.schedule == Schedule.HT:
        raise ConfigError(
            f"{field_ref('graph')} cannot capture {field_ref('schedule')} ht: it keeps host-known expert counts "
            f"(like DeepEP's normal mode), a host sync a graph cannot hold; use {field_ref('schedule')} ll"
        )


def _check_distributed(cfg: OverlapConfig) -> None:
    """The options a run on several ranks (``world_size`` > 1) cannot take."""
    ws, w = cfg.world_size, field_ref("world_size")
    if cfg.backend == "virtual":
        raise ConfigError(
            f"{w} {ws} runs real ranks with real transfers, which the virtual clock cannot time; "
            f"use {field_ref('backend')} threads (gloo) or cuda (nccl)"
        )
    if cfg.meta:
        raise ConfigError(
            f"{field_ref('meta')} skips the math; real ranks exchange real tokens: drop {field_ref('meta')} with {w}"
        )
    if cfg.sanitize:
        raise ConfigError(f"{field_ref('sanitize')} checks one process's streams and workspace: drop it with {w} > 1")
    if cfg.comm_ratio is not None or cfg.link is not None:
        raise ConfigError(
            f"{field_ref('comm_ratio')} and {field_ref('link')} shape the modelled link; with {w} > 1 the transfers "
            "are real (torch.distributed all-to-all), so drop them"
        )
    if cfg.launcher == "spawn" and ws > max_spawned_ranks():
        raise ConfigError(
            f"{w} {ws} is more ranks than this machine can run side by side: at most {max_spawned_ranks()} "
            f"({RANKS_PER_CPU} per CPU core, {os.cpu_count() or 1} cores); each rank is a process with its own threads"
        )
    if cfg.experts % ws:
        raise ConfigError(
            f"{field_ref('experts')} ({cfg.experts}) must be a multiple of {w} ({ws}): each rank owns experts/{ws}"
        )
    if cfg.ep is not None and cfg.ep != ws:
        raise ConfigError(
            f"{field_ref('ep')} is the number of ranks with {w}; got {field_ref('ep')} {cfg.ep} with {w} {ws}"
        )
    if cfg.tokens < ws * cfg.ubatches:
        raise ConfigError(
            f"{field_ref('tokens')} ({cfg.tokens}) is fewer than {w} x {field_ref('ubatches')} "
            f"({ws} x {cfg.ubatches}): every ubatch of every rank needs at least one token"
        )


def max_spawned_ranks() -> int:
    """The most ranks this host may start for one run (``RANKS_PER_CPU`` per core)."""
    return RANKS_PER_CPU * (os.cpu_count() or 1)


def _choose_backend(cfg: OverlapConfig, distributed: bool) -> str:
    backend, ws = cfg.backend, cfg.world_size
    if distributed:
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        enough = gpus >= 1 if cfg.launcher == "env" else gpus >= ws
        if backend == "auto":
            backend = "cuda" if enough else "threads"
        elif backend == "cuda" and not enough:
            raise ConfigError(
                f"{field_ref('backend')} cuda with {field_ref('world_size')} {ws} needs one GPU per rank ({ws}), "
                f"found {gpus}; use {field_ref('backend')} threads (gloo)"
            )
    if backend == "auto":
        backend = "cuda" if torch.cuda.is_available() else "threads"
    elif backend == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            f"{field_ref('backend')} cuda needs a CUDA GPU, and torch.cuda.is_available() is False here; "
            "use threads or virtual"
        )
    return backend


def _check_modelled(cfg: OverlapConfig, backend: str, distributed: bool) -> list[str]:
    """Refuse what only the virtual backend models when the run is elsewhere (``profile``, one
    process's ``ep``); the notes that say how ``link`` is used there (docs/overlap.md)."""
    if backend == "virtual":
        return []
    chose = f" ({field_ref('backend')} auto chose {backend} here)" if cfg.backend == "auto" else ""
    if cfg.profile is not None:
        raise ConfigError(
            f"{field_ref('profile')} models the compute on the virtual backend only; on {backend}{chose} the kernels "
            f"really run and no profile is read: add {field_ref('backend')} virtual, or drop {field_ref('profile')}"
        )
    if cfg.ep is not None and not distributed:
        raise ConfigError(
            f"{field_ref('ep')} only changes the virtual backend's cost model (the experts' weight reads); on "
            f"{backend}{chose} one process runs every expert's real math: add {field_ref('backend')} virtual, or "
            f"drop {field_ref('ep')}"
        )
    if cfg.link is not None and not distributed:
        how = "a GPU sleep kernel" if backend == "cuda" else "a timed wait on the comm executor"
        name = getattr(cfg.link, "name", cfg.link)
        return [
            f"link {name} on {backend}: the compute is real; each transfer takes its modelled time on this link "
            f"({how}), the data is really moved"
        ]
    return []


def resolve(cfg: OverlapConfig) -> Resolved:
    """Check ``cfg`` and fill in the automatic choices; ConfigError (one line) on a bad option."""
    _check_fields(cfg)
    ws = cfg.world_size
    distributed = ws > 1 or cfg.launcher == "env"
    if distributed:
        _check_distributed(cfg)
    backend = _choose_backend(cfg, distributed)
    notes = _check_modelled(cfg, backend, distributed)
    if cfg.ep is not None:
        ep = cfg.ep
    elif distributed:
        ep = ws
    else:  # virtual models a deployment (8 experts a rank); one process elsewhere runs every expert
        ep = max(1, cfg.experts // 8) if backend == "virtual" else 1
    probe = model_config(
        cfg, ep=ep, dtype=torch.float32 if cfg.dtype == "auto" else getattr(torch, cfg.dtype), device="cpu"
    )
    try:
        probe.validate()
    except ValueError as e:
        raise ConfigError(str(e)) from None
    meta = choose_meta(cfg, probe, backend, notes)
    dtype = (torch.bfloat16 if meta else torch.float32) if cfg.dtype == "auto" else getattr(torch, cfg.dtype)
    comm_ratio = cfg.comm_ratio if cfg.comm_ratio is not None else (None if cfg.link is not None else 1.0)
    device = "meta" if meta else ("cuda" if backend == "cuda" else "cpu")
    model = model_config(cfg, ep=ep, dtype=dtype, device=device).resolved()
    threads = cfg.torch_threads if cfg.torch_threads is not None else (1 if backend in ("threads", "virtual") else None)
    if distributed:
        comm_ratio = None  # the link is real: nothing to calibrate
    return Resolved(
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
