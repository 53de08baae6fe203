"""Kernel-time curves fitted per GPU family to measured kernel tables, and the fitted figures' data file.

A GEMM of ``groups`` x (``m`` x ``n`` x ``k``) in a dtype of dense peak ``R`` on HBM of bandwidth ``B``::

    time  = latency + max(2 groups m n k / (R * ceiling * eff),  bytes / (B * mem_efficiency * occ))
    eff   = m / pad16(m) * M/(M+m0) * n/(n+n0) * k/(k+k0),   M = groups * m
    occ   = min(1, tiles / (mem_tiles * SMs)),   tiles = groups * ceil(m / 128) * ceil(n / 128)
    bytes = weights * n k * w_bytes + groups * (m k * a_bytes + m n * c_bytes)

(``GemmCurve``). It keeps apart what a kernel reaches toward the GPU's peak FLOP/s and toward its peak
bandwidth. Toward FLOP/s: ``ceiling`` x ``eff``, the rows padded to a 16-row tile (``ROW_TILE``: the
smallest tile the small-M kernels issue, a stated choice) and the fill of the shape. Toward bandwidth:
``mem_efficiency`` x ``occ``, where a GEMM of few 128 x 128 output tiles keeps too few SMs loading to
reach its share of HBM, and a grouped GEMM over many experts keeps them all busy (``mem_tiles``: the
fraction of the SMs whose tiles it takes). ``latency`` is the fixed time of one kernel as a harness
times it alone. So a GPU without tables, given its family's curve over its own datasheet, has its small-M
kernels bounded by their bytes at the family's reach toward bandwidth, not by another GPU's FLOP/s.

Attention (``AttentionCurve``): ``latency + max(flops / (R_bf16 * ceiling), bytes / (B * mem_efficiency))``,
one curve for MLA decode and one for MLA prefill per family, and one for MLA decode over an FP8 cache.

The routed experts (``GroupedCurve``, ``FamilyFit.experts``): each of their two grouped GEMMs over
``active`` experts takes ``max(math, bytes / (B * mem_efficiency))``, the math on the FP8 ``GemmCurve``
with the row knee on all ``active x m`` rows (a grouped kernel fills the GPU with every expert's tiles),
the bytes every active expert's weights once plus the rows in and out; the op adds its activation pass
and ``latency``. Fitted to the measured MoE tables (uniform routing) with the FP8 curve held, so that a
grouped GEMM over many experts is not held to the share of bandwidth one dense GEMM reaches.

DeepEP's low-latency kernels on one node (``LinearCost``, ``FamilyFit.ll_sm``): ``fixed + per_byte x
bytes + per_peer x peers``, the bytes a rank's messages carry (``tokens x top_k`` messages) and the other
ranks of the node it exchanges counts and flags with (``per_peer`` is 0 where the tables hold one node size
only, Hopper's 8 GPUs). On one node the SMs carry every message over NVLink, so the whole kernel holds the
SMs (``demos.zoo.overlap_costs`` charges it as the SM-held halves of a hooked low-latency kernel).

``FITS`` holds the curves per family, pooled over ``FIT_GPUS``, and ``GPU_FITS`` each GPU's fitted to its own
tables alone (every GPU with tables, ``demos.zoo.measured.SYSTEMS``); the predictor takes a GPU's own where it
has them, else its family's (``gpu_fit``). ``python -m demos.fits`` writes both to ``rooflines.json`` from the
measured tables, each figure's provenance in the file (docs/kernels.md). The curves' vocabulary lives here
too (``GEMM_DTYPES``, ``MLA_KV``: which tables our dtypes are fitted to); ``demos.fits`` imports this module.

Every curve's formula takes numbers or numpy arrays alike (``_ceil``, ``_min``, ``_max`` pick the numpy
function for an array), so the fitting evaluates the very formula the simulator runs, over all the rows at
once, and a number in gives the same float out as a plain ``math`` formula would.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from demos.zoo.elementwise import ceil_ as _ceil
from demos.zoo.elementwise import max_ as _max
from demos.zoo.elementwise import min_ as _min
from demos.zoo.hardware import FAMILIES, GpuSpec
from demos.zoo.index_curves import INDEX_CURVES, INDEX_SCORES, TIE_CAP, MqaLogitsCurve, TopkCurve

__all__ = [
    "FAMILIES",
    "FITS",
    "FITS_PATH",
    "FITTED_WITH",
    "FIT_GPUS",
    "GPU_FITS",
    "GDN_CURVES",
    "GEMM_DTYPES",
    "INDEX_CURVES",
    "INDEX_SCORES",
    "LOCAL_FALLBACK_STORAGE",
    "MHC_SITES",
    "MLA_KV",
    "MLA_KV_FP8",
    "OUT_TILE",
    "ROW_TILE",
    "TIE_CAP",
    "AttentionCurve",
    "ChunkedCurve",
    "FamilyFit",
    "GemmCurve",
    "GemmShape",
    "GroupedCurve",
    "LinearCost",
    "MqaLogitsCurve",
    "SmBoundCurve",
    "TopkCurve",
    "family_fit",
    "gpu_fit",
    "linear_seconds",
    "load_fits",
]

FITS_PATH = Path(__file__).with_name("rooflines.json")
ROW_TILE = 16
"""Rows a GEMM's tensor-core work is padded to (the smallest tile small-M kernels issue; a stated choice)."""
OUT_TILE = 128
"""The output tile edge ``GemmShape.tiles`` counts tiles in (their share of the SMs is the occupancy)."""

