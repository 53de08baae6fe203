"""The MLA decode module as the predictor composes it, for the module rows engines measured whole.

The predictor builds a layer's attention from its kernels (``demos.zoo.costs``): the projections and
absorptions on the family's fitted GEMM curves, the core on its MLA curve, and every kernel of the op at
least the per-kernel floor (``demos.zoo.profile``). Each of those curves is fitted to a table of one
kernel. TRT-LLM's collection also measures the whole decode module as the engine runs it, from the input
norm to ``o_proj`` (``demos.zoo.measured.MlaModuleRow``), on every GPU with tables; against it the
composed op runs short at the batches decode serves, by a median 25-36 us per layer (the
module's small kernels, its quantizations and the gaps between its kernels cost more than the floors
say; the composition cannot tell which). ``FamilyFit.mla_module`` holds that constant per GPU family
(fitted by ``demos.fits.module``), and ``KernelTimes.attention`` adds it to every MLA decode core, so each
ubatch of a DBO step pays it again; it covers the floors of the module's kernels rather than adding to them
(``demos.zoo.attention_base.module_costs``).

``module_rows(gpu)`` are the rows fitted and checked (``FIT_ROWS``: FP8 block GEMMs and a BF16 cache,
DeepSeek-V3's checkpoint and the predictor's default cache, at 16 to 128 heads per GPU: attention TP 8 to
1); ``composed_seconds(gpu, row, fit)`` is the predictor's attention op of one row, its kernels timed with
``fit`` (its ``mla_module`` included): what the fit puts on the rows and ``validate --kernels`` (op ``mla
module``) compares with them. The same tables time the module with BF16 GEMMs (no activation quantized):
``module_rows(gpu, "bfloat16")`` (``MODULE_GEMMS``), composed at BF16 weights, fit ``FamilyFit.mla_module_gemm``,
which a module of BF16 projections takes (``demos.zoo.attention_base.module_key``). Prefill modules, other
attention and other engines' modules are not fitted (vLLM's measures a median 46-55 us longer at up to 64
requests on H100, H200 and GB200: docs/kernels.md).

``dsa_rows(gpu)`` are SGLang's whole sparse-MLA decode modules of DeepSeek-V3.2 and GLM-5 (``DSA_ROWS``),
which ``validate kernels`` (op ``dsa module``) compares with the predictor's sparse attention op
(``composed_seconds`` with the row's model, as SGLang's step composes it): the indexer and the core over its
top-k composed as ``demos.zoo.attention.SparseMLA`` composes them, SGLang's module time and the family's indexer
time included.

``skip_rows(gpu, kv)`` are SGLang's sparse-MLA modules run without their indexer (``SKIP_MODELS``: GLM-5.2's
checkpoints, whose indexer SGLang skips), over a BF16 or FP8 cache: SGLang's own MLA decode module. Its fixed
time is not TRT-LLM's: below 2,048 cached tokens the composed op runs 10-17 us past these rows on B200, and
SGLang's module over an FP8 cache measures 8-10 us shorter than over a BF16 one on Blackwell at few requests,
where TRT-LLM's measures the same (its FP8 decode path fuses the RoPE of the query and key with their
quantization into one kernel and skips the query's concatenation: ``_fuse_rope_for_trtllm_mla``), and 15-19 us
longer on Hopper (FlashMLA's FP8 kernel). ``FamilyFit.sglang_dsa_module`` holds SGLang's per cache dtype,
fitted by ``demos.fits.module`` to these rows (``skip_composed_seconds``: the op less its indexer), and a step of
SGLang's charges it to its sparse-MLA layers in place of TRT-LLM's (``KernelTimes.module_extra``); its dense
MLA keeps TRT-LLM's (SGLang's tables measure no dense module: a guess, docs/kernels.md).

``index_rows(gpu)`` are the indexer's share of those modules: SGLang measures GLM-5's module with and
without its indexer (``INDEX_ROWS``: GLM-5's FP8 checkpoint, and GLM-5.2's, of the same shapes, with the
indexer skipped), and a row's share is the one less the other at the same heads, requests and context;
``index_composed_seconds`` is the predictor's ``attn_index`` op of a row alone. The indexer is a chain of
about 17 small kernels in SGLang's decode (its projections and their quantizations, norm, RoPE, two
Hadamard rotations, the cache write, the head weights, the scores' schedule, the scores and the top-k)
against the op's 5, and takes 24-30 us with nothing to select where the op's floors give 15:
``FamilyFit.dsa_index`` holds that excess per GPU family, fitted by ``demos.fits.module`` to the rows below
``INDEX_FIT_BELOW`` cached tokens (where the top-k has nothing to do and the scores read a few
keys), and ``KernelTimes.index_extra`` adds it to every DSA decode indexer. The rows of longer contexts and
every DeepSeek-V3.2 module row are fitted to nothing.

``v4_rows(gpu)`` are SGLang's whole DeepSeek-V4 decode modules (``V4_MODELS``: Flash and Pro, CSA and HCA
layers, FP8 block GEMMs and an FP8 cache, attention TP 1 to 8), which ``validate kernels`` (ops ``csa
module``, ``hca module``) compares with the predictor's attention op of a layer of the row's ratio
(``v4_composed_seconds``: ``demos.zoo.compressed_attention.Compressed`` composed, its hyper-connection
kernels apart); nothing is fitted to them either. A CSA row's indexer is composed with its top-k at the
harness's tied scores (``HARNESS_SCORES``), the one condition in which a module row differs from what the
predictor times for a served model.

``msa_rows(gpu)`` are SGLang's whole MiniMax-M3 block-sparse decode modules (BF16 cache and GEMMs, its split
top-k kernel), which ``validate kernels`` (op ``msa module``) compares with the predictor's block-sparse
attention op (``msa_composed_seconds``: ``demos.zoo.gqa_attention.BlockSparseGQA`` composed); nothing
fitted.
"""

