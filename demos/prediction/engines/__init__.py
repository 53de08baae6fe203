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

The parts, one idea each: ``_releases`` (the pinned releases, ``Engines``, the flags read from them and the
``model_type`` tables), ``_deployment`` (``Deployment``, ``ServedModel``, ``ExpertBalance``, ``served_model``),
``_shared`` (the placeholders and the ``#`` line both engines write), ``_carry`` (what the lines carry: the
model and its quantization, the expert balancing, the memory cap), ``_vllm`` (vLLM's line), ``_sglang``
(SGLang's line) and ``_lines`` (``serve_lines``, ``EngineLines`` and the notes, ``overlap_flags``).
"""

from __future__ import annotations

from demos.prediction.engines._carry import PRECISION_WORDS as PRECISION_WORDS
from demos.prediction.engines._deployment import KV_CACHE_NAMES as KV_CACHE_NAMES
from demos.prediction.engines._deployment import WEIGHT_NAMES as WEIGHT_NAMES
from demos.prediction.engines._deployment import Deployment, ExpertBalance, ServedModel, served_model
from demos.prediction.engines._lines import EngineLines, overlap_flags, serve_lines
from demos.prediction.engines._releases import (
    EPLB_MODEL_TYPES,
    SGLANG_FLAGS,
    SGLANG_MEGAMOE_MODEL_TYPES,
    SGLANG_SBO_MODEL_TYPES,
    SGLANG_TBO_MODEL_TYPES,
    SGLANG_VERSION,
    VLLM_DBO_REFUSED_MODEL_TYPES,
    VLLM_FLAGS,
    VLLM_MEGAMOE_MODEL_TYPES,
    VLLM_VERSION,
    Engines,
    sglang_kv_default,
)
from demos.prediction.engines._releases import KV_CACHE_FLAGS as KV_CACHE_FLAGS
from demos.prediction.engines._releases import SGLANG_DEEPEP_MODES as SGLANG_DEEPEP_MODES
from demos.prediction.engines._releases import SGLANG_FP8_KV_DEFAULT as SGLANG_FP8_KV_DEFAULT
from demos.prediction.engines._releases import VLLM_DEEPEP_BACKENDS as VLLM_DEEPEP_BACKENDS
from demos.prediction.engines._releases import VLLM_DEFAULT_THRESHOLDS as VLLM_DEFAULT_THRESHOLDS
from demos.prediction.engines._releases import VLLM_MIN_THRESHOLD as VLLM_MIN_THRESHOLD
from demos.prediction.engines._shared import HEAD_IP as HEAD_IP
from demos.prediction.engines._shared import MODEL as MODEL
from demos.prediction.engines._shared import NODE_RANK as NODE_RANK
from demos.prediction.engines._shared import PORT as PORT
from demos.prediction.engines._shared import START_RANK as START_RANK

__all__ = [
    "EPLB_MODEL_TYPES",
    "SGLANG_FLAGS",
    "SGLANG_MEGAMOE_MODEL_TYPES",
    "SGLANG_SBO_MODEL_TYPES",
    "SGLANG_TBO_MODEL_TYPES",
    "SGLANG_VERSION",
    "VLLM_DBO_REFUSED_MODEL_TYPES",
    "VLLM_MEGAMOE_MODEL_TYPES",
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
    "sglang_kv_default",
]