GEMM_DTYPES = {"fp8": "fp8_block", "bfloat16": "bfloat16", "fp4": "nvfp4"}
"""Our math dtype -> the measured table's dtype its GEMM curve is fitted to (FP8: DeepGEMM with 128-block
scales, what DeepSeek-style FP8 checkpoints run; FP4: NVFP4, fitted only for a family whose GPUs have FP4
tensor cores and tables of it, Blackwell)."""

MLA_KV = "bfloat16"
"""The KV-cache dtype whose MLA rows the attention curves are fitted to: the engines' default ("auto")
for the FP8 DeepSeek checkpoints, and the zoo's presets' (an FP8 cache takes another kernel path)."""

MLA_KV_FP8 = "fp8"
"""The KV-cache dtype of the MLA decode rows ``FamilyFit.mla_decode_fp8`` is fitted to: another kernel path
(on Hopper about twice the BF16 cache's time, on Blackwell less: docs/kernels.md)."""

GDN_CURVES = ("delta_rule decode", "delta_rule prefill", "conv decode", "conv prefill")
"""The keys of ``FamilyFit.gdn`` and ``FamilyFit.kda``: a Gated DeltaNet (or Kimi Delta Attention) layer's
fitted kernels, "<kernel> <phase>"."""

MHC_SITES = ("pre", "post")
"""The keys of ``FamilyFit.mhc``: a wide residual's two kernels around every sub-layer."""

FIT_GPUS = {"hopper": ("h100", "h200"), "blackwell": ("b200", "gb200")}
"""The GPUs each family's pooled curves are fitted to (``family_fit``; B300 and GB300 held out)."""

LOCAL_FALLBACK_STORAGE = "fp8_e4m3"
"""The expert storage whose local fused MoE curve stands in for a storage without one of its own."""


