"""Every ```python block of docs/python.md runs, in order, in one namespace (as a reader would)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import workspace
from tests.support.timing import slack

PAGE = Path(__file__).resolve().parents[2] / "docs" / "python.md"
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)


def blocks(text: str) -> list[str]:
    return BLOCK.findall(text)


def test_the_extractor_finds_each_block_whole():
    text = "intro\n```python\na = 1\n\nb = 2\n```\n```bash\nno\n```\n```python\nc = 3\n```\n"
    assert blocks(text) == ["a = 1\n\nb = 2\n", "c = 3\n"]


@pytest.fixture
def clean_workspace():
    workspace.reset_workspace_manager()
    yield
    workspace.reset_workspace_manager()


@pytest.mark.slow  # a whole run (the fast tier leaves it out: docs/testing.md)
@pytest.mark.timeout(slack(60))
def test_every_python_block_of_docs_python_md_runs(clean_workspace):
    found = blocks(PAGE.read_text())
    assert len(found) >= 7, f"expected the page's 7+ python blocks, found {len(found)}"
    assert PAGE.read_text().count("```python") == len(found), "a ```python block the extractor missed"
    namespace: dict = {"__name__": "docs_python"}
    for i, code in enumerate(found, 1):
        try:
            exec(compile(code, f"docs/python.md block {i}", "exec"), namespace)
        except Exception as e:
            raise AssertionError(f"docs/python.md block {i} failed: {type(e).__name__}: {e}\n{code}") from e
