"""The serve command lines for vLLM and SGLang that the predictor prints: built from the predicted
cluster so that they run as printed on one pinned release of each engine, every flag one that the
release defines (issue 35).

``serve_lines(deployment, overlap, threshold) -> EngineLines``: each engine's line (one command per kind
of node, with a ``#`` comment line above each where there are several; a ``#`` line alone where the
engine cannot run the predicted cluster), the two versions, and ``notes``: every ``<PLACEHOLDER>``
explained and what each engine does with the setting. A ``Deployment`` is what the lines are written
for, passed whole: the model's repository, the cluster (its GPUs, nodes and EP), the attention TP
group, the phase and the schedule, the engine releases (``Engines``, the pinned ones), and what the
prediction assumed, which the lines carry (issue 47):

* ``served`` (``ServedModel``): the weights and KV cache it ran. The checkpoint at the predicted weights
  where the model's published ones include it (``demos.zoo.models.CHECKPOINTS``: Qwen3-235B at ``--weights
  fp8`` serves ``Qwen/Qwen3-235B-A22B-FP8``); else FP8 from a BF16 checkpoint by ``--quantization fp8``
  (both engines quantize as they load); else ``<MODEL>``, with a note on what to convert. An FP8 KV cache
  is ``--kv-cache-dtype fp8`` (vLLM) / ``fp8_e4m3`` (SGLang); BF16 is both engines' default. The model's
  architecture (``model_type``) decides the overlaps SGLang can run: its two-batch overlap only for the
  decoder layers its operations strategy knows (DeepSeek-V2/V3 and Kimi K2's, Kimi-K2.5's text model among
  them, Qwen3-MoE's; it raises ``NotImplementedError`` for any other, ``batch_overlap/operations_strategy.py``),
  its single-batch overlap only in DeepSeek-V2's MoE (``models/deepseek_v2.py``). vLLM 0.34.0 refuses DBO
  for multimodal, encoder-decoder and hybrid (state-space) models (``VllmConfig._get_dbo_unsupported_features``):
  of the families the predictor loads, Kimi-K2.5 (``VLLM_DBO_REFUSED_MODEL_TYPES``), whose vision tower
  makes it multimodal whether or not a request carries an image.
* ``limits`` (``demos.zoo.memory.ServingLimits``): where the memory model says the step stops fitting.
  Decode: ``--max-num-seqs`` (vLLM, per data-parallel rank: one attention group) and
  ``--max-running-requests`` (SGLang, over all attention groups; each worker takes its share,
  ``model_executor/pool_configurator.py``) at the largest batch that fits; both phases:
  ``--gpu-memory-utilization`` at the share of HBM the memory model lets a step use (its reserve left
  out) and SGLang's ``--mem-fraction-static`` at the weights and KV cache that leaves at the cap.
* ``experts`` (``ExpertBalance``): redundant expert slots (an EP that does not divide the routed
  experts: the prediction shards ``ceil(experts / ep)`` slots per GPU) are vLLM's ``--enable-eplb
  --eplb-config '{"num_redundant_experts": R}'`` (vLLM refuses redundant experts without EPLB) and
  SGLang's ``--ep-num-redundant-experts R`` (its DeepEP dispatcher needs the slots to divide evenly) with
  ``--enable-eplb``; an imbalance given as a number turns on both engines' EPLB (``--enable-eplb``), the
  balancing the figure assumes; ``auto`` (uniform routing's fluctuation, which EPLB does not remove)
  leaves it off.

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
* What the lines carry, read from the same releases: vLLM's ``--quantization`` (its ``fp8`` method
  quantizes a BF16 checkpoint as it loads; ``model_executor/layers/quantization/__init__.py``),
  ``--kv-cache-dtype`` and ``--gpu-memory-utilization`` (``CacheConfig``: the default is 1.0 with the
  extensible KV cache sized from measured memory), ``--max-num-seqs`` (``SchedulerConfig``),
  ``--enable-eplb`` and ``--eplb-config`` (``ParallelConfig``, ``EPLBConfig.num_redundant_experts``);
  SGLang's ``--quantization`` (``fp8``: online, ``arg_groups/choices.py``), ``--kv-cache-dtype``
  (``fields/model.py``), ``--mem-fraction-static`` and ``--max-running-requests`` (``fields/schedule.py``),
  ``--enable-eplb`` and ``--ep-num-redundant-experts`` (``fields/exec_.py``). Neither quantizes to FP4 as
  it loads with DeepEP's all-to-all (SGLang's ``nvfp4_online`` runs on Blackwell without it only).
"""

