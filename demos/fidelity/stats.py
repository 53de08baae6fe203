"""The statistics every check reports of predicted against measured rows: ``error_stats``."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["error_stats"]


def error_stats(rows: Sequence) -> tuple[dict, object]:
    """``({"rows", "median_error", "median_abs_error", "max_error"}, worst row)`` of ``rows``, each with an
    ``error`` (predicted / measured - 1): the median of the signed errors, the median of their sizes, and
    the signed error of the row whose size is largest. ``rows`` must not be empty."""
    errs = sorted(r.error for r in rows)
    mid = len(errs) // 2
    median = errs[mid] if len(errs) % 2 else 0.5 * (errs[mid - 1] + errs[mid])
    worst = max(rows, key=lambda r: abs(r.error))
    sizes = sorted(abs(e) for e in errs)
    stats = {"rows": len(errs), "median_error": median, "median_abs_error": sizes[mid], "max_error": worst.error}
    return stats, worst
