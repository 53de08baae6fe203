"""The seam where the zoo's kernel times come from: the fitted roofline, or measured tables.

``KernelTimes(gpu, profile)`` (source "roofline", the default, no dependency) times each GEMM part and
each attention core with the GPU's fitted curves (``demos.zoo.rooflines.gpu_fit``), against the GPU's
datasheet peaks (``profile``'s per-dtype rates, which carry a ``gemm`` what-if) and HBM bandwidth
(``gpu``'s, which carries an ``hbm`` what-if). ``MeasuredKernelTimes`` (source "measured", the
``measured`` extra) takes a GEMM's and MLA attention core's time from the tables measured on that GPU
(``demos.zoo.measured``) where they have the shape, interpolating between measured rows, and falls back
to the roofline where they do not; ``fallbacks`` records each op that fell back and why, so that a
report can say so (no silent substitution).

A lightning indexer's decode kernels (``index_scores_seconds``, ``index_topk_seconds``) take the family's
``FamilyFit.index`` curves, the top-k at the score distribution of ``index_scores`` (default ``SERVED_SCORES``).

A curve's ``latency`` is the fixed time of one kernel as the tables' harness timed it alone; in a step
the fixed time of each kernel is the profile's per-kernel floor (``demos.zoo.profile.MIN_KERNEL``,
measured in graph replays on our H200), which each op pays per device kernel it issues, so the roofline
source leaves the curves' latency out (a modelling choice, docs/kernels.md). A measured row holds its
harness's fixed time, so the measured source takes the row less the family curve's latency (at least
the part a roofline would give).

An MLA decode core over an FP8 cache takes the engine's own curve where the family has one
(``FamilyFit.engine_mla_decode_fp8``: TRT-LLM's, whose Hopper kernel runs 4-5x faster than SGLang's), else the
family's (SGLang's kernels); ``engine`` None (the predictor's step, for every engine at once) takes the family's.
A grouped-query attention decode core takes the curve of the engine's default kernel over its cache's dtype
(``FamilyFit.gqa``, fitted to each engine's measured tables; ``engine`` None: SGLang's), its prefill core the same.

``kernel_times(source, gpu, profile, engine)`` builds one; ``KERNEL_SOURCES`` names the choices.
"""

from __future__ import annotations

import bisect
import math

from dbo.costs import DeviceProfile
from demos.errors import ConfigError, field_ref
from demos.vocabulary import KernelSource, Phase
from demos.zoo.hardware import GpuSpec
from demos.zoo.hardware.collectives import CUSTOM_AR_MAX_BYTES, tp_collective
from demos.zoo.models.dtypes import dtype as storage_dtype
from demos.zoo.rooflines import (
    GEMM_DTYPES,
    INDEX_SCORES,
    MLA_KV,
    FamilyFit,
    GqaCurve,
    gpu_fit,
    gqa_key,
    linear_seconds,
)

__all__ = [
    "GQA_DEFAULT_ENGINE",
    "KERNEL_SOURCES",
    "LOCAL_EXPERTS",
    "SERVED_SCORES",
    "KernelTimes",
    "MeasuredKernelTimes",
    "gemm_curve_key",
    "kernel_times",
    "local_experts_op",
    "storage_curve",
]

KERNEL_SOURCES = KernelSource.choices()
GQA_DEFAULT_ENGINE = "sglang"
"""The engine whose GQA kernels a step of no named engine, or of an engine without fitted GQA tables, is timed with
(the family's curves are SGLang's)."""

SERVED_SCORES = "top_last"
"""The score distribution a served model's indexer top-k is timed at (``demos.zoo.rooflines.INDEX_SCORES``):
distinct scores. The whole-module tables' harness ran dummy weights, whose scores all tie ("flat");
``demos.zoo.attention_module`` composes those rows at that distribution."""

LOCAL_EXPERTS = "local_experts"
"""The kind of op name under which a step's local fused MoE parts are timed (``local_experts_op``)."""


