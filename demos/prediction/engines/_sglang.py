"""SGLang's line (the package docstring): one ``python -m sglang.launch_server`` command, the same on
every node, with its attention data parallelism, DeepEP mode and two-batch or single-batch overlap; a ``#``
line where SGLang cannot run the predicted cluster or the overlap."""

from __future__ import annotations

from demos.prediction.engines._carry import expert_flags, memory_flags
from demos.prediction.engines._deployment import Deployment
from demos.prediction.engines._releases import (
    SGLANG_DEEPEP_MODES,
    SGLANG_SBO_MODEL_TYPES,
    SGLANG_TBO_MODEL_TYPES,
    SGLANG_TBO_PREFILL_ONLY_MODEL_TYPES,
)
from demos.prediction.engines._shared import (
    HEAD_IP,
    HW_QUEUES_ENV,
    NODE_RANK,
    PORT,
    efa_proxy_note,
    ep_below_world,
    gpus,
    hw_queues_note,
)
from demos.vocabulary import Overlap, Phase, Schedule

MORI_TOKENS = 16384
MORI_ENV = f"MORI_SHMEM_MODE=ISOLATION SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK={MORI_TOKENS}"
"""What SGLang's line on AMD sets for MoRI (``--moe-a2a-backend mori``): SGLang 0.5.23 asserts the chunked prefill
(16,384 tokens by default on a GPU of 160 GB or more, ``arg_groups/memory_hook.py``) fits the dispatch buffer
(``SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK``, 4096 by default, ``arg_groups/moe_hook.py``)."""


def sglang_refusal(d: Deployment, overlap: Overlap) -> str:
    """The ``#`` line (ending in a newline) when SGLang cannot run ``overlap`` for the model's architecture
    (``SGLANG_TBO_MODEL_TYPES``, ``SGLANG_TBO_PREFILL_ONLY_MODEL_TYPES`` in decode, ``SGLANG_SBO_MODEL_TYPES``);
    "" when it can or the type is not known."""
    mt, s = d.served.model_type, f"SGLang {d.engines.sglang}"
    if mt is None:
        return ""
    if overlap == Overlap.DBO and mt in SGLANG_TBO_PREFILL_ONLY_MODEL_TYPES:
        if d.phase == Phase.PREFILL:
            return ""
        return (
            f"# {s} runs two-batch overlap for DeepSeek-V4 ({mt}) in prefill only (its operations strategy has no "
            "decode split for its decoder layer); the line without it:\n"
        )
    if overlap == Overlap.DBO and mt not in SGLANG_TBO_MODEL_TYPES:
        return (
            f"# {s} runs two-batch overlap only for DeepSeek-V2/V3/V3.2, GLM-5, Kimi K2/K2.5 and Qwen3-MoE decoder "
            "layers (for "
            f"{mt}'s its operations strategy raises NotImplementedError); the line without it:\n"
        )
    if overlap == Overlap.SBO and mt not in SGLANG_SBO_MODEL_TYPES:
        return (
            f"# {s} runs single-batch overlap only in DeepSeek-V2/V3/V3.2, GLM-5 and Kimi K2/K2.5's MoE "
            f"(not in {mt}'s); the line "
            "without it:\n"
        )
    return ""


def sglang_command(
    model: str, flags: str, d: Deployment, overlap: Overlap, threshold: int | None, notes: list[str]
) -> str:
    world, ep, nodes, tp, phase, schedule = d.world, d.ep, d.nodes, d.attention_tp, d.phase, d.schedule
    s = f"SGLang {d.engines.sglang}"
    if ep < world:
        why = "with --moe-a2a-backend deepep it sets the expert-parallel size to --tp-size, every GPU of the deployment"
        return ep_below_world(s, f"{why} ({world} here)", world, ep)
    groups = world // tp
    line = f"python -m sglang.launch_server --model-path {model} --tp-size {world}" + flags
    if groups == 1:  # no all-to-all (docs/clusters.md, "Attention tensor parallelism": the replicated path)
        if d.moe_tp > 1:
            notes.append(
                f"{s}: one attention group of {gpus(tp)} without --ep-size: its MoE is tensor parallel, every GPU "
                f"holding every routed expert at 1/{world} of its width, their outputs all-reduced (--moe-tp {world})"
            )
        else:
            notes.append(
                f"{s}: one attention group of {gpus(tp)}: --ep-size {world} shards the experts over it and their "
                "outputs are all-reduced, with no all-to-all (no --moe-a2a-backend, the path the prediction models)"
            )
        head = ""
        if overlap in (Overlap.DBO, Overlap.SBO):
            head = (
                f"# {s} overlaps micro-batches only around DeepEP's all-to-all, which one attention group of "
                "every GPU does not run; the line without overlap:\n"
            )
        ep_flag = "" if d.moe_tp > 1 else f" --ep-size {world}"
        line += ep_flag + expert_flags(d, "sglang", s, notes) + memory_flags(d, "sglang", s, False, notes)
        return head + line + _sglang_nodes(s, nodes, notes)
    line += f" --attn-dp-size {groups}"  # more than one attention group from here on
    notes.append(
        f"{s}: --tp-size {world} --attn-dp-size {groups} runs attention in {groups} data-parallel groups of "
        f"{gpus(tp)} (tensor parallel inside each); releases before the attn-dp-size flag spell it "
        f"--dp-size {groups} --enable-dp-attention, which {s} still accepts with a deprecation warning"
    )
    a2a = "mori" if d.vendor == "amd" else "deepep_v2" if d.network == "efa-gda" else "deepep"
    line += f" --moe-a2a-backend {a2a} --deepep-mode {SGLANG_DEEPEP_MODES[schedule]}"
    notes.append(f"{s}: --moe-a2a-backend {a2a} sets the expert-parallel size to --tp-size, {world} = the EP")
    if d.vendor == "amd":
        line = f"{MORI_ENV} {line}"
        notes.append(
            f"{s}: {MORI_ENV}: MoRI's shared memory isolated per process and a dispatch buffer of {MORI_TOKENS} tokens "
            f"a rank, which its server args require to hold the chunked prefill ({MORI_TOKENS} by default on GPUs of "
            "160 GB or more; the default buffer is 4096); MoRI dispatches in the experts' dtype (FP8 experts: FP8; "
            "SGLANG_MORI_DISPATCH_DTYPE overrides it)"
        )
    if schedule == Schedule.HT:
        notes.append(f"{s}: --deepep-mode normal turns off CUDA graphs (its server_args warn so)")
    head = sglang_refusal(d, overlap)
    if d.network == "efa":
        notes.append(efa_proxy_note(s))
    if not head and overlap in (Overlap.DBO, Overlap.SBO) and a2a == "deepep_v2":
        head = (
            f"# {s}'s DeepEP v2 MoE has no two-batch or single-batch overlap hooks (its server args refuse them with "
            "--moe-a2a-backend deepep_v2); the line without it:\n"
        )
    if not head and overlap == Overlap.SBO and d.vendor == "amd":
        head = (
            f"# {s}'s single-batch overlap runs DeepEP's combine with its overlap hooks, which the MoRI dispatcher "
            "takes but never uses; the line without it:\n"
        )
    if head:
        overlap = Overlap.NONE
    line += expert_flags(d, "sglang", s, notes) + memory_flags(d, "sglang", s, overlap == Overlap.DBO, notes)
    if overlap == Overlap.DBO:
        line += " --enable-two-batch-overlap"
        if d.vendor == "amd":
            line = f"{HW_QUEUES_ENV} {line}"
            notes.append(hw_queues_note(s))
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