from __future__ import annotations

import functools
import statistics
from typing import NamedTuple

from demos.zoo.breakdown import attention_seconds, layer_attention
from demos.zoo.fold import Folder
from demos.zoo.hardware import get_gpu
from demos.zoo.kernel_times import KernelTimes
from demos.zoo.models import get_preset, with_precision
from demos.zoo.plan import launch_seconds
from demos.zoo.profile import gpu_profile
from demos.zoo.rooflines import FamilyFit
from demos.zoo.workload import Workload, cluster_for

__all__ = [
    "DSA_FP8_KERNELS",
    "DSA_MODELS",
    "DSA_ROWS",
    "FIT_ROWS",
    "MODULE_GEMMS",
    "HARNESS_SCORES",
    "MSA_ROWS",
    "V4_MODELS",
    "INDEX_FIT_BELOW",
    "INDEX_ROWS",
    "IndexShareRow",
    "SKIP_MODELS",
    "composed_seconds",
    "dsa_rows",
    "index_composed_seconds",
    "index_rows",
    "module_rows",
    "msa_composed_seconds",
    "msa_rows",
    "skip_composed_seconds",
    "skip_rows",
    "v4_composed_seconds",
    "v4_rows",
]

HARNESS_SCORES = "flat"
"""The score distribution of the module tables' indexers: SGLang's module harness runs dummy weights, whose
indexer scores all tie (aiconfigurator-core's own models say so: "module is dummy/flat", and correct its
module rows by the flat less the distinct top-k time); every module row here is composed with the top-k
timed at it (``KernelTimes.index_topk_seconds``), where the predictor times distinct scores
(``demos.zoo.kernel_times.SERVED_SCORES``). Only DeepSeek-V4's CSA indexer takes the fitted top-k (the DSA
models' keeps a memory pass for now: docs/models.md)."""

FIT_ROWS = {"gemm_dtype": "fp8_block", "kv_dtype": "bfloat16", "heads": (16, 32, 64, 128)}
"""The module rows fitted and checked: FP8 block GEMMs, a BF16 cache, 16 to 128 query heads per GPU."""

