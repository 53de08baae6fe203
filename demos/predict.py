"""``python -m demos.predict``: does DBO pay for this model on this cluster, from which batch size, and
what to pass to vLLM and SGLang (docs/predict.md).

The command line only: flags, one-line errors before any work, the progress bar, the files. The answer
is ``demos.prediction.predict`` (the same function from Python: docs/python.md), called with the flags
as its keyword arguments; ``--model toy --profile PATH.json`` goes through it too. This module prints
its ``text()`` (``text(detail=True)`` with ``--detail``) and writes its ``to_dict()`` (``--json``),
``--csv``, ``--plot`` and ``--trace``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence

import demos._cli as cli_common
from demos._cli.model_flags import add_model_flags, flag_of
from demos._cli.values import int_list, name_list, token_count, token_list
from demos.errors import ConfigError, field_ref
from demos.prediction import Prediction, predict
from demos.prediction.sweep import DEFAULT_TOKENS, WHAT_IF
from demos.prediction.workload import DEFAULT_REQUESTS
from demos.prediction.workload import ENGINES as WORKLOAD_ENGINES
from demos.zoo.loading import TOY

__all__ = ["PROG", "build_parser", "main"]

PROG = "python -m demos.predict"


def _what_if(text: str) -> tuple[str, float]:
    key, sep, value = text.partition("=")
    try:
        f = float(value)
    except ValueError:
        f = None
    if not sep or f is None:
        raise argparse.ArgumentTypeError(f"expected KEY=FACTOR with KEY one of {', '.join(WHAT_IF)}, got {text!r}")
    return key.strip(), f


def build_parser() -> cli_common.OneLineParser:
    p = cli_common.OneLineParser(
        prog=PROG,
        description="Predict whether DBO pays for a model on a cluster, from which tokens per GPU, and what to pass "
        "to vLLM and SGLang (docs/predict.md).",
    )
    add_model_flags(p, model_default=None, sweep=True)
    a = p.add_argument
    a(
        "--tokens",
        type=token_list,
        default=None,
        metavar="N,...",
        help="tokens per GPU to sweep; k = 1024, M = 1024 x 1024 (1k,2k) (default: "
        + "; ".join(f"{k} {','.join(map(str, v))}" for k, v in DEFAULT_TOKENS.items())
        + ")",
    )
    a("--ubatches", type=int_list, default=(2,), metavar="N,...", help="ubatches with DBO to sweep (default 2)")
    a(
        "--mode",
        default=None,
        choices=("graph", "eager", "both"),
        help="graph replays (vLLM's DBO decode) or eager steps (default: graph for decode, eager for prefill)",
    )
    a(
        "--what-if",
        type=_what_if,
        action="append",
        default=[],
        metavar="KEY=FACTOR",
        help="multiply one figure: " + "; ".join(f"{k}: {v}" for k, v in WHAT_IF.items()),
    )
    a(
        "--overlap",
        type=name_list,
        default=None,
        metavar="S,...",
        help="the overlap strategies to compare, among none, dbo, sbo (default: every one that applies; "
        "sbo needs the ll schedule, dbo and sbo an all-to-all)",
    )
    a(
        "--workload",
        default=None,
        metavar="SPEC",
        help="also run this serving workload (python -m demos.serving) on the same model and cluster, and take "
        "vLLM's threshold from it: closed:CONCURRENCY:ISL:OSL, poisson:RATE:ISL:OSL or trace:PATH (k = 1024)",
    )
    a(
        "--engine",
        default=None,
        choices=WORKLOAD_ENGINES,
        help="with --workload: the engine whose scheduler and split rule run it (default vllm)",
    )
    a(
        "--requests",
        type=int,
        default=None,
        metavar="N",
        help=f"with --workload: the requests measured (default {DEFAULT_REQUESTS})",
    )
    a("--profile", default=None, metavar="PATH.json", help="with --model toy: the profile demos.calibrate measured")
    a("--json", dest="json_path", default=None, metavar="PATH", help="write the prediction as JSON")
    a("--csv", dest="csv_path", default=None, metavar="PATH", help="write the points as CSV")
    a("--plot", dest="plot_path", default=None, metavar="PATH.png", help="step time and speedup against tokens")
    a("--trace", dest="trace_path", default=None, metavar="PATH", help="a Perfetto trace of one point's steps")
    a(
        "--trace-tokens",
        type=token_count,
        default=None,
        metavar="N",
        help="the point --trace shows (default: the crossover)",
    )
    a(
        "--detail",
        action="store_true",
        help="also print each point's device ms per op of one MoE and one dense layer of the no-DBO step",
    )
    return p


def _bar(done: int, total: int, what: str) -> str:
    n = 24
    k = n * done // total
    unit = "requests" if what.startswith("serving run") else "points"  # a workload's run, then the sweep
    return f"[{'#' * k}{'.' * (n - k)}] {done}/{total} {unit} ({what})"


def _say_rack(ns) -> None:
    """One stderr line when ``--gpus-per-node`` names whole NVL72 racks: the hosts they are predicted as."""
    from demos.zoo.hardware import get_gpu
    from demos.zoo.hardware.cluster import rack_hosts

    try:
        g = get_gpu(ns.gpu)
    except ValueError:
        return  # the prediction says so
    if ns.gpus_per_node is None:
        return
    racks = rack_hosts(g, ns.nodes, ns.gpus_per_node)
    if racks is not None:
        n = ns.nodes * ns.gpus_per_node // g.nvlink_domain
        what = f"one NVL{g.nvlink_domain} rack" if n == 1 else f"{n} NVL{g.nvlink_domain} racks"
        sys.stderr.write(
            f"{PROG}: --gpus-per-node {ns.gpus_per_node} is {what}: predicted as --nodes {racks[0]} "
            f"({racks[1]} GPUs per node, one {g.name} host each)\n"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        ns = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    paths = [(ns.json_path, "--json"), (ns.csv_path, "--csv"), (ns.plot_path, "--plot"), (ns.trace_path, "--trace")]
    bar = cli_common.ProgressLine(every=5.0)
    try:
        if ns.model == TOY and ns.trace_path is not None:
            raise ConfigError(f"{field_ref('trace')} applies to real models, not to {field_ref('model')} toy")
        cli_common.check_output_paths(paths)
        cli_common.check_plot_path(ns.plot_path)
        _say_rack(ns)
        pred = predict(
            ns.model,
            gpu=ns.gpu,
            nodes=ns.nodes,
            gpus_per_node=ns.gpus_per_node,
            ep=ns.ep,
            network=ns.network,
            attention_tp=ns.attention_tp,
            moe_tp=ns.moe_tp,
            kernels=ns.kernels,
            phase=ns.phase,
            context=ns.context,
            imbalance=ns.imbalance,
            comm_sms=ns.comm_sms,
            schedule=ns.schedule,
            tokens=ns.tokens,
            ubatches=ns.ubatches,
            mode=ns.mode,
            what_if=ns.what_if,
            weights=ns.weights,
            kv_cache_dtype=ns.kv_cache_dtype,
            overlap=ns.overlap,
            profile=ns.profile,
            workload=ns.workload,
            engine=ns.engine,
            requests=ns.requests,
            progress=lambda d, t, w: bar(_bar(d, t, w)),
        )
    except ConfigError as e:
        sys.stderr.write(f"{PROG}: error: {e.render(flag_of)}\n")
        return 2
    except cli_common.OutputPathError as e:
        sys.stderr.write(f"{PROG}: error: {e}\n")
        return 2
    finally:
        bar.done()
    cli_common.say(pred.text(detail=ns.detail))
    return _write_files(ns, pred)


def _write_files(ns: Any, pred: Prediction) -> int:
    status = 0
    rep = pred.to_dict()

    # each writer gets a temporary path (cli_common.write_whole): the report names the one asked for
    def plot(path: str) -> None:
        note = pred.write_plot(path)
        if note:
            raise OSError(note)
        rep["plot_path"] = ns.plot_path

    def trace(path: str) -> None:
        pred.write_trace(path, ns.trace_tokens)
        rep["trace_path"] = ns.trace_path

    def json_file(path: str) -> None:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(rep, f, indent=2)

    for flag, path, write in (
        ("--csv", ns.csv_path, pred.write_csv),
        ("--plot", ns.plot_path, plot),
        ("--trace", ns.trace_path, trace),
        ("--json", ns.json_path, json_file),
    ):
        if path and not cli_common.write_output(path, flag, write, PROG):
            status = 1
    return status


if __name__ == "__main__":
    raise SystemExit(cli_common.run_main(main, PROG))
