"""The values users type into the commands' flags, parsed one way everywhere: token counts with a
``k`` or ``M`` suffix, and comma-separated lists, in which an empty item is an error (``8,16,,32`` is a
typo, not ``8,16,32``). Each parser is an argparse ``type``: a bad value is one
``argparse.ArgumentTypeError`` line, which the commands' parser prints with the flag (exit 2).
"""

from __future__ import annotations

import argparse
from typing import Any, Callable

from demos.tokens import TOKEN_SUFFIXES, parse_token_count

__all__ = ["TOKEN_SUFFIXES", "EmptyItemError", "float_list", "int_list", "name_list", "token_count", "token_list"]


class EmptyItemError(argparse.ArgumentTypeError):
    """A comma-separated list with an empty item (``8,16,,32``, ``8,16,``)."""


def token_count(text: str) -> int:
    """A token count: an int, or a number with a suffix of ``TOKEN_SUFFIXES`` that makes a whole count
    (``4k`` = 4096, ``1.5k`` = 1536, ``1M`` = 1048576; ``demos.tokens``, which the library reads too)."""
    try:
        return parse_token_count(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _list(text: str, item: Callable[[str], Any], what: str) -> tuple[Any, ...]:
    """The comma-separated ``item``s of ``text``; an empty item (``8,,16``, a trailing comma) is an error."""
    parts = text.split(",")
    if any(not x.strip() for x in parts):
        raise EmptyItemError(f"an empty item in the list {text!r} (two commas in a row, or one at an end)")
    try:
        return tuple(item(x) for x in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of {what}: {text!r}") from None


def int_list(text: str) -> tuple[int, ...]:
    """A comma-separated list of ints (``2,3,4``); an empty item is an error."""
    return _list(text, int, "ints")


def token_list(text: str) -> tuple[int, ...]:
    """A comma-separated list of token counts (``8,16,1k``: ``token_count`` each); an empty item is an error."""
    return _list(text, token_count, "token counts")


def name_list(text: str) -> tuple[str, ...]:
    """A comma-separated list of names (``none,dbo``), each stripped; an empty item is an error."""
    return _list(text, str.strip, "names")


def float_list(text: str) -> tuple[float, ...]:
    """A comma-separated list of numbers (``0.5,1,2``); an empty item is an error."""
    return _list(text, float, "numbers")
