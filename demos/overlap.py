"""``python -m demos.overlap``: the toy MoE model with and without DBO, and what the overlap buys.

This module is the command line only: its flags (defined in ``demos._overlap_flags``), one-line
errors that name flags, the files that ``--json``, ``--trace`` and ``--plot`` ask for, and the
exit status. The work lives in the
``demos.toy`` package: ``demos.toy.config`` (OverlapConfig, its checks), ``demos.toy.run`` (runs the
steps, returns an ``OverlapResult``), ``demos.toy.report`` (the text and JSON report).
docs/overlap.md explains every line of the report; docs/distributed.md the ``--world-size`` runs.

``run_overlap(OverlapConfig(...))`` (``demos.toy.experiment``, re-exported here) is the command as a
function: it runs, writes the files the config names, and returns the report dict (the keys
``--json`` writes).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Sequence

import demos._cli as cli_common
from dbo import CaptureError
from demos._overlap_flags import PROG, build_parser, flag_of
from demos.toy.config import TOLERANCE, ConfigError, OverlapConfig, resolve
from demos.toy.experiment import output_files, report_of, run_overlap
from demos.toy.plot import plot_path_problem
from demos.toy.report import format_output_line, format_report
from demos.toy.run import reference_outputs, run
from demos.zoo.loading import TOY

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


FIRST_BEAT_S = 10.0
"""A run shorter than this prints no heartbeat."""


class _Heartbeat:
    """The run's heartbeat (``ToyMoE.on_layer``): from ``FIRST_BEAT_S`` on, a line on stderr at most every
    5 s, on a terminal or not, saying how many layers the simulation has run, so that a long run shows it
    is alive."""

    def __init__(self, layers: int):
        self.line = cli_common.ProgressLine(every=5.0)
        self.layers = layers
        self.count = 0
        self.lock = threading.Lock()

    def __call__(self, layer: int, layers: int) -> None:
        with self.lock:
            self.count += 1
            if time.perf_counter() - self.line.t0 < FIRST_BEAT_S:
                return
            self.line(f"{PROG}: {self.count} layers of ubatch steps run (layer {layer + 1} of {layers} now)")

    def done(self) -> None:
        self.line.done()


def _heartbeat(cfg: OverlapConfig) -> _Heartbeat | None:
    return None if cfg.world_size > 1 or cfg.launcher == "env" else _Heartbeat(cfg.layers)


ZOO_ONLY_FLAGS = (
    "--gpu",
    "--nodes",
    "--gpus-per-node",
    "--attention-tp",
    "--phase",
    "--imbalance",
    "--comm-sms",
    "--shrink",
    "--kernels",
)
"""Flags of a ``--model`` run that the toy has no use for (refused without ``--model``)."""


def _model_arg(args: list[str]) -> str | None:
    """The value of ``--model`` in ``args`` (the last one), None without it."""
    found = None
    for i, a in enumerate(args):
        if a == "--model" and i + 1 < len(args):
            found = args[i + 1]
        elif a.startswith("--model="):
            found = a.split("=", 1)[1]
    return found


def _without_model(args: list[str]) -> list[str]:
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a == "--model":
            skip = True
        elif not a.startswith("--model="):
            out.append(a)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status: 0 ok, 2 a bad option or output path
    (before anything runs), 1 a failed run or a file that could not be written (after the report
    was printed). Run as ``python -m demos.overlap``, ``cli_common.run_main`` adds 130 (Ctrl-C),
    143 (SIGTERM) and 141 (stdout closed)."""
    args = list(sys.argv[1:] if argv is None else argv)
    model = _model_arg(args)
    if model is not None and model != TOY:  # a real model: the generic transformer (demos.zoo)
        from demos._zoo_overlap import main as zoo_main

        return zoo_main(args)
    args = _without_model(args)
    for arg in args:
        if arg.split("=", 1)[0] in ZOO_ONLY_FLAGS:
            sys.stderr.write(
                f"{PROG}: error: {arg.split('=', 1)[0]} describes a real model's cluster: add --model NAME "
                f"(the toy runs on --profile)\n"
            )
            return 2
        if arg == "--detail":
            sys.stderr.write(f"{PROG}: error: --detail is the per-op table of a real model's layer: add --model NAME\n")
            return 2
    parser = build_parser()
    try:
        ns = parser.parse_args(args)
    except SystemExit as e:
        return int(e.code or 0)
    from demos.ranks.launcher import DistributedError, in_torchrun

    opts = vars(ns)
    opts.pop("model", None)  # --model toy: this command's own model (a real one went to demos._zoo_overlap)
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
    if opts["dist_timeout"] is None:
        del opts["dist_timeout"]  # the config's default
    elif opts["world_size"] == 1 and opts.get("launcher") != "env":
        sys.stderr.write(
            f"{parser.prog}: error: --dist-timeout bounds the collectives between ranks: add --world-size N\n"
        )
        return 2
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
    beat = _heartbeat(cfg) if reporter else None
    try:
        result = run(cfg, on_layer=beat)
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
        oom = cli_common.out_of_memory_of(e) if isinstance(e, Exception) else None
        if oom is not None:  # an allocation the estimate did not foresee failed: one line
            text = (str(oom).strip().splitlines() or [type(oom).__name__])[-1][:200]
            sys.stderr.write(f"{parser.prog}: error: the run ran out of memory: {text}\n")
            return 1
        if cfg.launcher != "env" or cli_common.interrupt_of(e) is not None:
            raise
        # one rank under torchrun: say why, then leave at once (a collective may still be stuck on
        # the backend's comm executor thread); torchrun sees the non-zero status and stops the other ranks
        import traceback

        sys.stderr.write(f"{parser.prog}: rank {os.environ.get('RANK')} failed:\n{traceback.format_exc()}")
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(1)
    if beat is not None:
        beat.done()
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
    raise SystemExit(cli_common.run_main(main, PROG))