from __future__ import annotations

import json
import math
import os
import shlex
from dataclasses import dataclass, field
from typing import Any

from demos.vocabulary import Overlap, Phase, Schedule
from demos.zoo.memory import ServingLimits
from demos.zoo.models import checkpoints, kv_cache_name, weights_name

__all__ = [
    "EPLB_MODEL_TYPES",
    "SGLANG_FLAGS",
    "SGLANG_SBO_MODEL_TYPES",
    "SGLANG_TBO_MODEL_TYPES",
    "SGLANG_VERSION",
    "VLLM_DBO_REFUSED_MODEL_TYPES",
    "VLLM_FLAGS",
    "VLLM_VERSION",
    "Deployment",
    "EngineLines",
    "Engines",
    "ExpertBalance",
    "ServedModel",
    "overlap_flags",
    "serve_lines",
    "served_model",
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
        "--quantization",
        # the CacheConfig group
        "--gpu-memory-utilization",
        "--kv-cache-dtype",
        # the SchedulerConfig group
        "--max-num-seqs",
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
        "--enable-eplb",
        "--ep-num-redundant-experts",
        # .../fields/schedule.py 0.5.23
        "--mem-fraction-static",
        "--max-running-requests",
        # .../fields/model.py and .../fields/serving.py 0.5.23
        "--model-path",
        "--model",
        "--trust-remote-code",
        "--quantization",
        "--kv-cache-dtype",
        "--host",
        "--port",
        # python/sglang/srt/server_args.py 0.5.23, registered there (deprecated for --attn-dp-size)
        "--enable-dp-attention",
    }
)
"""The SGLang 0.5.23 flags read (module docstring); every flag ``serve_lines`` prints is one of them."""

SGLANG_DEEPEP_MODES = {Schedule.LL: "low_latency", Schedule.HT: "normal"}
"""``--deepep-mode`` per schedule: its choices are auto, normal, low_latency (fields/exec_.py 0.5.23)."""

SGLANG_TBO_MODEL_TYPES = frozenset({"deepseek_v2", "deepseek_v3", "kimi_k2", "kimi_k25", "qwen3_moe"})
"""The ``model_type``s whose decoder layers SGLang 0.5.23's two-batch overlap splits: DeepseekV2DecoderLayer
(DeepSeek-V2/V3 and Kimi K2, which it serves as DeepseekV3ForCausalLM, and Kimi-K2.5, whose
``models/kimi_k25.py`` wraps a DeepseekV3ForCausalLM as its language model) and Qwen3MoeDecoderLayer, among
the families the predictor loads (``batch_overlap/operations_strategy.py``, ``init_new_tbo``: no branch for
MiniMaxM2DecoderLayer, whose ``models/minimax_m2.py`` defines TBO operations the strategy does not call, nor
for gpt-oss's layer)."""

SGLANG_SBO_MODEL_TYPES = frozenset({"deepseek_v2", "deepseek_v3", "kimi_k2", "kimi_k25"})
"""The ``model_type``s whose MoE runs SGLang 0.5.23's single-batch overlap (``compute_overlap_args`` is
called in ``models/deepseek_v2.py`` only: Kimi-K2.5's text model is that file's)."""

EPLB_MODEL_TYPES = {
    "vllm": frozenset({"deepseek_v2", "deepseek_v3", "kimi_k2", "qwen3_moe", "glm4_moe", "mixtral"}),
    "sglang": frozenset(
        {"deepseek_v2", "deepseek_v3", "kimi_k2", "kimi_k25", "qwen3_moe", "glm4_moe", "gpt_oss", "minimax_m2"}
    ),
}
"""The ``model_type``s each engine balances experts for, among the families the predictor loads. vLLM 0.34.0:
the model classes that implement its ``MixtureOfExperts`` interface (``model_executor/models/``; its EPLB
registers nothing for ``GptOssForCausalLM``, ``v1/worker/gpu/eplb_utils.py``; ``KimiK25ForConditionalGeneration``
and ``MiniMaxM2ForCausalLM`` do not implement it). SGLang 0.5.23: the model files that read
``ep_num_redundant_experts`` (``models/deepseek_v2.py``, which Kimi-K2.5's language model is, ``qwen3_moe.py``,
``glm4_moe.py``, ``gpt_oss.py``, ``minimax_m2.py``; not ``mixtral.py``)."""

