"""``python -m demos.serving``: DBO over a serving run: throughput, TTFT, TPOT and inter-token latency of a
workload with and without each overlap, the share of steps each engine's own rule splits and why the
others stay whole, and the vLLM threshold this workload favours (docs/serving.md).

The command line only: flags, one-line errors before any work, the progress line, the files (``--json``,
``--csv``: one row per request per overlap run, ``--plot``), each written whole or not at all. The answer
is ``demos.serving.api.simulate`` (the same function from Python), called with the flags as its keyword
arguments.
"""

from __future__ import annotations

import json
import sys
from typing import Sequence

import demos._cli as cli_common
from demos._cli.model_flags import flag_of, gpu_name, parse_imbalance
from demos._cli.values import name_list, token_count
from demos.errors import ConfigError
from demos.zoo.hardware import GPUS
from demos.zoo.hardware.cluster import NETWORKS
from demos.zoo.models import ALIASES, PRESET_NAMES
from demos.zoo.models.precision import KV_CACHE_DTYPES, WEIGHT_DTYPES

PROG = "python -m demos.serving"


def build_parser() -> cli_common.OneLineParser:
    p = cli_common.OneLineParser(
        prog=PROG,
        description="Simulate a serving run of a model on a cluster, with and without each overlap, by each "
        "engine's own scheduler and split rule (docs/serving.md).",
    )
    a = p.add_argument
    a(
        "--model",
        required=True,
        metavar="NAME|PATH",
        help=f"a preset ({', '.join((*PRESET_NAMES, *ALIASES))}) or a config.json",
    )
    a(
        "--engine",
        default="vllm",
        choices=("vllm", "sglang", "trtllm"),
        help="the engine whose rules run (default vllm)",
    )
    a(
        "--pool",
        default="colocated",
        choices=("colocated", "decode", "prefill"),
        help="the pool simulated: colocated, or one side of a disaggregated deployment (default colocated)",
    )
    a("--concurrency", type=int, default=None, metavar="N", help="a closed loop of N clients")
    a("--isl", type=token_count, default=None, metavar="N", help="prompt tokens per request (k = 1024)")
    a("--osl", type=token_count, default=None, metavar="N", help="output tokens per request (k = 1024)")
    a("--rate", type=float, default=None, metavar="R", help="an open loop of R requests/s (with --trace: its scale)")
    a("--trace", default=None, metavar="PATH", help="a request trace (Azure LLM inference CSV, Mooncake JSONL)")
    a("--trace-format", default=None, choices=("azure", "mooncake"), help="the trace's format (default: by suffix)")
    a("--requests", type=int, default=None, metavar="N", help="how many requests are measured (default 1000)")
    a("--warmup", type=int, default=None, metavar="N", help="closed loop: requests sent first, not measured")
    a(
        "--range-ratio",
        type=float,
        default=1.0,
        metavar="R",
        help="closed loop: each request's lengths drawn uniformly from R x --isl/--osl to them, as InferenceX's "
        "client draws them with --random-range-ratio (default 1: fixed)",
    )
    a(
        "--overlap",
        type=name_list,
        default=None,
        metavar="S,...",
        help="none, dbo, sbo (default: every one that applies)",
    )
    a("--dbo-decode-token-threshold", type=int, default=None, metavar="N", help="vLLM's (default 32)")
    a("--dbo-prefill-token-threshold", type=int, default=None, metavar="N", help="vLLM's (default 512)")
    a("--max-seqs", type=int, default=None, metavar="N", help="requests per rank (vLLM's --max-num-seqs)")
    a("--no-search", action="store_true", help="skip the search of the best vLLM threshold")
    a("--gpu", default="h100", type=gpu_name, choices=tuple(GPUS), help="GPU profile (default h100)")
    a("--nodes", type=int, default=1, help="hosts (default 1)")
    a("--gpus-per-node", type=int, default=None, help="GPUs per host (default: the GPU's server)")
    a(
        "--network",
        default="ib",
        choices=NETWORKS,
        help="the scale-out network: ib, roce, efa (CPU proxies) or efa-gda (docs/clusters.md; default ib)",
    )
    a("--ep", type=int, default=None, help="expert-parallel degree (default: every GPU)")
    a("--attention-tp", type=int, default=1, metavar="N", help="attention tensor parallelism (default 1)")
    a(
        "--moe-tp",
        type=int,
        default=1,
        metavar="N",
        help="MoE tensor parallelism over one attention TP group that is the EP group (N = --attention-tp = --ep; "
        "default 1: the experts sharded by EP)",
    )
    a(
        "--imbalance",
        type=parse_imbalance,
        default="auto",
        metavar="X|auto|power-law",
        help="expert-load imbalance: a number, auto (uniform routing) or power-law (skewed; default auto)",
    )
    a("--weights", default=None, choices=tuple(WEIGHT_DTYPES), help="the weights' precision (default: the config's)")
    a("--kv-cache-dtype", default=None, choices=tuple(KV_CACHE_DTYPES), help="the KV cache's precision")
    a("--kernels", default="roofline", choices=("roofline", "measured"), help="kernel-time source (default roofline)")
    a(
        "--release",
        default=None,
        metavar="VERSION",
        help="SGLang only: the release whose host behaviour the steps take, e.g. 0.5.9 (default: the pinned one)",
    )
    a(
        "--disable-radix-cache",
        action="store_true",
        help="SGLang only: the server runs without its radix cache (keeps the overlap schedule where --release would "
        "turn it off)",
    )
    a("--json", dest="json_path", default=None, metavar="PATH", help="write the run as JSON")
    a("--csv", dest="csv_path", default=None, metavar="PATH", help="write one row per request per overlap run")
    a("--plot", dest="plot_path", default=None, metavar="PATH.png", help="latency CDFs with and without each overlap")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        ns = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    bar = cli_common.ProgressLine(every=5.0)
    try:
        cli_common.check_output_paths([(ns.json_path, "--json"), (ns.csv_path, "--csv"), (ns.plot_path, "--plot")])
        cli_common.check_plot_path(ns.plot_path)
        from demos.serving.api import simulate

        run = simulate(
            ns.model,
            engine=ns.engine,
            pool=ns.pool,
            concurrency=ns.concurrency,
            isl=ns.isl,
            osl=ns.osl,
            rate=ns.rate,
            trace=ns.trace,
            trace_format=ns.trace_format,
            requests=ns.requests,
            warmup=ns.warmup,
            range_ratio=ns.range_ratio,
            overlap=ns.overlap,
            dbo_decode_token_threshold=ns.dbo_decode_token_threshold,
            dbo_prefill_token_threshold=ns.dbo_prefill_token_threshold,
            gpu=ns.gpu,
            nodes=ns.nodes,
            gpus_per_node=ns.gpus_per_node,
            network=ns.network,
            ep=ns.ep,
            attention_tp=ns.attention_tp,
            moe_tp=ns.moe_tp,
            imbalance=ns.imbalance,
            weights=ns.weights,
            kv_cache_dtype=ns.kv_cache_dtype,
            kernels=ns.kernels,
            max_seqs=ns.max_seqs,
            search=not ns.no_search,
            release=ns.release,
            disable_radix_cache=ns.disable_radix_cache,
            progress=lambda d, t, w: bar(f"{d}/{t} requests ({w})"),
        )
    except ConfigError as e:
        sys.stderr.write(f"{PROG}: error: {e.render(flag_of)}\n")
        return 2
    except cli_common.OutputPathError as e:
        sys.stderr.write(f"{PROG}: error: {e}\n")
        return 2
    finally:
        bar.done()
    cli_common.say(run.text())
    status = 0
    rep = run.to_dict()
    if ns.plot_path and not cli_common.write_output(ns.plot_path, "--plot", run.write_plot, PROG):
        status = 1
    if ns.json_path:

        def write(path: str) -> None:
            with open(path, "w", encoding="utf-8") as f:
                json.dump(rep, f, indent=2)

        if not cli_common.write_output(ns.json_path, "--json", write, PROG):
            status = 1
    if ns.csv_path and not cli_common.write_output(ns.csv_path, "--csv", run.write_csv, PROG):
        status = 1
    return status


if __name__ == "__main__":
    raise SystemExit(cli_common.run_main(main, PROG))
