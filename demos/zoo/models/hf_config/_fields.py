"""Typed reads of a config.json object (``demos.zoo.models.hf_config``): ``Fields``, whose every failure is one
``ModelConfigError`` naming the file and the field, and the helpers the readers share (``show``, ``is_one``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any


class ModelConfigError(ValueError):
    """A config.json that cannot become a ModelSpec; the message is one line naming the file and the field."""


MISSING = object()


def is_one(value: Any) -> bool:
    return type(value) is int and value == 1


def show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class Fields:
    """Typed reads of one config dict; every failure is a ModelConfigError naming source and field.

    ``prefix`` qualifies the fields of a nested object (``quantization_config.``) in messages.
    """

    def __init__(self, config: Mapping[str, Any], source: str, model_type: str, prefix: str = "") -> None:
        self.config, self.source, self.model_type, self.prefix = config, source, model_type, prefix

    def fail(self, field: str, reason: str) -> ModelConfigError:
        where = f"{self.prefix}{field}"
        return ModelConfigError(f"{self.source}: field '{where}' {reason} (model_type {self.model_type})")

    def has(self, field: str) -> bool:
        return field in self.config

    def _get(self, field: str, default: Any) -> Any:
        value = self.config.get(field, MISSING)
        if value is MISSING:
            if default is MISSING:
                where = f"{self.prefix}{field}"
                raise ModelConfigError(f"{self.source}: missing field '{where}' (model_type {self.model_type})")
            return default
        return value

    def get_int(self, field: str, default: Any = MISSING, *, nullable: bool = False) -> Any:
        value = self._get(field, default)
        if value is None and nullable:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            what = "an integer or null" if nullable else "an integer"
            raise self.fail(field, f"must be {what}, got {type(value).__name__} {show(value)}")
        return value

    def get_float(self, field: str, default: Any = MISSING) -> float:
        value = self._get(field, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(field, f"must be a number, got {type(value).__name__} {show(value)}")
        return float(value)

    def get_bool(self, field: str, default: Any = MISSING) -> bool:
        value = self._get(field, default)
        if not isinstance(value, bool):
            raise self.fail(field, f"must be true or false, got {type(value).__name__} {show(value)}")
        return value

    def get_choice(self, field: str, choices: tuple[str, ...], default: Any = MISSING) -> str:
        value = self._get(field, default)
        if not isinstance(value, str):
            raise self.fail(field, f"must be a string, got {type(value).__name__} {show(value)}")
        if value not in choices:
            raise self.fail(field, f"is {value!r}, not one of {', '.join(choices)}")
        return value

    def get_object(self, field: str, default: Any = MISSING) -> Mapping[str, Any] | None:
        """A nested object (``text_config``, ``quantization_config``); None where ``default`` is None and the
        field is absent or null."""
        value = self._get(field, default)
        if value is None and default is None:
            return None
        if not isinstance(value, Mapping):
            what = "an object or null" if default is None else "an object"
            raise self.fail(field, f"must be {what}, got {type(value).__name__} {show(value)}")
        return value

    def nested(self, field: str, config: Mapping[str, Any]) -> Fields:
        """The fields of the object ``config`` read from ``field``, named ``field.name`` in messages."""
        return Fields(config, self.source, self.model_type, prefix=f"{self.prefix}{field}.")

    def get_str_list(self, field: str) -> tuple[str, ...]:
        value = self._get(field, MISSING)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(field, f"must be a list of strings, got {type(value).__name__} {show(value)}")
        return tuple(value)

    def get_int_list(self, field: str) -> tuple[int, ...]:
        value = self._get(field, MISSING)
        if not isinstance(value, list) or not all(type(v) is int for v in value):
            raise self.fail(field, f"must be a list of integers, got {type(value).__name__} {show(value)}")
        return tuple(value)

    def unsupported_unless(self, field: str, default: Any, ok: Callable[[Any], bool], what: str) -> None:
        """Fail when ``field`` (``default`` when absent) holds a layout the spec cannot express."""
        value = self.config.get(field, default)
        if not ok(value):
            raise self.fail(field, f"is {show(value)}: {what} is not supported")
