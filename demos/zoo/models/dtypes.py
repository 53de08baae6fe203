"""The dtypes a model's parts are stored in: one table of their bytes and of the math each multiplies in.

``DTYPES`` maps a storage name (what ``Precision``'s fields hold) to a ``DType``:

* ``bytes``: bytes per element, a block format's scales included (MXFP4: 32 four-bit values share one
  8-bit E8M0 scale, 17/32 bytes per value; NVFP4: 16 four-bit values share one FP8 E4M3 scale, 18/32,
  its one FP32 scale per tensor left out; INT4 in groups of 32 with a BF16 scale each, symmetric so
  without a zero point, as compressed-tensors' ``pack-quantized`` format stores Kimi-K2.5's experts:
  18/32, the packed int32 words holding 8 values each and the per-tensor ``weight_shape`` left out);
* ``math``: the ``dbo.costs.DTYPES`` key of the math rate a GEMM over such weights runs at. FP8 weights
  multiply in FP8 (their activations quantized to FP8); NVFP4 weights in FP4 with their activations
  quantized to NVFP4 too (W4A4, NVIDIA's checkpoints' ``input_activations``), at the GPU's FP4 rate where it
  has FP4 tensor cores and, dequantized, at its BF16 rate where it has none (``GpuSpec.flops("fp4")``;
  ``demos.zoo.kernel_times`` times them on the family's FP4 GEMM curve, or its BF16 one); MXFP4 weights
  (gpt-oss's ``mxfp4``, DeepSeek-V4's FP4 experts) against FP8 activations (W4A8, ``w4a8``: DeepGEMM's FP8 x
  FP4 grouped GEMMs for V4, FlashInfer's MXFP4 x MXFP8 MoE), at the FP8 rate on the FP8 GEMM curve where the
  GPU has FP4 tensor cores (Blackwell: its MMA takes FP8 and FP4 operands) and dequantized at the BF16 rate
  where it has none (Hopper); MXFP4 weights a checkpoint declares with BF16 activations (``mxfp4_w4a16``,
  Kimi-K3's compressed-tensors ``input_activations`` null) at the BF16 rate. SGLang's measured MoE
  tables of Kimi-K3's shapes on B200 (``moe_perf``) run W4A8 1.1-1.3 times as fast as W4A16 where the
  weights' bytes bound them and 2-3 times from a few thousand tokens a rank. Every other weight in
  BF16: INT4 because its kernels (W4A16: Marlin,
  Machete, CUTLASS mixed-input GEMMs) dequantize the weights to BF16 in registers and multiply in BF16
  (W4A8 kernels, FP8 activations, exist as well: a modelling choice), FP16 at the same rate as BF16, and
  FP32 weights, which no preset ships, at the BF16 rate too (a modelling choice);
* ``activation_bytes``: bytes of one activation value such a GEMM reads (1 when it runs in FP8, NVFP4's
  18/32 in FP4, else a BF16 activation's 2).

``ACTIVATION`` is the activation dtype of every model in the zoo (BF16; ``ACT_BYTES`` its bytes), and
``storage_of(math)`` the storage name whose GEMMs run at ``math`` (the measured tables' FP8 GEMMs are
E4M3 weights). ``dtype(name)`` looks one up; an unknown name is a ``KeyError`` naming the choices.
Nothing here imports torch or the runtime.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

__all__ = ["ACTIVATION", "ACT_BYTES", "DTYPES", "DType", "dtype", "storage_of"]


@dataclass(frozen=True)
class DType:
    """One storage dtype (module docstring)."""

    name: str
    bytes: float
    math: str
    activation_bytes: float


ACT_BYTES = 2
"""Bytes of one BF16 activation value."""

ACTIVATION = "bfloat16"
"""The activation dtype of every model in the zoo."""

DTYPES = MappingProxyType(
    {
        d.name: d
        for d in (
            DType("float32", 4.0, "bfloat16", 2.0),
            DType("bfloat16", 2.0, "bfloat16", 2.0),
            DType("float16", 2.0, "bfloat16", 2.0),
            DType("fp8_e4m3", 1.0, "fp8", 1.0),
            DType("fp8_e5m2", 1.0, "fp8", 1.0),
            DType("mxfp4", 17 / 32, "w4a8", 2.0),
            DType("mxfp4_w4a16", 17 / 32, "bfloat16", 2.0),
            DType("nvfp4", 18 / 32, "fp4", 18 / 32),
            DType("int4_g32", 18 / 32, "bfloat16", 2.0),
        )
    }
)
"""Every storage dtype a part may use, by name (module docstring)."""

_STORAGE_OF_MATH = {"fp8": "fp8_e4m3", "bfloat16": "bfloat16", "fp4": "nvfp4"}


def dtype(name: str) -> DType:
    """The ``DType`` named ``name``; ``KeyError`` naming the choices for any other name."""
    try:
        return DTYPES[name]
    except (KeyError, TypeError):
        raise KeyError(f"unknown dtype {name!r}; known: {', '.join(DTYPES)}") from None


def storage_of(math: str) -> str:
    """The storage dtype whose GEMMs run at the ``math`` rate ("fp8" -> "fp8_e4m3", "bfloat16")."""
    try:
        return _STORAGE_OF_MATH[math]
    except KeyError:
        raise KeyError(f"no storage dtype multiplies at {math!r}; known: {', '.join(_STORAGE_OF_MATH)}") from None
