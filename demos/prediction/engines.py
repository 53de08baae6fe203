"""The serve command lines for vLLM and SGLang that the predictor prints: built from the predicted
cluster so that they run as printed on one pinned release of each engine, every flag one that the
release defines (issue 35).

``serve_lines(deployment, overlap, threshold) -> EngineLines``: each engine's line (one command per kind
of node, with a ``#`` comment line above each where there are several; a ``#`` line alone where the
engine cannot run the predicted cluster), the two versions, and ``notes``: every ``<PLACEHOLDER>``
explained and what each engine does with the setting. A ``Deployment`` is what the lines are written
for, passed whole: the model's repository, the cluster (its GPUs, nodes and EP), the attention TP
group, the phase and the schedule, and the engine releases (``Engines``, the pinned ones).

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
from dataclasses import dataclass, field
from typing import Any

from demos.vocabulary import Overlap, Phase, Schedule

__all__ = [
    "Deployment",
    "Engines",
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

VLLM_DEEPEP_BACKENDS = {Schedule.LL: "deepep_low_latency", Schedule.HT: "deepep_high_throughput"}
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

SGLANG_DEEPEP_MODES = {Schedule.LL: "low_latency", Schedule.HT: "normal"}
"""``--deepep-mode`` per schedule: its choices are auto, normal, low_latency (fields/exec_.py 0.5.23)."""

VLLM_DEFAULT_THRESHOLDS = {Phase.DECODE: 32, Phase.PREFILL: 512}
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


@dataclass(frozen=True)
class Engines:
    """The engine releases the lines are written and checked for: the pinned ones (module docstring); any
    other is refused, since no other release's flags were read."""

    vllm: str = VLLM_VERSION
    sglang: str = SGLANG_VERSION

    def __post_init__(self) -> None:
        for name, pinned in (("vllm", VLLM_VERSION), ("sglang", SGLANG_VERSION)):
            if getattr(self, name) != pinned:
                raise ValueError(
                    f"engines.{name}: the lines are checked against {pinned} only, got {getattr(self, name)!r}"
                )

    def as_dict(self) -> dict[str, str]:
        return {"vllm": self.vllm, "sglang": self.sglang}


