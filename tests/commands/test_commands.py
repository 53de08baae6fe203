"""The commands are listed once (``demos._cli.commands``): every entry in it runs, every ``python -m`` entry
point of the project is in it, and the pages that list the commands name exactly these (README.md's
command table, with each one's audience, and docs/design.md's layout)."""

from __future__ import annotations

import importlib.util
import re

import pytest

from demos._cli.commands import AUDIENCES, COMMANDS, MODULES
from tests.support.paths import REPO

_MENTION = re.compile(r"python -m (demos\.[a-z_]+)")


def _table_rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("|")]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.module)
def test_every_command_has_an_entry_point_and_a_page(command):
    spec = importlib.util.find_spec(command.module)
    assert spec is not None, command.module
    if spec.submodule_search_locations:  # a package: run by its __main__
        assert importlib.util.find_spec(command.module + ".__main__") is not None, command.module
    assert (REPO / command.doc).is_file(), command.doc
    assert command.answers and "\n" not in command.answers
    assert command.audience in AUDIENCES, command


def _entry_points() -> set[str]:
    """Every module of ``demos`` that runs as ``python -m``: a ``__main__.py`` (its package) or a module with
    an ``if __name__ == "__main__":`` block."""
    out = set()
    for path in (REPO / "demos").rglob("*.py"):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        if path.name == "__main__.py":
            out.add(module.removesuffix(".__main__"))
        elif re.search(r"^if __name__ == .__main__.:", path.read_text(encoding="utf-8"), re.M):
            out.add(module)
    return out


def test_every_entry_point_is_registered():
    """The registry is the whole list: a ``python -m`` entry point missing from it would escape the
    Ctrl-C guard, its test and the README's table."""
    assert _entry_points() == set(MODULES)


def test_the_readme_command_table_names_exactly_the_registry():
    rows = _table_rows((REPO / "README.md").read_text(encoding="utf-8"))
    named = [m for row in rows for m in _MENTION.findall(row)]
    assert sorted(set(named)) == sorted(MODULES), "README.md's command table and demos/_cli/commands.py differ"


def test_the_readme_command_table_says_what_the_registry_says():
    """Each command's row carries the registry's audience, one line and page, in the registry's order, so
    the table is the registry's."""
    rows = _table_rows((REPO / "README.md").read_text(encoding="utf-8"))
    assert [c.strip() for c in rows[0].strip("|").split("|")] == ["command", "for", "answers", "page"]
    by_module = {m: row for row in rows for m in _MENTION.findall(row)}
    assert list(by_module) == list(MODULES)
    for c in COMMANDS:
        cells = [cell.strip() for cell in by_module[c.module].strip("|").split("|")]
        assert cells[1] == c.audience and cells[2] == c.answers and f"({c.doc})" in cells[3], (c.module, cells)


def test_design_md_places_every_command():
    text = (REPO / "docs" / "design.md").read_text(encoding="utf-8")
    named = set(_MENTION.findall(text))
    assert set(MODULES) <= named, sorted(set(MODULES) - named)
    assert named <= set(MODULES), f"docs/design.md names commands the registry lacks: {sorted(named - set(MODULES))}"


def test_a_command_missing_from_the_registry_would_be_caught():
    """The README check fails on a planted extra row (the check is not vacuous)."""
    rows = _table_rows((REPO / "README.md").read_text(encoding="utf-8")) + ["| `python -m demos.nothing` | x |"]
    named = {m for row in rows for m in _MENTION.findall(row)}
    assert named != set(MODULES)
