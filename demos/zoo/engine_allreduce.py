"""Which all-reduce kernel an engine build runs attention TP's all-reduces with: the key of the family's line
(``demos.zoo.rooflines.FamilyFit.engine_all_reduce``) that ``KernelTimes.all_reduce`` takes for a step
(docs/kernels.md, "The engines' all-reduce").

vLLM and TensorRT-LLM: their own kernel (one release of each is measured, and vLLM's 0.19.0 table is its
0.24.0 one within 0.5 us). SGLang runs one of two kernels, read in its released wheels:

* **FlashInfer's fused all-reduce** (``flashinfer.comm.trtllm_allreduce_fusion``, TensorRT-LLM's one-shot /
  two-shot kernel ported, the residual add and RMSNorm fused into it), which the server turns on by itself
  (``ServerArgs._handle_model_specific_adjustments``; from 0.5.23 ``arg_groups/overrides.py``) for a list of
  architectures on SM90 and SM100 GPUs (Hopper but H20, Blackwell), with TP above 1, no DP attention, no
  all-to-all backend and one node (0.5.23: or SM100), for batches up to 2,048 tokens
  (``communicator.FUSE_ALLREDUCE_MAX_BATCH_SIZE``; decode's all-reduces up to 8 MiB are all within it). The
  list by release, as ``FUSED_ALLREDUCE_MODELS`` holds it (model types; architectures in the comments);
  timed on TensorRT-LLM's line, the kernel it was ported from (a stated assumption: no table of FlashInfer's);
* otherwise **SGLang's custom all-reduce** of the build: up to 0.5.10 (and nightlies before 0.5.11's upload) the
  kernel its 0.5.9 and 0.5.10 tables time alike ("sglang 0.5.10": a floor of 7 us on B200 and a jump to 26 us
  from 256 KiB over 8 GPUs, vLLM's one-stage / two-stage switch); from 0.5.14 the faster one of its 0.5.14 table
  ("sglang"). 0.5.11 to 0.5.13 have no table: 0.5.14's, a guess.

A release is a version (``0.5.9``, ``0.5.10rc0``, ``0.5.10.post1``) or a dated nightly
(``nightly-dev-20260402-d3bae71e``): a nightly takes what the newest release uploaded to PyPI on or before its
date holds, a release between two read ones the older one's list; None is the pinned release (0.5.23).

``allreduce_source`` and ``tp_collectives_source`` are the words a serving report's and a prediction's ``rests on``
lines give for it.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = [
    "FUSED_ALLREDUCE_MODELS",
    "FUSED_KERNEL",
    "RING_SOURCE",
    "SGLANG_CUSTOM_BUILDS",
    "SGLANG_NIGHTLY",
    "SGLANG_RELEASE",
    "allreduce_kernel",
    "allreduce_source",
    "sglang_release_point",
    "tp_collectives_source",
]

FUSED_KERNEL = "trtllm"
"""The line FlashInfer's fused all-reduce is timed on: TensorRT-LLM's kernel, which it ports."""

SGLANG_PINNED = ((0, 5, 23), "20261030")
"""SGLang's pinned release (``demos.serving.host``) and its upload date: the build a step of no release runs."""

FUSED_ALLREDUCE_MODELS = (
    # (release, its PyPI upload date, the zoo's model types the release adds to the list)
    ((0, 5, 8), "20260123", frozenset({"deepseek_v3", "kimi_k2", "gpt_oss", "glm4_moe", "qwen3_moe"})),
    # DeepseekV3ForCausalLM (Kimi-K2's architecture too), GptOssForCausalLM, Glm4MoeForCausalLM, Qwen3MoeForCausalLM,
    # read in 0.5.8.post1, and taken for older releases (not read)
    ((0, 5, 9), "20260223", frozenset({"kimi_k25"})),  # KimiK25ForConditionalGeneration
    ((0, 5, 10), "20260327", frozenset({"qwen3_5_moe"})),  # Qwen3_5MoeForConditionalGeneration, from 0.5.10rc0
    (
        (0, 5, 11),
        "20260507",
        frozenset({"deepseek_v32", "glm_moe_dsa"}),
    ),  # DeepseekV32ForCausalLM, GlmMoeDsaForCausalLM
    ((0, 5, 23), "20261030", frozenset({"deepseek_v4"})),  # DeepseekV4ForCausalLM
)
"""SGLang's architectures that run FlashInfer's fused all-reduce, by the release that added them (module
docstring): each release's list is its entry's and every older entry's model types."""

SGLANG_CUSTOM_BUILDS = (((0, 5, 10), "20260506", "sglang 0.5.10"),)
"""(the newest release, the last nightly date) that run SGLang's older custom all-reduce kernel, and its line's
key; later builds run 0.5.14's ("sglang")."""