VLLM_DBO_REFUSED_MODEL_TYPES = {"kimi_k25": "multimodal (KimiK25ForConditionalGeneration has a vision tower)"}
"""The ``model_type``s whose model vLLM 0.34.0 refuses DBO for, and why (module docstring)."""

KV_CACHE_FLAGS = {"vllm": "fp8", "sglang": "fp8_e4m3"}
"""``--kv-cache-dtype`` for an FP8 (E4M3) cache: vLLM's ``fp8`` is E4M3 (``CacheDType``), SGLang names it."""

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


WEIGHT_NAMES = ("bf16", "fp8", "fp4", "int4")
KV_CACHE_NAMES = ("bf16", "fp8")


@dataclass(frozen=True)
class ServedModel:
    """The model as the prediction ran it (module docstring): ``weights`` and ``native`` (the ``--weights``
    names of the predicted weights and of the checkpoint ``Deployment.model_id`` names; None: as predicted),
    ``kv_cache`` (the ``--kv-cache-dtype`` name), ``checkpoints`` (the published repositories by weights name,
    as ``demos.zoo.models.checkpoints`` gives them) and ``model_type`` (the config's; None: not known, every
    overlap taken as supported). A bad field is a ``ValueError`` naming it."""

    weights: str = "bf16"
    native: str | None = None
    kv_cache: str = "bf16"
    checkpoints: tuple[tuple[str, str], ...] = ()
    model_type: str | None = None

    def __post_init__(self) -> None:
        for name, value, choices in (
            ("weights", self.weights, WEIGHT_NAMES),
            ("native", self.native or self.weights, WEIGHT_NAMES),
            ("kv_cache", self.kv_cache, KV_CACHE_NAMES),
        ):
            if value not in choices:
                raise ValueError(f"served.{name} must be one of {', '.join(choices)}, got {value!r}")
        cps = dict(self.checkpoints) if not isinstance(self.checkpoints, str) else None
        if cps is None or any(k not in WEIGHT_NAMES or not isinstance(v, str) or not v for k, v in cps.items()):
            raise ValueError(f"served.checkpoints must map weights names to repository ids, got {self.checkpoints!r}")
        object.__setattr__(self, "checkpoints", tuple(sorted(cps.items())))


@dataclass(frozen=True)
class ExpertBalance:
    """How the experts are placed (module docstring): ``redundant`` expert slots beyond the routed experts
    over the EP group, and the ``imbalance`` the prediction assumed when given as a number (None: not given,
    or ``auto``)."""

    redundant: int = 0
    imbalance: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.redundant, bool) or not isinstance(self.redundant, int) or self.redundant < 0:
            raise ValueError(f"experts.redundant must be an integer >= 0, got {self.redundant!r}")
        i = self.imbalance
        if i is not None and (isinstance(i, bool) or not isinstance(i, (int, float)) or not i >= 1):
            raise ValueError(f"experts.imbalance must be a number >= 1 or None, got {i!r}")


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
    served: ServedModel = field(default_factory=ServedModel)
    limits: ServingLimits | None = None
    experts: ExpertBalance = field(default_factory=ExpertBalance)

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
        for name, kind in (("engines", Engines), ("served", ServedModel), ("experts", ExpertBalance)):
            if not isinstance(getattr(self, name), kind):
                raise ValueError(f"{name} must be {kind.__name__}, got {getattr(self, name)!r}")
        if self.limits is not None and not isinstance(self.limits, ServingLimits):
            raise ValueError(f"limits must be ServingLimits or None, got {self.limits!r}")

    @classmethod
    def of(
        cls,
        workload: Any,
        model_id: str | None,
        *,
        served: ServedModel | None = None,
        limits: ServingLimits | None = None,
    ) -> Deployment:
        """The deployment of a ``demos.zoo.workload.Workload``: its cluster, attention TP, phase and schedule,
        its redundant expert slots and its imbalance when a number; ``served`` and ``limits`` as given."""
        c = workload.cluster
        imbalance = workload.imbalance if isinstance(workload.imbalance, (int, float)) else None
        return cls(
            model_id,
            c.world,
            c.ep,
            c.gpus_per_node,
            c.nodes,
            workload.attention_tp,
            workload.phase,
            workload.schedule,
            served=served or ServedModel(),
            limits=limits,
            experts=ExpertBalance(workload.redundant_experts, imbalance),
        )