def local_experts_op(storage: str) -> str:
    """The op name a local fused MoE of experts stored as ``storage`` is timed under (``KernelTimes.gemm``)."""
    return f"{LOCAL_EXPERTS} {storage}"


def gemm_curve_key(math: str, has_fp4: bool, curves) -> str:
    """The key of a family's GEMM curves (``curves``: ``FamilyFit.gemm``) a GEMM of ``math`` takes: "fp8", "fp4"
    where the family has an FP4 curve, else "bfloat16" (BF16's, and FP4 weights dequantized on a family
    without FP4 tensor cores); "w4a8" (MXFP4 weights against FP8 activations) takes FP8's on a GPU with FP4
    tensor cores (``has_fp4``), else BF16's."""
    if math == "w4a8":  # FP8 x FP4 kernels on FP4 tensor cores run on the FP8 curve; elsewhere dequantized
        math = "fp8" if has_fp4 else "bfloat16"
    return math if math in ("fp8", "fp4") and math in curves else "bfloat16"


def storage_curve(curves, storage: str, has_fp4: bool):
    """The curve of a family's GEMM curves (``curves``: ``FamilyFit.gemm``) that weights stored as ``storage``
    multiply on (``gemm_curve_key`` of the storage's math)."""
    return curves[gemm_curve_key(storage_dtype(storage).math, has_fp4, curves)]