SGLANG_RELEASE = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:\.post\d+|rc\d+(?:\.post\d+)?)?(?:-.*)?$")
"""A numbered SGLang release (``0.5.9``, ``0.5.10rc0``, ``v0.5.10.post1``, an image tag's ``-cu130`` after it)."""
SGLANG_NIGHTLY = re.compile(r"^nightly-dev-(\d{8})(?:-.*)?$")
"""A dated SGLang nightly image (``nightly-dev-20260402-d3bae71e``)."""


def sglang_release_point(release: str | None) -> tuple[tuple[int, ...] | None, str | None]:
    """``(version, None)`` of a numbered SGLang release, ``(None, "YYYYMMDD")`` of a dated nightly, the pinned
    release's version for None; ``ValueError`` for anything else."""
    if release is None:
        return SGLANG_PINNED[0], None
    if m := SGLANG_RELEASE.match(release):
        return tuple(int(x) for x in m.groups()), None
    if n := SGLANG_NIGHTLY.match(release):
        return None, n.group(1)
    raise ValueError(f"not an SGLang release: {release!r} (a version such as 0.5.9, or nightly-dev-YYYYMMDD)")


def _reached(point: tuple, version: tuple[int, ...], date: str) -> bool:
    """Whether a build at ``point`` (``sglang_release_point``) holds what release ``version`` of ``date`` does."""
    v, d = point
    return v >= version if v is not None else d >= date


def _fused(model_type: str, point: tuple) -> bool:
    added = [types for version, date, types in FUSED_ALLREDUCE_MODELS if _reached(point, version, date)]
    return any(model_type in types for types in added) or (
        not added and model_type in FUSED_ALLREDUCE_MODELS[0][2]  # older than every release read: the oldest list
    )


def allreduce_kernel(engine: str | None, release: str | None, w: Any) -> str | None:
    """The key of the line a step of ``w`` (a ``Workload``) served by ``engine`` at ``release`` times its
    all-reduces on (module docstring); None for no engine (the family's line of every engine's kernel)."""
    if engine != "sglang":
        return engine
    point = sglang_release_point(release)
    gpu = w.gpu
    sm90_sm100 = gpu.family in ("hopper", "blackwell") and gpu.name.split("-")[0] != "h20"  # H20: SGLang's exception
    one_node = w.cluster.nodes == 1 or (gpu.family == "blackwell" and _reached(point, *SGLANG_PINNED))
    if sm90_sm100 and one_node and not w.alltoall and _fused(w.spec.model_type, point):
        return FUSED_KERNEL
    version, date = point
    for last, night, key in SGLANG_CUSTOM_BUILDS:
        if (version <= last) if version is not None else (date <= night):
            return key
    return "sglang"


def allreduce_source(engine: str | None, key: str | None) -> str:
    """The report's words for the all-reduce kernel ``allreduce_kernel`` chose (``key``) for ``engine``."""
    if key is None:
        return "all-reduce: one line of SGLang's, vLLM's and TRT-LLM's kernels (no engine named)"
    if engine == "sglang" and key == FUSED_KERNEL:
        return (
            "all-reduce: FlashInfer's fused kernel, which this SGLang release turns on for the model "
            "(timed on TRT-LLM's kernel's line)"
        )
    if key == SGLANG_CUSTOM_BUILDS[0][2]:
        return "all-reduce: SGLang's custom kernel as built up to 0.5.10 (its 0.5.10 tables' line)"
    names = {
        "sglang": "SGLang's custom kernel (its 0.5.14 tables' line)",
        "vllm": "vLLM's custom kernel",
        "trtllm": "TRT-LLM's kernel",
    }
    return f"all-reduce: {names.get(key, f'{key} (the line of every engine where it has none)')}"


RING_SOURCE = "NCCL's ring cost model and default latencies on NVLink (docs/clusters.md)"
"""The ``rests on`` words for NCCL's ring model of attention TP's collectives (``tp_collective``)."""


def tp_collectives_source(has_line: bool) -> str:
    """A prediction's ``rests on`` words for attention TP's collectives: the engines' fitted all-reduce line up to
    8 MiB where faster than NCCL's ring, the ring otherwise and for the other collectives (``KernelTimes.all_reduce``);
    the ring alone where the GPU's curves carry no line (``has_line`` False: AMD's families)."""
    if not has_line:
        return f"attention TP collectives: {RING_SOURCE}"
    return (
        "attention TP collectives: the all-reduce up to 8 MiB on the line fitted to SGLang's, vLLM's and TRT-LLM's "
        f"measured kernels where faster (docs/kernels.md), else and for the others {RING_SOURCE}"
    )
