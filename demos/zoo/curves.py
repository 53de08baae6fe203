"""Kernel-time curves: the formulas the predictor times kernels with, each a frozen dataclass of fitted
parameters (their figures per GPU family: ``demos.zoo.rooflines``).

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
Grouped-query attention (``GqaCurve``) adds a time per work item, ``per_unit x requests x kv_heads``: each
request's share of each KV head is a unit of the kernel's work (its page-table walk, its split-KV merge) whose
cost does not shrink with its bytes; one curve per phase, engine and cache dtype.

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

Every curve's formula takes numbers or numpy arrays alike (``_ceil``, ``_min``, ``_max`` pick the numpy
function for an array), so the fitting evaluates the very formula the simulator runs, over all the rows at
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from demos.zoo.elementwise import ceil_ as _ceil
from demos.zoo.elementwise import max_ as _max
from demos.zoo.elementwise import min_ as _min

__all__ = [
    "OUT_TILE",
    "ROW_TILE",
    "AttentionCurve",
    "ChunkedCurve",
    "GemmCurve",
    "GemmShape",
    "GqaCurve",
    "GroupedCurve",
    "LinearCost",
    "SmBoundCurve",
    "linear_seconds",
]

ROW_TILE = 16
"""Rows a GEMM's tensor-core work is padded to (the smallest tile small-M kernels issue; a stated choice)."""
OUT_TILE = 128
"""The output tile edge ``GemmShape.tiles`` counts tiles in (their share of the SMs is the occupancy)."""


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
        return self.latency + _roof(self, flops, nbytes, peak, hbm)


def _roof(curve, flops, nbytes, peak: float, hbm: float):
    """The longer of ``flops`` at ``curve``'s share of ``peak`` and ``nbytes`` at its share of ``hbm``: the
    attention-form curves' roofline (``AttentionCurve``, ``GqaCurve``, ``ChunkedCurve``)."""
    return _max(flops / (peak * curve.ceiling), nbytes / (hbm * curve.mem_efficiency))


@dataclass(frozen=True)
class GqaCurve:
    """A grouped-query attention core's time curve (module docstring): an ``AttentionCurve``'s shares and fixed
    time, and ``per_unit`` seconds for each of its ``units`` (requests x KV heads on the GPU)."""

    ceiling: float
    mem_efficiency: float
    latency: float
    per_unit: float

    def seconds(self, flops: float, nbytes: float, peak: float, hbm: float, units: float) -> float:
        return self.latency + _roof(self, flops, nbytes, peak, hbm) + self.per_unit * units


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
        return self.latency + _max(_roof(self, flops, nbytes, peak, hbm), chunks * self.per_chunk)


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