@dataclass(frozen=True)
class GemmCurve:
    """A GEMM time curve (module docstring); shares in (0, 1], knees in rows, latency in seconds."""

    ceiling: float
    m0: float
    n0: float
    k0: float
    mem_efficiency: float
    latency: float
    mem_tiles: float

    def _eff(self, s: GemmShape):
        """The share of the ceiling a GEMM reaches: each group's rows padded to ``ROW_TILE``, the row knee on
        the kernel's rows, ``groups x m`` (module docstring)."""
        return s.padded_rows / (s.rows + self.m0) * s.n / (s.n + self.n0) * s.k / (s.k + self.k0)

    def parts(self, flops: float, nbytes: float, m: float, n: float, k: float, peak: float, hbm: float, sms: int):
        """(math seconds, memory seconds) of a GEMM part on a GPU of ``sms`` SMs, without the latency;
        its groups are ``flops / (2 m n k)``."""
        return self.parts_of(GemmShape.of(flops, nbytes, m, n, k), peak, hbm, sms)

    def parts_of(self, s: GemmShape, peak: float, hbm: float, sms: int):
        """``parts`` of a shape whose shape-only terms are computed already (a fit evaluates thousands of
        candidate curves on the same rows: ``demos.fits.rooflines``)."""
        occ = _min(1.0, s.tiles / (self.mem_tiles * sms))
        return s.flops / (peak * self.ceiling * self._eff(s)), s.nbytes / (hbm * self.mem_efficiency * occ)

    def seconds(
        self, flops: float, nbytes: float, m: float, n: float, k: float, peak: float, hbm: float, sms: int
    ) -> float:
        """Seconds of a GEMM of ``flops`` and ``nbytes`` whose (rows per group, n, k) is (m, n, k)."""
        return self.seconds_of(GemmShape.of(flops, nbytes, m, n, k), peak, hbm, sms)

    def seconds_of(self, s: GemmShape, peak: float, hbm: float, sms: int):
        """``seconds`` of a shape whose shape-only terms are computed already (``parts_of``)."""
        return self.latency + _max(*self.parts_of(s, peak, hbm, sms))


@dataclass(frozen=True)
class GemmShape:
    """What ``GemmCurve``'s formulas take of a GEMM's shape and work, numbers or numpy arrays, independent of
    the curve's parameters: with its groups ``max(1, flops / (2 m n k))``, the kernel's rows ``groups x m``,
    those rows times the ``ROW_TILE`` padding share, and the groups' ``OUT_TILE`` output tiles."""

    flops: Any
    nbytes: Any
    n: Any
    k: Any
    rows: Any
    padded_rows: Any
    tiles: Any

    @staticmethod
    def of(flops, nbytes, m, n, k) -> GemmShape:
        groups = _max(1.0, flops / (2.0 * m * n * k))
        rows, pad = groups * m, m / (_ceil(m / ROW_TILE) * ROW_TILE)
        tiles = groups * _ceil(m / OUT_TILE) * _ceil(n / OUT_TILE)
        return GemmShape(flops, nbytes, n, k, rows, pad * rows, tiles)


@dataclass(frozen=True)
class AttentionCurve:
    """An attention-core time curve: a share of the BF16 peak, a share of HBM bandwidth, a fixed latency."""

    ceiling: float
    mem_efficiency: float
    latency: float

    def seconds(self, flops: float, nbytes: float, peak: float, hbm: float) -> float:
        return self.latency + _max(flops / (peak * self.ceiling), nbytes / (hbm * self.mem_efficiency))


@dataclass(frozen=True)
class ChunkedCurve:
    """A kernel whose work runs as a chain of chunks one after another (the chunked delta rule of a Gated
    DeltaNet prefill: each chunk's state pass needs the one before): an ``AttentionCurve``'s shares and
    fixed time, and at least ``per_chunk`` seconds per chunk of the longest chain, however much of the GPU
    the chains leave idle (one long prompt at a few heads)."""

    ceiling: float
    mem_efficiency: float
    latency: float
    per_chunk: float

    def seconds(self, flops: float, nbytes: float, peak: float, hbm: float, chunks: float) -> float:
        roof = _max(flops / (peak * self.ceiling), nbytes / (hbm * self.mem_efficiency))
        return self.latency + _max(roof, chunks * self.per_chunk)


