"""Byte-level facts about tensor views, for the workspace isolation checks.

``start_of`` and ``extent`` give addresses from the storage (meaningful for empty views too, whose
``data_ptr()`` is 0); ``pattern`` and ``as_bytes`` write and compare canaries byte for byte.
"""

from __future__ import annotations

import torch

# Every dtype a uint8 buffer can be viewed as (the workspace hands out views of such buffers).
DTYPES = (
    torch.uint8,
    torch.int8,
    torch.bool,
    torch.float16,
    torch.bfloat16,
    torch.int16,
    torch.int32,
    torch.float32,
    torch.int64,
    torch.float64,
    torch.complex64,
    torch.complex128,
)


def start_of(t: torch.Tensor) -> int:
    """A view's first byte address (also meaningful for empty views, whose data_ptr() is 0)."""
    return t.untyped_storage().data_ptr() + t.storage_offset() * t.element_size()


def extent(t: torch.Tensor) -> tuple[int, int]:
    """The bytes ``t`` can touch: [storage start + storage_offset * itemsize, + strided extent)."""
    start = start_of(t)
    if t.numel() == 0:
        return start, start
    span = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride())) + 1
    return start, start + span * t.element_size()


def pattern(key: int, nbytes: int) -> torch.Tensor:
    """Bytes unique (with overwhelming probability) to ``key``."""
    g = torch.Generator().manual_seed(key)
    return torch.randint(0, 256, (nbytes,), generator=g, dtype=torch.uint8)


def as_bytes(view: torch.Tensor) -> torch.Tensor:
    """A (contiguous) view's bytes, as a flat uint8 view of the same memory."""
    return view.reshape(-1).view(torch.uint8)
