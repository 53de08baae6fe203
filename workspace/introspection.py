"""Read-only views of a manager's state: slot sizes and ranges, pending and undersized slots, counters.

``IntrospectionMixin`` is one part of ``WorkspaceManager``; every method takes the manager's lock
for a consistent snapshot and changes nothing a caller can see (it forgets retired buffers that
have died).
"""

from __future__ import annotations

from typing import Any

__all__ = ["IntrospectionMixin"]


class IntrospectionMixin:
    """``slot_sizes``, ``pending_slots``, ``undersized_slots``, ``slot_ranges``, ``orphaned_bytes``, ``stats``."""

    def slot_sizes(self) -> list[int]:
        """Each slot's capacity in bytes: what its next call is guaranteed to fit.

        Equal within a lane under ``lockstep`` and ``deferred-lockstep``. A slot whose buffer is
        still smaller (deferred, see ``pending_slots``) gets its bigger buffer at its next call.
        """
        with self._lock:
            return list(self._capacity)

    def pending_slots(self) -> list[int]:
        """Slots whose buffer is smaller than their capacity (reallocated at their next call or lock)."""
        with self._lock:
            return [s for s in range(self._num_slots) if self._sizes[s] < self._capacity[s]]

    def undersized_slots(self) -> list[int]:
        """Slots whose capacity is below the largest capacity of their lane (``requester`` growth)."""
        with self._lock:
            return self._undersized()

    def slot_ranges(self) -> list[tuple[int, int]]:
        """Each slot's current buffer as ``(data_ptr, nbytes)``; ``(0, 0)`` for a slot without one.

        For isolation checks: every view handed to a slot lies in its range (until it is reallocated).
        """
        with self._lock:
            return [(0, 0) if b is None or b.numel() == 0 else (b.data_ptr(), b.numel()) for b in self._buffers]

    def orphaned_bytes(self) -> int:
        """Bytes of buffers the manager has dropped that are still alive (someone holds their views)."""
        with self._lock:
            return self._orphaned()

    def stats(self) -> dict[str, Any]:
        """Counters: ``grows``, ``bytes_reserved`` (sum of buffers held), ``allocations``, ...

        ``grows`` counts growth events (a request that outgrew its slot's capacity); ``allocations``
        counts slot buffer allocations; ``deferred_reallocations`` those made at a sibling's safe
        point or at lock; ``allocations_after_lock`` must stay 0. ``orphaned_bytes``: dropped buffers
        still alive. ``cache_misses`` counts calls that built views.
        """
        with self._lock:
            return {
                "num_slots": self._num_slots,
                "num_ubatches": self._num_ubatches,
                "num_lanes": self._num_lanes,
                "policy": self._policy.name,
                "locked": self._locked,
                "capacity_bytes": max(self._capacity),
                "bytes_reserved": sum(self._sizes),
                "pending_slots": sum(1 for s in range(self._num_slots) if self._sizes[s] < self._capacity[s]),
                "undersized_slots": len(self._undersized()),
                "orphaned_bytes": self._orphaned(),
                "grows": self._grows,
                "allocations": self._allocations,
                "deferred_reallocations": self._deferred_reallocations,
                "allocations_after_lock": self._allocations_after_lock,
                "persistent_entries": sum(len(p) for p in self._persistent),
                "persistent_allocations": self._persistent_allocations,
                "cache_entries": sum(len(c) for c in self._caches),
                "cache_misses": self._cache_misses,
                "cache_clears": self._cache_clears,
                "largest_request_bytes": self._largest_request,
                "largest_request_exact_bytes": self._largest_request_exact,
            }

    def _undersized(self) -> list[int]:
        out = []
        for slot in range(self._num_slots):
            top = max(self._capacity[s] for s in self._group(slot))
            if self._capacity[slot] < top:
                out.append(slot)
        return out

    def _orphaned(self) -> int:
        self._retired = [(ref, n) for ref, n in self._retired if ref() is not None]
        return sum(n for _, n in self._retired)