def served_model(given: Any, native: Any, predicted: Any) -> tuple[str | None, ServedModel]:
    """What the engine lines serve of ``given`` (the model as the user named it: a preset, an alias, a path
    or a ``ModelSpec``), loaded as ``native`` and predicted as ``predicted`` (``ModelSpec``s): the model's
    own repository and ``ServedModel`` (the weights and KV cache predicted, the checkpoint's own weights,
    the published checkpoints, the architecture). A preset
    or alias (by name or as its ``ModelSpec``) has its repository and checkpoints
    (``demos.zoo.models.checkpoints``: an alias has its own, DeepSeek-R1 is not DeepSeek-V3); a model folder
    (a HuggingFace snapshot) is served from that folder as given; a config.json or another spec has neither
    (the lines then hold a placeholder the user fills: the folder with the weights)."""
    source = native.source
    repo = None
    if source.startswith("huggingface.co/") and " " in source:
        repo = source[len("huggingface.co/") :].split(" ", 1)[0]
    elif isinstance(given, (str, os.PathLike)) and os.path.isdir(given):
        repo = os.fspath(given)
    nat = weights_name(native.precision)
    found: dict[str, str] = {}
    if repo is not None:
        names = ((given,) if isinstance(given, str) else ()) + (native.name,)
        found = next((c for c in map(checkpoints, names) if c), {})
    served = ServedModel(
        weights=weights_name(predicted.precision),
        native=nat,
        kv_cache=kv_cache_name(predicted.precision),
        checkpoints=tuple(found.items()),
        model_type=native.model_type,
    )
    return found.get(nat, repo), served


def _gpus(n: int) -> str:
    return f"{n} GPU" + ("s" if n != 1 else "")


def _ep_below_world(engine: str, why: str, world: int, ep: int) -> str:
    """The ``#`` line for an EP smaller than the GPUs it serves, which ``engine`` cannot express: ``why``,
    and what the prediction is instead."""
    return (
        f"# not expressible in {engine}: {why}, not the predicted {ep}; the prediction is {world // ep} "
        f"separate deployments of {ep} GPUs each, behind your own load balancer"
    )


PRECISION_WORDS = {"bf16": "BF16", "fp8": "FP8", "fp4": "FP4", "int4": "INT4"}


def _model_flags(d: Deployment, notes: list[str]) -> tuple[str, dict[str, str]]:
    """The model argument of both lines and, per engine, the flags that load it as the prediction ran it
    (the quantization, the KV cache dtype), with their notes (module docstring)."""
    sv = d.served
    pred, native = sv.weights, sv.native or sv.weights
    word, was = PRECISION_WORDS[pred], PRECISION_WORDS[native]
    repo = dict(sv.checkpoints).get(pred)
    flags = {"vllm": "", "sglang": ""}
    if repo is not None:
        model = shlex.quote(repo)
        if repo != d.model_id:
            notes.append(
                f"{repo}: the {word} checkpoint of the model, the weights the prediction ran (--weights {pred})"
            )
    elif pred == native or (pred == "fp8" and native == "bf16"):
        model = MODEL if d.model_id is None else shlex.quote(d.model_id)
        if pred != native:
            flags = {"vllm": " --quantization fp8", "sglang": " --quantization fp8"}
            notes.append(
                f"--quantization fp8 (both engines): the {was} checkpoint quantized to FP8 as it loads, the weights "
                f"the prediction ran (--weights fp8); no FP8 checkpoint of this model is known to the predictor"
            )
    else:
        model = MODEL
        how = (
            "neither pinned engine quantizes to FP4 as it loads with DeepEP's all-to-all (SGLang's nvfp4_online "
            "runs on Blackwell without it only): quantize it (NVIDIA's ModelOpt writes NVFP4)"
            if pred == "fp4"
            else f"neither pinned engine turns {was} weights into {word} as it loads: convert it"
        )
        notes.append(
            f"{MODEL}: the prediction ran {word} weights (--weights {pred}), and no {word} checkpoint of this model "
            f"is known to the predictor; {how}, and serve that folder"
        )
    if sv.kv_cache == "fp8":
        for engine, value in KV_CACHE_FLAGS.items():
            flags[engine] += f" --kv-cache-dtype {value}"
        notes.append(
            f"--kv-cache-dtype {KV_CACHE_FLAGS['vllm']} (vLLM) / {KV_CACHE_FLAGS['sglang']} (SGLang): the FP8 E4M3 KV "
            "cache the prediction sized and timed (--kv-cache-dtype fp8); without it both engines keep it in BF16"
        )
    return model, flags


