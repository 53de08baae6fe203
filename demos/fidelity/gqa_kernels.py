"""Grouped-query attention's core against the engines' measured kernels: ``validate kernels``' ops ``gqa decode
sglang|vllm|trtllm`` and ``gqa prefill sglang|vllm|trtllm`` (BF16 cache), each also ``... fp8`` (FP8 cache).

Each engine's rows of its default kernel (``demos.zoo.measured_attention.gqa_rows``) at the head shapes the zoo's
GQA presets run (``model_head_shapes``: query heads, KV heads and head dim on one GPU at attention TP 1 to 8, 26
shapes, about 62,000 of a GPU's 282,000 to 308,000 rows), on the family's GQA curve of that phase, engine
and dtype (``FamilyFit.gqa``), their work counted as the predictor counts it (``demos.fits.gqa.gqa_row_work``). The
curves are fitted to every row on H100, H200, B200 and GB200 (B300's and GB300's held out of the family's); the check
reads the shapes a prediction asks for.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

import numpy as np

from demos.fits.gqa import GQA_FIELDS, gqa_row_units, gqa_row_work
from demos.vocabulary import Phase
from demos.zoo.hardware import get_gpu
from demos.zoo.measured_attention import GQA_ENGINES, GQA_KV, gqa_rows
from demos.zoo.rooflines import FamilyFit, gqa_key

__all__ = ["GQA_OPS", "gqa_check_rows", "model_head_shapes"]

GQA_OPS = {
    gqa_key(p, e, kv): f"gqa {p} {e}" + " fp8" * (kv == "fp8") for p in Phase for e in GQA_ENGINES for kv in GQA_KV
}
"""``FamilyFit.gqa`` key -> the op its engine's rows are checked as."""


@functools.cache
def model_head_shapes() -> frozenset[tuple[int, int, int]]:
    """(query heads, KV heads, head dim) on one GPU of every GQA preset at attention TP 1, 2, 4 and 8 (its KV heads
    replicated when fewer than the TP, as ``demos.zoo.gqa_attention.GQA`` splits them)."""
    from demos.zoo.models import GQAAttention, get_preset
    from demos.zoo.models.presets import PRESET_NAMES

    shapes = set()
    for name in PRESET_NAMES:
        a = get_preset(name).attention
        if isinstance(a, GQAAttention):
            tps = [tp for tp in (1, 2, 4, 8) if a.heads % tp == 0]
            shapes |= {(a.heads // tp, max(1, a.kv_heads // tp), a.head_dim) for tp in tps}
    return frozenset(shapes)


def gqa_check_rows(gpu: str, fit: FamilyFit) -> Iterable[tuple[str, str, float, float]]:
    """``(op, shape, predicted seconds, measured seconds)`` of each of ``gpu``'s GQA rows at the presets' head shapes
    whose phase, engine and dtype ``fit`` has a curve for (module docstring)."""
    g, shapes = get_gpu(gpu), model_head_shapes()
    for key, op in GQA_OPS.items():
        curve = fit.gqa.get(key)
        if curve is None:
            continue
        phase, engine, kv = key.split()
        rows = [r for r in gqa_rows(gpu, phase, engine, kv) if (r.heads, r.kv_heads, r.head_dim) in shapes]
        if not rows:
            continue
        cols = {f: np.array([getattr(r, f) for r in rows], dtype=float) for f in GQA_FIELDS}
        flops, nbytes = gqa_row_work(phase, kv, *cols.values())
        units = gqa_row_units(phase, cols["batch"], cols["context"], cols["kv_heads"])
        predicted = curve.seconds(flops, nbytes, g.flops("bfloat16"), g.hbm_bandwidth, units).tolist()
        length = "context" if phase == Phase.DECODE else "prompt"
        for r, t in zip(rows, predicted):
            shape = f"batch={r.batch} heads={r.heads} kv_heads={r.kv_heads} head_dim={r.head_dim} {length}={r.context}"
            yield op, shape + (f" window={r.window}" if r.window else ""), t, r.seconds