class KernelTimes:
    """Roofline kernel times on ``gpu`` (module docstring)."""

    source = KernelSource.ROOFLINE

    def __init__(
        self,
        gpu: GpuSpec,
        profile: DeviceProfile,
        fit: FamilyFit | None = None,
        index_scores: str = SERVED_SCORES,
        engine: str | None = None,
        allreduce: str | None = None,
    ):
        if index_scores not in INDEX_SCORES:
            raise ValueError(f"index_scores must be one of {', '.join(INDEX_SCORES)}, got {index_scores!r}")
        self.engine, self.allreduce = engine, allreduce or engine
        self.gpu = gpu
        self.profile = profile
        self.fit = gpu_fit(gpu) if fit is None else fit
        self.index_scores = index_scores
        self.fallbacks: dict[str, str] = {}

    @property
    def mem_bandwidth(self) -> float:
        """The bandwidth a streaming kernel reaches: the FP8 GEMM curve's share of HBM."""
        return self.gpu.hbm_bandwidth * self.fit.gemm["fp8"].mem_efficiency

    def gemm(self, op: str, m: float, n: int, k: int, dtype: str, flops: float, nbytes: float) -> float:
        """Seconds of one GEMM part of ``op`` ((m, n, k): rows per group, n, k) of ``flops`` and ``nbytes``
        on the family's curve of its math (``dtype``: "fp8", "fp4" where the family has an FP4 curve, else
        BF16's), at the GPU's rate of that math (``GpuSpec.flops``: FP4 on a GPU without FP4 tensor cores is
        its BF16 rate); the routed experts' grouped GEMMs (``op`` "experts") move their bytes at the
        family's grouped share of bandwidth (``FamilyFit.experts``), and in the engine's local fused MoE (``op``
        "local_experts <storage>", ``local_experts_op``) at that kernel's for the experts' storage
        (``FamilyFit.local_curve``)."""
        curve = self.fit.gemm[self.gemm_math(dtype)]
        peak, hbm = self.profile.flops_rate(dtype), self.gpu.hbm_bandwidth
        math_s, mem_s = curve.parts(flops, nbytes, m, n, k, peak, hbm, self.gpu.sm_count)
        kind, _, storage = op.partition(" ")
        local = self.fit.local_curve(storage, self.engine, self.gpu.has_fp4) if kind == LOCAL_EXPERTS else None
        grouped = self.fit.experts if op == "experts" else local
        if grouped is not None:
            mem_s = nbytes / (hbm * grouped.mem_efficiency)
        return max(math_s, mem_s)

    def all_reduce(self, nbytes: float, n: int) -> float:
        """Seconds of an all-reduce of a BF16 tensor of ``nbytes`` over ``n`` GPUs of one NVLink domain: NCCL's
        ring (``tp_collective``) or, up to ``CUSTOM_AR_MAX_BYTES``, the engine build's kernel where faster (the line
        ``FamilyFit.engine_all_reduce`` holds under ``allreduce``, ``demos.zoo.engine_allreduce``, default the
        engine's; none, or one without a table: the family's line of every engine's kernel); 0 for one GPU."""
        ring = tp_collective(self.gpu, "all_reduce", nbytes, n)
        line = self.fit.engine_all_reduce.get(self.allreduce) or self.fit.custom_all_reduce
        if line is None or n < 2 or nbytes > CUSTOM_AR_MAX_BYTES:
            return ring
        return min(ring, line.seconds(nbytes, n - 1))

    def gemm_math(self, dtype: str) -> str:
        """The key of the family's GEMM curve a GEMM of math ``dtype`` takes (``gemm_curve_key``)."""
        return gemm_curve_key(dtype, self.gpu.has_fp4, self.fit.gemm)

    def memory(self, nbytes: float, flops: float = 0.0) -> float:
        """Seconds of a memory pass of ``nbytes`` folded into an op (its op pays the kernel floor)."""
        return max(nbytes / self.mem_bandwidth, flops / self.profile.flops_rate("bfloat16"))

    def attention(
        self,
        phase: str,
        flops: float,
        nbytes: float,
        shape: tuple | None = None,
        fp8_cache: bool = False,
        units: float = 0.0,
        module: str = "mla",
    ) -> float:
        """Seconds of an attention core of ``flops`` and ``nbytes`` in ``phase``; ``shape`` (batch, heads,
        kv_len) for MLA, None for grouped-query attention (on ``gqa_curve`` with its ``units``, requests x KV heads;
        the MLA curve of the phase where the family has none, a stated extrapolation). An MLA decode core carries
        the fixed time of its ``module`` too (``module_extra``). ``fp8_cache``: a core over an FP8 cache, an MLA
        decode one timed on the engine's own curve of such rows or the family's (``FamilyFit.mla_decode_fp8``)."""
        peak, hbm = self.profile.flops_rate("bfloat16"), self.gpu.hbm_bandwidth
        if shape is None and (gqa := self.gqa_curve(phase, fp8_cache)) is not None:
            return gqa.seconds(flops, nbytes, peak, hbm, units) - gqa.latency
        curve = self.fit.mla_decode if phase == Phase.DECODE else self.fit.mla_prefill
        if shape is not None and fp8_cache and phase == Phase.DECODE:
            curve = self.fit.engine_mla_decode_fp8.get(self.engine) or self.fit.mla_decode_fp8 or curve
        extra = self.module_extra(phase, shape, fp8_cache, module)
        return curve.seconds(flops, nbytes, peak, hbm) - curve.latency + extra

    def gqa_curve(self, phase: str, fp8_cache: bool) -> GqaCurve | None:
        """The GQA curve of ``phase`` of the engine's kernel over a BF16 or FP8 cache (``FamilyFit.gqa``; ``engine``
        None, or an engine whose tables were not fitted, such as AMD's ATOM: SGLang's, the family's kernels); None
        where the family has none (the MLA curve stands in)."""
        kv = "fp8" if fp8_cache else "bfloat16"
        own = self.fit.gqa.get(gqa_key(phase, self.engine, kv)) if self.engine else None
        return own or self.fit.gqa.get(gqa_key(phase, GQA_DEFAULT_ENGINE, kv))

    def gdn(self, kernel: str, phase: str, flops: float, nbytes: float, chunks: float = 0.0) -> float:
        """Seconds of a Gated DeltaNet ``kernel`` ("delta_rule" or "conv") of ``flops`` and ``nbytes`` in
        ``phase`` on the family's fitted curve (``FamilyFit.gdn``; the prefill delta rule's a ``ChunkedCurve``
        over a chain of ``chunks``), its fixed time left to the kernel floor as for every curve; a family
        without that curve is a ``ConfigError``."""
        return self._linear(self.fit.gdn, "Gated DeltaNet", kernel, phase, flops, nbytes, chunks)

    def kda(self, kernel: str, phase: str, flops: float, nbytes: float, chunks: float = 0.0) -> float:
        """``gdn``'s for a Kimi Delta Attention ``kernel`` on ``FamilyFit.kda`` (SGLang's ``kda_perf`` kernels),
        its work counted as a Gated DeltaNet layer's of as many key heads as value heads (``demos.zoo.work``):
        KDA's state per head is ``dk x dv`` and moves the same bytes; its decay's flops the curve absorbs."""
        return self._linear(self.fit.kda, "Kimi Delta Attention", kernel, phase, flops, nbytes, chunks)

    def _linear(self, curves: dict, what: str, kernel: str, phase: str, flops, nbytes, chunks) -> float:
        """``gdn`` and ``kda``: ``kernel``'s curve of ``phase`` among ``curves`` (a ``GDN_CURVES``-keyed dict of
        the family's, ``what`` the layer kind in words), less its fixed time."""
        curve = curves.get(f"{kernel} {phase}")
        if curve is None:
            raise ConfigError(
                f"no {what} {kernel} curve fitted for the {self.fit.family} family (python -m demos.fits write)"
            )
        peak, g = self.profile.flops_rate("bfloat16"), self.gpu
        return linear_seconds(curve, flops, nbytes, peak, g.hbm_bandwidth, g.sm_count, chunks) - curve.latency

    def mhc(self, site: str, flops: float, nbytes: float) -> float:
        """Seconds of a wide residual's ``site`` kernel ("pre" or "post") of ``flops`` and ``nbytes`` on the
        family's fitted curve (``FamilyFit.mhc``), its fixed time included: the kernel's own (the pre
        kernel's Sinkhorn iterations run one after another), several times the per-kernel floor; a family
        without that curve is a ``ConfigError``."""
        curve = self.fit.mhc.get(site)
        if curve is None:
            raise ConfigError(
                f"no hyper-connection {site} curve fitted for the {self.fit.family} family (python -m demos.fits write)"
            )
        return curve.seconds(flops, nbytes, self.profile.flops_rate("bfloat16"), self.gpu.hbm_bandwidth)

    @property
    def has_index(self) -> bool:
        """Whether the family has a lightning indexer's decode curves (``FamilyFit.index``; a file written
        before they were fitted has none, and its indexer is timed as before: ``demos.zoo.compressed_attention``)."""
        return bool(self.fit.index)

    def index_scores_seconds(self, flops: float, nbytes: float) -> float:
        """Seconds of a decode indexer's scores (DeepGEMM's ``fp8_paged_mqa_logits``) of ``flops`` and ``nbytes``
        (``demos.zoo.work.index_score_work``) on the family's fitted curve at the GPU's FP8 rate, less the
        share of its fixed time the kernel floor stands for (``_floor_share``)."""
        curve = self.fit.index["scores"]
        t = curve.seconds(flops, nbytes, self.profile.flops_rate("fp8"), self.gpu.hbm_bandwidth)
        return t - self._floor_share(curve.latency)

    def _floor_share(self, latency: float) -> float:
        """The part of an indexer kernel's fixed time ``latency`` that the op's per-kernel floor pays in a step: at
        most the floor (``DeviceProfile.min_kernel``). A fixed time can be the kernel's own work (the top-k over tied
        scores: about 9 us, three floors), which no floor stands for, so it stays."""
        return min(latency, self.profile.min_kernel)

    @property
    def index_extra(self) -> float:
        """The seconds a DeepSeek sparse attention decode indexer takes beyond the kernels it is composed of
        (``FamilyFit.dsa_index``, fitted to SGLang's measured modules with and without the indexer:
        ``demos.zoo.attention_module``); 0 in a fit without it."""
        return self.fit.dsa_index

    @property
    def has_prefill_index(self) -> bool:
        """Whether the family has a prefill indexer's scores curve (``FamilyFit.index["prefill scores"]``; a
        file written before it was fitted has none, and the prefill indexer is timed as an FP8 GEMM)."""
        return "prefill scores" in self.fit.index

    def index_prefill_scores_seconds(self, tokens: float, context: float, heads: int, head_dim: int) -> float:
        """Seconds of a prefill indexer's scores (DeepGEMM's ``fp8_mqa_logits``) of ``tokens`` prompt tokens in
        requests of ``context`` tokens (causal within each, the last request the remainder; no cached prefix)
        with ``heads`` heads of ``head_dim``, on the family's fitted curve at the GPU's FP8 rate, less the
        floor's share of its fixed time."""
        curve = self.fit.index["prefill scores"]
        full, rest = divmod(float(tokens), float(context))
        pairs = full * curve.pairs(float(context), 0.0) + (curve.pairs(rest, 0.0) if rest else 0.0)
        longest = float(context) if full else rest
        peak = self.profile.flops_rate("fp8")
        return curve.seconds(pairs, longest, 2.0 * heads * head_dim, peak, self.gpu.sm_count) - self._floor_share(
            curve.latency
        )

    def index_topk_seconds(self, kernel: str, rows: float, entries: float, topk: int) -> float:
        """Seconds of ``kernel``'s ("csa": DeepSeek-V4's, "dsa": DeepSeek-V3.2's and GLM-5's) top-``topk`` of
        ``rows`` rows of ``entries`` scores on the family's fitted curve at this source's score distribution
        (``index_scores``: every score tied when "flat"), less the floor's share of its fixed time; 0 when
        ``entries <= topk``."""
        curve = self.fit.index[f"{kernel} topk {self.index_scores}"]
        ties = entries if self.index_scores == "flat" else 0.0
        t = curve.seconds(rows, entries, topk, self.gpu.sm_count, ties)
        return max(0.0, t - self._floor_share(curve.latency)) if t else 0.0

    def module_extra(self, phase: str, shape: tuple | None, fp8_cache: bool = False, module: str = "mla") -> float:
        """A whole MLA decode module's seconds beyond its kernels: TRT-LLM's (``FamilyFit.mla_module``; ``module``
        "mla:bfloat16", BF16 GEMMs: ``mla_module_gemm`` where fitted), or for SGLang's sparse-MLA ``module`` ("dsa...")
        its own by cache dtype (``sglang_dsa_module``; ``demos.zoo.attention_module``); 0 for prefill, non-MLA."""
        if phase != Phase.DECODE or shape is None:
            return 0.0
        kind, _, gemm = module.partition(":")
        own = self.fit.sglang_dsa_module if kind == "dsa" and self.engine == "sglang" else {}
        return own.get("fp8" if fp8_cache else "bfloat16", self.fit.mla_module_gemm.get(gemm, self.fit.mla_module))