MODULE_GEMMS = {"bfloat16": "bf16"}
"""The other GEMM dtypes of the module tables whose fixed time is fitted apart (``FamilyFit.mla_module_gemm``'s
keys) -> the ``--weights`` their rows are composed at. Their NVFP4 rows are not: DeepSeek's NVFP4 checkpoints keep
the module's first projections in BF16, a mix no table times."""

_MODEL = "deepseek-v3"  # the architecture every module table was measured on
_EP = 8  # any EP group whose NVLink domain holds attention TP 8; the attention op does not depend on it


def module_rows(gpu: str, gemm: str = FIT_ROWS["gemm_dtype"]) -> list:
    """``gpu``'s measured module rows of ``FIT_ROWS`` (needs the ``measured`` extra); ``gemm``: of that GEMM dtype
    instead (``MODULE_GEMMS``)."""
    from demos.zoo import measured

    return [
        r
        for r in measured.mla_module_rows(gpu)
        if r.gemm_dtype == gemm and r.kv_dtype == FIT_ROWS["kv_dtype"] and r.heads in FIT_ROWS["heads"]
    ]


@functools.lru_cache(maxsize=16)
def _spec(model: str, kv_cache: str, weights: str | None = None):
    """``model`` with its KV cache in ``kv_cache`` (and its weights in ``weights``, None: the preset's), built
    once: a fit composes every row many times."""
    return with_precision(get_preset(model), weights=weights, kv_cache=kv_cache)


DSA_MODELS = {"deepseek-ai/DeepSeek-V3.2": "deepseek-v3.2", "zai-org/GLM-5-FP8": "glm-5"}
"""The sparse-MLA module table's models -> the preset of each (GLM-5's FP8 rows are those of its FP8
checkpoint, whose GEMMs the rows' ``fp8_block`` are)."""

DSA_ROWS = {
    "kernels": ("sglang_dsa_indexer_fa3", "sglang_dsa_indexer_trtllm"),
    "gemm_dtype": "fp8_block",
    "kv_dtype": "bfloat16",
}
"""The sparse-MLA module rows checked: SGLang's indexer with its attention kernel over a BF16 cache
(FlashAttention-3 on Hopper, TRT-LLM's on Blackwell: each GPU's table has one of them), FP8 block GEMMs
(the other rows read an FP8 cache, or skip the indexer, which GLM-5.2 does)."""


def dsa_rows(gpu: str, kv: str = DSA_ROWS["kv_dtype"]) -> list:
    """``gpu``'s measured sparse-MLA module rows of ``DSA_ROWS`` for the ``DSA_MODELS``, at attention TP 1
    to 8 (needs the ``measured`` extra); ``kv`` "fp8": the rows over an FP8 cache instead (FlashMLA's FP8
    kernel on Hopper, ``DSA_FP8_KERNELS``; TRT-LLM's on Blackwell)."""
    from demos.zoo import measured

    heads_of = {model: get_preset(preset).attention.heads for model, preset in DSA_MODELS.items()}
    kernels = DSA_ROWS["kernels"] + (DSA_FP8_KERNELS if kv == "fp8" else ())
    out = []
    for r in measured.dsa_module_rows(gpu):
        heads = heads_of.get(r.model, 0)
        dtypes = (r.gemm_dtype, r.kv_dtype) == (DSA_ROWS["gemm_dtype"], kv)
        picked = dtypes and r.kernel in kernels
        if picked and heads and heads % r.heads == 0 and heads // r.heads <= _EP:
            out.append(r)
    return out


DSA_FP8_KERNELS = ("sglang_dsa_indexer_flashmla_kv",)
"""The FP8-cache module rows' attention kernel on Hopper (FlashMLA's; Blackwell's FP8 rows keep TRT-LLM's)."""