def _expert_flags(d: Deployment, engine: str, name: str, notes: list[str]) -> str:
    """``engine``'s expert-load balancing flags for ``d.experts`` (module docstring), with their note; none,
    with a note, where the engine balances no expert of the model's architecture (``EPLB_MODEL_TYPES``)."""
    r, imb = d.experts.redundant, d.experts.imbalance
    if d.ep < 2 or (r == 0 and imb is None):
        return ""
    why = []
    if r:
        why.append(
            f"{r} redundant expert slots (the prediction holds ceil(routed experts / EP) slots on each of the "
            f"{d.ep} GPUs, the spare ones copies of the busiest experts)"
        )
    if imb is not None:
        why.append(f"--imbalance {imb:g} (the busiest GPU's expert load over the mean, the load balanced)")
    mt = d.served.model_type
    if mt is not None and mt not in EPLB_MODEL_TYPES[engine]:
        notes.append(
            f"{name}: no expert-load balancing for {mt} (its model class has no expert-placement hooks in this "
            f"release), so the line runs without the prediction's " + " and ".join(why)
        )
        return ""
    if engine == "vllm":
        flags = " --enable-eplb"
        if r:
            flags += " --eplb-config " + shlex.quote(json.dumps({"num_redundant_experts": r}))
            why.append("vLLM takes redundant experts with EPLB only")
    else:
        flags = (f" --ep-num-redundant-experts {r}" if r else "") + " --enable-eplb"
        if r:
            why.append("SGLang's DeepEP dispatcher needs the expert slots to divide evenly over the EP")
    notes.append(f"{name}:{flags} carries " + "; ".join(why))
    return flags


def _memory_flags(d: Deployment, engine: str, name: str, dbo: bool, notes: list[str]) -> str:
    """``engine``'s request cap and memory share at the memory model's limit (module docstring; nothing
    without ``d.limits``), with their note; ``dbo``: the line runs DBO (its step's limit)."""
    if d.limits is None:
        return ""
    lim = d.limits.of(dbo)
    util = d.limits.utilization
    groups = d.world // d.attention_tp
    step = "step with DBO" if dbo else "step"
    flags, said = "", []
    decode = d.phase == Phase.DECODE
    if decode and lim.tokens > 0:
        per = f"per data-parallel rank (one attention group of {_gpus(d.attention_tp)})"
        if engine == "vllm":
            flags += f" --max-num-seqs {lim.tokens}"
            said.append(f"--max-num-seqs {lim.tokens}: the most decode requests {per} whose {step} fits in memory")
        else:
            total = lim.tokens * groups
            flags += f" --max-running-requests {total}"
            each = f" = {lim.tokens} per attention group x {groups} groups (each worker takes its share)"
            said.append(
                f"--max-running-requests {total}{each if groups > 1 else ''}: the most decode requests whose "
                f"{step} fits in memory"
            )
    elif decode:
        said.append(f"no request cap: the memory model fits no {step} here")
    if engine == "vllm":
        flags += f" --gpu-memory-utilization {util:g}"
        said.append(
            f"--gpu-memory-utilization {util:g}: the share of HBM the memory model lets a step use, keeping "
            f"{1 - util:.0%} for the CUDA context, fragmentation and graph pools (a guess; vLLM's default, 1.0, "
            "sizes its KV cache from measured memory instead)"
        )
    elif lim.tokens > 0:
        frac = math.floor(lim.static_fraction * 1000) / 1000
        flags += f" --mem-fraction-static {frac:.3f}"
        at = "at that cap" if decode else f"of the largest {step} that fits ({lim.tokens} prompt tokens per GPU)"
        said.append(
            f"--mem-fraction-static {frac:.3f}: the share of HBM for the weights and KV cache {at}, the rest left "
            f"for the step's activations, workspace and all-to-all buffers and the {1 - util:.0%} reserve"
        )
    if said:
        notes.append(f"{name}, at the memory model's limit (docs/models.md): " + "; ".join(said))
    return flags