def _interp(xs: list[float], ys: list[float], x: float) -> float:
    """Linear interpolation of y at x in log-log coordinates (clamped to the ends)."""
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1] * x / xs[-1]  # past the table: proportional to the size
    i = bisect.bisect_right(xs, x)
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    w = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
    return math.exp(math.log(y0) + w * (math.log(y1) - math.log(y0)))


class MeasuredKernelTimes(KernelTimes):
    """Kernel times from the tables measured on ``gpu`` where they have the shape (module docstring)."""

    source = KernelSource.MEASURED

    def __init__(self, gpu: GpuSpec, profile: DeviceProfile, table_gpu: str, engine: str | None = None, **kw):
        super().__init__(gpu, profile, engine=engine, **kw)
        from demos.zoo import measured

        self.table_gpu = table_gpu
        self._gemm: dict[tuple, tuple[list, list]] = {}
        for dtype, theirs in GEMM_DTYPES.items():
            rows: dict[tuple, list] = {}
            for r in measured.gemm_rows(table_gpu, theirs):
                rows.setdefault((dtype, r.n, r.k), []).append((r.m, r.seconds))
            for key, pts in rows.items():
                pts.sort()
                self._gemm[key] = ([float(m) for m, _ in pts], [s for _, s in pts])
        self._mla: dict[tuple, dict[int, tuple[list, list]]] = {}
        for phase in Phase:
            grid: dict[tuple, dict[int, list]] = {}
            for r in measured.mla_rows(table_gpu, phase, MLA_KV):
                grid.setdefault((phase, r.heads), {}).setdefault(r.batch, []).append((r.kv_len, r.seconds))
            for key, by_batch in grid.items():
                self._mla[key] = {
                    b: ([float(s) for s, _ in sorted(p)], [t for _, t in sorted(p)]) for b, p in by_batch.items()
                }

    def _fall(self, op: str, why: str) -> None:
        self.fallbacks.setdefault(op, why)

    def gemm(self, op: str, m: float, n: int, k: int, dtype: str, flops: float, nbytes: float) -> float:
        key = (self.gemm_math(dtype), n, k)
        table = self._gemm.get(key)
        if flops > 2.0 * m * n * k * 1.001:  # a grouped GEMM (routed experts, per-head bmm): one kernel
            self._fall(op, f"grouped GEMM: the tables time single GEMMs on {self.table_gpu}")
            return super().gemm(op, m, n, k, dtype, flops, nbytes)
        if table is None:
            self._fall(op, f"no measured {key[0]} GEMM with n={n}, k={k} on {self.table_gpu}")
            return super().gemm(op, m, n, k, dtype, flops, nbytes)
        floor = super().gemm(op, m, n, k, dtype, flops, nbytes)
        return max(floor, _interp(*table, m) - self.fit.gemm[key[0]].latency)

    def attention(
        self,
        phase: str,
        flops: float,
        nbytes: float,
        shape: tuple | None = None,
        fp8_cache: bool = False,
        units: float = 0.0,
        module: str = "mla",
    ) -> float:
        grid = self._mla.get((phase, shape[1])) if shape is not None and not fp8_cache else None
        if grid is None:
            what = "GQA attention (timed on its family's GQA curve)" if shape is None else f"MLA with {shape[1]} heads"
            what += " over an FP8 cache" if fp8_cache else ""
            self._fall(f"attention ({phase})", f"no measured table for {what} on {self.table_gpu}")
            return super().attention(phase, flops, nbytes, shape, fp8_cache, units, module)
        batch, _, kv_len = shape
        batches = sorted(grid)
        ts = [_interp(*grid[b], max(1.0, kv_len)) for b in batches]
        got = _interp([float(b) for b in batches], ts, max(1.0, batch))
        curve = self.fit.mla_decode if phase == Phase.DECODE else self.fit.mla_prefill
        measured_core = got - curve.latency + self.module_extra(phase, shape, module=module)
        return max(super().attention(phase, flops, nbytes, shape, module=module), measured_core)