@dataclass(frozen=True)
class SmBoundCurve:
    """A kernel whose data moves at a rate its SMs set, not HBM's: a share of the BF16 peak, bytes per second
    per SM (``sm_rate``), a fixed latency. The short causal convolutions of linear attention: SGLang's tables
    time them the same on H100 and H200 (median ratio 0.99 over 4,400 prefill rows, 1.00 over 440 decode
    rows), whose SMs are the same and whose HBM differs 1.43x."""

    ceiling: float
    sm_rate: float
    latency: float

    def seconds(self, flops: float, nbytes: float, peak: float, sms: float) -> float:
        return self.latency + _max(flops / (peak * self.ceiling), nbytes / (sms * self.sm_rate))


def linear_seconds(curve, flops, nbytes, peak: float, hbm: float, sms: float, chunks=0.0):
    """Seconds of a linear-attention kernel on its curve (``FamilyFit.gdn`` / ``.kda``), ``peak`` the BF16
    rate, ``hbm`` and ``sms`` the GPU's: a ``ChunkedCurve`` over its chain of ``chunks``, an ``SmBoundCurve``
    at its SMs' rate, an ``AttentionCurve`` at its shares of peak and bandwidth."""
    if isinstance(curve, ChunkedCurve):
        return curve.seconds(flops, nbytes, peak, hbm, chunks)
    if isinstance(curve, SmBoundCurve):
        return curve.seconds(flops, nbytes, peak, sms)
    return curve.seconds(flops, nbytes, peak, hbm)


@dataclass(frozen=True)
class LinearCost:
    """``fixed + per_byte x bytes + per_peer x peers`` seconds (module docstring)."""

    fixed: float
    per_byte: float
    per_peer: float = 0.0

    def seconds(self, nbytes: float, peers: int = 0) -> float:
        return self.fixed + self.per_byte * nbytes + self.per_peer * peers


@dataclass(frozen=True)
class GroupedCurve:
    """The routed experts' grouped GEMMs (module docstring): the share of HBM bandwidth their bytes move
    at (``mem_efficiency``) and the fixed seconds of the MoE op as the tables' harness timed it alone
    (``latency``); their math takes the family's FP8 ``GemmCurve``."""

    mem_efficiency: float
    latency: float