def _vllm_refusal(d: Deployment, overlap: Overlap) -> str:
    """The ``#`` line (ending in a newline) when vLLM refuses DBO for the model's architecture
    (``VLLM_DBO_REFUSED_MODEL_TYPES``); "" when it runs it or the type is not known."""
    why = VLLM_DBO_REFUSED_MODEL_TYPES.get(d.served.model_type or "")
    if overlap != Overlap.DBO or why is None:
        return ""
    return (
        f"# vLLM {d.engines.vllm} refuses DBO for {d.served.model_type}, {why} "
        "(VllmConfig._get_dbo_unsupported_features); the line without it:\n"
    )


def _vllm(model: str, flags: str, d: Deployment, overlap: Overlap, threshold: int | None, notes: list[str]) -> str:
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
    head = _vllm_refusal(d, overlap)
    if head:
        overlap = Overlap.NONE
    base += flags + _expert_flags(d, "vllm", v, notes)
    base += _memory_flags(d, "vllm", v, overlap == Overlap.DBO and dp > 1, notes)
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


def _sglang_refusal(d: Deployment, overlap: Overlap) -> str:
    """The ``#`` line (ending in a newline) when SGLang cannot run ``overlap`` for the model's architecture
    (``SGLANG_TBO_MODEL_TYPES``, ``SGLANG_SBO_MODEL_TYPES``); "" when it can or the type is not known."""
    mt, s = d.served.model_type, f"SGLang {d.engines.sglang}"
    if mt is None:
        return ""
    if overlap == Overlap.DBO and mt not in SGLANG_TBO_MODEL_TYPES:
        return (
            f"# {s} runs two-batch overlap only for DeepSeek-V2/V3, Kimi K2/K2.5 and Qwen3-MoE decoder layers (for "
            f"{mt}'s its operations strategy raises NotImplementedError); the line without it:\n"
        )
    if overlap == Overlap.SBO and mt not in SGLANG_SBO_MODEL_TYPES:
        return (
            f"# {s} runs single-batch overlap only in DeepSeek-V2/V3 and Kimi K2/K2.5's MoE (not in {mt}'s); the line "
            "without it:\n"
        )
    return ""


def _sglang(model: str, flags: str, d: Deployment, overlap: Overlap, threshold: int | None, notes: list[str]) -> str:
    world, ep, nodes, tp, phase, schedule = d.world, d.ep, d.nodes, d.attention_tp, d.phase, d.schedule
    s = f"SGLang {d.engines.sglang}"
    if ep < world:
        why = "with --moe-a2a-backend deepep it sets the expert-parallel size to --tp-size, every GPU of the deployment"
        return _ep_below_world(s, f"{why} ({world} here)", world, ep)
    groups = world // tp
    line = f"python -m sglang.launch_server --model-path {model} --tp-size {world}" + flags
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
        line += (
            f" --ep-size {world}" + _expert_flags(d, "sglang", s, notes) + _memory_flags(d, "sglang", s, False, notes)
        )
        return head + line + _sglang_nodes(s, nodes, notes)
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
    head = _sglang_refusal(d, overlap)
    if head:
        overlap = Overlap.NONE
    line += _expert_flags(d, "sglang", s, notes) + _memory_flags(d, "sglang", s, overlap == Overlap.DBO, notes)
    if overlap == Overlap.DBO:
        line += " --enable-two-batch-overlap"
        below = f"below {threshold} tokens per attention group" if threshold is not None else "below the crossover"
        notes.append(
            f"{s}: two-batch overlap has no token threshold (it is on or off; --tbo-token-distribution-threshold "
            f"is the share of tokens between the two micro-batches, not a count): {below} it slows the {phase} step"
        )
    elif overlap == Overlap.SBO:
        line += " --enable-single-batch-overlap"
    return head + line + _sglang_nodes(s, nodes, notes)


