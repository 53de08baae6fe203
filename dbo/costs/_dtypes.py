"""The dtype keys of a profile's math rates: ``DTYPES`` and ``dtype_key`` (``dbo.costs`` re-exports them)."""

from __future__ import annotations

from typing import Any

DTYPES = ("float64", "float32", "tf32", "bfloat16", "float16", "fp8", "fp4", "w4a8")
"""Keys of ``DeviceProfile.dtype_flops`` (the math rate of each dtype; ``w4a8``: 4-bit weights against 8-bit
activations, the FP8 rate where the tensor cores take FP4 operands, else the weights dequantized)."""

_DTYPE_ALIASES = {
    "double": "float64",
    "float": "float32",
    "half": "float16",
    "bf16": "bfloat16",
    "fp16": "float16",
    "fp32": "float32",
    "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8",
    "float8_e4m3fnuz": "fp8",
    "float8_e5m2fnuz": "fp8",
    "float4_e2m1fn_x2": "fp4",
}


def dtype_key(dtype: Any) -> str | None:
    """The ``dtype_flops`` key of ``dtype`` (a torch.dtype or a string); None if unknown/None."""
    if dtype is None:
        return None
    s = str(dtype)
    if s.startswith("torch."):
        s = s[6:]
    s = _DTYPE_ALIASES.get(s, s)
    return s if s in DTYPES else None
