"""A request of a serving run: when it arrives and how many tokens it brings and asks for.

``Request(id, arrival_s, prompt_tokens, output_tokens)``: ``arrival_s`` seconds from the run's start
(a closed loop's requests arrive when a slot frees: their arrival is set by the run, ``None`` until then);
``prompt_tokens`` >= 1 and ``output_tokens`` >= 1 (the first output token is the prefill's). A bad field is
a ``ValueError`` naming it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Request"]


@dataclass(frozen=True)
class Request:
    """One request (module docstring)."""

    id: int
    arrival_s: float | None
    prompt_tokens: int
    output_tokens: int

    def __post_init__(self) -> None:
        for name in ("id", "prompt_tokens", "output_tokens"):
            v = getattr(self, name)
            low = 0 if name == "id" else 1
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ValueError(f"request.{name} must be an integer >= {low}, got {v!r}")
        a = self.arrival_s
        if a is not None and (isinstance(a, bool) or not isinstance(a, (int, float)) or not a >= 0):
            raise ValueError(f"request.arrival_s must be a number >= 0 or None, got {a!r}")
