"""Growth policies: when a request outgrows its slot, which slots grow, and when.

A *group* is the set of slots that run the same code: the slots of one lane, one per ubatch
(slot = ubatch * num_lanes + lane). A policy only ever touches the requester's group.

* ``lockstep``: every slot of the group is reallocated at once, to the same capacity. Warmup on one
  thread sizes every slot, but a sibling that holds views at that moment keeps its old buffer alive
  (orphaned views, the vllm#39226 "DBO leak"), and the peak is old + new for that slot.
* ``requester``: only the requesting slot grows (vLLM since #39226). Nothing is orphaned, but a
  slot that warmup never ran stays undersized, often at 0 bytes, and is locked that way
  (vllm#41858, #42275).
* ``deferred-lockstep``: every slot's *capacity* grows at once, but a sibling's buffer is
  reallocated only at that sibling's own next ``get_simultaneous`` call (its safe point: the views
  it holds are dead by contract there), or at ``lock()`` for a sibling that has not called since.
  Nothing is orphaned and no slot is undersized at lock.

The manager (``workspace.manager``) implements the mechanics; a policy is the decision. The
default is ``DEFAULT_GROWTH`` (see docs/workspace.md for the measurements behind it).
"""

from __future__ import annotations

from dataclasses import dataclass

from workspace.errors import InvalidArgumentError, InvalidArgumentTypeError

__all__ = ["GrowthPolicy", "POLICIES", "DEFAULT_GROWTH", "get_policy", "policy_names"]


@dataclass(frozen=True)
class GrowthPolicy:
    """How the siblings of a growing slot follow it.

    ``siblings``: "now" (reallocated in the same growth), "at-safe-point" (capacity raised now,
    buffer reallocated at the sibling's next call or at lock), or "never" (left as they are).
    """

    name: str
    siblings: str
    summary: str

    def __post_init__(self) -> None:
        if self.siblings not in ("now", "at-safe-point", "never"):
            raise InvalidArgumentError(f"siblings must be 'now', 'at-safe-point' or 'never', got {self.siblings!r}")

    @property
    def grows_siblings_now(self) -> bool:
        return self.siblings == "now"

    @property
    def defers_siblings(self) -> bool:
        return self.siblings == "at-safe-point"

    @property
    def sizes_siblings(self) -> bool:
        """Whether a growth raises the capacity of every slot of the group (no slot left undersized)."""
        return self.siblings != "never"

    def __str__(self) -> str:
        return self.name


LOCKSTEP = GrowthPolicy("lockstep", "now", "all slots of the group are reallocated at once")
REQUESTER = GrowthPolicy("requester", "never", "only the requesting slot grows")
DEFERRED_LOCKSTEP = GrowthPolicy(
    "deferred-lockstep",
    "at-safe-point",
    "all capacities grow at once; a sibling's buffer is reallocated at its own next call (or at lock)",
)

POLICIES: dict[str, GrowthPolicy] = {p.name: p for p in (LOCKSTEP, REQUESTER, DEFERRED_LOCKSTEP)}

DEFAULT_GROWTH = "deferred-lockstep"
"""The policy a manager uses when ``growth`` is not given: nothing orphaned, nothing undersized."""


def policy_names() -> tuple[str, ...]:
    """The names accepted by ``WorkspaceManager(growth=...)``."""
    return tuple(POLICIES)


def get_policy(growth: str | GrowthPolicy | None) -> GrowthPolicy:
    """The policy for a name (or a policy object; None means ``DEFAULT_GROWTH``)."""
    if growth is None:
        return POLICIES[DEFAULT_GROWTH]
    if isinstance(growth, GrowthPolicy):
        return growth
    if not isinstance(growth, str):
        raise InvalidArgumentTypeError(
            f"growth must be a policy name or a GrowthPolicy, got {type(growth).__name__}: {growth!r}"
        )
    policy = POLICIES.get(growth.strip().lower())
    if policy is None:
        raise InvalidArgumentError(f"unknown growth policy {growth!r}; valid: {', '.join(POLICIES)}")
    return policy
