"""The checks of a device profile's JSON before its dataclasses see it: one line that names the
field and the type it wants (``DeviceProfile.from_dict``), never a constructor's "missing 2
required positional arguments".

Each field's wanted JSON type is read from its dataclass annotation (``float`` -> a number,
``Mapping[...]`` -> an object, ...); the value checks (positive, in range) stay with the dataclasses.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

_WANTS: tuple[tuple[str, tuple[type, ...], str], ...] = (
    ("str", (str,), "a string"),
    ("float", (int, float), "a number"),
    ("int", (int,), "an integer"),
    ("bool", (bool,), "true or false"),
    ("tuple", (list, tuple), "a list of numbers"),
    ("Mapping", (Mapping,), "a JSON object"),
    ("HostCosts", (Mapping,), "a JSON object"),
    ("OpCost", (Mapping,), "a JSON object"),
)


def json_type_name(value: Any) -> str:
    """What ``value`` is, in JSON's words (a string, a number, an object, ...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    for kinds, word in (((str,), "a string"), ((int, float), "a number"), ((list, tuple), "a list")):
        if isinstance(value, kinds):
            return f"{word} {value!r}" if not isinstance(value, (list, tuple)) else word
    return "a JSON object" if isinstance(value, Mapping) else type(value).__name__


def _wanted(annotation: str) -> tuple[tuple[type, ...], str] | None:
    for prefix, kinds, word in _WANTS:
        if annotation.startswith(prefix):
            return kinds, word
    return None


def check_json_fields(cls: type, d: Any, what: str, where: str) -> None:
    """ValueError (one line) unless ``d`` is a JSON object holding ``cls``'s required fields, no
    unknown one, and each of the type its annotation names. ``what``: the fields' kind in the
    unknown-field message ("device profile", "host cost"); ``where``: the prefix of a field's
    name in the other messages ("" or "host.")."""
    place = f"device profile: {where.rstrip('.')}" if where else "device profile"
    if not isinstance(d, Mapping):
        raise ValueError(f"{place} must be a JSON object, got {json_type_name(d)}")
    known = {f.name: f for f in dataclasses.fields(cls)}
    extra = sorted(str(k) for k in set(d) - set(known))
    if extra:
        raise ValueError(f"unknown {what} field(s): {', '.join(extra)}")
    missing = [
        f"{where}{f.name} ({(_wanted(str(f.type)) or ((), 'a value'))[1]})"
        for f in known.values()
        if f.name not in d and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ValueError(f"device profile: missing field(s) {', '.join(missing)}")
    for name, value in d.items():
        wanted = _wanted(str(known[name].type))
        if wanted is None:
            continue
        kinds, word = wanted
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise ValueError(f"device profile: field {where}{name} must be {word}, got {json_type_name(value)}")
