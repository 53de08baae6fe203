"""The serve command lines for vLLM and SGLang that the predictor prints: built from the predicted
cluster so that they run as printed on one pinned release of each engine, every flag one that the
release defines (issue 35).

``serve_lines(model_id, world=, ep=, gpus_per_node=, nodes=, attention_tp=, phase=, schedule=,
overlap=, threshold=) -> EngineLines``: each engine's line (one command per kind of node, with a
``#`` comment line above each where there are several; a ``#`` line alone where the engine cannot run
the predicted cluster), the two versions, and ``notes``: every ``<PLACEHOLDER>`` explained and what
each engine does with the setting.

Pinned: vLLM 0.34.0 and SGLang 0.5.23 (their PyPI releases; the flags below are every flag the lines
can print, and more of the same argument groups, read from these files of those releases):

* vLLM 0.34.0 (``VLLM_FLAGS``): ``vllm/engine/arg_utils.py``, ``EngineArgs.add_cli_args``, its
  ParallelConfig group (``--tensor-parallel-size``, ``--data-parallel-size``, ``--data-parallel-size-local``,
  ``--data-parallel-address``, ``--data-parallel-rpc-port``, ``--data-parallel-start-rank``,
  ``--enable-expert-parallel``, ``--all2all-backend``, ``--enable-dbo``, ``--dbo-decode-token-threshold``,
  ``--dbo-prefill-token-threshold``); the fields behind those in ``vllm/config/parallel.py``
  (``ParallelConfig``, and ``All2AllBackend`` for the values ``deepep_low_latency`` and
  ``deepep_high_throughput``); ``--headless`` in ``vllm/entrypoints/common/cli_args.py``
  (``make_arg_parser``). No single-batch overlap: no such field in ``ParallelConfig``, no such flag.
* SGLang 0.5.23 (``SGLANG_FLAGS``): ``python/sglang/srt/server_args.py``, ``ServerArgs.add_cli_args``,
  which in this release derives each flag from a field name (``tp_size`` -> ``--tp-size``) and its
  aliases in ``python/sglang/srt/arg_groups/fields/parallel.py`` (``--tp-size``, ``--attn-dp-size``,
  ``--ep-size``, ``--nnodes``, ``--node-rank``, ``--dist-init-addr``, ``--moe-dense-tp-size``),
  ``.../fields/exec_.py`` (``--moe-a2a-backend``, ``--deepep-mode``, ``--enable-two-batch-overlap``,
  ``--enable-single-batch-overlap``, ``--tbo-token-distribution-threshold``) and ``.../fields/model.py``
  (``--model-path``), and registers the deprecated ``--enable-dp-attention`` itself. SGLang has no
  ``--tp``/``--dp`` (argparse abbreviations of ``--tp-size``/``--dp-size`` only).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

__all__ = [
    "OVERLAPS",
    "SCHEDULES",
    "SGLANG_FLAGS",
    "SGLANG_VERSION",
    "VLLM_FLAGS",
    "VLLM_VERSION",
    "EngineLines",
    "serve_lines",
]

VLLM_VERSION = "0.34.0"
SGLANG_VERSION = "0.5.23"

VLLM_FLAGS = frozenset(
    {
        # vllm/engine/arg_utils.py 0.34.0, EngineArgs.add_cli_args: the ParallelConfig group
        "--distributed-executor-backend",
        "--pipeline-parallel-size",
        "--master-addr",
        "--master-port",
        "--nnodes",
        "--node-rank",
        "--tensor-parallel-size",
        "--data-parallel-size",
        "--data-parallel-rank",
        "--data-parallel-start-rank",
        "--data-parallel-size-local",
        "--data-parallel-address",
        "--data-parallel-rpc-port",
        "--data-parallel-backend",
        "--data-parallel-hybrid-lb",
        "--data-parallel-external-lb",
        "--enable-expert-parallel",
        "--all2all-backend",
        "--enable-dbo",
        "--ubatch-size",
        "--dbo-decode-token-threshold",
        "--dbo-prefill-token-threshold",
        "--dp-sync-interval",
        "--disable-nccl-for-dp-synchronization",
        "--enable-eplb",
        "--eplb-config",
        "--expert-placement-strategy",
        "--enable-elastic-ep",
        # the ModelConfig group
        "--model",
        "--trust-remote-code",
        # vllm/entrypoints/common/cli_args.py 0.34.0, make_arg_parser
        "--headless",
        "--api-server-count",
    }
)
"""The vLLM 0.34.0 flags read (module docstring); every flag ``serve_lines`` prints is one of them."""

VLLM_DEEPEP_BACKENDS = {"ll": "deepep_low_latency", "ht": "deepep_high_throughput"}
"""``--all2all-backend`` per schedule: values of ``All2AllBackend`` (vllm/config/parallel.py 0.34.0)."""

SGLANG_FLAGS = frozenset(
    {
        # python/sglang/srt/arg_groups/fields/parallel.py 0.5.23: field names, then their aliases
        "--tp-size",
        "--tensor-parallel-size",
        "--dp-size",
        "--data-parallel-size",
        "--attn-dp-size",
        "--attention-data-parallel-size",
        "--moe-dp-size",
        "--ep-size",
        "--expert-parallel-size",
        "--ep",
        "--moe-dense-tp-size",
        "--nnodes",
        "--node-rank",
        "--dist-init-addr",
        "--nccl-init-addr",
        # .../fields/exec_.py 0.5.23
        "--moe-a2a-backend",
        "--deepep-mode",
        "--enable-two-batch-overlap",
        "--enable-single-batch-overlap",
        "--tbo-token-distribution-threshold",
        # .../fields/model.py and .../fields/serving.py 0.5.23
        "--model-path",
        "--model",
        "--trust-remote-code",
        "--host",
        "--port",
        # python/sglang/srt/server_args.py 0.5.23, registered there (deprecated for --attn-dp-size)
        "--enable-dp-attention",
    }
)
"""The SGLang 0.5.23 flags read (module docstring); every flag ``serve_lines`` prints is one of them."""

SGLANG_DEEPEP_MODES = {"ll": "low_latency", "ht": "normal"}
"""``--deepep-mode`` per schedule: its choices are auto, normal, low_latency (fields/exec_.py 0.5.23)."""

SCHEDULES = tuple(VLLM_DEEPEP_BACKENDS)
OVERLAPS = ("none", "dbo", "sbo")
PHASES = ("decode", "prefill")
VLLM_DEFAULT_THRESHOLDS = {"decode": 32, "prefill": 512}
"""``ParallelConfig.dbo_decode_token_threshold`` / ``dbo_prefill_token_threshold`` defaults (0.34.0)."""
VLLM_MIN_THRESHOLD = 2
"""vLLM 0.34.0 refuses DBO thresholds below the number of micro-batches, 2 (ParallelConfig's check)."""

MODEL = "<MODEL>"
HEAD_IP = "<HEAD_IP>"
PORT = "<PORT>"
START_RANK = "<START_RANK>"
NODE_RANK = "<NODE_RANK>"


@dataclass(frozen=True)
class EngineLines:
    """``vllm`` and ``sglang``: the command line(s) for each engine, or a ``#`` line saying why the
    engine cannot run the cluster as predicted; the pinned versions they were checked against;
    ``notes``: each placeholder in the lines explained, then what each engine does with the setting."""

    vllm: str
    sglang: str
    vllm_version: str
    sglang_version: str
    notes: tuple[str, ...]


def _check(world: int, ep: int, gpus_per_node: int, nodes: int, tp: int, phase: str, schedule: str, overlap: str):
    for name, v in (("world", world), ("ep", ep), ("gpus_per_node", gpus_per_node), ("nodes", nodes), ("tp", tp)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if world != nodes * gpus_per_node:
        raise ValueError(f"world ({world}) must be nodes x gpus_per_node ({nodes} x {gpus_per_node})")
    if world % ep or world % tp:
        raise ValueError(f"ep ({ep}) and attention_tp ({tp}) must divide the {world} GPUs")
    for name, v, allowed in (
        ("phase", phase, PHASES),
        ("schedule", schedule, SCHEDULES),
        ("overlap", overlap, OVERLAPS),
    ):
        if v not in allowed:
            raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {v!r}")


def _gpus(n: int) -> str:
    return f"{n} GPU" + ("s" if n != 1 else "")


def _ep_below_world(engine: str, why: str, world: int, ep: int) -> str:
    """The ``#`` line for an EP smaller than the GPUs it serves, which ``engine`` cannot express: ``why``,
    and what the prediction is instead."""
    return (
        f"# not expressible in {engine}: {why}, not the predicted {ep}; the prediction is {world // ep} "
        f"separate deployments of {ep} GPUs each, behind your own load balancer"
    )


def _vllm(
    model: str,
    world: int,
    ep: int,
    gpn: int,
    nodes: int,
    tp: int,
    phase: str,
    schedule: str,
    overlap: str,
    threshold: int | None,
    notes: list[str],
) -> str:
    v = f"vLLM {VLLM_VERSION}"
    if ep < world:
        why = "with --enable-expert-parallel its expert parallelism spans every GPU of the deployment (tensor x data"
        return _ep_below_world(v, f"{why} parallel = {world} here)", world, ep)
    if nodes > 1 and gpn % tp:
        return (
            f"# not expressible in {v} as a multi-node data-parallel launch: each data-parallel rank's "
            f"--tensor-parallel-size {tp} group must lie within one node of {gpn} GPUs"
        )
    dp = ep // tp
    base = f"vllm serve {model} --tensor-parallel-size {tp} --data-parallel-size {dp} --enable-expert-parallel"
    sharded = f"{v}: with --enable-expert-parallel the experts are sharded over tensor x data parallel, {tp} x {dp}"
    if dp > 1:
        base += f" --all2all-backend {VLLM_DEEPEP_BACKENDS[schedule]}"
        kind = "low-latency" if schedule == "ll" else "high-throughput (normal)"
        notes.append(
            f"{sharded} = {ep} GPUs; --all2all-backend {VLLM_DEEPEP_BACKENDS[schedule]}: DeepEP's {kind} kernels"
        )
    else:
        notes.append(
            f"{sharded} = {ep} GPUs; with --data-parallel-size 1 its MoE has no all-to-all (an all-reduce), "
            "so no --all2all-backend: DeepEP's would go unused"
        )
    head = ""
    if overlap == "sbo":
        head = f"# {v} has no single-batch overlap (no such flag or ParallelConfig field); the line without it:\n"
    elif overlap == "dbo" and dp == 1:
        head = (
            f"# {v} runs DBO only with --data-parallel-size > 1 (its micro-batch runner needs the DP "
            "handshake), and here attention tensor parallelism takes every GPU; the line without DBO:\n"
        )
    dbo = ""
    if overlap == "dbo" and dp > 1:
        dbo = " --enable-dbo"
        flag = f"--dbo-{phase}-token-threshold"
        if threshold is None:
            notes.append(f"{v}: {flag} left at its default, {VLLM_DEFAULT_THRESHOLDS[phase]}")
        else:
            t = max(threshold, VLLM_MIN_THRESHOLD)
            dbo += f" {flag} {t}"
            if t != threshold:
                notes.append(f"{v}: {flag} raised from {threshold} to {t}, the least it accepts (2 micro-batches)")
            notes.append(
                f"{v}: DBO splits a {phase} step when its tokens per data-parallel rank (one attention TP "
                f"group of {_gpus(tp)}) reach {flag}; the other phase's threshold stays at its default"
            )
    if nodes == 1:
        return head + base + dbo
    local = gpn // tp
    dp_args = f" --data-parallel-size-local {local} --data-parallel-address {HEAD_IP} --data-parallel-rpc-port {PORT}"
    starts = ", ".join(str(local * i) for i in range(1, min(nodes, 4))) + (", ..." if nodes > 4 else "")
    notes.append(
        f"{START_RANK} (vLLM): the first data-parallel rank of the node, {local} x its index from 1 to "
        f"{nodes - 1} ({starts}); each of the {nodes} nodes runs {local} of the {local * nodes} data-parallel ranks"
    )
    return (
        f"{head}# vLLM on the head node (node 0):\n{base}{dp_args}{dbo}\n"
        f"# vLLM on every other node (1 to {nodes - 1}):\n{base}{dp_args} "
        f"--data-parallel-start-rank {START_RANK} --headless{dbo}"
    )


def _sglang(
    model: str,
    world: int,
    ep: int,
    nodes: int,
    tp: int,
    phase: str,
    schedule: str,
    overlap: str,
    threshold: int | None,
    notes: list[str],
) -> str:
    s = f"SGLang {SGLANG_VERSION}"
    if ep < world:
        why = "with --moe-a2a-backend deepep it sets the expert-parallel size to --tp-size, every GPU of the deployment"
        return _ep_below_world(s, f"{why} ({world} here)", world, ep)
    groups = world // tp
    line = f"python -m sglang.launch_server --model-path {model} --tp-size {world}"
    if groups == 1:  # no all-to-all (docs/clusters.md, "Attention tensor parallelism": the replicated path)
        notes.append(
            f"{s}: one attention group of {_gpus(tp)}: --ep-size {world} shards the experts over it and their "
            "outputs are all-reduced, with no all-to-all (no --moe-a2a-backend, the path the prediction models)"
        )
        head = ""
        if overlap in ("dbo", "sbo"):
            head = (
                f"# {s} overlaps micro-batches only around DeepEP's all-to-all, which one attention group of "
                "every GPU does not run; the line without overlap:\n"
            )
        return f"{head}{line} --ep-size {world}" + _sglang_nodes(s, nodes, notes)
    line += f" --attn-dp-size {groups}"  # more than one attention group from here on
    notes.append(
        f"{s}: --tp-size {world} --attn-dp-size {groups} runs attention in {groups} data-parallel groups of "
        f"{_gpus(tp)} (tensor parallel inside each); releases before the attn-dp-size flag spell it "
        f"--dp-size {groups} --enable-dp-attention, which {s} still accepts with a deprecation warning"
    )
    line += f" --moe-a2a-backend deepep --deepep-mode {SGLANG_DEEPEP_MODES[schedule]}"
    notes.append(f"{s}: --moe-a2a-backend deepep sets the expert-parallel size to --tp-size, {world} = the EP")
    if schedule == "ht":
        notes.append(f"{s}: --deepep-mode normal turns off CUDA graphs (its server_args warn so)")
    if overlap == "dbo":
        line += " --enable-two-batch-overlap"
        below = f"below {threshold} tokens per attention group" if threshold is not None else "below the crossover"
        notes.append(
            f"{s}: two-batch overlap has no token threshold (it is on or off; --tbo-token-distribution-threshold "
            f"is the share of tokens between the two micro-batches, not a count): {below} it slows the {phase} step"
        )
    elif overlap == "sbo":
        line += " --enable-single-batch-overlap"
    return line + _sglang_nodes(s, nodes, notes)


def _sglang_nodes(s: str, nodes: int, notes: list[str]) -> str:
    """SGLang's multi-node flags (nothing on one node), with their note."""
    if nodes == 1:
        return ""
    notes.append(f"{NODE_RANK} (SGLang): the same line on each of the {nodes} nodes, 0 on the head node to {nodes - 1}")
    return f" --nnodes {nodes} --node-rank {NODE_RANK} --dist-init-addr {HEAD_IP}:{PORT}"


def serve_lines(
    model_id: str | None,
    *,
    world: int,
    ep: int,
    gpus_per_node: int,
    nodes: int,
    attention_tp: int,
    phase: str,
    schedule: str,
    overlap: str,
    threshold: int | None,
) -> EngineLines:
    """Both engines' lines for the predicted cluster (module docstring): ``world`` GPUs on ``nodes``
    nodes of ``gpus_per_node``, experts over ``ep`` of them, attention tensor parallel over
    ``attention_tp``; ``phase`` decode or prefill; ``schedule`` ll (DeepEP low-latency) or ht (normal);
    ``overlap`` none, dbo (vLLM's DBO, SGLang's two-batch overlap) or sbo (SGLang's single-batch
    overlap); ``threshold``: tokens per attention TP group from which DBO pays (None: the default).
    ``model_id``: a Hugging Face repo id, or None for ``<MODEL>``."""
    _check(world, ep, gpus_per_node, nodes, attention_tp, phase, schedule, overlap)
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 1):
        raise ValueError(f"threshold must be a positive integer or None, got {threshold!r}")
    notes: list[str] = []
    if model_id is None:
        model = MODEL
        notes.append(
            f"{MODEL}: fill in the model: a folder holding its config.json and its weights (the same path on "
            "every node), or its Hugging Face repo id"
        )
    else:
        model = shlex.quote(model_id)
    args = (world, ep, gpus_per_node, nodes, attention_tp, phase, schedule, overlap, threshold, notes)
    vllm = _vllm(model, *args)
    sglang = _sglang(model, world, ep, nodes, attention_tp, phase, schedule, overlap, threshold, notes)
    head = [
        f"{HEAD_IP}: the address of the head node (node 0), reachable from every node",
        f"{PORT}: a free TCP port on the head node, the same on every node (vLLM: its data-parallel RPC port; "
        "SGLang: its distributed init port)",
    ]
    notes[1 if model_id is None else 0 : 0] = [n for n in head if n.split(":")[0] in vllm + sglang]
    return EngineLines(vllm, sglang, VLLM_VERSION, SGLANG_VERSION, tuple(notes))
