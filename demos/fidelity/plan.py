"""What a calibration measures: ``plan(backend, quick)`` -> ``Plan``, and ``CalibrationError``.

The plan sweeps GEMMs (dtypes, M, (N, K) pairs) and copies on the device, the toy model's runs
whose kernels the op fits use, the small runs that time the host's issue of a step, and the
repetitions of the host micro-benchmarks. ``demos.fidelity.calibration`` measures it and fits a
profile (and re-exports these names).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BACKENDS", "CalibrationError", "Plan", "plan"]

BACKENDS = ("threads", "cuda")


class CalibrationError(ValueError):
    """Calibration cannot run as asked (a bad option, no GPU for cuda)."""


@dataclass(frozen=True)
class Plan:
    """What to measure."""

    dtypes: tuple[str, ...]
    gemm_m: tuple[int, ...]
    gemm_nk: tuple[tuple[int, int], ...]
    copy_elems: tuple[int, ...]
    op_runs: tuple[dict, ...]  # OverlapConfig overrides of the model runs
    issue_runs: tuple[dict, ...]  # small configs for the host issue time
    host_reps: int
    op_steps: int


def plan(backend: str, quick: bool = False) -> Plan:
    """The measurement plan for ``backend`` ("threads" or "cuda"); ``quick``: a smaller sweep."""
    if backend not in BACKENDS:
        raise CalibrationError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    gpu = backend == "cuda"
    if gpu:
        dtypes = ("bfloat16", "float32") if quick else ("bfloat16", "float16", "float32")
        ms = (8, 64, 512, 4096) if quick else (4, 16, 64, 256, 1024, 4096, 16384)
        nk = (
            ((1024, 1024), (4096, 4096), (4096, 1024))
            if quick
            else ((512, 512), (1024, 4096), (4096, 4096), (8192, 2048), (4096, 14336))
        )
        copies = (1 << 14, 1 << 18, 1 << 22, 1 << 26) if quick else tuple(1 << k for k in range(12, 29, 2))
        tokens = (16, 256, 2048, 8192) if quick else (8, 64, 512, 2048, 8192)
        hiddens = (1024, 4096) if quick else (1024, 2048, 4096)
        dt = "bfloat16"
    else:
        dtypes = ("float32", "bfloat16") if quick else ("float32", "bfloat16", "float64")
        ms = (1, 4, 16, 64, 256) if quick else (1, 4, 16, 64, 256, 1024)
        nk = (
            ((128, 128), (384, 384), (768, 256), (256, 1024))
            if quick
            else ((64, 64), (128, 384), (384, 384), (768, 256), (1024, 512))
        )
        copies = tuple(1 << k for k in range(8, 23, 2))
        tokens = (8, 48, 320, 1536) if quick else (4, 16, 64, 256, 1024, 2048)
        hiddens = (192, 320) if quick else (128, 256, 384)
        dt = "float32"
    runs = [
        dict(tokens=t, hidden=h, schedule=sched, layers=2, dtype=dt)
        for h in hiddens
        for t in tokens
        for sched in ("ht", "ll")
    ]
    issue = tuple(dict(tokens=t, hidden=128, schedule=s, layers=2, dtype=dt) for t in (4, 16) for s in ("ht", "ll"))
    return Plan(
        dtypes, ms, nk, copies, tuple(runs), issue, host_reps=300 if quick else 1000, op_steps=9 if quick else 15
    )
