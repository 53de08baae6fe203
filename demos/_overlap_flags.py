"""The flags of ``python -m demos.overlap`` (``build_parser``) and how they name config fields
(``flag_of``); ``demos.overlap`` runs them and writes the files.

Each flag is an ``OverlapConfig`` field (``--width`` is ``timeline_width``, ``--json`` is
``json_path``, ...), so a ConfigError from ``demos.toy.config`` renders with the flag's name.
"""

from __future__ import annotations

import argparse

import dbo
import demos._cli as cli_common
from demos.toy.config import BACKEND_CHOICES, DTYPE_CHOICES, OverlapConfig
from demos.toy.model import SCHEDULES

PROG = "python -m demos.overlap"

_FLAGS = {"timeline_width": "--width", "json_path": "--json", "trace_path": "--trace", "plot_path": "--plot"}


def flag_of(field: str) -> str:
    """The command-line flag of an OverlapConfig field (``comm_ratio`` -> ``--comm-ratio``)."""
    return _FLAGS.get(field, "--" + field.replace("_", "-"))


def _float_arg(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    d = OverlapConfig()
    p = cli_common.OneLineParser(
        prog=PROG,
        description=(
            "Run a toy MoE transformer with and without DBO (dual-batch overlap) and report the step times, "
            "the speedup, how much of the hideable communication was hidden, whether the outputs match, the "
            "workspace, and an ASCII timeline of one layer. docs/overlap.md explains the output."
        ),
    )
    a = p.add_argument
    a(
        "--model",
        default="toy",
        metavar="toy|NAME|PATH",
        help="toy (default): this toy MoE, with the flags below; a real model instead (deepseek-v3, kimi-k2, "
        "qwen3-30b-a3b, mixtral-8x7b, gpt-oss-120b, ... or a HuggingFace config.json) runs the generic transformer "
        "on a cluster with its own flags: python -m demos.overlap --model NAME --help (docs/models.md)",
    )
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
        "(virtual only, or the number of ranks with --world-size; default: experts/8, at least 1)",
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
        help="link profile of the modelled transfers: nvlink, ib400, loopback (default nvlink, rescaled); on "
        "threads and cuda each transfer also takes its modelled time (the compute is real there)",
    )
    a(
        "--profile",
        default=None,
        metavar="NAME|PATH.json",
        help="device profile of the modelled compute, virtual only: a built-in name (cpu, h200) or a JSON file "
        "from python -m demos.calibrate (default cpu); refused on threads and cuda, where the kernels really run",
    )
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
        default=None,
        metavar="S",
        help="seconds a collective may wait for the other ranks before the run fails, with --world-size > 1 or "
        f"under torchrun (default {d.dist_timeout:g})",
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
