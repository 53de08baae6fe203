"""``python -m demos.overlap``: the toy MoE model with and without DBO, and what the overlap buys.

This module is the command line only: flags, one-line errors that name flags, the files that
``--json``, ``--trace`` and ``--plot`` ask for, and the exit status. The work lives in the
``demos.moe`` package: ``demos.moe.config`` (OverlapConfig, its checks), ``demos.experiment.run`` (runs the
steps, returns an ``OverlapResult``), ``demos.experiment.report`` (the text and JSON report).
docs/overlap.md explains every line of the report; docs/distributed.md the ``--world-size`` runs.

``run_overlap(OverlapConfig(...))`` is the command as a function: it runs, writes the files the
config names, and returns the report dict (the keys ``--json`` writes).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Callable, Sequence

import dbo
import demos._cli as cli_common
from dbo import CaptureError
from demos.experiment.plot import plot_path_problem, plot_timeline
from demos.experiment.report import format_output_line, format_report, to_dict, trace_of
from demos.experiment.results import OverlapResult
from demos.experiment.run import reference_outputs, run
from demos.moe.config import BACKEND_CHOICES, DTYPE_CHOICES, TOLERANCE, ConfigError, OverlapConfig, resolve
from demos.moe.model import SCHEDULES

__all__ = [
    "OverlapConfig",
    "ConfigError",
    "run_overlap",
    "reference_outputs",
    "format_report",
    "main",
    "build_parser",
    "flag_of",
    "output_files",
    "report_of",
    "TOLERANCE",
]

_FLAGS = {"timeline_width": "--width", "json_path": "--json", "trace_path": "--trace", "plot_path": "--plot"}


def flag_of(field: str) -> str:
    """The command-line flag of an OverlapConfig field (``comm_ratio`` -> ``--comm-ratio``)."""
    return _FLAGS.get(field, "--" + field.replace("_", "-"))


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
    ``demos.experiment.run.run``.

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
    records what it wrote in ``report``."""
    cfg = result.config
    out: list[tuple[str, str, Callable[[str], None]]] = []

    def trace(path: str) -> None:
        trace_of(result).to_chrome(path)
        report["trace_path"] = path

    def plot(path: str) -> None:
        w = result.window
        msg = plot_timeline(
            result.records_dbo,
            w,
            path,
            f"DBO ({cfg.schedule}, {cfg.ubatches} ubatches, {result.resolved.backend}): layer {w.layer}",
        )
        if msg is None:
            report["plot_path"] = path
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


# --- command line --------------------------------------------------------------------------------


