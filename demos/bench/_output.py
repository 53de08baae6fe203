"""The files a bench run writes: ``write_json`` (machine info and every record) and ``write_markdown`` (the
report page, where a partial run replaces only its own sections of an existing page). The command line
that chooses them is ``demos/bench/__main__.py``; the sections themselves, and what a record holds, are in
``demos.bench._suite``.
"""

from __future__ import annotations

import json
import os
from typing import Any

from demos.bench._merge import merge_sections
from demos.bench._report import Record, format_cell
from demos.bench._report import markdown as _markdown
from demos.bench._suite import SECTIONS


def markdown(records: list[Record], command: str, m: dict[str, Any]) -> str:
    """The report page of ``records`` over every section of ``SECTIONS``."""
    return _markdown(records, command, m, SECTIONS)


def section_names() -> list[str]:
    """The sections' names, as ``--section`` takes them."""
    return [fn.__name__.removeprefix("section_") for fn in SECTIONS]


def write_json(path: str, mach: dict[str, Any], command: str, records: list[Record]) -> None:
    """Machine info, the command line and every record, as JSON at ``path``."""
    with open(path, "w") as f:
        json.dump({"machine": mach, "command": command, "records": records}, f, indent=2)


def write_markdown(
    path: str, mach: dict[str, Any], command: str, records: list[Record], partial: bool, page: str | None = None
) -> None:
    """The report page at ``path``; a ``partial`` run (``--section``) into an existing page (``page``,
    default ``path``: the command writes to a temporary file that becomes ``page``) replaces only its
    own sections and stamps them with this run's machine."""
    text = markdown(records, command, mach)
    page = path if page is None else page
    if partial and os.path.exists(page):
        with open(page) as f:
            old = f.read()
        stamp = (
            f"Measured with `{command}` on {mach['platform']}, "
            f"{mach['cpu_count']} CPUs, torch {mach['torch']} (CUDA available: {'yes' if mach['cuda'] else 'no'}); "
            f"1-minute load average when the run started: {format_cell(mach['load_avg_1min'], 2)}."
        )
        text = merge_sections(old, text, section_names(), stamp)
    with open(path, "w") as f:
        f.write(text)
