"""Ablation of the GEMM curve's form: what each part of it does (docs/kernels.md, "Ablation").

    python -m pip install -e '.[measured]'
    python -m demos.fits ablate

Fits five forms of the FP8 GEMM curve to the H100 + H200 tables and prints, per form, the median
|error| and signed median error on H100, H200 and B200 (B200 with the Hopper curve), and the time of one
8-row GEMM through a 4096 x 7168 FP8 weight on H20 over H100 (the extrapolation to a GPU without tables).
The kept form is demos.zoo.rooflines.GemmCurve; the ablation does not change it. Each form's work is the
predictor's (``demos.zoo.work.gemm_work``); only the curve's form varies (``FORMS``), so the forms other
than the kept one are written here on purpose. ``ablation_lines()`` returns the printed table.
"""

from __future__ import annotations

import numpy as np

from demos.fits.rooflines import minimize
from demos.zoo import measured
from demos.zoo.hardware import get_gpu
from demos.zoo.models.dtypes import storage_of
from demos.zoo.rooflines import OUT_TILE, ROW_TILE
from demos.zoo.work import gemm_work

__all__ = ["FORMS", "ablation_lines"]

FORMS = {
    "hyperbolic M knee only (the old form)": ("knee",),
    "16-row padding, no knee, no occupancy": ("pad",),
    "16-row padding + occupancy": ("pad", "occ"),
    "16-row padding + occupancy + knee (kept)": ("pad", "occ", "knee"),
    "padding width fitted too": ("fitpad", "occ", "knee"),
}
# (ceiling, m0, n0, k0, mem_efficiency, latency, mem_tiles, padding width)
STARTS = ((0.9, 64, 256, 256, 0.9, 3e-6, 0.5, 4), (0.9, 8, 1000, 300, 0.8, 4e-6, 0.2, 16))


def _rows(gpus):
    cols = []
    for name in gpus:
        g = get_gpu(name)
        for r in measured.gemm_rows(name, "fp8_block"):
            cols.append((r.m, r.n, r.k, r.seconds, g.fp8, g.hbm_bandwidth, g.sm_count))
    return [np.array(c, dtype=float) for c in zip(*cols)]


def _time(parts, u, m, n, k, peak, hbm, sms):
    e = np.exp(u)
    ceiling, mem_eff = min(1.0, e[0]), min(1.0, e[4])
    width = max(1.0, round(e[7])) if "fitpad" in parts else ROW_TILE
    eff = n / (n + e[2]) * k / (k + e[3])
    if "pad" in parts or "fitpad" in parts:
        eff = eff * m / (np.ceil(m / width) * width)
    if "knee" in parts:
        eff = eff * m / (m + e[1])
    occ = 1.0
    if "occ" in parts:
        occ = np.minimum(1.0, np.ceil(m / OUT_TILE) * np.ceil(n / OUT_TILE) / (e[6] * sms))
    flops, nbytes = gemm_work(m, n, k, storage_of("fp8"))
    return e[5] + np.maximum(flops / (peak * ceiling * eff), nbytes / (hbm * mem_eff * occ))


def ablation_lines() -> list[str]:
    """The ablation's table: a header, then one line per form (module docstring)."""
    m, n, k, t, peak, hbm, sms = _rows(("h100", "h200"))
    lines = [f"{'form':44} {'H100':>16} {'H200':>16} {'B200 (Hopper curve)':>20} {'H20/H100':>9}"]
    for label, parts in FORMS.items():
        u = minimize(
            lambda u: float(np.sum((np.log(_time(parts, u, m, n, k, peak, hbm, sms)) - np.log(t)) ** 2)), STARTS
        )
        cells = []
        for gpu in ("h100", "h200", "b200"):
            rows = _rows((gpu,))
            err = _time(parts, u, *rows[:3], *rows[4:]) / rows[3] - 1
            cells.append(f"{np.median(np.abs(err)):6.1%}, {np.median(err):+6.1%}")
        one = [
            _time(
                parts,
                u,
                np.array([8.0]),
                np.array([4096.0]),
                np.array([7168.0]),
                np.array([g.fp8]),
                np.array([g.hbm_bandwidth]),
                np.array([g.sm_count]),
            )[0]
            for g in (get_gpu("h100"), get_gpu("h20"))
        ]
        lines.append(f"{label:44} {cells[0]:>16} {cells[1]:>16} {cells[2]:>20} {one[1] / one[0]:9.2f}")
    return lines
