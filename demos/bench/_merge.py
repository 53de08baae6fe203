"""Merge a partial benchmark report into an existing one: ``python -m demos.bench --section S
--markdown P`` with P present replaces (or adds) only the ``## S`` sections of P and keeps the rest.

A merged section carries its own line saying when, how and on which machine it was measured, since
the page's header describes the run that wrote the other sections.
"""

from __future__ import annotations

import re

_HEADING = re.compile(r"^## (\S+)\s*$", re.MULTILINE)


def split_sections(text: str) -> tuple[str, dict[str, str]]:
    """(the text before the first ``## name`` heading, {name: that section's text, heading included})."""
    marks = list(_HEADING.finditer(text))
    if not marks:
        return text, {}
    pre = text[: marks[0].start()]
    sections = {}
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        sections[m.group(1)] = text[m.start() : end].rstrip("\n") + "\n"
    return pre, sections


def merge_sections(old: str, new: str, order: list[str], stamp: str) -> str:
    """``old`` with each section of ``new`` put in place of the section of the same name (or added in
    ``order``'s place), each new one stamped with ``stamp`` under its heading."""
    pre, have = split_sections(old)
    _, fresh = split_sections(new)
    for name, body in fresh.items():
        heading, _, rest = body.partition("\n")
        have[name] = f"{heading}\n\n{stamp}\n{rest}"
    known = [n for n in order if n in have] + [n for n in have if n not in order]
    return pre.rstrip("\n") + "\n\n" + "\n".join(have[n] for n in known)