SKIP_MODELS = {"zai-org/GLM-5.2-FP8": "fp8", "nvidia/GLM-5.2-NVFP4": "bf16"}
"""The module table's checkpoints without an indexer -> the weights of their attention GEMMs: GLM-5.2's FP8
one (H100, H200, B200 measure it) and its NVFP4 one, whose attention stays BF16 (GB200, B300, GB300)."""


def skip_rows(gpu: str, kv: str) -> list:
    """``gpu``'s SGLang modules without their indexer (``SKIP_MODELS``) over a ``kv`` ("bfloat16", "fp8") cache,
    run by the attention kernel ``dsa_rows`` reads over that cache, below 512 requests and ``INDEX_FIT_BELOW``
    cached tokens (the rows ``FamilyFit.sglang_dsa_module`` is fitted to), at attention TP 1 to 8."""
    from demos.zoo import measured

    heads = get_preset(INDEX_ROWS["preset"]).attention.heads
    picked = DSA_ROWS["kernels"] + (DSA_FP8_KERNELS if kv == "fp8" else ())
    kernels = {k.replace("_indexer_", "_skip_indexer_") for k in picked}
    return [
        r
        for r in measured.dsa_module_rows(gpu)
        if r.model in SKIP_MODELS
        and r.kernel in kernels
        and r.kv_dtype == kv
        and r.batch < 512
        and r.kv_len < INDEX_FIT_BELOW
        and heads % r.heads == 0
        and heads // r.heads <= _EP
    ]


def skip_composed_seconds(gpu: str, row, fit: FamilyFit) -> float:
    """The predictor's sparse attention op of SGLang (``engine`` "sglang") less its indexer, for skip row ``row``
    on ``gpu``: GLM-5 with the row's GEMM weights (``SKIP_MODELS``) and cache, its kernels timed with ``fit``."""
    kv = "fp8" if row.kv_dtype.startswith("fp8") else "bf16"
    spec = _spec(INDEX_ROWS["preset"], kv, SKIP_MODELS[row.model])
    tp = spec.attention.heads // row.heads
    whole = _layer_attention_seconds(gpu, spec, spec.first_k_dense, row.batch, row.kv_len, tp, fit, "sglang")
    return whole - _index_seconds(gpu, spec, row.batch, row.kv_len, tp, fit)


INDEX_ROWS = {
    "module": "zai-org/GLM-5-FP8",
    "skipped": "zai-org/GLM-5.2-FP8",
    "preset": "glm-5",
    "gemm_dtype": "fp8_block",
    "kv_dtype": "bfloat16",
}
"""The module rows whose difference is the indexer's share: GLM-5's FP8 checkpoint with its indexer, and
GLM-5.2's (the same attention shapes: ``config.json``) without it (the tables' ``skip_indexer`` kernels),
both with FP8 block GEMMs and a BF16 cache, as ``DSA_ROWS``; H100, H200 and B200 measure both."""

INDEX_FIT_BELOW = 2048
"""The cached tokens below which an indexer share row fits ``FamilyFit.dsa_index``: GLM-5's top-k keeps 2,048
entries, so below it the top-k has nothing to select and the scores read a few keys (the indexer's fixed
time, nearly alone)."""


class IndexShareRow(NamedTuple):
    """The indexer's share of a measured module (``index_rows``): ``batch`` requests of ``kv_len`` cached
    tokens at ``heads`` query heads per GPU; ``module`` and ``skipped`` the two rows' seconds (medians where
    a table repeats a shape) and ``seconds`` their difference."""

    batch: int
    heads: int
    kv_len: int
    module: float
    skipped: float

    @property
    def seconds(self) -> float:
        return self.module - self.skipped


