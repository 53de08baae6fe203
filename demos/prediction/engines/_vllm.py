"""vLLM's line (the package docstring): one ``vllm serve`` command, or one for the head node and one for
every other node, with its data parallelism, DeepEP backend, DBO and threshold; a ``#`` line where vLLM
cannot run the predicted cluster or the overlap."""

from __future__ import annotations

from demos.prediction.engines._carry import expert_flags, memory_flags
from demos.prediction.engines._deployment import Deployment
from demos.prediction.engines._releases import (
    VLLM_DBO_BACKENDS,
    VLLM_DBO_REFUSED_MODEL_TYPES,
    VLLM_DEEPEP_BACKENDS,
    VLLM_DEFAULT_THRESHOLDS,
    VLLM_MIN_THRESHOLD,
)
from demos.prediction.engines._shared import HEAD_IP, PORT, START_RANK, efa_proxy_note, ep_below_world, gpus
from demos.vocabulary import Overlap, Schedule


def vllm_refusal(d: Deployment, overlap: Overlap) -> str:
    """The ``#`` line (ending in a newline) when vLLM refuses DBO for the model's architecture
    (``VLLM_DBO_REFUSED_MODEL_TYPES``); "" when it runs it or the type is not known."""
    why = VLLM_DBO_REFUSED_MODEL_TYPES.get(d.served.model_type or "")
    if overlap != Overlap.DBO or why is None:
        return ""
    return (
        f"# vLLM {d.engines.vllm} refuses DBO for {d.served.model_type}, {why} "
        "(VllmConfig._get_dbo_unsupported_features); the line without it:\n"
    )


def vllm_command(
    model: str, flags: str, d: Deployment, overlap: Overlap, threshold: int | None, notes: list[str]
) -> str:
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
        return ep_below_world(v, f"{why} parallel = {world} here)", world, ep)
    if nodes > 1 and gpn % tp:
        return (
            f"# not expressible in {v} as a multi-node data-parallel launch: each data-parallel rank's "
            f"--tensor-parallel-size {tp} group must lie within one node of {gpn} GPUs"
        )
    dp = ep // tp
    backend = ""  # the --all2all-backend the line passes
    base = f"vllm serve {model} --tensor-parallel-size {tp} --data-parallel-size {dp} --enable-expert-parallel"
    sharded = f"{v}: with --enable-expert-parallel the experts are sharded over tensor x data parallel, {tp} x {dp}"
    if d.moe_tp > 1:  # one TP group of every GPU: no expert parallelism, every expert tensor parallel
        base = f"vllm serve {model} --tensor-parallel-size {tp} --data-parallel-size 1"
        notes.append(
            f"{v}: without --enable-expert-parallel its MoE is tensor parallel: every GPU holds every routed expert "
            f"at 1/{tp} of its width, their outputs all-reduced (--moe-tp {tp})"
        )
    elif dp > 1 and d.vendor == "amd":
        backend = "mori"
        notes.append(
            f"{sharded} = {ep} GPUs; --all2all-backend mori: MoRI's kernels (ROCm), which pick the inter-node kernel "
            "from the token budget; DBO reserves no CUs for them (VLLM_DBO_COMM_SMS applies to DeepEP's "
            "high-throughput kernels only)"
        )
    elif dp > 1 and d.network == "efa-gda":
        backend = "deepep_v2"
        notes.append(
            f"{sharded} = {ep} GPUs; --all2all-backend deepep_v2: DeepEP V2's kernels, over EFA through NCCL's GPU-"
            "initiated path (NCCL 2.31 or later with NCCL_GIN_TYPE=5, aws-ofi-nccl 1.21 or later)"
        )
    elif dp > 1:
        backend = VLLM_DEEPEP_BACKENDS[schedule]
        if d.network == "efa":
            notes.append(efa_proxy_note(v))
        kind = "low-latency" if schedule == Schedule.LL else "high-throughput (normal)"
        notes.append(
            f"{sharded} = {ep} GPUs; --all2all-backend {VLLM_DEEPEP_BACKENDS[schedule]}: DeepEP's {kind} kernels"
        )
    else:
        notes.append(
            f"{sharded} = {ep} GPUs; with --data-parallel-size 1 its MoE has no all-to-all (an all-reduce), "
            "so no --all2all-backend: DeepEP's would go unused"
        )
    if backend:
        base += f" --all2all-backend {backend}"
    head = vllm_refusal(d, overlap)
    dbo_ok = VLLM_DBO_BACKENDS["rocm" if d.vendor == "amd" else "cuda"]
    if not head and overlap == Overlap.DBO and backend and backend not in dbo_ok:
        head = (
            f"# {v} runs DBO on {'ROCm' if d.vendor == 'amd' else 'CUDA'} with the {', '.join(dbo_ok)} all2all "
            f"backends only (VllmConfig asserts it), not {backend}, whose kernels the prediction times; the line "
            "without it:\n"
        )
    if head:
        overlap = Overlap.NONE
    base += flags + expert_flags(d, "vllm", v, notes)
    base += memory_flags(d, "vllm", v, overlap == Overlap.DBO and dp > 1, notes)
    if overlap == Overlap.SBO:
        head = f"# {v} has no single-batch overlap (no such flag or ParallelConfig field); the line without it:\n"
    elif overlap == Overlap.DBO and dp == 1:
        head = (
            f"# {v} runs DBO only with --data-parallel-size > 1 (its micro-batch runner needs the DP "
            "handshake), and here attention tensor parallelism takes every GPU; the line without DBO:\n"
        )
    dbo = ""
    if overlap == Overlap.DBO and dp > 1:
        dbo = " --enable-dbo"  # never on AMD: VLLM_DBO_BACKENDS has no MoRI, the one backend its lines run there
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
                f"group of {gpus(tp)}) reach {flag}; the other phase's threshold stays at its default"
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
