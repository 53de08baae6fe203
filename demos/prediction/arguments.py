"""``predict``'s arguments checked one way (``demos.prediction.api``): each value as the sweep takes it, or a
``ConfigError`` (``demos.errors``), one line naming the keyword.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Sequence

from demos.errors import ConfigError, field_ref
from demos.prediction.sweep import default_mode
from demos.vocabulary import Mode
from demos.zoo.workload import PHASES


def overlap_names(value: Any) -> tuple[str, ...] | None:
    """``overlap`` as a tuple of names (one name, or a list of them), None for the default."""
    if value is None:
        return None
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(x, str) for x in items):
        raise ConfigError(f"{field_ref('overlap')} must be a name or a list of names, got {value!r}")
    return tuple(dict.fromkeys(items))


def modes_of(mode: Any, phase: Any) -> tuple[str, ...]:
    if phase not in PHASES:
        raise ConfigError(f"{field_ref('phase')} must be one of {', '.join(PHASES)}, got {phase!r}")
    if mode == "both":
        return tuple(Mode)
    if mode is None:
        return (default_mode(phase),)
    if mode not in Mode.choices():
        raise ConfigError(f"{field_ref('mode')} must be graph, eager or both, got {mode!r}")
    return (Mode(mode),)


def int_tuple(name: str, value: Any, default: tuple, what: str, low: int | None = 1) -> tuple:
    """``value`` as a tuple of ints (one int, or a list of them; None: ``default``), each >= ``low``
    (the range of ``comm_sms`` is the workload's to check)."""
    if value is None:
        return tuple(default)
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value,)
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (Sequence, range)):
        raise ConfigError(f"{field_ref(name)} must be an int or a list of ints, got {value!r}")
    if not value:
        raise ConfigError(f"{field_ref(name)} needs at least one {what}")
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int):
            raise ConfigError(f"{field_ref(name)} must be an int or a list of ints, got {v!r}")
        if low is not None and v < low:
            raise ConfigError(f"{field_ref(name)} must be an int >= {low}, got {v!r}")
    return tuple(value)


def as_float(x: Any) -> Any:
    """An int given where the command parses a float (``--imbalance 1``, ``--what-if link=2``) as that float."""
    return float(x) if isinstance(x, int) and not isinstance(x, bool) else x


def what_if_factors(what_if: Any) -> dict[str, Any]:
    """``{knob: factor}`` from a mapping or (knob, factor) pairs; the knobs and factors are ``Sweep``'s to check."""
    if what_if is None:
        return {}
    items = what_if.items() if isinstance(what_if, Mapping) else what_if
    try:
        if isinstance(what_if, (str, bytes)):
            raise TypeError
        return {k: as_float(v) for k, v in items}
    except (TypeError, ValueError):
        raise ConfigError(
            f"{field_ref('what_if')} must map each knob to its factor ({{'link': 2.0}}) or list (knob, factor) "
            f"pairs, got {what_if!r}"
        ) from None


def ubatches_is_2(ubatches: Any) -> bool:
    return ubatches == 2 or (isinstance(ubatches, (tuple, list)) and list(ubatches) == [2])
