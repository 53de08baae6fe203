"""Reading kernel records: interval arithmetic, busy fractions, overlap, and an ASCII timeline.

Works on any list of ``dbo.trace.KernelRecord``. The ubatch that owns a kernel is the record's
``ubatch`` field (the ubatch registered on the launching thread); a record with ``ubatch=None``
(launched outside any ubatch, e.g. by the main thread) is drawn as ``?``. What a kernel *does*
is not known here: the caller passes ``op_of`` (record -> op name or None) and ``op_letters``
(op name -> one letter) to label the op rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

from dbo.trace._recorder import KernelRecord

Interval = tuple[float, float]


def fmt_seconds(s: float | None) -> str:
    """Seconds with a readable unit: ``1.23 s``, ``45.6 ms``, ``789 us``, ``12.3 ns``."""
    if s is None:
        return "n/a"
    a = abs(s)
    if a >= 1:
        return f"{s:.3g} s" if a < 100 else f"{s:.0f} s"
    if a >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    if a >= 1e-6:
        return f"{s * 1e6:.3g} us"
    if a == 0:
        return "0 s"
    return f"{s * 1e9:.3g} ns"


_UNITS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns"))


def fmt_seconds_group(values: Sequence[float | None]) -> list[str]:
    """Several durations in one unit, the one ``fmt_seconds`` picks for the largest of them, so
    that a sum or a difference reads at a glance: ``["238 ms", "0 ms", "238 ms"]``, not
    ``"238 ms - 0 s"``. None stays ``"n/a"``."""
    known = [abs(v) for v in values if v is not None]
    top = max(known, default=0.0)
    scale, unit = next(((k, u) for k, u in _UNITS if top >= k), _UNITS[-1])
    if top == 0:
        scale, unit = 1.0, "s"
    out = []
    for v in values:
        if v is None:
            out.append("n/a")
            continue
        x = v / scale
        if x == 0:
            out.append(f"0 {unit}")
        elif abs(x) >= 100:
            out.append(f"{x:.0f} {unit}")
        elif abs(x) >= 1:
            out.append(f"{x:.3g} {unit}")
        else:  # a small part of the group: two decimals of its unit
            out.append(f"{x:.2f} {unit}" if abs(x) >= 0.005 else f"{'-' if x < 0 else ''}<0.01 {unit}")
    return out


def merge_intervals(spans: Iterable[Interval]) -> list[Interval]:
    """The union of ``(start, end)`` intervals as sorted, disjoint intervals (empty ones dropped)."""
    out: list[list[float]] = []
    for s, e in sorted(spans):
        if e <= s:
            continue
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def engine_sums(records: Iterable[KernelRecord]) -> dict[str, float]:
    """Total kernel seconds per kind (summed, not merged): ``{"compute": C, "comm": M, ...}``."""
    out = {"compute": 0.0, "comm": 0.0}
    for r in records:
        out[r.kind] = out.get(r.kind, 0.0) + r.duration
    return out


def busy_seconds(records: Iterable[KernelRecord], kind: str, t0: float, t1: float) -> float:
    """Seconds of [t0, t1] during which at least one ``kind`` kernel ran (overlaps counted once)."""
    spans = merge_intervals(
        (max(r.start, t0), min(r.end, t1)) for r in records if r.kind == kind and r.end > t0 and r.start < t1
    )
    return sum(e - s for s, e in spans)


def busy_fraction(records: Iterable[KernelRecord], kind: str, t0: float, t1: float) -> float:
    """Fraction of [t0, t1] during which at least one ``kind`` kernel ran (0.0 for an empty window)."""
    return busy_seconds(records, kind, t0, t1) / (t1 - t0) if t1 > t0 else 0.0


def overlap_seconds(records: Iterable[KernelRecord], a: str = "compute", b: str = "comm") -> float:
    """Seconds during which some ``a`` kernel and some ``b`` kernel ran at the same time.

    Each kind's intervals are merged first, so two ``b`` kernels running together over one ``a``
    kernel count that stretch once.
    """
    recs = list(records)
    xs = merge_intervals((r.start, r.end) for r in recs if r.kind == a)
    ys = merge_intervals((r.start, r.end) for r in recs if r.kind == b)
    total, i, j = 0.0, 0, 0
    while i < len(xs) and j < len(ys):
        s = max(xs[i][0], ys[j][0])
        e = min(xs[i][1], ys[j][1])
        if e > s:
            total += e - s
        if xs[i][1] < ys[j][1]:
            i += 1
        else:
            j += 1
    return total


@dataclass(frozen=True)
class Window:
    """A stretch ``[start, end]`` of a step to draw; times on the scale are relative to ``step_start``."""

    start: float
    end: float
    step_start: float
    layer: int | None = None


def stream_sort_key(name: str) -> tuple[int, str]:
    """Row order of a timeline: compute streams, then comm streams, then links, then the rest."""
    for i, prefix in enumerate(("compute", "comm", "link")):
        if name.startswith(prefix):
            return i, name
    return 3, name


def _scale_line(width: int, t0: float, t1: float, pad: str) -> list[str]:
    ticks = 4
    labels = [" "] * (width + 12)
    marks = ["-"] * width
    texts = fmt_seconds_group([t0 + (t1 - t0) * k / ticks for k in range(ticks + 1)])  # one unit for the scale
    for k in range(ticks + 1):
        col = round(k * (width - 1) / ticks)
        marks[col] = "|"
        text = texts[k]
        begin = col if k < ticks else max(0, col - len(text) + 1)
        for j, ch in enumerate(text):
            if begin + j < len(labels):
                labels[begin + j] = ch
    return [pad + "".join(labels).rstrip(), pad + "".join(marks)]


def _owner_char(ub: int | None) -> str:
    if ub is None:
        return "?"  # launched outside any ubatch
    return str(ub) if 0 <= ub < 10 else "+"


def legend_lines(
    letters_shown: Iterable[str], names: Mapping[str, str], width: int, head: str = "  by kernel ("
) -> list[str]:
    """The legend of the letters that appear (in the order of ``names``), wrapped at ``width``
    characters: ``["  by kernel (A attention, R router,", "             E experts)"]``. A shown
    letter missing from ``names`` is listed as unknown; no letters: no lines."""
    shown = set(letters_shown) - {"."}
    items = [f"{k} {v}" for k, v in names.items() if k in shown]
    items += [f"{k} unknown kernel" for k in sorted(shown - set(names))]
    if not items:
        return []
    out, line = [], head
    for i, item in enumerate(items):
        piece = item + (")" if i == len(items) - 1 else ",")
        if line.strip() and len(line) + len(piece) + (0 if line == head else 1) > width and line != head:
            out.append(line)
            line = " " * len(head) + piece
        else:
            line += ("" if line == head else " ") + piece
    out.append(line)
    return out


def _cells(recs: Sequence[KernelRecord], t0: float, dt: float, width: int) -> list[KernelRecord | None]:
    """The kernel drawn in each column: the one running at the column's midpoint; in a column no
    kernel covers at its midpoint, a kernel too short to cover any midpoint (the one overlapping
    the column most), so that every kernel of the window shows unless its columns are taken."""
    cells: list[KernelRecord | None] = []
    for col in range(width):
        tm = t0 + (col + 0.5) * dt
        cells.append(next((r for r in recs if r.start <= tm < r.end), None))
    shown = {id(r) for r in cells if r is not None}
    for col in range(width):
        if cells[col] is not None:
            continue
        c0, c1 = t0 + col * dt, t0 + (col + 1) * dt
        best, most = None, 0.0
        for r in recs:
            if id(r) in shown or r.end <= c0 or r.start >= c1:
                continue
            part = min(r.end, c1) - max(r.start, c0)
            if part > most:
                best, most = r, part
        if best is not None:
            cells[col] = best
            shown.add(id(best))
    return cells


def render_ascii(
    records: Sequence[KernelRecord],
    window: Window,
    *,
    op_of: Callable[[KernelRecord], str | None] | None = None,
    op_letters: Mapping[str, str] | None = None,
    legend: Sequence[str] = (),
    op_names: Mapping[str, str] | None = None,
    width: int = 72,
    label_width: int = 10,
) -> list[str]:
    """The timeline of ``window`` as text lines.

    A time scale (relative to ``window.step_start``); one row per stream with the owning ubatch's
    digit where a kernel runs at that column's midpoint ('.' idle, '?' a kernel with no ubatch,
    '+' ubatch 10 or more; a kernel shorter than a column gets one column to itself where no
    kernel covers the midpoint, so no kernel of the window goes missing); then, when ``op_of`` is
    given, the legend and the same rows with one letter per kernel op (``op_letters[op]``, '?' when
    unknown); then how busy the compute kinds and the comm kinds were.

    The legend: with ``op_names`` (letter -> words), one entry per letter that appears in the
    rows, wrapped to the timeline's width (``legend_lines``); else the ``legend`` lines as given.
    """
    if width < 1:
        raise ValueError(f"width must be at least 1, got {width}")
    t0, t1 = window.start, window.end
    dt = (t1 - t0) / width
    letters = op_letters or {}
    by_stream: dict[str, list[KernelRecord]] = {}
    for r in records:
        if r.end > t0 and r.start < t1 and r.end > r.start:
            by_stream.setdefault(r.stream, []).append(r)
    names = sorted(by_stream, key=stream_sort_key)
    pad = " " * (label_width + 2)
    lines = _scale_line(width, t0 - window.step_start, t1 - window.step_start, pad)
    owners, ops = [], []
    seen: set[str] = set()
    for name in names:
        recs = sorted(by_stream[name], key=lambda r: r.start)
        row_u, row_k = [], []
        for hit in _cells(recs, t0, dt, width):
            if hit is None:
                row_u.append(".")
                row_k.append(".")
                continue
            row_u.append(_owner_char(hit.ubatch))
            if op_of is not None:
                op = op_of(hit)
                row_k.append(letters.get(op, "?") if op is not None else "?")
        owners.append(f"  {name:<{label_width}}{''.join(row_u)}")
        ops.append(f"  {name:<{label_width}}{''.join(row_k)}")
        seen.update(row_k)
    lines += owners
    if op_of is not None:
        if op_names is not None:
            lines += legend_lines(seen, op_names, len(pad) + width)
        else:
            lines += list(legend)
        lines += ops
    comp = busy_fraction(records, "compute", t0, t1)
    comm = busy_fraction(records, "comm", t0, t1)
    lines.append(f"  in this window the compute engine was busy {comp:.0%} of the time, the comm engine {comm:.0%}")
    return lines
