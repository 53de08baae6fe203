"""Reading a step's kernel records: engine sums, one layer's window, an ASCII timeline, a plot.

Works on ``dbo.trace.KernelRecord`` lists whose kernel names follow ``demos.model.kernel_name``
(``"<op> L<layer> u<ubatch>"``), so the owner of a kernel is known even when another ubatch's
thread launched it (a recv hook).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from dbo.trace import KernelRecord

from .moe.model import OP_LETTERS, parse_kernel_name

__all__ = [
    "Window",
    "engine_sums",
    "layer_window",
    "render_ascii",
    "plot_timeline",
    "owner",
    "fmt_seconds",
    "busy_fraction",
    "intervals",
    "overlap_seconds",
]


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


def owner(rec: KernelRecord) -> int | None:
    """The ubatch a kernel belongs to (from its name), else the ubatch that launched it."""
    parsed = parse_kernel_name(rec.name)
    return parsed[2] if parsed is not None else rec.ubatch


def engine_sums(records: Iterable[KernelRecord]) -> dict[str, float]:
    """Total kernel seconds per kind: ``{"compute": C, "comm": M}``."""
    out = {"compute": 0.0, "comm": 0.0}
    for r in records:
        out[r.kind] = out.get(r.kind, 0.0) + r.duration
    return out


def intervals(records: Iterable[KernelRecord], **match: object) -> list[tuple[float, float]]:
    """``(start, end)`` of the kernels whose parsed name matches ``op=``, ``layer=``, ``ubatch=``
    (each optional; ``op`` may be a tuple of ops)."""
    out = []
    for r in records:
        p = parse_kernel_name(r.name)
        if p is None:
            continue
        op, layer, ub = p
        want = match.get("op")
        if want is not None and (op not in want if isinstance(want, tuple) else op != want):
            continue
        if "layer" in match and match["layer"] != layer:
            continue
        if "ubatch" in match and match["ubatch"] != ub:
            continue
        out.append((r.start, r.end))
    return out


def _union(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for s, e in sorted(spans):
        if e <= s:
            continue
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def busy_fraction(records: Iterable[KernelRecord], kind: str, t0: float, t1: float) -> float:
    """Fraction of [t0, t1] during which at least one ``kind`` kernel ran (union of intervals)."""
    spans = _union((max(r.start, t0), min(r.end, t1)) for r in records if r.kind == kind and r.end > t0 and r.start < t1)
    busy = sum(e - s for s, e in spans)
    return busy / (t1 - t0) if t1 > t0 else 0.0


def overlap_seconds(records: Iterable[KernelRecord]) -> float:
    """Seconds during which some compute kernel and some comm kernel ran at the same time."""
    recs = list(records)
    comp = _union((r.start, r.end) for r in recs if r.kind == "compute")
    comm = _union((r.start, r.end) for r in recs if r.kind == "comm")
    total, i, j = 0.0, 0, 0
    while i < len(comp) and j < len(comm):
        s = max(comp[i][0], comm[j][0])
        e = min(comp[i][1], comm[j][1])
        if e > s:
            total += e - s
        if comp[i][1] < comm[j][1]:
            i += 1
        else:
            j += 1
    return total


@dataclass(frozen=True)
class Window:
    layer: int
    start: float
    end: float
    step_start: float


def layer_window(records: Sequence[KernelRecord], num_layers: int) -> Window:
    """The window of one steady-state layer of a step: from ubatch 0's first attention kernel of
    layer ``(num_layers - 1) // 2`` to the same kernel of the next layer (to the step's end for a
    one-layer model)."""
    layer = (num_layers - 1) // 2
    step_start = min(r.start for r in records)
    step_end = max(r.end for r in records)
    first = intervals(records, op="attn_qkv", layer=layer, ubatch=0)
    nxt = intervals(records, op="attn_qkv", layer=layer + 1, ubatch=0)
    start = first[0][0] if first else step_start
    end = nxt[0][0] if nxt else step_end
    if end <= start:
        end = step_end
    return Window(layer, start, end, step_start)


def _stream_key(name: str) -> tuple[int, str]:
    for i, prefix in enumerate(("compute", "comm", "link")):
        if name.startswith(prefix):
            return i, name
    return 3, name


def _scale_line(width: int, t0: float, t1: float, pad: str) -> list[str]:
    ticks = 4
    labels = [" "] * (width + 12)
    marks = ["-"] * width
    for k in range(ticks + 1):
        col = round(k * (width - 1) / ticks)
        marks[col] = "|"
        text = fmt_seconds(t0 + (t1 - t0) * k / ticks)
        begin = col if k < ticks else max(0, col - len(text) + 1)
        for j, ch in enumerate(text):
            if begin + j < len(labels):
                labels[begin + j] = ch
    return [pad + "".join(labels).rstrip(), pad + "".join(marks)]


def render_ascii(records: Sequence[KernelRecord], window: Window, width: int = 72, label_width: int = 10) -> list[str]:
    """The timeline of ``window`` as text lines: a time scale (relative to the step's start), one
    row per stream with the owning ubatch's digit where a kernel runs at that column's midpoint
    ('.' idle), then the same rows with one letter per kernel op (legend below), then how busy the
    compute engine and the link were."""
    t0, t1 = window.start, window.end
    dt = (t1 - t0) / width
    by_stream: dict[str, list[KernelRecord]] = {}
    for r in records:
        if r.end > t0 and r.start < t1 and r.end > r.start:
            by_stream.setdefault(r.stream, []).append(r)
    names = sorted(by_stream, key=_stream_key)
    pad = " " * (label_width + 2)
    lines = _scale_line(width, t0 - window.step_start, t1 - window.step_start, pad)
    owners, ops = [], []
    for name in names:
        recs = sorted(by_stream[name], key=lambda r: r.start)
        row_u, row_k = [], []
        for col in range(width):
            tm = t0 + (col + 0.5) * dt
            hit = next((r for r in recs if r.start <= tm < r.end), None)
            if hit is None:
                row_u.append(".")
                row_k.append(".")
                continue
            ub = owner(hit)
            row_u.append(str(ub) if ub is not None and 0 <= ub < 10 else "+")
            parsed = parse_kernel_name(hit.name)
            row_k.append(OP_LETTERS.get(parsed[0], "?") if parsed else "?")
        owners.append(f"  {name:<{label_width}}{''.join(row_u)}")
        ops.append(f"  {name:<{label_width}}{''.join(row_k)}")
    lines += owners
    lines.append("  by kernel (A attention, R router, D dispatch, d dispatch recv, E experts, C combine,")
    lines.append("             c combine recv/copy, S shared expert, F finalize)")
    lines += ops
    comp = busy_fraction(records, "compute", t0, t1)
    comm = busy_fraction(records, "comm", t0, t1)
    lines.append(f"  in this window the compute engine was busy {comp:.0%} of the time, the link {comm:.0%}")
    return lines


def plot_timeline(records: Sequence[KernelRecord], window: Window, path: str, title: str) -> str | None:
    """Draw the window as a picture (one lane per stream, one colour per ubatch) into ``path``.

    Returns None on success, or a one-line message when matplotlib is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return (
            "--plot: matplotlib is not installed, so no picture was drawn "
            "(install it with: pip install 'dbo-sim[plot]'); everything else ran normally"
        )
    t0, t1 = window.start, window.end
    by_stream: dict[str, list[KernelRecord]] = {}
    for r in records:
        if r.end > t0 and r.start < t1:
            by_stream.setdefault(r.stream, []).append(r)
    names = sorted(by_stream, key=_stream_key)
    colours = plt.rcParams["axes.prop_cycle"].by_key().get("color", ["C0", "C1", "C2", "C3"])
    fig, ax = plt.subplots(figsize=(12, 0.6 * len(names) + 1.5))
    scale = 1e3
    for lane, name in enumerate(reversed(names)):
        for r in by_stream[name]:
            s, e = max(r.start, t0), min(r.end, t1)
            ub = owner(r) or 0
            ax.broken_barh(
                [((s - window.step_start) * scale, (e - s) * scale)],
                (lane - 0.4, 0.8),
                facecolors=colours[ub % len(colours)],
                edgecolor="black",
                linewidth=0.3,
                alpha=0.9 if r.kind == "compute" else 0.55,
            )
            parsed = parse_kernel_name(r.name)
            if parsed and (e - s) > (t1 - t0) / 60:
                ax.text(((s + e) / 2 - window.step_start) * scale, lane, OP_LETTERS.get(parsed[0], "?"), ha="center", va="center", fontsize=7)
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels(list(reversed(names)))
    ax.set_xlabel("time since the step started (ms)")
    ax.set_title(title)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[u % len(colours)]) for u in sorted({owner(r) or 0 for recs in by_stream.values() for r in recs})]
    ax.legend(handles, [f"ubatch {u}" for u in sorted({owner(r) or 0 for recs in by_stream.values() for r in recs})], loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None