def kernel_times(
    source: str, gpu: GpuSpec, profile: DeviceProfile, engine: str | None = None, allreduce: str | None = None
) -> KernelTimes:
    """A ``KernelTimes`` of ``source`` ("roofline" or "measured") for ``gpu``, of ``engine``'s kernels where they
    differ (module docstring; None: the family's), its all-reduces on ``allreduce``'s line (``KernelTimes.all_reduce``);
    a bad source, a GPU without tables, or the measured extra missing -> one-line ``ConfigError``."""
    if source == KernelSource.ROOFLINE:
        return KernelTimes(gpu, profile, engine=engine, allreduce=allreduce)
    if source != KernelSource.MEASURED:
        raise ConfigError(f"{field_ref('kernels')} must be one of {', '.join(KERNEL_SOURCES)}, got {source!r}")
    from demos.zoo import measured

    measured.package_version()  # MeasuredTablesError (a ConfigError) with the install hint
    if gpu.name not in measured.SYSTEMS:
        raise ConfigError(
            f"{field_ref('kernels')} measured: no measured tables for {gpu.name}; "
            f"tables exist for {', '.join(measured.SYSTEMS)} (use --kernels roofline)"
        )
    return MeasuredKernelTimes(gpu, profile, gpu.name, engine, allreduce=allreduce)