def index_rows(gpu: str) -> list[IndexShareRow]:
    """``gpu``'s indexer share rows (module docstring; needs the ``measured`` extra): every shape ``INDEX_ROWS``'
    two models both measure at attention TP 1 to 8, below 512 requests (the tables step by about 1 ms at 512
    and 1,024 on some GPUs, another path), with a positive share."""
    from demos.zoo import measured

    heads = get_preset(INDEX_ROWS["preset"]).attention.heads
    sides = {INDEX_ROWS["module"]: "module", INDEX_ROWS["skipped"]: "skipped"}
    times: dict[tuple[str, tuple], list[float]] = {}
    for r in measured.dsa_module_rows(gpu):
        dtypes = (r.gemm_dtype, r.kv_dtype) == (INDEX_ROWS["gemm_dtype"], INDEX_ROWS["kv_dtype"])
        side = sides.get(r.model)
        if dtypes and side and ("skip_indexer" in r.kernel) == (side == "skipped") and r.batch < 512:
            if heads % r.heads == 0 and heads // r.heads <= _EP:
                times.setdefault((side, (r.batch, r.heads, r.kv_len)), []).append(r.seconds)
    out = []
    for (side, shape), with_index in sorted(times.items()):
        without = times.get(("skipped", shape))
        if side == "module" and without:
            row = IndexShareRow(*shape, statistics.median(with_index), statistics.median(without))
            if row.seconds > 0.0:
                out.append(row)
    return out


