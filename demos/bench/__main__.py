"""``python -m demos.bench [--quick] [--json P] [--markdown P]``: the performance suite, micro-benchmarks with
baselines and targets (docs/performance.md).

The command line: which sections run (``--section``), the table printed on stdout, and the files
written after it (``--json``: machine info and every record; ``--markdown``: the report page, where a
partial run replaces only its own sections of an existing page; ``demos.bench._output``). The sections
themselves, and what a record holds, are in ``demos.bench._suite``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys

import demos._cli as cli_common
from demos._cli import OutputPathError, check_output_paths, run_main, say, write_output
from demos.bench._core import Config
from demos.bench._output import section_names, write_json, write_markdown
from demos.bench._report import NOISY_SPREAD, Record, machine, table
from demos.bench._serving import TRACE_ENV
from demos.bench._suite import SECTIONS


def build_parser() -> argparse.ArgumentParser:
    parser = cli_common.OneLineParser(prog="python -m demos.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer and shorter repeats (a smoke run)")
    parser.add_argument("--json", metavar="PATH", help="write machine info and all records as JSON")
    parser.add_argument("--markdown", metavar="PATH", help="write a docs/performance.md-style report")
    parser.add_argument("--section", action="append", metavar="NAME", help="run only this section (repeatable)")
    parser.add_argument("--device", default="cpu", help="device for buffers (default: cpu)")
    parser.add_argument("--strict", action="store_true", help="exit with status 1 if a target is missed")
    parser.add_argument(
        "--backend",
        default="auto",
        choices=("auto", "cuda", "threads", "virtual", "inline"),
        help="stream backend of the host section (default auto: cuda with a GPU, else threads)",
    )
    parser.add_argument(
        "--azure-trace",
        metavar="PATH",
        default=None,
        help="the serving section's full AzureLLMInferenceTrace_conv.csv (default: $DBO_AZURE_CONV_TRACE; "
        "without either, the shipped head repeated to its size)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the chosen sections, print the table, write the files asked for; the exit status (1: a
    file could not be written, or ``--strict`` and a target missed)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        check_output_paths([(args.json, "--json"), (args.markdown, "--markdown")])
    except OutputPathError as e:
        parser.exit(2, f"{parser.prog}: error: {e}\n")

    trace = args.azure_trace or os.environ.get(TRACE_ENV) or None
    if trace is not None and not os.path.isfile(trace):
        how = "--azure-trace" if args.azure_trace else f"${TRACE_ENV}"
        parser.exit(2, f"{parser.prog}: error: {how} {trace}: no such file\n")
    cfg = Config(quick=args.quick, device=args.device, backend=args.backend, azure_trace=trace)
    mach = machine()  # before the run: the load average says how busy the machine was
    chosen = [fn for fn in SECTIONS if not args.section or fn.__name__.removeprefix("section_") in args.section]
    if args.section and not chosen:
        parser.error(f"no such section: {args.section}; known: {section_names()}")
    records: list[Record] = []
    for fn in chosen:
        records += fn(cfg)
    command = "python -m demos.bench " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    say(table(records))
    missed = [r["name"] for r in records if r["ok"] is False]
    noisy = [r["name"] for r in records if r.get("noisy")]
    if noisy:
        say(f"noisy (max/min > {NOISY_SPREAD}): " + ", ".join(noisy))
    say("targets missed: " + (", ".join(missed) if missed else "none"))
    status = 1 if (args.strict and missed) else 0

    cmd, partial = command.strip(), bool(args.section)
    writers = (
        (args.json, "--json", lambda path: write_json(path, mach, cmd, records)),
        (args.markdown, "--markdown", lambda path: write_markdown(path, mach, cmd, records, partial, args.markdown)),
    )
    for path, flag, write in writers:
        if path and not write_output(path, flag, write, parser.prog):  # it says "wrote PATH" on success
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(run_main(main, "python -m demos.bench"))
