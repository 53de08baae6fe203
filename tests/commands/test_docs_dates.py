"""Reference pages say what holds now, without dates (issue 43): no ISO date (YYYY-MM-DD) on a page of
docs/ (the top level) or in README.md, outside a section whose heading says "Current status".

Dated measurement series live in docs/results/ and design history in docs/decisions/: both are dated
by nature and exempt, and a link to one of their pages (``results/2026-12-04-attention-module.md``) is
a path, not a date on the page. A reference page quotes the current conclusion and links the series.
"""

from __future__ import annotations

import re

import pytest

from tests.support.paths import REPO

PAGES = sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md"]

DATE = re.compile(r"(?<![\w-])(?:19|20)\d{2}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])(?![\w-])")
DATED_PAGE = re.compile(r"(?:results|decisions)/[\w.-]+\.md")  # a path to a dated page, not a date
HEADING = re.compile(r"(#{1,6})\s")
EXEMPT = "current status"


def dates(text: str) -> list[tuple[int, str]]:
    """(line number, date) of every ISO date in ``text`` outside a "Current status" section (its
    heading and everything under it until a heading of the same or a higher level)."""
    found: list[tuple[int, str]] = []
    fence = False
    exempt_level = 0  # the heading level of the "Current status" section we are in; 0: none
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            fence = not fence
        heading = None if fence else HEADING.match(line)
        if heading:
            level = len(heading.group(1))
            if exempt_level and level <= exempt_level:
                exempt_level = 0
            if not exempt_level and EXEMPT in line.lower():
                exempt_level = level
        if exempt_level:
            continue
        found += [(number, d) for d in DATE.findall(DATED_PAGE.sub("", line))]
    return found


def test_the_pages_are_found():
    names = {p.name for p in PAGES}
    assert {"README.md", "design.md", "fidelity.md", "kernels.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_a_reference_page_carries_no_date(page):
    where = page.relative_to(REPO).as_posix()
    found = dates(page.read_text(encoding="utf-8"))
    assert not found, (
        f"{where} carries dates outside a 'Current status' section (move a dated series to docs/results/, "
        "design history to docs/decisions/, and state the conclusion without its date): "
        + ", ".join(f"{where}:{n}: {d}" for n, d in found)
    )


def test_the_check_finds_a_planted_date():
    """Not vacuous: a date in prose, a table or a code block is found with its line; one under "Current
    status" (and its subsections) is not, nor a link to a dated results page; the exemption ends at the
    next heading of the same level."""
    text = "\n".join(
        [
            "# Page",  # 1
            "Measured on 2026-12-01 with the quick grid.",  # 2
            "| run | 2026-12-02 |",  # 3
            "See [the series](results/2026-12-02-held-out-points.md) and decisions/0001-x.md.",  # 4
            "## Current status",  # 5
            "From the series of 2026-12-02:",  # 6
            "### Its details",  # 7
            "still 2026-12-03 here",  # 8
            "## Next",  # 9
            "```",  # 10
            "# not a heading 2026-12-04",  # 11
            "```",  # 12
            "v1.2026-12-05x and 12026-12-06 are not dates; 2026-13-01 is not either",  # 13
        ]
    )
    assert dates(text) == [(2, "2026-12-01"), (3, "2026-12-02"), (11, "2026-12-04")]
