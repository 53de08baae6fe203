"""Persistent per-slot objects: resources built by a factory, and tensors kept apart from the scratch.

``PersistentMixin`` is one part of ``WorkspaceManager`` (it relies on the manager's lock, slots,
observers and ``_allocate``); it holds nothing of its own beyond the per-slot dicts the manager makes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from workspace.diagnostics import caller
from workspace.errors import BadAllocationError, InvalidArgumentTypeError, PersistentKeyError, WorkspaceLockedError
from workspace.layout import canonical_dtype, canonical_shape, nbytes_of

__all__ = ["PersistentMixin"]


@dataclass
class Persistent:
    kind: str  # "resource" or "tensor"
    value: Any
    shape: tuple[int, ...] | None = None
    dtype: torch.dtype | None = None


class PersistentMixin:
    """``get_persistent_resource``, ``get_persistent`` and ``persistent_keys`` of the manager."""

    _persistent: list[dict[Any, Persistent]]

    def get_persistent_resource(self, key: Any, factory: Callable[[], Any]) -> Any:
        """The object ``factory()`` built for ``key`` in the calling (ubatch, lane) slot.

        Built lazily on first use, once per slot, and cached; the same key in another ubatch or lane
        is another object. After ``lock()`` a key the slot does not hold yet raises
        ``WorkspaceLockedError``. Uses of one resource must not overlap in time (two streams that
        run concurrently need two keys).
        """
        if not callable(factory):
            raise InvalidArgumentTypeError(f"factory must be callable, got {type(factory).__name__}")
        slot = self._checked_slot(self._current_slot())
        entry = self._persistent[slot].get(key)
        if entry is not None:
            if entry.kind != "resource":
                raise PersistentKeyError(
                    f"persistent key {key!r} of {self._describe_slot(slot)} holds a tensor (get_persistent), "
                    "not a resource; use another key"
                )
            return entry.value
        with self._lock:
            self._refuse_new_persistent_if_locked(slot, key)
        value = factory()  # outside the lock: a factory may use the workspace itself
        with self._lock:
            existing = self._persistent[slot].get(key)
            if existing is not None:  # a helper acting as the same slot created it meanwhile
                return existing.value
            self._persistent[slot][key] = Persistent("resource", value)
        return value

    def get_persistent(self, key: Any, shape: Any, dtype: torch.dtype, *, zero_init: bool = False) -> torch.Tensor:
        """A tensor kept for ``key`` in the calling (ubatch, lane) slot, separate from the scratch.

        Created on first use (zeroed then if ``zero_init``, never again), returned as the same object
        afterwards, and never touched by ``get_simultaneous``. Asking for the key with another shape
        or dtype raises ``PersistentKeyError`` (a ``ValueError``); after ``lock()`` a new key raises
        ``WorkspaceLockedError``.
        """
        shape_c = canonical_shape(shape)
        dtype_c = canonical_dtype(dtype)
        slot = self._checked_slot(self._current_slot())
        entry = self._persistent[slot].get(key)
        if entry is None:
            with self._lock:
                entry = self._persistent[slot].get(key)
                if entry is None:
                    self._refuse_new_persistent_if_locked(slot, key)
                    tensor = self._new_persistent_tensor(shape_c, dtype_c, zero_init)
                    entry = self._persistent[slot][key] = Persistent("tensor", tensor, shape_c, dtype_c)
                    for obs in self._observers:
                        obs.persistent_created(self, slot, key, tensor)
                    return tensor
        if entry.kind != "tensor":
            raise PersistentKeyError(
                f"persistent key {key!r} of {self._describe_slot(slot)} holds a resource "
                "(get_persistent_resource), not a tensor; use another key"
            )
        if entry.shape != shape_c or entry.dtype != dtype_c:
            raise PersistentKeyError(
                f"persistent tensor {key!r} of {self._describe_slot(slot)} was created as {entry.shape} "
                f"{entry.dtype}, but the requested shape and dtype are {shape_c} {dtype_c}: a persistent "
                "tensor cannot change shape or dtype (use another key)"
            )
        return entry.value

    def persistent_keys(self, ubatch_id: int, lane: int = 0) -> list[Any]:
        """Keys of the persistent resources and tensors that (ubatch, lane) holds."""
        return list(self._persistent[self._checked_slot(self.slot_of(ubatch_id, lane))])

    def _refuse_new_persistent_if_locked(self, slot: int, key: Any) -> None:
        if not self._locked:
            return
        where = caller()
        ubatch, lane = self.owner_of(slot)
        raise WorkspaceLockedError(
            f"Workspace is locked, but {where} asked for persistent resource {key!r}, which was not "
            f"allocated during warmup for ubatch {ubatch}, lane {lane}: creating persistent resources is "
            "not allowed after locking. Create it for every ubatch and lane during warmup, or unlock() first.",
            caller=where,
            ubatch_id=ubatch,
            lane=lane,
            key=key,
        )

    def _new_persistent_tensor(self, shape: tuple[int, ...], dtype: torch.dtype, zero_init: bool) -> torch.Tensor:
        nbytes = nbytes_of(shape, dtype)
        buffer = self._allocate(nbytes)
        if buffer.dtype != torch.uint8 or buffer.dim() != 1 or buffer.numel() != nbytes:
            raise BadAllocationError(
                f"_allocate({nbytes}) returned {buffer.dtype} {tuple(buffer.shape)}, not 1-D uint8"
            )
        tensor = buffer.view(dtype).reshape(shape)
        del buffer
        if zero_init:
            tensor.zero_()
        self._persistent_allocations += 1
        return tensor
