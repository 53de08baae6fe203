"""Whole attention modules against the predictor's attention op: ``validate kernels``' ops ``mla module``, ``dsa
module`` / ``dsa module fp8`` (each also ``... no indexer``), ``dsa indexer``, ``csa module`` / ``hca module`` and
``msa module``, each row composed as ``demos.zoo.attention_module`` composes it (the step's kernels on the GPU's
curves, the module's fixed time included):

* ``mla module``: TRT-LLM's whole MLA decode module (FP8 block GEMMs, BF16 cache, 16 to 128 heads per GPU), the
  family's fitted module time (``FamilyFit.mla_module``, fitted to these rows) included (``module_rows``); ``mla
  module bf16``: the same module of BF16 GEMMs, composed at BF16 weights with its own fitted time
  (``FamilyFit.mla_module_gemm``);
* ``dsa module`` / ``dsa module fp8``: SGLang's whole sparse-MLA decode module (DeepSeek-V3.2, GLM-5: FP8 block
  GEMMs, the indexer) over a BF16 / an FP8 cache, composed as SGLang's step composes it (``dsa_rows``: its own
  module time, ``FamilyFit.sglang_dsa_module``); ``... no indexer``: GLM-5.2's modules, which skip the indexer,
  against the op less its indexer (``skip_rows``: SGLang's module time is fitted to them below 2,048 cached
  tokens); ``dsa indexer``: the indexer's share of GLM-5's (``index_rows``) against the ``attn_index`` op alone,
  its fixed time fitted below 2,048 cached tokens;
* ``csa module`` / ``hca module``: SGLang's whole DeepSeek-V4 decode modules (Flash and Pro, FP8 block GEMMs and
  an FP8 cache, attention TP 1 to 8) against the compressed attention op of a layer of that ratio (``v4_rows``),
  fitted to nothing;
* ``msa module``: SGLang's whole MiniMax-M3 block-sparse decode module (BF16, its split top-k kernel, attention
  TP 1 to 8) against the block-sparse attention op (``msa_rows``), fitted to nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

from demos.zoo import attention_module as am
from demos.zoo.rooflines import FamilyFit

__all__ = ["MODULE_OPS", "module_check_rows"]

_DSA = (("dsa module", "bfloat16"), ("dsa module fp8", "fp8"))

MODULE_OPS = (
    "mla module",
    "mla module bf16",
    *(op for op, _ in _DSA),
    *(f"{op} no indexer" for op, _ in _DSA),
    "dsa indexer",
    "csa module",
    "hca module",
    "msa module",
)
"""The ops ``module_check_rows`` gives (module docstring)."""


def module_check_rows(gpu: str, fit: FamilyFit, ops: set[str]) -> Iterable[tuple[str, str, float, float]]:
    """``(op, shape, predicted s, measured s)`` of ``gpu``'s module rows of ``ops`` on ``fit``'s curves (module
    docstring; needs the ``measured`` extra)."""
    for r in am.module_rows(gpu) if "mla module" in ops else ():
        yield "mla module", _shape(r), am.composed_seconds(gpu, r, fit), r.seconds
    for r in am.module_rows(gpu, "bfloat16") if "mla module bf16" in ops else ():
        yield "mla module bf16", _shape(r), am.composed_seconds(gpu, r, fit), r.seconds
    for op, kv in _DSA:
        for r in am.dsa_rows(gpu, kv) if op in ops else ():
            model = am.DSA_MODELS[r.model]
            yield op, _shape(r, model), am.composed_seconds(gpu, r, fit, model, engine="sglang"), r.seconds
        for r in am.skip_rows(gpu, kv) if f"{op} no indexer" in ops else ():
            yield f"{op} no indexer", _shape(r, r.model), am.skip_composed_seconds(gpu, r, fit), r.seconds
    for r in am.index_rows(gpu) if "dsa indexer" in ops else ():
        yield "dsa indexer", _shape(r, "glm-5"), am.index_composed_seconds(gpu, r, fit), r.seconds
    for r in am.v4_rows(gpu) if ops & {"csa module", "hca module"} else ():
        op = "csa module" if r.ratio == 4 else "hca module"
        if op in ops:
            shape = f"{am.V4_MODELS[r.model]} batch={r.batch} heads={r.heads} kv={r.length}"
            yield op, shape, am.v4_composed_seconds(gpu, r, fit), r.seconds
    for r in am.msa_rows(gpu) if "msa module" in ops else ():
        yield "msa module", _shape(r), am.msa_composed_seconds(gpu, r, fit), r.seconds


def _shape(row, model: str = "") -> str:
    """A module row's shape as a report names it (``model``, if any, first)."""
    return f"{model} batch={row.batch} heads={row.heads} kv={row.kv_len}".lstrip()
