"""One overlap experiment of the toy with its files: ``run_overlap(config)`` runs it (``demos.toy.run``),
writes the files the config names (``--trace``, ``--plot``, ``--json``) and returns the report dict
(docs/overlap.md). ``python -m demos.overlap`` and ``demos.bench`` both call it.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from demos.toy.config import OverlapConfig
from demos.toy.plot import plot_timeline
from demos.toy.report import to_dict, trace_of
from demos.toy.results import OverlapResult
from demos.toy.run import run


def run_overlap(config: OverlapConfig | None = None, *, details: dict | None = None, **overrides: Any) -> dict | None:
    """Run the demo, write the files the config names (``json_path``, ``trace_path``,
    ``plot_path``) and return the report dict (docs/overlap.md). ``overrides`` replace fields of
    ``config``; a bad option raises ConfigError (naming config fields).

    ``details``: a dict to receive what the report summarises: ``records_no_dbo`` and
    ``records_dbo`` (the kernel records of the last timed step of each kind), ``window`` (the
    timeline's layer window), ``output_no_dbo`` and ``output_dbo`` (the final hidden states of the
    whole batch, CPU tensors; None with meta tensors) and, with ``world_size`` > 1,
    ``output_reference`` (the single-process run they are compared with); ``output_split`` (the
    same ubatch split run one ubatch after another: the exact reference) and ``output_dbo_graph``
    (the DBO replay's output with ``graph``, else None). For typed results without files, call
    ``demos.toy.run.run``.

    Under torchrun (``launcher="env"``) ranks other than 0 return None.
    """
    result = run(config, **overrides)
    if result is None:
        return None
    if details is not None:
        details.update(
            records_no_dbo=result.records_no_dbo,
            records_dbo=result.records_dbo,
            window=result.window,
            output_no_dbo=result.output_no_dbo,
            output_dbo=result.output_dbo,
        )
        if result.output_reference is not None:
            details["output_reference"] = result.output_reference
        details.update(output_split=result.output_split, output_dbo_graph=result.output_dbo_graph)
    report = report_of(result)
    for flag, path, write in output_files(result, report):
        write(path)
    return report


def report_of(result: OverlapResult) -> dict:
    """The report dict of a result (what ``run_overlap`` returns and the command prints), before
    any file is written."""
    report = to_dict(result)
    report["wall_s"] = result.wall_s
    return report


def output_files(result: OverlapResult, report: dict) -> list[tuple[str, str, Callable[[str], None]]]:
    """``(flag, path, write)`` for each file the result's config names, in the order they are
    written: ``--trace``, ``--plot``, then ``--json`` (last, so that it holds ``trace_path`` and
    ``plot_path`` of the files written before it). ``write(path)`` raises OSError on failure and
    records what it wrote in ``report``: the config's path, also when ``path`` is a temporary file
    that becomes it (``demos._cli.write_whole``)."""
    cfg = result.config
    out: list[tuple[str, str, Callable[[str], None]]] = []

    def trace(path: str) -> None:
        trace_of(result).to_chrome(path)
        report["trace_path"] = cfg.trace_path

    def plot(path: str) -> None:
        w = result.window
        msg = plot_timeline(
            result.records_dbo,
            w,
            path,
            f"DBO ({cfg.schedule}, {cfg.ubatches} ubatches, {result.resolved.backend}): layer {w.layer}",
        )
        if msg is None:
            report["plot_path"] = cfg.plot_path
        else:
            report["notes"].append(msg)
            report["plot_error"] = msg

    def json_file(path: str) -> None:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)

    for flag, path, write in (
        ("--trace", cfg.trace_path, trace),
        ("--plot", cfg.plot_path, plot),
        ("--json", cfg.json_path, json_file),
    ):
        if path:
            out.append((flag, path, write))
    return out
