"""Pure layout functions: validate a request, size it, place it at 256-byte aligned offsets.

Nothing here touches a buffer or any manager state, so every function is safe to call from any
thread, and the plan of a canonical request is cached (``plan`` is an ``lru_cache``).

A *request* is a sequence of ``(shape, dtype)`` specs. Its *canonical* form is a tuple of
``(tuple_of_python_ints, torch.dtype)`` pairs; canonical requests are hashable and compare equal
exactly when they describe the same layout.
"""

from __future__ import annotations

import functools
import math
import operator
from dataclasses import dataclass
from typing import Iterable, Sequence

import torch

from workspace.errors import InvalidArgumentError, InvalidArgumentTypeError

__all__ = [
    "ALIGNMENT",
    "Plan",
    "Spec",
    "align_up",
    "canonical_dtype",
    "canonical_request",
    "canonical_shape",
    "canonical_spec",
    "carve",
    "nbytes_of",
    "plan",
]

ALIGNMENT = 256
"""Every view starts at a multiple of this many bytes from the start of its slot."""

Spec = tuple[tuple[int, ...], torch.dtype]
"""A canonical spec: a shape of Python ints and a torch dtype."""


def align_up(n: int, alignment: int = ALIGNMENT) -> int:
    """The smallest multiple of ``alignment`` that is >= ``n`` (``n`` >= 0, ``alignment`` >= 1)."""
    if n < 0:
        raise InvalidArgumentError(f"cannot align a negative byte count: {n}")
    if alignment < 1:
        raise InvalidArgumentError(f"alignment must be >= 1, got {alignment}")
    return -(-n // alignment) * alignment


def _dim(value: object, shape: object, position: int) -> int:
    if isinstance(value, bool):
        raise InvalidArgumentTypeError(f"shape {shape!r}: dim {position} is a bool ({value!r}); dims must be ints")
    try:
        dim = operator.index(value)  # ints and int-like scalars (numpy ints); not floats
    except TypeError:
        raise InvalidArgumentTypeError(
            f"shape {shape!r}: dim {position} must be an int, got {type(value).__name__} {value!r}"
        ) from None
    if dim < 0:
        raise InvalidArgumentError(
            f"shape {shape!r}: dim {position} is negative ({dim}); dims must be >= 0 (non-negative)"
        )
    return dim


def canonical_shape(shape: object) -> tuple[int, ...]:
    """A shape (tuple, list, torch.Size, or an int for 1-D) as a tuple of non-negative Python ints.

    Raises TypeError for a non-sequence shape, a bool or non-integer dim; ValueError for a negative dim.
    """
    if isinstance(shape, (tuple, list, torch.Size)):
        return tuple(_dim(d, shape, i) for i, d in enumerate(shape))
    if isinstance(shape, bool):
        raise InvalidArgumentTypeError(f"shape must be a tuple, list, torch.Size or int, got a bool ({shape!r})")
    if hasattr(shape, "__index__"):
        return (_dim(shape, shape, 0),)
    raise InvalidArgumentTypeError(
        f"shape must be a tuple, list, torch.Size or int, got {type(shape).__name__}: {shape!r}"
    )


@functools.lru_cache(maxsize=None)
def _viewable(dtype: torch.dtype) -> bool:
    # A uint8 byte range must be reinterpretable as the dtype. The meta device does no real work.
    try:
        torch.empty(dtype.itemsize, dtype=torch.uint8, device="meta").view(dtype)
    except (RuntimeError, TypeError):
        return False
    return True


def canonical_dtype(dtype: object) -> torch.dtype:
    """Check that ``dtype`` is a ``torch.dtype`` a uint8 buffer can be viewed as; TypeError if not."""
    if not isinstance(dtype, torch.dtype):
        raise InvalidArgumentTypeError(f"dtype must be a torch.dtype, got {type(dtype).__name__}: {dtype!r}")
    if not _viewable(dtype):
        raise InvalidArgumentTypeError(f"dtype {dtype} cannot be carved from a uint8 workspace buffer")
    return dtype


def canonical_spec(spec: object) -> Spec:
    """One ``(shape, dtype)`` pair in canonical form; TypeError/ValueError on anything else."""
    if not isinstance(spec, (tuple, list)) or len(spec) != 2:
        raise InvalidArgumentTypeError(
            "each request must be a (shape, dtype) pair, e.g. ((4, 128), torch.float16); "
            f"got {type(spec).__name__}: {spec!r}"
        )
    shape, dtype = spec
    return canonical_shape(shape), canonical_dtype(dtype)


def canonical_request(specs: Iterable[object]) -> tuple[Spec, ...]:
    """A whole request in canonical (hashable) form; raises on the first bad spec."""
    return tuple(canonical_spec(s) for s in specs)


def nbytes_of(shape: Sequence[int], dtype: torch.dtype) -> int:
    """Exact bytes of a tensor: numel * itemsize."""
    return math.prod(shape) * dtype.itemsize


@dataclass(frozen=True)
class Plan:
    """Where each view of a request goes in its slot.

    ``nbytes[i]`` is view i's exact size, ``offsets[i]`` its 256-aligned start, ``total`` the bytes
    the slot must hold (the running sum of every size rounded up to 256).
    """

    specs: tuple[Spec, ...]
    offsets: tuple[int, ...]
    nbytes: tuple[int, ...]
    total: int

    @property
    def exact_total(self) -> int:
        """Sum of the exact sizes (what a perfect packer would need)."""
        return sum(self.nbytes)


@functools.lru_cache(maxsize=4096)
def plan(specs: tuple[Spec, ...]) -> Plan:
    """Lay out a canonical request: offsets are the running sum of sizes rounded up to 256 bytes."""
    offsets = []
    sizes = []
    cursor = 0
    for shape, dtype in specs:
        size = nbytes_of(shape, dtype)
        offsets.append(cursor)
        sizes.append(size)
        cursor += align_up(size)
    return Plan(specs, tuple(offsets), tuple(sizes), cursor)


def carve(buffer: torch.Tensor, layout: Plan) -> list[torch.Tensor]:
    """The views of ``layout`` carved from a 1-D uint8 ``buffer`` (which must hold ``layout.total``)."""
    return [
        buffer[off : off + size].view(dtype).reshape(shape)
        for (shape, dtype), off, size in zip(layout.specs, layout.offsets, layout.nbytes)
    ]