@dataclass(frozen=True)
class FamilyFit:
    """One GPU family's fitted curves (or one GPU's, ``GPU_FITS``): ``gemm`` per dtype ("fp8", "bfloat16"),
    ``mla_decode``, ``mla_prefill``, ``ll_sm`` per kernel ("dispatch", "combine"), ``experts`` (the routed experts'
    grouped GEMMs); ``mla_module`` the seconds a whole MLA decode module takes beyond the kernels the predictor composes
    it of (``demos.zoo.attention_module``); ``mla_decode_fp8`` the MLA decode core over an FP8 cache (``MLA_KV_FP8``;
    None: the BF16 curve at the FP8 bytes; SGLang's kernels), ``engine_mla_decode_fp8`` an engine's own such core where
    its tables differ (keyed by engine: "trtllm"); ``dsa_index`` the seconds a DeepSeek sparse attention decode indexer
    takes beyond the kernels the predictor composes it of (the same module); ``gdn`` a Gated DeltaNet layer's kernel
    curves, keyed by ``GDN_CURVES`` ("delta_rule decode" ... "conv prefill": the recurrence's and the causal
    convolution's per phase, their work by ``demos.zoo.work.delta_rule_work`` and ``conv_work``; the prefill delta rule
    a ``ChunkedCurve``, its chain ``delta_rule_chunks``); ``kda`` a Kimi Delta Attention layer's, the same keys and
    kinds of curve, fitted to SGLang's ``kda_perf`` kernels, their work counted as a Gated DeltaNet layer's of as many
    key heads as value heads; ``mhc`` a wide residual's kernels (DeepSeek-V4's hyper-connections), keyed by
    ``MHC_SITES`` ("pre", "post"), each an ``AttentionCurve`` whose fixed time is the kernel's own (20 Sinkhorn
    iterations in "pre"), their work by ``demos.zoo.work.mhc_work``; ``index`` a lightning indexer's decode kernels,
    keyed by ``INDEX_CURVES`` ("scores": DeepGEMM's ``fp8_paged_mqa_logits``, an ``AttentionCurve`` over the FP8 peak,
    its work ``demos.zoo.work.index_score_work``; each top-k a ``TopkCurve``, ``demos.zoo.index_curves``);
    ``local_experts`` the routed experts where the engine's local fused MoE runs them (no all-to-all: MoE tensor
    parallelism, or expert parallelism beside attention TP), one ``GroupedCurve`` per expert storage
    (``demos.zoo.models.dtypes`` names), fitted to SGLang's local kernels of that dtype
    (``demos.zoo.measured_moe.sglang_moe_rows``): their share of bandwidth and the kernel's fixed time, which the step
    charges (``local_curve``; empty for a family without such tables: the step then times them on ``experts`` without a
    fixed time); ``fitted_on`` the GPUs whose tables gave them; ``custom_all_reduce`` the engines' own all-reduce of a
    small tensor over one NVLink domain (``fixed + per_byte x bytes + per_peer x peers``, fitted to SGLang's, vLLM's and
    TRT-LLM's graph-captured kernels, ``demos.zoo.measured_comm``; None: the NCCL ring model alone); ``source`` the
    tables' provenance. A field the file lacks (written before it was fitted) reads as None, 0 or empty."""

    family: str
    gemm: dict
    mla_decode: AttentionCurve
    mla_prefill: AttentionCurve
    ll_sm: dict
    fitted_on: tuple[str, ...]
    source: str
    experts: GroupedCurve | None = None
    mla_module: float = 0.0
    dsa_index: float = 0.0
    mla_decode_fp8: AttentionCurve | None = None
    engine_mla_decode_fp8: dict = field(default_factory=dict)
    gdn: dict = field(default_factory=dict)
    mhc: dict = field(default_factory=dict)
    kda: dict = field(default_factory=dict)
    index: dict = field(default_factory=dict)
    local_experts: dict = field(default_factory=dict)
    custom_all_reduce: LinearCost | None = None

    def local_curve(self, storage: str) -> GroupedCurve | None:
        """The local fused MoE's curve for experts stored as ``storage``: its own where fitted, else block
        FP8's (a stated stand-in), else None (no local curves: the family's ``experts`` applies)."""
        return self.local_experts.get(storage) or self.local_experts.get(LOCAL_FALLBACK_STORAGE)

    def to_dict(self) -> dict:
        return {
            "family": self.family,
            "gemm": {k: asdict(v) for k, v in self.gemm.items()},
            "mla_decode": asdict(self.mla_decode),
            "mla_prefill": asdict(self.mla_prefill),
            "ll_sm": {k: asdict(v) for k, v in self.ll_sm.items()},
            "experts": None if self.experts is None else asdict(self.experts),
            "mla_module": self.mla_module,
            "dsa_index": self.dsa_index,
            "mla_decode_fp8": None if self.mla_decode_fp8 is None else asdict(self.mla_decode_fp8),
            "engine_mla_decode_fp8": {k: asdict(v) for k, v in self.engine_mla_decode_fp8.items()},
            "gdn": {k: asdict(v) for k, v in self.gdn.items()},
            "kda": {k: asdict(v) for k, v in self.kda.items()},
            "mhc": {k: asdict(v) for k, v in self.mhc.items()},
            "index": {k: asdict(v) for k, v in self.index.items()},
            "local_experts": {k: asdict(v) for k, v in self.local_experts.items()},
            "custom_all_reduce": None if self.custom_all_reduce is None else asdict(self.custom_all_reduce),
            "fitted_on": list(self.fitted_on),
            "source": self.source,
        }

    @classmethod
    def from_dict(cls, d: dict) -> FamilyFit:
        return cls(
            family=d["family"],
            gemm={k: GemmCurve(**v) for k, v in d["gemm"].items()},
            mla_decode=AttentionCurve(**d["mla_decode"]),
            mla_prefill=AttentionCurve(**d["mla_prefill"]),
            ll_sm={k: LinearCost(**v) for k, v in d["ll_sm"].items()},
            fitted_on=tuple(d["fitted_on"]),
            source=d["source"],
            experts=GroupedCurve(**d["experts"]) if d.get("experts") else None,
            mla_module=float(d.get("mla_module", 0.0)),
            dsa_index=float(d.get("dsa_index", 0.0)),
            mla_decode_fp8=AttentionCurve(**d["mla_decode_fp8"]) if d.get("mla_decode_fp8") else None,
            engine_mla_decode_fp8={k: AttentionCurve(**v) for k, v in (d.get("engine_mla_decode_fp8") or {}).items()},
            gdn=_linear_curves(d.get("gdn")),
            kda=_linear_curves(d.get("kda")),
            mhc={k: AttentionCurve(**v) for k, v in (d.get("mhc") or {}).items()},
            index={
                k: (TopkCurve if "per_entry" in v else MqaLogitsCurve if "min_keys" in v else AttentionCurve)(**v)
                for k, v in (d.get("index") or {}).items()
            },
            local_experts={k: GroupedCurve(**v) for k, v in (d.get("local_experts") or {}).items()},
            custom_all_reduce=LinearCost(**d["custom_all_reduce"]) if d.get("custom_all_reduce") else None,
        )