@dataclass(frozen=True)
class Deployment:
    """What the engine lines are written for (module docstring): ``model_id`` (a Hugging Face repo id, or
    None for ``<MODEL>``), ``world`` GPUs on ``nodes`` nodes of ``gpus_per_node``, the experts over ``ep``
    of them, attention tensor parallel over ``attention_tp``, the ``phase`` (decode or prefill), the
    ``schedule`` (ll: DeepEP low-latency, ht: normal) and the ``engines``' releases. A bad field is a
    ``ValueError`` naming it."""

    model_id: str | None
    world: int
    ep: int
    gpus_per_node: int
    nodes: int
    attention_tp: int
    phase: Phase
    schedule: Schedule
    engines: Engines = field(default_factory=Engines)

    def __post_init__(self) -> None:
        for name in ("world", "ep", "gpus_per_node", "nodes", "attention_tp"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if self.world != self.nodes * self.gpus_per_node:
            raise ValueError(
                f"world ({self.world}) must be nodes x gpus_per_node ({self.nodes} x {self.gpus_per_node})"
            )
        if self.world % self.ep or self.world % self.attention_tp:
            raise ValueError(f"ep ({self.ep}) and attention_tp ({self.attention_tp}) must divide the {self.world} GPUs")
        object.__setattr__(self, "phase", Phase.parse(self.phase, "phase"))
        object.__setattr__(self, "schedule", Schedule.parse(self.schedule, "schedule"))
        if not isinstance(self.engines, Engines):
            raise ValueError(f"engines must be Engines, got {self.engines!r}")

    @classmethod
    def of(cls, workload: Any, model_id: str | None) -> Deployment:
        """The deployment of a ``demos.zoo.workload.Workload``: its cluster, attention TP, phase and schedule."""
        c = workload.cluster
        return cls(
            model_id, c.world, c.ep, c.gpus_per_node, c.nodes, workload.attention_tp, workload.phase, workload.schedule
        )


def _gpus(n: int) -> str:
    return f"{n} GPU" + ("s" if n != 1 else "")


def _ep_below_world(engine: str, why: str, world: int, ep: int) -> str:
    """The ``#`` line for an EP smaller than the GPUs it serves, which ``engine`` cannot express: ``why``,
    and what the prediction is instead."""
    return (
        f"# not expressible in {engine}: {why}, not the predicted {ep}; the prediction is {world // ep} "
        f"separate deployments of {ep} GPUs each, behind your own load balancer"
    )


def _vllm(model: str, d: Deployment, overlap: Overlap, threshold: int | None, notes: list[str]) -> str:
    world, ep, gpn, nodes, tp, phase, schedule = (
        d.world,
        d.ep,
        d.gpus_per_node,
        d.nodes,
        d.attention_tp,
        d.phase,
        d.schedule,
    )
    v = f"vLLM {d.engines.vllm}"
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
        kind = "low-latency" if schedule == Schedule.LL else "high-throughput (normal)"
        notes.append(
            f"{sharded} = {ep} GPUs; --all2all-backend {VLLM_DEEPEP_BACKENDS[schedule]}: DeepEP's {kind} kernels"
        )
    else:
        notes.append(
            f"{sharded} = {ep} GPUs; with --data-parallel-size 1 its MoE has no all-to-all (an all-reduce), "
            "so no --all2all-backend: DeepEP's would go unused"
        )
    head = ""
    if overlap == Overlap.SBO:
        head = f"# {v} has no single-batch overlap (no such flag or ParallelConfig field); the line without it:\n"
    elif overlap == Overlap.DBO and dp == 1:
        head = (
            f"# {v} runs DBO only with --data-parallel-size > 1 (its micro-batch runner needs the DP "
            "handshake), and here attention tensor parallelism takes every GPU; the line without DBO:\n"
        )
    dbo = ""
    if overlap == Overlap.DBO and dp > 1:
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


def _sglang(model: str, d: Deployment, overlap: Overlap, threshold: int | None, notes: list[str]) -> str:
    world, ep, nodes, tp, phase, schedule = d.world, d.ep, d.nodes, d.attention_tp, d.phase, d.schedule
    s = f"SGLang {d.engines.sglang}"
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
        if overlap in (Overlap.DBO, Overlap.SBO):
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
    if schedule == Schedule.HT:
        notes.append(f"{s}: --deepep-mode normal turns off CUDA graphs (its server_args warn so)")
    if overlap == Overlap.DBO:
        line += " --enable-two-batch-overlap"
        below = f"below {threshold} tokens per attention group" if threshold is not None else "below the crossover"
        notes.append(
            f"{s}: two-batch overlap has no token threshold (it is on or off; --tbo-token-distribution-threshold "
            f"is the share of tokens between the two micro-batches, not a count): {below} it slows the {phase} step"
        )
    elif overlap == Overlap.SBO:
        line += " --enable-single-batch-overlap"
    return line + _sglang_nodes(s, nodes, notes)


def _sglang_nodes(s: str, nodes: int, notes: list[str]) -> str:
    """SGLang's multi-node flags (nothing on one node), with their note."""
    if nodes == 1:
        return ""
    notes.append(f"{NODE_RANK} (SGLang): the same line on each of the {nodes} nodes, 0 on the head node to {nodes - 1}")
    return f" --nnodes {nodes} --node-rank {NODE_RANK} --dist-init-addr {HEAD_IP}:{PORT}"


def serve_lines(deployment: Deployment, overlap: Overlap | str, threshold: int | None) -> EngineLines:
    """Both engines' lines for ``deployment`` (module docstring) with ``overlap`` none, dbo (vLLM's DBO,
    SGLang's two-batch overlap) or sbo (SGLang's single-batch overlap) on; ``threshold``: tokens per
    attention TP group from which DBO pays (None: the engine's default)."""
    if not isinstance(deployment, Deployment):
        raise ValueError(f"deployment must be a Deployment, got {deployment!r}")
    overlap = Overlap.parse(overlap, "overlap")
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 1):
        raise ValueError(f"threshold must be a positive integer or None, got {threshold!r}")
    notes: list[str] = []
    if deployment.model_id is None:
        model = MODEL
        notes.append(
            f"{MODEL}: fill in the model: a folder holding its config.json and its weights (the same path on "
            "every node), or its Hugging Face repo id"
        )
    else:
        model = shlex.quote(deployment.model_id)
    vllm = _vllm(model, deployment, overlap, threshold, notes)
    sglang = _sglang(model, deployment, overlap, threshold, notes)
    head = [
        f"{HEAD_IP}: the address of the head node (node 0), reachable from every node",
        f"{PORT}: a free TCP port on the head node, the same on every node (vLLM: its data-parallel RPC port; "
        "SGLang: its distributed init port)",
    ]
    notes[1 if deployment.model_id is None else 0 : 0] = [n for n in head if n.split(":")[0] in vllm + sglang]
    e = deployment.engines
    return EngineLines(vllm, sglang, e.vllm, e.sglang, tuple(notes))
