"""``ConfigError``: a bad option of an overlap run, one line that names the config fields involved.

The message is a template with each field marked by ``field_ref(name)``: ``str(e)`` spells the
fields as themselves (``topk``), ``e.render(name_of)`` through ``name_of`` (the command line's
``--topk``), so that ``demos.toy.config`` needs to know nothing about flags.
"""

from __future__ import annotations

import re
from typing import Callable

__all__ = ["ConfigError", "field_ref"]

_MARK = "\ue000"
_FIELD = re.compile(_MARK + r"(\w+)" + _MARK)


def field_ref(name: str) -> str:
    """A config field's name inside a ConfigError message (``ConfigError.render`` spells it)."""
    return f"{_MARK}{name}{_MARK}"


class ConfigError(ValueError):
    """A bad option; its message is one line saying which field and why."""

    def __init__(self, template: str):
        self.template = template
        self.fields = tuple(dict.fromkeys(_FIELD.findall(template)))
        super().__init__(self.render(lambda name: name))

    def render(self, name_of: Callable[[str], str]) -> str:
        """The message with every field named by ``name_of(field)``."""
        return _FIELD.sub(lambda m: name_of(m.group(1)), self.template)