def _sglang_nodes(s: str, nodes: int, notes: list[str]) -> str:
    """SGLang's multi-node flags (nothing on one node), with their note."""
    if nodes == 1:
        return ""
    notes.append(f"{NODE_RANK} (SGLang): the same line on each of the {nodes} nodes, 0 on the head node to {nodes - 1}")
    return f" --nnodes {nodes} --node-rank {NODE_RANK} --dist-init-addr {HEAD_IP}:{PORT}"


def overlap_flags(deployment: Deployment) -> dict[str, str]:
    """What selects each overlap strategy in each engine, one line per strategy (``dbo``, ``sbo``), for the
    model's architecture (``VLLM_DBO_REFUSED_MODEL_TYPES``, ``SGLANG_TBO_MODEL_TYPES``, ``SGLANG_SBO_MODEL_TYPES``)."""
    d, sg = deployment, f"SGLang {deployment.engines.sglang}"
    tbo = "SGLang --enable-two-batch-overlap"
    sbo = "SGLang --enable-single-batch-overlap (with --moe-a2a-backend deepep)"
    if _sglang_refusal(d, Overlap.DBO):
        tbo = f"{sg} has no two-batch overlap for {d.served.model_type}"
    if _sglang_refusal(d, Overlap.SBO):
        sbo = f"{sg} has no single-batch overlap for {d.served.model_type}"
    dbo = "vLLM --enable-dbo with the threshold below"
    if _vllm_refusal(d, Overlap.DBO):
        dbo = f"vLLM {d.engines.vllm} refuses DBO for {d.served.model_type}"
    return {
        "dbo": f"{dbo}; {tbo}",
        "sbo": f"{sbo}; vLLM has no single-batch overlap",
    }


def serve_lines(
    deployment: Deployment,
    overlap: Overlap | str,
    threshold: int | None,
    *,
    vllm: tuple[Overlap | str, int | None] | None = None,
) -> EngineLines:
    """Both engines' lines for ``deployment`` (module docstring) with ``overlap`` none, dbo (vLLM's DBO,
    SGLang's two-batch overlap) or sbo (SGLang's single-batch overlap) on; ``threshold``: tokens per
    attention TP group from which DBO pays (None: the engine's default). ``vllm``: vLLM's own
    ``(overlap, threshold)`` where its answer differs from SGLang's (a serving run of vLLM's rule decided
    it: ``demos.prediction.workload``); None: the same as SGLang's."""
    if not isinstance(deployment, Deployment):
        raise ValueError(f"deployment must be a Deployment, got {deployment!r}")
    overlap = Overlap.parse(overlap, "overlap")
    v_overlap, v_threshold = (overlap, threshold) if vllm is None else (Overlap.parse(vllm[0], "overlap"), vllm[1])
    for t in (threshold, v_threshold):
        if t is not None and (isinstance(t, bool) or not isinstance(t, int) or t < 1):
            raise ValueError(f"threshold must be a positive integer or None, got {t!r}")
    first: list[str] = []  # the model's notes, then the placeholders', then each engine's
    model, flags = _model_flags(deployment, first)
    if model == MODEL and not any(n.startswith(MODEL) for n in first):
        first.insert(
            0,
            f"{MODEL}: fill in the model: a folder holding its config.json and its weights (the same path on "
            "every node), or its Hugging Face repo id",
        )
    notes: list[str] = []
    vllm_line = _vllm(model, flags["vllm"], deployment, v_overlap, v_threshold, notes)
    sglang = _sglang(model, flags["sglang"], deployment, overlap, threshold, notes)
    head = [
        f"{HEAD_IP}: the address of the head node (node 0), reachable from every node",
        f"{PORT}: a free TCP port on the head node, the same on every node (vLLM: its data-parallel RPC port; "
        "SGLang: its distributed init port)",
    ]
    notes[0:0] = first + [n for n in head if n.split(":")[0] in vllm_line + sglang]
    e = deployment.engines
    return EngineLines(vllm_line, sglang, e.vllm, e.sglang, tuple(notes))
