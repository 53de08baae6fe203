"""``python -m demos.overlap --model NAME|PATH``: one step of a real model on a real cluster, with and
without DBO (the generic transformer of ``demos.zoo``). The toy's own flags (``--hidden``, ``--experts``,
...) do not apply there and are refused in one line; docs/models.md explains the report.
"""

from __future__ import annotations

import json
import sys
from typing import Sequence

import demos._cli as cli_common
from demos._cli.model_flags import add_model_flags, flag_of, workload_of
from demos._cli.values import token_count
from demos.errors import ConfigError
from demos.vocabulary import Mode, Phase
from demos.zoo.kernel_times import kernel_times
from demos.zoo.loading import load_model, shrunk_spec
from demos.zoo.overlap_costs import step_profile
from demos.zoo.report import format_step_report, measure_point, step_report
from demos.zoo.run import merged_trace

PROG = "python -m demos.overlap"

TOY_ONLY_FLAGS = (
    "--layers",
    "--hidden",
    "--experts",
    "--topk",
    "--expert-ffn",
    "--shared-ffn",
    "--shared-chunk",
    "--comm-ratio",
    "--link",
    "--profile",
    "--meta",
    "--dtype",
    "--world-size",
    "--dist-timeout",
    "--sanitize",
    "--stream-layout",
    "--plot",
    "--width",
)
"""Flags of the toy model that a ``--model`` run refuses (the model's config or the GPU sets them)."""

_BACKENDS = ("virtual", "threads", "inline")


def build_zoo_parser() -> cli_common.OneLineParser:
    p = cli_common.OneLineParser(
        prog=PROG,
        description="One step of a real model on a real cluster with and without DBO (docs/models.md).",
    )
    add_model_flags(p, model_default=None)
    a = p.add_argument
    a(
        "--tokens",
        type=token_count,
        default=None,
        help="tokens per GPU in the step (default 128 decode, 4096 prefill; k = 1024: 4k = 4096)",
    )
    a("--ubatches", type=int, default=2, help="ubatches with DBO (default 2)")
    a(
        "--backend",
        default="virtual",
        choices=_BACKENDS,
        help="virtual: full size on meta tensors, the GPU's modelled time (default); threads or inline: real math "
        "on a shrunken model (--shrink), checked bitwise against the same split run one ubatch after another",
    )
    a("--graph", action="store_true", help="time CUDA-graph replays of both steps (the mode vLLM runs DBO decode in)")
    a("--steps", type=int, default=None, help="accepted for the toy's sake; a virtual step is deterministic (one step)")
    a("--warmup", type=int, default=None, help="accepted for the toy's sake; one warmup step of each kind")
    a("--seed", type=int, default=0, help="seed of the real-math weights (default 0)")
    a("--json", dest="json_path", default=None, metavar="PATH", help="write the report as JSON to PATH")
    a("--trace", dest="trace_path", default=None, metavar="PATH", help="write a Perfetto/Chrome trace of both steps")
    a(
        "--detail",
        action="store_true",
        help="also print the device ms of each op of one MoE and one dense layer of the no-DBO step "
        "(the JSON's moe_layer_s and dense_layer_s)",
    )
    return p


def main(argv: Sequence[str]) -> int:
    """The ``--model`` form of ``demos.overlap`` (module docstring); exit 0, 1 (a file not written) or 2."""
    for arg in argv:
        name = arg.split("=", 1)[0]
        if name in TOY_ONLY_FLAGS:
            sys.stderr.write(
                f"{PROG}: error: {name} is a flag of the toy model; with --model the model's config and --gpu set it\n"
            )
            return 2
    parser = build_zoo_parser()
    try:
        ns = parser.parse_args(list(argv))
    except SystemExit as e:
        return int(e.code or 0)
    try:
        spec = load_model(ns.model)
        if ns.backend == "virtual" and ns.shrink not in (None, 1):
            raise ConfigError("--shrink does the real math: use it with --backend threads or inline")
        if ns.backend != "virtual":
            spec = shrunk_spec(spec, 32 if ns.shrink is None else ns.shrink)
        tokens = ns.tokens if ns.tokens is not None else (128 if ns.phase == Phase.DECODE else 4096)
        w = workload_of(ns, tokens=tokens, ubatches=ns.ubatches, spec=spec)
        if ns.backend != "virtual" and w.tokens > 4096:
            raise ConfigError("--tokens above 4096 on real math is slow on a CPU: use --backend virtual")
        cli_common.check_output_paths([(ns.json_path, "--json"), (ns.trace_path, "--trace")])
        profile = step_profile(w)
        kernels = kernel_times(ns.kernels, w.gpu, profile)
    except ConfigError as e:
        sys.stderr.write(f"{PROG}: error: {e.render(flag_of)}\n")
        return 2
    except cli_common.OutputPathError as e:
        sys.stderr.write(f"{PROG}: error: {e}\n")
        return 2
    mode = Mode.GRAPH if ns.graph else Mode.EAGER
    cli_common.progress(PROG, f"simulating {w.spec.name} on {w.cluster.world} {w.gpu.name} ({ns.backend}, {mode})")
    point = measure_point(
        w, backend=ns.backend, mode=mode, check=ns.backend != "virtual", profile=profile, kernels=kernels
    )
    rep = step_report(point)
    cli_common.say(format_step_report(rep, detail=ns.detail))
    status = 0

    def trace(path: str) -> None:
        merged_trace((step.tracer, 0.0) for step in (point.no_dbo, point.dbo)).to_chrome(path)
        rep["trace_path"] = ns.trace_path  # path is a temporary file (cli_common.write_whole)

    def json_file(path: str) -> None:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(rep, f, indent=2)

    for flag, path, write in (("--trace", ns.trace_path, trace), ("--json", ns.json_path, json_file)):
        if path and not cli_common.write_output(path, flag, write, PROG):
            status = 1
    if rep["exact"] is not None and not rep["exact"]["bitwise_equal"]:
        status = 1
    return status