def _float_arg(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    d = OverlapConfig()
    p = cli_common.OneLineParser(
        prog="python -m demos.overlap",
        description=(
            "Run a toy MoE transformer with and without DBO (dual-batch overlap) and report the step times, "
            "the speedup, how much of the hideable communication was hidden, whether the outputs match, the "
            "workspace, and an ASCII timeline of one layer. docs/overlap.md explains the output."
        ),
    )
    a = p.add_argument
    a(
        "--backend",
        default=d.backend,
        choices=BACKEND_CHOICES,
        help="stream backend: threads (real math and wall-clock time on the CPU, transfers sleep), virtual "
        "(deterministic virtual clock from the cost model), cuda (a GPU), auto (cuda if available, else threads). "
        "Default auto",
    )
    a(
        "--schedule",
        default=d.schedule,
        choices=SCHEDULES,
        help="where each MoE layer yields: ll = low-latency style (one stream, send + recv hook, 2 yields per layer), "
        "ht = high-throughput style (compute + comm streams, 3 yields per layer). Default ht",
    )
    a("--layers", type=int, default=d.layers, help=f"transformer layers (default {d.layers})")
    a(
        "--tokens",
        type=int,
        default=d.tokens,
        help=f"tokens in the batch, split evenly into the ubatches (default {d.tokens})",
    )
    a("--hidden", type=int, default=d.hidden, help=f"hidden size (default {d.hidden})")
    a("--experts", type=int, default=d.experts, help=f"routed experts per layer (default {d.experts})")
    a("--topk", type=int, default=d.topk, help=f"experts per token, at most --experts (default {d.topk})")
    a("--ubatches", type=int, default=d.ubatches, help=f"ubatches with DBO, at most --tokens (default {d.ubatches})")
    a("--expert-ffn", type=int, default=None, help="intermediate size of a routed expert (default: --hidden)")
    a("--shared-ffn", type=int, default=None, help="intermediate size of the shared expert (default: 2 x expert ffn)")
    a("--context", type=int, default=None, help="cached context tokens every token attends to (default: --hidden / 2)")
    a(
        "--shared-chunk",
        type=int,
        default=d.shared_chunk,
        help=f"tokens per shared-expert chunk (default {d.shared_chunk})",
    )
    a(
        "--ep",
        type=int,
        default=None,
        help="expert-parallel group size assumed by the cost model: each rank reads the weights of experts/ep experts "
        "(default: experts/8, at least 1)",
    )
    a(
        "--comm-ratio",
        type=_float_arg,
        default=None,
        metavar="R",
        help="scale the link bandwidth so that a layer's communication takes R x its compute, measured on the chosen "
        "backend from a no-DBO step (default 1; with --link, the link is used as given unless --comm-ratio is set)",
    )
    a(
        "--link",
        default=None,
        help="link profile of the modelled transfers: nvlink, ib400, loopback (default nvlink, rescaled)",
    )
    a("--profile", default=None, help="device profile for modelled compute on virtual: cpu, h200 (default cpu)")
    a(
        "--meta",
        action="store_true",
        default=None,
        help="meta tensors: shapes only, math skipped (virtual only; automatic there when the weights exceed 1 GiB)",
    )
    a(
        "--dtype",
        default=d.dtype,
        choices=DTYPE_CHOICES,
        help="compute dtype (default auto: float32, bfloat16 with meta tensors)",
    )
    a("--steps", type=int, default=d.steps, help=f"timed steps without DBO and again with DBO (default {d.steps})")
    a(
        "--warmup",
        type=int,
        default=d.warmup,
        help=f"warmup steps of each kind before the workspace is locked (default {d.warmup})",
    )
    a("--seed", type=int, default=d.seed, help=f"seed of the weights and inputs (default {d.seed})")
    a(
        "--torch-threads",
        type=int,
        default=None,
        help="torch intra-op threads during the run (default 1 on threads and virtual: the comm executor and the "
        "ubatch threads need a core too; unchanged on cuda)",
    )
    a(
        "--stream-layout",
        default=d.stream_layout,
        choices=dbo.STREAM_LAYOUTS,
        help="per-ubatch (default: each ubatch on its own compute and comm streams) or shared "
        "(as vLLM: one compute and one comm stream for all ubatches)",
    )
    a(
        "--width",
        dest="timeline_width",
        type=int,
        default=d.timeline_width,
        help="columns of the ASCII timeline (default 72)",
    )
    a("--json", dest="json_path", default=None, metavar="PATH", help="write the report as JSON to PATH")
    a(
        "--trace",
        dest="trace_path",
        default=None,
        metavar="PATH",
        help="write a Chrome trace of the last no-DBO and DBO steps to PATH",
    )
    a(
        "--plot",
        dest="plot_path",
        default=None,
        metavar="PATH",
        help="draw the timeline of one DBO layer to PATH (needs matplotlib: pip install 'dbo-sim[plot]')",
    )
    a(
        "--world-size",
        type=int,
        default=None,
        metavar="N",
        help="run on N ranks over torch.distributed instead of the modelled link: this command starts them on this "
        "host (gloo on the CPU, nccl when every rank has a GPU); each rank holds tokens/N tokens and experts/N "
        "experts, and rank 0 reports. Under torchrun it is this process's WORLD_SIZE (default 1; docs/distributed.md)",
    )
    a(
        "--dist-timeout",
        type=_float_arg,
        default=d.dist_timeout,
        metavar="S",
        help=f"seconds a collective may wait for the other ranks before the run fails (default {d.dist_timeout:g})",
    )
    a(
        "--graph",
        action="store_true",
        default=False,
        help="capture the no-DBO step and the DBO step once each and time their replays (a CUDA graph on cuda; a "
        "recorded replay on the CPU backends): the speedup compares graph with graph. ll only: ht keeps "
        "host-known expert counts, which a graph cannot hold",
    )
    a(
        "--sanitize",
        action="store_true",
        default=False,
        help="run every step under the workspace sanitizer and the stream-race detector (dbo.races); the report "
        "counts the findings and lists the first few (docs/races.md). Slower; single process only",
    )
    a(
        "--no-pin-engines",
        dest="pin_engines",
        action="store_false",
        default=d.pin_engines,
        help="threads backend: let the OS place the compute and comm executors on any CPU instead of giving each "
        "its own (by default they are pinned in a single-process run, as a GPU's engines never wait for each "
        "other's processor; docs/streams.md)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status: 0 ok, 2 a bad option or output path
    (before anything runs), 1 a failed run or a file that could not be written (after the report
    was printed). Run as ``python -m demos.overlap``, ``cli_common.run_main`` adds 130 (Ctrl-C),
    143 (SIGTERM) and 141 (stdout closed)."""
    parser = build_parser()
    try:
        ns = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    from demos.ranks.launcher import DistributedError, in_torchrun

    opts = vars(ns)
    if in_torchrun():  # started by torchrun: this process is one rank (env:// rendezvous)
        world = int(os.environ["WORLD_SIZE"])
        if opts["world_size"] not in (None, world):
            sys.stderr.write(
                f"{parser.prog}: error: --world-size {opts['world_size']} but torchrun started {world} ranks\n"
            )
            return 2
        opts.update(world_size=world, launcher="env")
    elif opts["world_size"] is None:
        opts["world_size"] = 1
    cfg = OverlapConfig(**opts)
    try:
        resolve(cfg)  # the options first (cheap: nothing is built), then the paths, then the run
    except ConfigError as e:
        sys.stderr.write(f"{parser.prog}: error: {e.render(flag_of)}\n")
        return 2
    reporter = cfg.launcher != "env" or os.environ.get("RANK", "0") == "0"  # under torchrun rank 0 reports
    if reporter:
        try:
            cli_common.check_output_paths(
                [(getattr(cfg, f), flag_of(f)) for f in ("json_path", "trace_path", "plot_path")]
            )
            problem = plot_path_problem(cfg.plot_path) if cfg.plot_path else None
            if problem:
                raise cli_common.OutputPathError(f"--plot {cfg.plot_path}: {problem}")
        except cli_common.OutputPathError as e:
            sys.stderr.write(f"{parser.prog}: error: {e}\n")
            return 2
        cli_common.progress(
            parser.prog,
            f"running {cfg.steps} steps without DBO and {cfg.steps} with DBO after {cfg.warmup} warmup "
            "(Ctrl-C stops it)",
        )
    try:
        result = run(cfg)
    except ConfigError as e:
        sys.stderr.write(f"{parser.prog}: error: {e.render(flag_of)}\n")
        return 2
    except DistributedError as e:
        from demos.ranks.launcher import describe_exit

        sys.stderr.write(f"{parser.prog}: error: {e}\n")
        if e.exitcodes:
            sys.stderr.write("ranks: " + "; ".join(f"{r} {describe_exit(c)}" for r, c in enumerate(e.exitcodes)) + "\n")
        if e.remote_traceback:
            sys.stderr.write(f"--- traceback of rank {e.rank} ---\n{e.remote_traceback}")
        return 1
    except CaptureError as e:  # --graph: the step made a host sync a graph cannot hold
        sys.stderr.write(f"{parser.prog}: error: --graph could not capture the step: {e}\n")
        return 1
    except BaseException as e:
        if cfg.launcher != "env" or cli_common.interrupt_of(e) is not None:
            raise
        # one rank under torchrun: say why, then leave at once (a collective may still be stuck on
        # the backend's comm executor thread); torchrun sees the non-zero status and stops the other ranks
        import traceback

        sys.stderr.write(f"{parser.prog}: rank {os.environ.get('RANK')} failed:\n{traceback.format_exc()}")
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(1)
    if result is None:  # a rank other than 0 under torchrun: rank 0 reports
        return 0
    # the report first, then the files: a file that fails to be written loses nothing printed
    rep = report_of(result)
    cli_common.say(format_report(rep))
    status = 0
    for flag, path, write in output_files(result, rep):
        notes = len(rep["notes"])
        if not cli_common.write_output(path, flag, write, parser.prog):
            status = 1
            continue
        for note in rep["notes"][notes:]:
            cli_common.say(format_output_line("note", note))
        if flag == "--plot" and "plot_path" not in rep:  # no matplotlib: the note above says so
            continue
        cli_common.say(format_output_line(flag.lstrip("-"), path))
    return status


if __name__ == "__main__":
    raise SystemExit(cli_common.run_main(main, "python -m demos.overlap"))
