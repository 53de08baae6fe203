"""DeepGEMM's fused MoE kernel ("MegaMoE"): where it runs, and what one MoE layer costs with it.

One persistent kernel per MoE layer pulls the tokens routed to its experts from the other ranks over NVLink
(CUDA symmetric memory), runs both grouped GEMMs with the activation between them and sends each result
back, the transfers overlapped with the tensor-core work inside the kernel (DeepGEMM PRs #304, #316; SM90
block-FP8 experts since #383). It replaces the dispatch, the experts and the combine, so it leaves DBO
nothing to overlap: SGLang 0.5.23 refuses it with two-batch or single-batch overlap (``--moe-a2a-backend
megamoe has no two-batch / single-batch overlap decomposition``), and vLLM's micro-batching yields in the
all-to-all kernels it bypasses.

``fused_moe_refusal(w)``: why it cannot run for workload ``w`` (None where it can): it needs an all-to-all
(``Workload.alltoall``), an EP group inside one NVLink domain (its peers are addressed through symmetric
memory: ``ClusterSpec.domains`` 1, a node of HGX or a GB200/GB300 rack; SGLang's issue #36303 reports two
nodes failing), and experts in a format
its kernels take: 4-bit (MXFP4 or NVFP4) on Blackwell, block FP8 on Hopper (SGLang's ``mega_moe_hook``), at
widths they tile (``FUSED_ALIGN``: gpt-oss's 2880 is not).

``fused_moe_math(w, math)``: the rate its grouped GEMMs run at (MXFP4 experts against FP8 activations, W4A8,
whatever the checkpoint declares: the kernel's ``fp8xfp4``).

``fused_moe_seconds(w, t, experts_s)``: one layer's kernel for ``t`` tokens per rank whose grouped GEMMs
take ``experts_s`` when run alone. Its transfers are the single-node low-latency kernels' (the line fitted to
DeepEP's single-node tables, ``ll_node_seconds``): ``comm(t)`` the dispatch and the combine of ``t``
tokens. What cannot overlap is their latency, ``comm(1)`` (the first rows arrive before the GEMMs start;
the last results leave after they end); the rest of the transfers and the GEMMs overlap whole:

    seconds = comm(1) + max(experts_s, comm(t) - comm(1))

Both halves are component fits (DeepEP's kernels, the grouped GEMM curves); nothing is fitted to the fused
kernel's own published times, which ``demos.fidelity.fused_moe`` checks this against (held out). That the
overlap inside the kernel is whole is the guess to ablate (its ``overlap`` argument: 0 adds the two).
"""

from __future__ import annotations

from demos.zoo.overlap_costs import ll_node_seconds
from demos.zoo.workload import Workload

__all__ = ["FUSED_ALIGN", "FUSED_EXPERT_DTYPES", "fused_moe_math", "fused_moe_refusal", "fused_moe_seconds"]

FUSED_EXPERT_DTYPES = {
    "blackwell": ("mxfp4", "mxfp4_w4a16", "nvfp4"),  # SM100: fp8 x fp4 (MXFP4 weights), nvfp4 x nvfp4
    "hopper": ("fp8_e4m3",),  # SM90: block-FP8 weights (DeepGEMM #383)
}
"""The routed experts' dtypes DeepGEMM's fused MoE kernels take, per GPU family (SGLang 0.5.23's
``mega_moe.py``, ``_mega_moe_mma_type``, and ``mega_moe_hook.py``)."""


FUSED_ALIGN = {"mxfp4": (512, 128), "mxfp4_w4a16": (512, 128), "nvfp4": (256, 256), "fp8_e4m3": (128, 128)}
"""(hidden, expert width) multiples the kernels need per expert dtype: SGLang 0.5.23's
``check_mega_moe_shapes`` (FP8 x FP4: 16 scale groups of 32 a row, the width in 128s; NVFP4: groups of 16 and
both in 256s); block FP8 on Hopper in its 128-wide blocks (assumed)."""


def fused_moe_refusal(w: Workload) -> str | None:
    """Why DeepGEMM's fused MoE cannot run ``w`` (module docstring), None where it can."""
    if w.spec.moe is None or not w.alltoall:
        return "it replaces an expert-parallel all-to-all, and this step has none"
    if w.cluster.domains > 1:
        c = w.cluster
        return f"its EP group must sit in one NVLink domain ({c.nvlink_domain} GPUs); EP {c.ep} spans {c.domains}"
    ok = FUSED_EXPERT_DTYPES.get(w.gpu.family, ())
    experts = w.spec.precision.experts
    if experts not in ok:
        allowed = " or ".join(ok) or "none"
        return f"its kernels take {allowed} experts on {w.gpu.family}, not {experts}"
    hidden_align, inter_align = FUSED_ALIGN[experts]
    H, inter = w.spec.routed_width, w.spec.moe.intermediate_size
    if H % hidden_align or inter % inter_align:
        return (
            f"its {experts} kernels need the hidden size a multiple of {hidden_align} and the expert width of "
            f"{inter_align}, got {H} and {inter}"
        )
    return None


def fused_moe_math(w: Workload, math: str) -> str:
    """The math the fused kernel's grouped GEMMs run at, where the unfused experts run at ``math``: MXFP4
    experts multiply against the FP8 activations it quantizes itself (its ``fp8xfp4`` kernel: SGLang's
    ``_mega_moe_mma_type``), W4A8 (``w4a8``: the FP8 rate on Blackwell) even where the checkpoint declares
    BF16 activations for the unfused path (Kimi-K3's ``mxfp4_w4a16``); every other dtype as unfused."""
    if w.spec.precision.experts in ("mxfp4", "mxfp4_w4a16"):
        return "w4a8"
    return math


def fused_moe_seconds(w: Workload, t: float, experts_s: float, *, overlap: float = 1.0) -> float:
    """One MoE layer's fused kernel for ``t`` tokens per rank (module docstring); ``overlap``: the share of
    the shorter of the transfers and the GEMMs hidden under the longer (1: whole, the model; 0: none)."""
    g, k = w.gpu, w.spec.moe.top_k
    H = w.spec.routed_width
    peers = w.cluster.ep - 1  # its kernels send FP8 (or 4-bit) rows whatever the engine's DeepEP dispatch

    def comm(tokens: float) -> float:
        busiest = tokens * w.imbalance_at(tokens)
        return sum(ll_node_seconds(g, kind, busiest, H, k, peers, fp8=True) for kind in ("dispatch", "combine"))

    floor = comm(1.0)
    flight = max(0.0, comm(max(1.0, t)) - floor)
    return floor + max(experts_s, flight) + (1.0 - overlap) * min(experts_s, flight)