def index_composed_seconds(gpu: str, row: IndexShareRow, fit: FamilyFit) -> float:
    """The predictor's ``attn_index`` op alone for indexer share row ``row`` on ``gpu`` (``INDEX_ROWS``' preset,
    its kernels timed with ``fit``, its ``dsa_index`` included): launch overhead and the op's floors as a
    step charges them (``demos.zoo.plan.launch_seconds``)."""
    spec = _spec(INDEX_ROWS["preset"], "bf16")
    return _index_seconds(gpu, spec, row.batch, row.kv_len, spec.attention.heads // row.heads, fit)


def _index_seconds(gpu: str, spec, batch: int, cached: int, tp: int, fit: FamilyFit) -> float:
    """``spec``'s ``attn_index`` op alone for ``batch`` requests of ``cached`` tokens at attention TP ``tp``."""
    w = _workload(gpu, spec, batch, cached, tp)
    profile = gpu_profile(w.gpu, fit=fit)
    fold = Folder(profile, KernelTimes(w.gpu, profile, fit, index_scores=HARNESS_SCORES))
    kind, a = layer_attention(spec.attention, spec.first_k_dense)
    return launch_seconds("attn_index", kind.index_costs(w, a, batch, fold), profile)


def composed_seconds(gpu: str, row, fit: FamilyFit, model: str = _MODEL, engine: str | None = None) -> float:
    """The predictor's attention op (``moe_layer_s["attention"]``) for module row ``row`` on ``gpu``, its
    kernels timed with ``fit`` (its module's fixed time included) as in a step of ``engine`` (None: any):
    ``model`` (DeepSeek-V3 by default) with the row's cache dtype and, for a row of BF16 GEMMs, BF16 weights
    (``MODULE_GEMMS``), ``row.batch`` requests of ``row.kv_len`` cached tokens, attention TP ``heads / row.heads``."""
    spec = _spec(model, "fp8" if row.kv_dtype.startswith("fp8") else "bf16", MODULE_GEMMS.get(row.gemm_dtype))
    tp = spec.attention.heads // row.heads
    return _layer_attention_seconds(gpu, spec, spec.first_k_dense, row.batch, row.kv_len, tp, fit, engine)


def _layer_attention_seconds(
    gpu: str, spec, layer: int, batch: int, cached: int, tp: int, fit: FamilyFit, engine: str | None = None
) -> float:
    """The attention ops of ``spec``'s layer ``layer`` (``attention_seconds``) for ``batch`` requests of
    ``cached`` tokens (at least 1) at attention TP ``tp`` on ``gpu``, its kernels timed with ``fit`` as in a
    step of ``engine``: what every module row here is compared with (an EP group of ``_EP``, which the
    attention op does not see)."""
    w = _workload(gpu, spec, batch, cached, tp)
    profile = gpu_profile(w.gpu, fit=fit)
    kernels = KernelTimes(w.gpu, profile, fit, index_scores=HARNESS_SCORES, engine=engine)
    return attention_seconds(w, batch, layer, profile, kernels)


def _workload(gpu: str, spec, batch: int, cached: int, tp: int) -> Workload:
    """A decode ``Workload`` of ``spec`` for ``batch`` requests of ``cached`` tokens (at least 1) at attention TP
    ``tp`` on ``gpu``, in an EP group of ``_EP`` (which the attention ops do not see)."""
    per = min(_EP, get_gpu(gpu).gpus_per_node)
    return Workload(
        spec, cluster_for(gpu, _EP // per, per, _EP), tokens=batch, context=max(1, cached), ubatches=1, attention_tp=tp
    )


V4_MODELS = {
    "sgl-project/DeepSeek-V4-Flash-FP8": "deepseek-v4-flash",
    "deepseek-ai/DeepSeek-V4-Flash": "deepseek-v4-flash",
    "sgl-project/DeepSeek-V4-Pro-FP8": "deepseek-v4-pro",
    "deepseek-ai/DeepSeek-V4-Pro": "deepseek-v4-pro",
}
"""The DeepSeek-V4 module tables' models -> the preset of each (their attention is the same in every
checkpoint: FP8 block GEMMs; the checkpoints differ in their experts only)."""


def v4_rows(gpu: str) -> list:
    """``gpu``'s measured DeepSeek-V4 decode module rows of the ``V4_MODELS`` with FP8 block GEMMs (the
    checkpoints' attention; the table's BF16 rows are an unquantized path) (needs the ``measured`` extra)."""
    from demos.zoo import measured

    return [r for r in measured.v4_module_rows(gpu) if r.gemm_dtype == "fp8_block" and r.model in V4_MODELS]


def v4_composed_seconds(gpu: str, row, fit: FamilyFit) -> float:
    """The predictor's attention ops of one layer of ``row.ratio`` (``attention_seconds``) for DeepSeek-V4
    module row ``row`` on ``gpu``, its kernels timed with ``fit``: the row's model with an FP8 cache,
    ``row.batch`` requests of ``row.length`` cached tokens, attention TP ``row.tp``."""
    spec = _spec(V4_MODELS[row.model], "fp8")
    layer = spec.attention.compress_ratios.index(row.ratio)
    return _layer_attention_seconds(gpu, spec, layer, row.batch, row.length, row.tp, fit)


MSA_ROWS = {"kernel": "sglang_minimax_decode_triton_sparse_topk_split", "kv_dtype": "bfloat16"}
"""The block-sparse module rows checked: SGLang's split top-k decode kernel (every context; its radix one is
measured at a few), over a BF16 cache (the predictor's default)."""


def msa_rows(gpu: str) -> list:
    """``gpu``'s measured MiniMax-M3 block-sparse decode module rows of ``MSA_ROWS`` (needs the extra)."""
    from demos.zoo import measured

    return [
        r
        for r in measured.msa_module_rows(gpu)
        if r.kernel == MSA_ROWS["kernel"] and r.kv_dtype == MSA_ROWS["kv_dtype"]
    ]


@functools.lru_cache(maxsize=2)
def _m3():
    from demos.zoo import measured
    from demos.zoo.models import load_config

    return load_config(measured.model_config_path("MiniMaxAI/MiniMax-M3"))


def msa_composed_seconds(gpu: str, row, fit: FamilyFit) -> float:
    """The predictor's attention ops of one MiniMax-M3 block-sparse layer for module row ``row`` on ``gpu``
    (the extra's config copy of the model; ``row.batch`` requests of ``row.kv_len`` cached tokens, attention
    TP ``heads / row.heads``)."""
    spec = _m3()
    layer = spec.attention.layer_types.index("block_sparse_attention")
    return _layer_attention_seconds(gpu, spec, layer, row.batch, row.kv_len, spec.attention.heads // row.heads, fit)
