"""Printing helpers and shared constants of the failure scenarios."""

from __future__ import annotations

import textwrap
from typing import Sequence

import torch

from workspace import sanitizer

MiB = 1 << 20
U8 = torch.uint8
F32 = torch.float32
WIDTH = 96
STEP_BOUNDS = dict(handoff_timeout=10.0, step_timeout=30.0, join_grace=5.0)


def say(text: str = "") -> None:
    print(text)


def para(title: str, text: str) -> None:
    """A wrapped paragraph under a bold-ish title."""
    say(f"{title}:")
    for line in textwrap.wrap(" ".join(text.split()), WIDTH - 2):
        say("  " + line)


def findings_line(found: Sequence[sanitizer.Finding]) -> str:
    """The sanitizer's findings on one line: each finding's kind, count, op, thread and ``file:line``."""
    if not found:
        return "no findings"
    return "; ".join(f"{f.kind} x{f.count} ({f.op} by {_who(f.ubatch)} at {_short(f.caller)})" for f in found)


def _who(ubatch: int | None) -> str:
    return "a non-ubatch thread" if ubatch is None else f"ubatch {ubatch}"


def _short(caller: str) -> str:
    path, _, rest = caller.partition(":")
    return path.rsplit("/", 1)[-1] + ":" + rest


def wrapped(text: str, indent: int, hang: int = 2) -> None:
    """``text`` wrapped to the page width: the first line indented by ``indent`` spaces, the rest
    by ``indent + hang``."""
    lines = textwrap.wrap(text, WIDTH - indent - hang)
    for i, line in enumerate(lines):
        say(" " * (indent + (hang if i else 0)) + line)
