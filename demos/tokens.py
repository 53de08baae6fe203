"""Token counts as users type them, parsed one way: an int, or a number with ``k`` = 1,024 or ``M`` =
1,024 x 1,024 that makes a whole count (``4k`` = 4096, ``1.5k`` = 1536, ``1M`` = 1048576).

The commands' flags read them through ``demos._cli.values.token_count`` (an argparse type over
``parse_token_count``); the library reads them here where it takes text, as a workload SPEC
(``demos.serving.workloads``). Only the standard library is imported here.
"""

from __future__ import annotations

import re

__all__ = ["TOKEN_SUFFIXES", "parse_token_count"]

TOKEN_SUFFIXES = {"k": 1024, "K": 1024, "M": 1024 * 1024}
"""The suffixes a token count takes: tokens are counted in powers of two, as context lengths are named
(a 4k context is 4,096 tokens), so k is 1,024 and M 1,024 x 1,024. A lower-case m (milli or mega?) is
none of them."""


def parse_token_count(text: str) -> int:
    """A token count (module docstring); a ``ValueError`` of one line that says what was typed and why
    it is not one."""
    t = text.strip()
    mult = TOKEN_SUFFIXES.get(t[-1:], 1) if t else 1
    number = t[:-1].strip() if mult > 1 else t
    try:
        if mult == 1:
            return int(number)
        if not re.fullmatch(r"\d+(\.\d+)?", number):
            raise ValueError
        value = float(number) * mult
    except ValueError:
        raise ValueError(
            f"not a token count: {text!r} (an integer, or one with k = 1024 or M = 1024 x 1024: 4k, 1.5k, 1M)"
        ) from None
    if value != int(value):
        raise ValueError(f"not a whole number of tokens: {text!r} is {value:g} (k = 1024)")
    return int(value)
