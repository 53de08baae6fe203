"""The text report's lines, one helper per kind of line (``demos.toy.report.format_report``
assembles them from the JSON report's dict; docs/overlap.md explains each line)."""

from __future__ import annotations

from dbo.trace import fmt_seconds, fmt_seconds_group

__all__ = [
    "times",
    "growth_text",
    "link_line",
    "graph_line",
    "output_lines",
    "pinned_text",
    "pct",
    "bound_lines",
    "sanitizer_lines",
]


def times(n: int) -> str:
    """``once``, ``2 times``."""
    return "once" if n == 1 else f"{n} times"


def growth_text(grows: int, in_warmup: int) -> str:
    """How often the workspace grew, and whether all of it happened in warmup (before the lock)."""
    if grows == 0:
        return "never grew"
    if grows == in_warmup:
        return f"grew {times(grows)}, all in warmup"
    late = grows - in_warmup
    return f"grew {times(grows)}, {late} of them after warmup"


def link_line(link: dict, comm_ratio: float | None) -> str:
    """The modelled link: its profile, and whether its bandwidth is the profile's own or was
    rescaled so that comm = ``comm_ratio`` x compute."""
    bw = f"{link['bandwidth_Bps'] / 1e9:.3g} GB/s"
    lat = f"latency {fmt_seconds(link['latency_s'])}"
    if comm_ratio is not None:
        what = f"{link['base_link']}, bandwidth rescaled to {bw} so that comm = {comm_ratio:g} x compute; {lat}"
    else:
        what = f"{link['base_link']}, {bw} and {lat} as given (no --comm-ratio)"
    return f"link       {what}; dispatch in {link['wire_dtype']}"


def graph_line(rep: dict) -> str:
    """Whether the step times are eager steps or replays of the captured steps (``--graph``)."""
    if not rep.get("graph"):
        return "graph      false: eager steps (--graph captures each step once and times its replays; ll only)"
    k = rep["graph_kernels"]
    en, ed = rep["eager_time_no_dbo_s"], rep["eager_time_dbo_s"]
    eager = f"; eager: no DBO {fmt_seconds(en)}, DBO {fmt_seconds(ed)}, speedup {en / ed:.2f}x" if ed else ""
    return (
        f"graph      true: the times above are replays of the captured steps ({k['no_dbo']} and {k['dbo']} kernels), "
        f"graph against graph{eager}; compute, comm and the timeline are the eager steps'"
    )


def output_lines(rep: dict) -> list[str]:
    """The exactness verdict (DBO against the same split run one ubatch after another: bitwise)
    and the whole-batch numerics (information, never a verdict)."""
    ex = rep["exact"]
    if ex is None:
        return ["outputs    max |DBO - same split, one ubatch after another|: n/a (meta tensors: no math)"]
    verdict = "PASS" if ex["bitwise_equal"] else "FAIL"
    which = "eager and graph replay" if rep.get("graph") else "eager"
    lines = [
        f"outputs    max |DBO - same split, one ubatch after another| = {ex['max_abs_diff']:.3g} ({which}; "
        f"must be 0, bitwise): {verdict}"
    ]
    d, e = rep.get("max_abs_diff_whole_batch"), rep.get("whole_batch_expected") or {}
    if d is not None and e.get("absolute") is not None:
        how = "within" if e["within"] else "above"
        lines.append(
            f"numerics   max |DBO - whole batch at once| = {d:.3g}: other row counts may take other GEMM kernels; "
            f"expected up to ~{e['relative']:g} x max(1, max|out|) = {e['absolute']:.3g} in {e['dtype']} ({how})"
        )
    return lines


def pinned_text(cpus: dict | None) -> str:
    """ ", engines pinned: compute CPU 0, comm CPU 1" (threads backend), or "" when not pinned."""
    if not cpus:
        return ""

    def one(c: list[int]) -> str:
        return (
            f"CPU {c[0]}"
            if len(c) == 1
            else f"CPUs {c[0]}-{c[-1]}"
            if c == list(range(c[0], c[-1] + 1))
            else "CPUs " + ",".join(map(str, c))
        )

    return ", engines pinned: " + ", ".join(f"{k} {one(cpus[k])}" for k in ("compute", "comm") if k in cpus)


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:.1f}%"


def bound_lines(rep: dict) -> list[str]:
    """The bound and hidden lines, from each step's own kernel times (docs/overlap.md)."""
    if rep.get("overlapped_dbo_s") is None:  # the DBO step's overlap was not measured
        return [
            f"bound      {fmt_seconds(rep['bound_s'])} = no-DBO step - hideable; hideable = min(compute, comm) - "
            f"already overlapped without DBO = {fmt_seconds(rep['hideable_s'])}",
            f"hidden     {pct(rep['hidden_fraction'])}",
        ]
    cd, md, od = rep["compute_dbo_s"], rep["comm_dbo_s"], rep["overlapped_dbo_s"]
    m_no = min(rep["compute_s"], rep["comm_s"])
    r_no = rep["overlapped_no_dbo_s"] / m_no if m_no > 0 else 0.0
    ideal = rep.get("ideal_speedup")
    bound, t_dbo, least, over = fmt_seconds_group([rep["bound_s"], rep["time_dbo_s"], min(cd, md), od])
    lines = [
        f"bound      {bound} = ideal DBO step = DBO step - (min(compute, comm) - overlapped) of its "
        f"own kernels = {t_dbo} - ({least} - {over})"
        + (f"; ideal speedup over the no-DBO step's kernels {ideal:.2f}x" if ideal is not None else ""),
        f"hidden     {pct(rep['hidden_fraction'])} of the hideable comm: overlapped / min(compute, comm) in the DBO "
        f"step ({pct(od / min(cd, md) if min(cd, md) > 0 else None)}) beyond the {pct(r_no)} overlapped without DBO",
    ]
    if rep.get("speedup_note"):
        lines.append(f"note       {rep['speedup_note']}")
    return lines


def sanitizer_lines(rep: dict) -> list[str]:
    if "sanitizer_findings" not in rep:
        return []
    n = rep["sanitizer_findings"]
    out = [f"sanitizer  {n} finding{'' if n == 1 else 's'} (workspace sanitizer + stream races, every step)"]
    out += [f"           {f}" for f in rep["sanitizer_first"]]
    return out
