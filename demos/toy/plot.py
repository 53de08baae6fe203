"""The timeline of one DBO layer as a picture (matplotlib, imported only when drawing)."""

from __future__ import annotations

from typing import Sequence

from dbo.trace import KernelRecord, Window, stream_sort_key
from demos.toy.ops import OP_LETTERS
from demos.toy.report import OP_NAMES

__all__ = ["plot_timeline", "key_entries", "plot_path_problem"]


def plot_path_problem(path: str) -> str | None:
    """Why matplotlib could not write a picture to ``path`` (its extension names the format), or
    None. Without matplotlib, None: the run goes on and says that no picture was drawn."""
    import os

    ext = os.path.splitext(path)[1].lstrip(".").lower()
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        return None
    known = sorted(FigureCanvasBase.get_supported_filetypes())
    if not ext:
        return f"give the file an extension that names the format ({', '.join(known)})"
    if ext not in known:
        return f"matplotlib cannot write .{ext} files; use one of {', '.join(known)}"
    return None


def key_entries(plt, by_stream: dict, colours: Sequence[str], letters: set[str]) -> tuple[list, list[str]]:
    """The picture's key: one colour per ubatch drawn, what a lighter bar means, and one entry
    per kernel letter written on a bar (only those; a bar too narrow for its letter adds none)."""
    from matplotlib.lines import Line2D

    ubatches = sorted({r.ubatch or 0 for recs in by_stream.values() for r in recs})
    handles: list = [plt.Rectangle((0, 0), 1, 1, color=colours[u % len(colours)]) for u in ubatches]
    labels = [f"ubatch {u}" for u in ubatches]
    if any(r.kind != "compute" for recs in by_stream.values() for r in recs):
        handles.append(plt.Rectangle((0, 0), 1, 1, color="grey", alpha=0.55))
        labels.append("lighter: comm kernel")
    for letter, words in OP_NAMES.items():
        if letter in letters:
            handles.append(Line2D([], [], linestyle="none", marker=f"${letter}$", color="black", markersize=7))
            labels.append(words)
    return handles, labels


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
    names = sorted(by_stream, key=stream_sort_key)
    colours = plt.rcParams["axes.prop_cycle"].by_key().get("color", ["C0", "C1", "C2", "C3"])
    fig, ax = plt.subplots(figsize=(13, max(0.6 * len(names) + 1.5, 3.6)))
    scale = 1e3
    drawn: set[str] = set()
    for lane, name in enumerate(reversed(names)):
        for r in by_stream[name]:
            s, e = max(r.start, t0), min(r.end, t1)
            ub = r.ubatch or 0  # no ubatch: drawn in ubatch 0's colour
            ax.broken_barh(
                [((s - window.step_start) * scale, (e - s) * scale)],
                (lane - 0.4, 0.8),
                facecolors=colours[ub % len(colours)],
                edgecolor="black",
                linewidth=0.3,
                alpha=0.9 if r.kind == "compute" else 0.55,
            )
            op = r.op  # the op the kernel declared
            if op is not None and (e - s) > (t1 - t0) / 60:
                letter = OP_LETTERS.get(op, "?")
                drawn.add(letter)
                ax.text(((s + e) / 2 - window.step_start) * scale, lane, letter, ha="center", va="center", fontsize=7)
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels(list(reversed(names)))
    ax.set_xlabel("time since the step started (ms)")
    ax.set_title(title)
    handles, labels = key_entries(plt, by_stream, colours, drawn)
    # the key sits right of the axes, never on the data
    ax.legend(
        handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False, borderaxespad=0.0
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None
