"""ATOM's line (AMD's engine, ``ATOM_VERSION``), printed beside vLLM's and SGLang's for AMD GPUs: one ``python -m
atom.entrypoints.openai_server`` command on one node with data-parallel attention, expert parallelism over MoRI and
its two-batch overlap (``--enable-tbo``: prefill only without a value, ``all`` for decode too); a ``#`` line where
ATOM cannot run the predicted cluster or the overlap."""

from __future__ import annotations

from demos.prediction.engines._deployment import Deployment
from demos.prediction.engines._releases import ATOM_COMMIT, ATOM_FLAGS, ATOM_VERSION
from demos.prediction.engines._shared import HW_QUEUES_ENV, gpus
from demos.vocabulary import Overlap, Phase, Schedule


def atom_command(model: str, d: Deployment, overlap: Overlap, notes: list[str]) -> str:
    """ATOM's line for ``d`` with ``overlap`` (none, dbo: its two-batch overlap, sbo: none in ATOM), ``notes``
    appended with what its settings do; "" for an NVIDIA deployment."""
    if d.vendor != "amd":
        return ""
    a = f"ATOM {ATOM_VERSION}"
    if d.nodes > 1:
        return (
            f"# not expressible in {a}: its server runs on one host (no multi-node flags; -tp and "
            f"--data-parallel-size span one node's GPUs), not {d.nodes} nodes of {gpus(d.gpus_per_node)}"
        )
    if d.ep < d.world or d.attention_tp > 1 or d.moe_tp > 1:
        return (
            f"# not expressible in {a} as predicted: its expert parallelism with --enable-dp-attention spans every "
            f"GPU (-tp {d.world}) with attention data parallel on each, not EP {d.ep} with attention TP "
            f"{d.attention_tp}"
        )
    line = f"MORI_SHMEM_MODE=ISOLATION python -m atom.entrypoints.openai_server --model {model} -tp {d.world}"
    line += " --enable-dp-attention --enable-expert-parallel"
    notes.append(
        f"{a} (ROCm/ATOM {ATOM_COMMIT[:8]}): -tp {d.world} --enable-dp-attention --enable-expert-parallel runs "
        f"attention data parallel on each of the {d.world} GPUs and the experts over all of them, MoRI's all-to-all "
        "between (MORI_SHMEM_MODE=ISOLATION: required with expert parallelism, recipes/TBO.md)"
    )
    if d.served.kv_cache == "fp8":
        line += " --kv_cache_dtype fp8"
    if d.schedule == Schedule.LL:
        line += " --all2all-backend low-latency"
        notes.append(
            f"{a}: --all2all-backend low-latency runs MoRI's AsyncLL kernels, which hold no CUs (the prediction "
            "times MoRI's IntraNodeLL kernel on one node: AsyncLL's own tuning tables are not usable, "
            "docs/clusters.md)"
        )
    head = ""
    if overlap == Overlap.SBO:
        head = f"# {a} has no single-batch overlap (no such flag); the line without it:\n"
    elif overlap == Overlap.DBO:
        line = f"{HW_QUEUES_ENV} {line}"
        if d.phase == Phase.DECODE:
            line += " --enable-tbo all"
            notes.append(f"{a}: --enable-tbo all: two-batch overlap in decode and prefill (prefill only without 'all')")
        else:
            line += " --enable-tbo"
            notes.append(f"{a}: --enable-tbo: two-batch overlap in prefill (its default without a value)")
        notes.append(
            f"{a}: its two-batch overlap has no token threshold (on or off): below the crossover it slows the step"
        )
    used = {w for w in line.split() if w.startswith("-") and w != "-m"}
    assert used <= ATOM_FLAGS, used - ATOM_FLAGS
    return head + line
