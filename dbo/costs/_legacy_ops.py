"""Profiles of the format before launches declared their op: their ``HostCosts.ops`` keys, mapped
to the declared ops (``declared_op_keys``, applied when a profile loads from JSON)."""

from __future__ import annotations

from typing import Any, Mapping

__all__ = ["LEGACY_OP_KEYS", "declared_op_keys"]

LEGACY_OP_KEYS: Mapping[str, str] = {
    "experts/_k_experts": "experts",
    "experts/_k_experts_ll": "experts_ll",
    "dispatch/_dispatch_kernel": "dispatch",
    "dispatch/_ll_dispatch_kernel": "dispatch_ll",
    "combine/_combine_sum_kernel": "combine",
    "combine/_combine_gather_kernel": "combine_ll",
}
"""The ``"<op>/<kernel function>"`` keys that ``python -m demos.calibrate`` wrote for an op the toy
model launched with two kernel functions, and the op each of those kernels declares now
(``demos.moe.ops``: the two schedules' kernels are two ops). Such an entry becomes the entry of its
declared op, over the plain entry of the same name: that one was only the fallback for kernel
functions without an entry of their own, and the toy model has none. Plain keys ("attn_qkv",
"combine_recv", ...) name the same op in both formats."""


def declared_op_keys(ops: Mapping[str, Any]) -> dict[str, Any]:
    """``ops`` keyed by declared op: the ``LEGACY_OP_KEYS`` renamed (replacing the plain entry of that
    op); another ``"a/b"`` key raises a one-line ValueError that says to calibrate again."""
    out = {k: v for k, v in ops.items() if k not in LEGACY_OP_KEYS}
    unknown = sorted(str(k) for k in out if "/" in str(k))
    if unknown:
        raise ValueError(
            f"device profile op key {unknown[0]!r} names a kernel function (the format before launches declared "
            "their op) and maps to no declared op: re-run `python -m demos.calibrate` to write the profile again"
        )
    out.update({LEGACY_OP_KEYS[k]: v for k, v in ops.items() if k in LEGACY_OP_KEYS})
    return out
