"""One measured serving run, however many rows of ``silicon_sample.csv`` hold it.

The measured extra's file gathers several sources, and one benchmark run is often in it more than once:
InferenceX's exports of 2026-03-25 and 2026-04-06 carry the same runs, NVIDIA's own table and its gap analyses
of Qwen3.5-397B and Kimi-K2.5 repeat InferenceX's figures rounded to 0.01 ms. The copies do not always agree on
what they record: a gap-analysis copy of a run InferenceX decoded with MTP says nothing of it, a copy may give
the layout another way (``tp 16`` for four GPUs) or lack the engine release or the radix-cache flag.

Two rows are one run (``same_run``) when they agree on the deployment's GPU system, engine, model, precision,
mode, lengths and concurrency, and their TPOT and TTFT agree to the coarsest copy's rounding (``ROUNDING``;
both missing also agrees). The model is compared by what ran, not by the name a copy gives it
(``SAME_MODEL``): the database dump of 2026-04-27 names InferenceX's DeepSeek-R1 runs DeepSeek-V3 (its
``dsr1`` configurations, measured 2025-11-10, with TTFT and TPOT equal to the last digit to the 2026-04-06
export's DeepSeek-R1 rows), and the two architectures are one. A group's rows then share what any copy knows
(``merged``): speculative decoding ("mtp" over "unknown" over "none"), the release a copy records, the radix
cache off where a copy knows it was.
Each copy keeps its own layout: a check takes the first copy, in file order, that it can express
(``first_expressible``), so each run counts once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, MutableMapping

from demos.zoo.measured_rows import SiliconRow

__all__ = [
    "COPIES",
    "ROUNDING",
    "SAME_MODEL",
    "checked_runs",
    "first_expressible",
    "measured_runs",
    "merged",
    "run_groups",
    "same_run",
]

ROUNDING = 0.0051e-3
"""Seconds two copies of one latency may differ by: the gap analyses round to 0.01 ms (half of it, and a
little more for the float text)."""

COPIES = "a copy of a run another row holds (each run is checked once)"
"""The reason the checks give for the rows they leave out as copies."""

_SPECULATIVE_ORDER = ("mtp", "unknown", "none")

SAME_MODEL = {"deepseek-ai/DeepSeek-V3": "deepseek-ai/DeepSeek-R1"}
"""A model name a copy gives -> the name its run is compared under (module docstring): DeepSeek-V3's and -R1's
rows are one run where everything else agrees, since the dump names R1's runs V3 and their shapes are one
architecture (only a run's latencies, equal to the coarsest rounding, make two rows one)."""


def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= ROUNDING


def _deployment(r: SiliconRow) -> tuple:
    model = SAME_MODEL.get(r.model, r.model)
    return (r.system, r.engine, model, r.precision, r.mode, r.isl, r.osl, r.concurrency)


def same_run(a: SiliconRow, b: SiliconRow) -> bool:
    """Whether rows ``a`` and ``b`` hold one benchmark run (module docstring)."""
    return _deployment(a) == _deployment(b) and _close(a.tpot_s, b.tpot_s) and _close(a.ttft_s, b.ttft_s)


def merged(group: Iterable[SiliconRow]) -> tuple[SiliconRow, ...]:
    """The rows of one run with what any copy records shared: the most specific ``speculative``, the ``release``
    a copy records (None where none does; copies recording two releases keep their own), ``radix_cache``
    off and the ``kv_cache`` dtype where any copy says so."""
    rows = tuple(group)
    spec = min((r.speculative for r in rows), key=_SPECULATIVE_ORDER.index)
    releases = {r.release for r in rows if r.release is not None}
    radix = all(r.radix_cache for r in rows)
    kv = next((r.kv_cache for r in rows if r.kv_cache is not None), None)
    out = []
    for r in rows:
        release = next(iter(releases)) if len(releases) == 1 else r.release
        out.append(r._replace(speculative=spec, release=release, radix_cache=radix, kv_cache=kv))
    return tuple(out)


def run_groups(rows: Iterable[SiliconRow]) -> tuple[tuple[SiliconRow, ...], ...]:
    """``rows`` grouped by run (``same_run``) and ``merged``, the groups in the order of their first row, each
    group's rows in file order."""
    by_deployment: dict[tuple, list[list[SiliconRow]]] = {}
    order: list[list[SiliconRow]] = []
    for r in rows:
        groups = by_deployment.setdefault(_deployment(r), [])
        for g in groups:
            if same_run(g[0], r):
                g.append(r)
                break
        else:
            groups.append([r])
            order.append(groups[-1])
    return tuple(merged(g) for g in order)


def measured_runs() -> tuple[tuple[SiliconRow, ...], ...]:
    """Every run of the measured extra's ``silicon_sample.csv`` (``demos.zoo.measured.silicon_rows``, read once) as
    its group of copies (``run_groups``; grouped on each call, a few milliseconds, so whatever ``silicon_rows``
    returns now is what is grouped)."""
    from demos.zoo import measured

    return run_groups(measured.silicon_rows())


def first_expressible(group: Iterable[SiliconRow], plan: Callable[[SiliconRow], object]) -> tuple[SiliconRow, object]:
    """(row, plan) of a run: the first copy whose ``plan(row)`` is not a string (a reason it cannot be
    checked), else the first copy with its reason."""
    rows = tuple(group)
    first = None
    for r in rows:
        p = plan(r)
        if not isinstance(p, str):
            return r, p
        first = first or (r, p)
    assert first is not None, "an empty group"
    return first


def checked_runs(plan: Callable[[SiliconRow], object], skipped: MutableMapping[str, int]) -> Iterator[tuple]:
    """(row, plan) of every measured run (``measured_runs``) a check can express (``first_expressible``); a run
    it cannot is counted into ``skipped`` under its reason, and every run's other copies under ``COPIES``, so the
    checked runs and ``skipped`` account for every row of the file."""
    for group in measured_runs():
        if len(group) > 1:
            skipped[COPIES] = skipped.get(COPIES, 0) + len(group) - 1
        row, p = first_expressible(group, plan)
        if isinstance(p, str):
            skipped[p] = skipped.get(p, 0) + 1
        else:
            yield row, p
