"""The words the studies and the commands share, as enumerations: one definition of each.

Each is a ``str`` enumeration (``Word``): a member equals, hashes, formats and serializes (``json``) as
its value, so ``Schedule.LL == "ll"``, ``{"ll": 1}[Schedule.LL]`` and ``f"{Schedule.LL}"`` give what the
plain string gave, and every report and JSON reads as before. Code compares members
(``w.schedule is Schedule.LL``), never spelled strings: a boundary that takes text (a flag, a keyword
argument, a JSON field) turns it into a member with ``Schedule(text)`` (or ``Schedule.parse(text, field)``,
which says the choices in one line), and a typo fails there instead of comparing false everywhere.

* ``Phase``: decode (one new token per request) or prefill (prompt tokens);
* ``Schedule``: DeepEP's low-latency kernels (``ll``, the decode default) or its normal ones (``ht``);
* ``Mode``: a step replayed from a CUDA graph (``graph``) or launched kernel by kernel (``eager``);
* ``Overlap``: none, dual-batch overlap (``dbo``), single-batch overlap (``sbo``), DeepGEMM's fused MoE
  kernel (``fused``);
* ``KernelSource``: where the zoo's kernel times come from: the fitted curves (``roofline``) or the
  measured tables (``measured``);
* ``Stage``: DeepSeek's stage figures a kernel's time is reported under (attention, dispatch, mlp,
  combine, other).

Only the standard library is imported here.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["KernelSource", "Mode", "Overlap", "Phase", "Schedule", "Stage", "Word"]


class Word(str, Enum):
    """A ``str`` enumeration that behaves as its value wherever a string did (module docstring)."""

    def __str__(self) -> str:
        return self.value

    __format__ = str.__format__
    __hash__ = str.__hash__

    @classmethod
    def choices(cls) -> tuple[str, ...]:
        """Every value, in definition order."""
        return tuple(m.value for m in cls)

    @classmethod
    def parse(cls, value: object, what: str) -> Word:
        """``value`` as a member; a ``ValueError`` of one line naming ``what`` and the choices otherwise."""
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"{what} must be one of {', '.join(cls.choices())}, got {value!r}") from None


class Phase(Word):
    DECODE = "decode"
    PREFILL = "prefill"


class Schedule(Word):
    LL = "ll"
    HT = "ht"


class Mode(Word):
    GRAPH = "graph"
    EAGER = "eager"


class Overlap(Word):
    NONE = "none"
    DBO = "dbo"
    SBO = "sbo"
    FUSED = "fused"


class KernelSource(Word):
    ROOFLINE = "roofline"
    MEASURED = "measured"


class Stage(Word):
    ATTENTION = "attention"
    DISPATCH = "dispatch"
    MLP = "mlp"
    COMBINE = "combine"
    OTHER = "other"
