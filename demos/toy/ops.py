"""What each of the toy MoE's kernels is: the op it declares (``launch(..., op=, layer=)``).

Every kernel of the model and of its transports declares one of ``OPS`` as its ``op`` (and its
layer as ``layer``, where it has one). That identity is data on the launch and on its
``KernelRecord``: a profile's per-op corrections (``dbo.costs.HostCosts.ops``) are keyed on it,
calibration fits one correction per op, and the report and the calibration read it off the
records. The kernel's display name (``kernel_name``: ``"<op> L<layer> u<ubatch>"``) is for people;
nothing reads it back.

Where one step of the layer has two kernels that cost differently (the two schedules' experts,
dispatch and combine), each is an op of its own: ``experts`` and ``experts_ll``, ``dispatch`` and
``dispatch_ll``, ``combine`` and ``combine_ll`` (``_ll``: the low-latency schedule's kernel).
"""

from __future__ import annotations

from demos.vocabulary import Stage

__all__ = ["OPS", "OP_LETTERS", "STAGES", "TRANSFER_OPS", "kernel_name", "stage_of"]

OP_LETTERS = {
    "load_input": "i",
    "attn_qkv": "A",
    "attn_context": "A",
    "attn_query": "A",
    "attn_out": "A",
    "router": "R",
    "dispatch": "D",
    "dispatch_ll": "D",
    "dispatch_recv": "d",
    "experts": "E",
    "experts_ll": "E",
    "combine": "C",
    "combine_ll": "C",
    "combine_recv": "c",
    "shared": "S",
    "moe_copy": "c",
    "finalize": "F",
}
"""One letter per op, for the timeline's kernel rows."""

OPS = tuple(OP_LETTERS)
"""Every op a kernel of the model or of its transports declares."""

STAGES: dict[str, Stage] = {
    "load_input": Stage.OTHER,
    "attn_qkv": Stage.ATTENTION,
    "attn_context": Stage.ATTENTION,
    "attn_query": Stage.ATTENTION,
    "attn_out": Stage.ATTENTION,
    "router": Stage.ATTENTION,
    "dispatch": Stage.DISPATCH,
    "dispatch_ll": Stage.DISPATCH,
    "dispatch_recv": Stage.DISPATCH,
    "experts": Stage.MLP,
    "experts_ll": Stage.MLP,
    "combine": Stage.COMBINE,
    "combine_ll": Stage.COMBINE,
    "combine_recv": Stage.COMBINE,
    "shared": Stage.MLP,
    "moe_copy": Stage.COMBINE,
    "finalize": Stage.OTHER,
}
"""The stage of DeepSeek's stage figures each op's time counts under (the zoo's ops use the same words)."""


def stage_of(op: str) -> Stage:
    """The stage of op ``op``; a ``KeyError`` naming the op for one that is not in ``OPS``."""
    try:
        return STAGES[op]
    except KeyError:
        raise KeyError(f"op {op!r} is not one of the toy's ops (demos.toy.ops.OPS)") from None


TRANSFER_OPS = ("dispatch", "dispatch_ll", "combine", "combine_ll")
"""The ops that are link transfers (the comm kernels whose time the link model sets)."""


def kernel_name(op: str, layer: int, ubatch: int, extra: str = "") -> str:
    """A kernel's display name: ``"<op> L<layer> u<ubatch>"`` and ``extra`` (for people only)."""
    return f"{op} L{layer} u{ubatch}" + (f" {extra}" if extra else "")
