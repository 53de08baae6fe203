"""What a pair of steps measures per engine, and how much of the comm DBO hid: one definition for the
toy (``demos.toy.results``) and the zoo (``demos.zoo.report``), so that both report the same figure.

``EngineTimes`` holds the kernel seconds of each engine in a no-DBO and a DBO step;
``overlap_hidden_fraction`` is the share of the comm that could be hidden and was (docs/overlap.md,
"Hidden").
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EngineTimes", "overlap_hidden_fraction"]


@dataclass
class EngineTimes:
    """Kernel seconds per engine: C, M and O are medians over the no-DBO steps (O: compute and
    comm kernels running at the same time); the ``dbo_*`` sums are those of the last DBO step."""

    compute_s: float
    comm_s: float
    overlapped_s: float
    dbo_compute_s: float
    dbo_comm_s: float
    dbo_overlapped_s: float | None = None  # O of the last DBO step (None: not measured)

    @property
    def hideable_s(self) -> float:
        """Comm time DBO could hide: min(C, M) less what already overlapped without DBO."""
        return max(0.0, min(self.compute_s, self.comm_s) - self.overlapped_s)

    @property
    def comm_ratio(self) -> float | None:
        return self.comm_s / self.compute_s if self.compute_s > 0 else None


def _ratio(overlapped: float | None, compute: float, comm: float) -> float | None:
    m = min(compute, comm)
    return None if overlapped is None or m <= 0 else overlapped / m  # O <= min(C, M) of the same step


def overlap_hidden_fraction(e: EngineTimes) -> float | None:
    """``(r_dbo - r_no) / (1 - r_no)``, ``r = O / min(C, M)`` per step (each step's own kernel
    times); None when the DBO step's overlap was not measured, or nothing was left to hide."""
    r_no = _ratio(e.overlapped_s, e.compute_s, e.comm_s)
    r_dbo = _ratio(e.dbo_overlapped_s, e.dbo_compute_s, e.dbo_comm_s)
    if r_dbo is None:
        return None
    r_no = r_no or 0.0
    if r_no >= 1.0:
        return None
    return (r_dbo - r_no) / (1.0 - r_no)
