"""Kernel-time curves fitted per GPU family to measured kernel tables, and the fitted figures' data file.

The curves' formulas (``GemmCurve``, ``AttentionCurve``, ``GroupedCurve``, ``LinearCost`` and the linear-attention
kinds) live in ``demos.zoo.curves`` and are re-exported here; this module holds one family's fitted set of them
(``FamilyFit``) and the data file they are read from.

``FITS`` holds the curves per family, pooled over ``FIT_GPUS``, and ``GPU_FITS`` each GPU's fitted to its own
tables alone (every GPU with tables, ``demos.zoo.measured.SYSTEMS``); the predictor takes a GPU's own where it
has them, else its family's (``gpu_fit``). ``python -m demos.fits`` writes both to ``rooflines.json`` from the
measured tables, each figure's provenance in the file (docs/kernels.md). The curves' vocabulary lives here
too (``GEMM_DTYPES``, ``MLA_KV``: which tables our dtypes are fitted to); ``demos.fits`` imports this module.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import MappingProxyType

from demos.zoo.curves import (
    OUT_TILE,
    ROW_TILE,
    AttentionCurve,
    ChunkedCurve,
    GemmCurve,
    GemmShape,
    GqaCurve,
    GroupedCurve,
    LinearCost,
    SmBoundCurve,
    linear_seconds,
)
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
    "GqaCurve",
    "GroupedCurve",
    "LinearCost",
    "MqaLogitsCurve",
    "SmBoundCurve",
    "TopkCurve",
    "W4A16_MXFP4",
    "family_fit",
    "gpu_fit",
    "gqa_key",
    "linear_seconds",
    "load_fits",
]

FITS_PATH = Path(__file__).with_name("rooflines.json")
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

W4A16_MXFP4 = "mxfp4_w4a16"
"""The storage whose local curve MXFP4 experts take on a GPU without FP4 tensor cores (``FamilyFit.local_curve``)."""

LOCAL_FALLBACK_STORAGE = "fp8_e4m3"
"""The expert storage whose local fused MoE curve stands in for a storage without one of its own."""


@dataclass(frozen=True)
class FamilyFit:
    """One GPU family's fitted curves (or one GPU's, ``GPU_FITS``): ``gemm`` per dtype ("fp8", "bfloat16"),
    ``mla_decode``, ``mla_prefill``, ``ll_sm`` per kernel ("dispatch", "combine"), ``experts`` (the routed experts'
    grouped GEMMs); ``mla_module`` the seconds a whole MLA decode module takes beyond the kernels the predictor
    composes it of (``demos.zoo.attention_module``); ``mla_decode_fp8`` the MLA decode core over an FP8 cache
    (``MLA_KV_FP8``; None: the BF16 curve at the FP8 bytes; SGLang's kernels), ``engine_mla_decode_fp8`` an engine's
    own such core where its tables differ (keyed by engine: "trtllm"); ``gqa`` a grouped-query attention core
    (``GqaCurve``) per phase, engine and KV-cache dtype (keyed ``gqa_key``: "decode sglang bfloat16" ... "prefill
    trtllm fp8"), fitted to the engine's default kernel (``demos.zoo.measured_attention``; empty for a family
    without such tables); ``dsa_index`` the seconds a DeepSeek sparse attention decode indexer takes beyond the
    kernels the predictor composes it of (the same module); ``gdn`` a Gated DeltaNet layer's kernel curves, keyed by
    ``GDN_CURVES`` ("delta_rule decode" ... "conv prefill": the recurrence's and the causal convolution's per phase,
    their work by ``demos.zoo.work.delta_rule_work`` and ``conv_work``; the prefill delta rule a ``ChunkedCurve``,
    its chain ``delta_rule_chunks``); ``kda`` a Kimi Delta Attention layer's, the same keys and kinds of curve,
    fitted to SGLang's ``kda_perf`` kernels, their work counted as a Gated DeltaNet layer's of as many key heads as
    value heads; ``mhc`` a wide residual's kernels (DeepSeek-V4's hyper-connections), keyed by ``MHC_SITES`` ("pre",
    "post"), each an ``AttentionCurve`` whose fixed time is the kernel's own (20 Sinkhorn iterations in "pre"),
    their work by ``demos.zoo.work.mhc_work``; ``index`` a lightning indexer's decode kernels, keyed by
    ``INDEX_CURVES`` ("scores": DeepGEMM's ``fp8_paged_mqa_logits``, an ``AttentionCurve`` over the FP8 peak, its
    work ``demos.zoo.work.index_score_work``; each top-k a ``TopkCurve``, ``demos.zoo.index_curves``);
    ``local_experts`` the routed experts where the engine's local fused MoE runs them (no all-to-all: MoE tensor
    parallelism, or expert parallelism beside attention TP), one ``GroupedCurve`` per expert storage
    (``demos.zoo.models.dtypes`` names), fitted to SGLang's local kernels of that dtype
    (``demos.zoo.measured_moe.sglang_moe_rows``): their share of bandwidth and the kernel's fixed time, which the
    step charges (``local_curve``; empty for a family without such tables: the step then times them on ``experts``
    without a fixed time); ``sglang_dsa_module`` SGLang's sparse-MLA decode module's own fixed time by KV-cache
    dtype ("bfloat16", "fp8"), where ``mla_module`` is TRT-LLM's (``demos.zoo.attention_module``: SGLang takes it
    for DeepSeek sparse attention layers); ``mla_module_gemm`` TRT-LLM's MLA module's fixed time where the module's
    projections are of another GEMM dtype than the FP8 block ones ``mla_module`` is fitted on, by dtype ("bfloat16":
    no activation quantization; ``demos.zoo.attention_module.MODULE_GEMMS``); ``engine_local_experts`` an engine's
    own local kernel of a storage where
    it differs, by engine then storage (``{"vllm": {"mxfp4_w4a16": ...}, "trtllm": ...}``, fitted to that engine's rows,
    ``demos.zoo.measured_moe.engine_local_moe_rows``; only for a family without FP4 tensor cores, whose MXFP4
    experts every engine runs as W4A16: ``local_curve``); ``fitted_on`` the GPUs whose tables gave them;
    ``custom_all_reduce`` the engines' own all-reduce of a small tensor over one NVLink domain (``fixed + per_byte
    x bytes + per_peer x peers``, fitted to SGLang's, vLLM's and TRT-LLM's graph-captured kernels together,
    ``demos.zoo.measured_comm``; None: the NCCL ring model alone), ``engine_all_reduce`` the same line fitted to
    each engine's kernel alone (by engine name); ``source`` the tables' provenance. A field the file lacks (written
    before it was fitted) reads as None, 0 or empty."""

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
    gqa: dict = field(default_factory=dict)
    gdn: dict = field(default_factory=dict)
    mhc: dict = field(default_factory=dict)
    kda: dict = field(default_factory=dict)
    index: dict = field(default_factory=dict)
    local_experts: dict = field(default_factory=dict)
    custom_all_reduce: LinearCost | None = None
    engine_all_reduce: dict = field(default_factory=dict)
    engine_local_experts: dict = field(default_factory=dict)
    sglang_dsa_module: dict = field(default_factory=dict)
    mla_module_gemm: dict = field(default_factory=dict)

    def local_curve(self, storage: str, engine: str | None = None, fp4: bool = True) -> GroupedCurve | None:
        """The local fused MoE's curve for experts stored as ``storage`` in a step of ``engine`` on a GPU with
        (``fp4``) or without FP4 tensor cores: its own where fitted, else block FP8's (a stated stand-in), else None
        (no local curves: the family's ``experts`` applies). MXFP4 experts on a GPU without FP4 tensor cores run
        as W4A16 (every engine's table times them so there): the engine's own such kernel where fitted
        (``engine_local_experts``), else SGLang's."""
        if storage == "mxfp4" and not fp4:
            own = self.engine_local_experts.get(engine, {}).get(W4A16_MXFP4)
            if own is not None:
                return own
            storage = W4A16_MXFP4
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
            "sglang_dsa_module": dict(self.sglang_dsa_module),
            "mla_module_gemm": dict(self.mla_module_gemm),
            "mla_decode_fp8": None if self.mla_decode_fp8 is None else asdict(self.mla_decode_fp8),
            "engine_mla_decode_fp8": {k: asdict(v) for k, v in self.engine_mla_decode_fp8.items()},
            "gqa": {k: asdict(v) for k, v in self.gqa.items()},
            "gdn": {k: asdict(v) for k, v in self.gdn.items()},
            "kda": {k: asdict(v) for k, v in self.kda.items()},
            "mhc": {k: asdict(v) for k, v in self.mhc.items()},
            "index": {k: asdict(v) for k, v in self.index.items()},
            "local_experts": {k: asdict(v) for k, v in self.local_experts.items()},
            "custom_all_reduce": None if self.custom_all_reduce is None else asdict(self.custom_all_reduce),
            "engine_all_reduce": {k: asdict(v) for k, v in self.engine_all_reduce.items()},
            "engine_local_experts": {
                e: {k: asdict(v) for k, v in curves.items()} for e, curves in self.engine_local_experts.items()
            },
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
            sglang_dsa_module={k: float(v) for k, v in (d.get("sglang_dsa_module") or {}).items()},
            mla_module_gemm={k: float(v) for k, v in (d.get("mla_module_gemm") or {}).items()},
            mla_decode_fp8=AttentionCurve(**d["mla_decode_fp8"]) if d.get("mla_decode_fp8") else None,
            engine_mla_decode_fp8={k: AttentionCurve(**v) for k, v in (d.get("engine_mla_decode_fp8") or {}).items()},
            gqa={k: GqaCurve(**v) for k, v in (d.get("gqa") or {}).items()},
            gdn=_linear_curves(d.get("gdn")),
            kda=_linear_curves(d.get("kda")),
            mhc={k: AttentionCurve(**v) for k, v in (d.get("mhc") or {}).items()},
            index={
                k: (TopkCurve if "per_entry" in v else MqaLogitsCurve if "min_keys" in v else AttentionCurve)(**v)
                for k, v in (d.get("index") or {}).items()
            },
            local_experts={k: GroupedCurve(**v) for k, v in (d.get("local_experts") or {}).items()},
            custom_all_reduce=LinearCost(**d["custom_all_reduce"]) if d.get("custom_all_reduce") else None,
            engine_all_reduce={k: LinearCost(**v) for k, v in (d.get("engine_all_reduce") or {}).items()},
            engine_local_experts={
                e: {k: GroupedCurve(**v) for k, v in curves.items()}
                for e, curves in (d.get("engine_local_experts") or {}).items()
            },
        )


def gqa_key(phase: str, engine: str, kv_dtype: str) -> str:
    """The key of ``FamilyFit.gqa`` for ``engine``'s kernel of ``phase`` over a ``kv_dtype`` cache."""
    return f"{phase} {engine} {kv_dtype}"


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
