"""The field checks every spec dataclass runs in ``__post_init__``, and the one error they raise
(``ModelSpecError``: one line naming the field as ``Class.field``) (``demos.zoo.models.spec``)."""

from __future__ import annotations

from typing import Any


class ModelSpecError(ValueError):
    """A spec field holds a bad value. ``field`` is ``"Class.field"``; ``reason`` is the message without it."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_int(owner: str, name: str, value: Any, *, minimum: int) -> None:
    if not is_int(value):
        raise ModelSpecError(f"{owner}.{name}", f"must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ModelSpecError(f"{owner}.{name}", f"must be >= {minimum}, got {value}")


def check_optional_int(owner: str, name: str, value: Any, *, minimum: int) -> None:
    if value is not None:
        check_int(owner, name, value, minimum=minimum)


def check_bool(owner: str, name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ModelSpecError(f"{owner}.{name}", f"must be a bool, got {type(value).__name__} {value!r}")


def check_choice(owner: str, name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ModelSpecError(f"{owner}.{name}", f"must be one of {', '.join(choices)}; got {value!r}")


def check_str(owner: str, name: str, value: Any) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ModelSpecError(f"{owner}.{name}", f"must be a non-empty str, got {value!r}")
