"""What the lines carry of the prediction (the package docstring), the same for both engines: the model
argument with its quantization and KV cache dtype (``model_flags``), the expert-load balancing
(``expert_flags``) and the request cap and memory share at the memory model's limit (``memory_flags``),
each with its note."""

from __future__ import annotations

import json
import math
import shlex

from demos.prediction.engines._deployment import Deployment
from demos.prediction.engines._releases import EPLB_MODEL_TYPES, KV_CACHE_FLAGS, SGLANG_FP8_KV_DEFAULT
from demos.prediction.engines._shared import MODEL, gpus
from demos.vocabulary import Phase
from demos.zoo.models.presets import KV_CACHE_FP8_CHECKPOINTS

PRECISION_WORDS = {"bf16": "BF16", "fp8": "FP8", "fp4": "FP4", "int4": "INT4"}


def model_flags(d: Deployment, notes: list[str]) -> tuple[str, dict[str, str]]:
    """The model argument of both lines and, per engine, the flags that load it as the prediction ran it
    (the quantization, the KV cache dtype), with their notes (the package docstring)."""
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
            "cache the prediction sized and timed (--kv-cache-dtype fp8); without it vLLM keeps the checkpoint's (BF16 "
            "unless its quantization config declares FP8), and SGLang BF16 but for DeepSeek-V4 and, on Blackwell, "
            "DeepSeek sparse attention models"
        )
    elif repo in KV_CACHE_FP8_CHECKPOINTS:
        notes.append(
            f"vLLM: {repo} declares an FP8 KV cache in its quantization config, which vLLM keeps when the line sets "
            "none (its pull request 30785): half the bytes of the BF16 cache the prediction sized and timed; predict "
            "with --kv-cache-dtype fp8 for the line as it runs"
        )
    if sv.kv_cache != "fp8" and sv.model_type in SGLANG_FP8_KV_DEFAULT:
        flags["sglang"] += " --kv-cache-dtype bfloat16"
        where = _FP8_KV_WHERE[SGLANG_FP8_KV_DEFAULT[sv.model_type]]
        notes.append(
            "--kv-cache-dtype bfloat16 (SGLang): the BF16 KV cache the prediction sized and timed; left at auto, "
            f"SGLang keeps a {sv.model_type} model's in FP8 E4M3 ({where})"
        )
    return model, flags


_FP8_KV_WHERE = {0: "on every GPU", 10: "on Blackwell"}


def expert_flags(d: Deployment, engine: str, name: str, notes: list[str]) -> str:
    """``engine``'s expert-load balancing flags for ``d.experts`` (the package docstring), with their note; none,
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


def memory_flags(d: Deployment, engine: str, name: str, dbo: bool, notes: list[str]) -> str:
    """``engine``'s request cap and memory share at the memory model's limit (the package docstring; nothing
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
        per = f"per data-parallel rank (one attention group of {gpus(d.attention_tp)})"
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