def _linear_curves(d: dict | None) -> dict:
    """``FamilyFit.gdn`` or ``.kda`` from its dict (absent or null: empty): a ``ChunkedCurve`` where a curve
    has a time per chunk, an ``SmBoundCurve`` where it has a rate per SM, else an ``AttentionCurve``."""
    kind = lambda v: ChunkedCurve if "per_chunk" in v else SmBoundCurve if "sm_rate" in v else AttentionCurve  # noqa: E731
    return {k: kind(v)(**v) for k, v in (d or {}).items()}


def _fits(section: dict) -> dict[str, FamilyFit]:
    return {name: FamilyFit.from_dict(d) for name, d in section.items()}


def load_fits(path: Path = FITS_PATH) -> tuple[dict[str, FamilyFit], dict[str, FamilyFit]]:
    """The fitted curves per family and per GPU (``FITS``, ``GPU_FITS``) from ``path`` (``rooflines.json``)."""
    data = json.loads(Path(path).read_text())
    return _fits(data["families"]), _fits(data.get("gpus", {}))


_DATA = json.loads(FITS_PATH.read_text())
FITS = MappingProxyType(_fits(_DATA["families"]))  # per family, pooled over FIT_GPUS
GPU_FITS = MappingProxyType(_fits(_DATA.get("gpus", {})))  # per GPU with tables, its own tables alone
FITTED_WITH = f"aiconfigurator-core {_DATA.get('aiconfigurator_core', 'unknown')}"  # the tables' package


def family_fit(family: str) -> FamilyFit:
    """The fitted curves of ``family`` (one of ``FAMILIES``), pooled over ``FIT_GPUS[family]``."""
    if family not in FITS:
        raise ValueError(f"no fitted curves for GPU family {family!r}; fitted: {', '.join(FITS)}")
    return FITS[family]


def gpu_fit(gpu: GpuSpec) -> FamilyFit:
    """The curves the predictor times ``gpu`` with: its own (``GPU_FITS``; a what-if's "h200*"), else its family's."""
    own = GPU_FITS.get(gpu.name.rstrip("*"))
    return own if own is not None else family_fit(gpu.family)
