"""docs/predict.md quotes the command's output: every quoted line must be what the command prints now,
so that no figure on the page goes stale (a planted change to a quoted figure fails here)."""

from __future__ import annotations

import re
import shlex

import pytest

from demos.predict import main
from tests.support.paths import REPO

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]  # recomputes what the page quotes (slow tier)

PAGE = REPO / "docs" / "predict.md"


README = REPO / "README.md"


def _examples(page=PAGE) -> list[tuple[list[str], list[str]]]:
    out = []
    for block in re.findall(r"```text\n(.*?)```", page.read_text(), flags=re.S):
        lines = block.splitlines()
        if lines and lines[0].startswith("$ python -m demos.predict "):
            out.append((shlex.split(lines[0])[4:], [x for x in lines[1:] if x.strip()]))
    return out


def test_the_page_has_its_five_examples_the_overlap_answer_and_the_workload():
    assert len(_examples()) == 7


@pytest.mark.parametrize(
    "args, quoted",
    _examples(),
    ids=[
        "decode-h100",
        "prefill-h100",
        "decode-gb200",
        "decode-mi355x",
        "decode-h200-efa",
        "overlap-h100",
        "workload-v2-lite",
    ],
)
def test_every_quoted_line_is_what_the_command_prints(args, quoted, capsys):
    if "--plot" in args:  # the page's plots are drawn with matplotlib, which the dev extra has not
        i = args.index("--plot")
        args = args[:i] + args[i + 2 :]
    assert main(args) == 0
    printed = set(capsys.readouterr().out.splitlines())
    missing = [q for q in quoted if q not in printed]
    assert not missing, missing


def test_the_readmes_excerpt_is_what_the_command_prints(capsys):
    """README.md quotes Example 1's opening lines and engine lines; they went stale once when only the page was
    regenerated."""
    (example,) = _examples(README)
    args, quoted = example
    assert main(args) == 0
    printed = set(capsys.readouterr().out.splitlines())
    missing = [q for q in quoted if q not in printed]
    assert not missing, missing


def test_the_plots_it_shows_exist():
    for name in re.findall(r"\]\((img/[^)]+)\)", PAGE.read_text()):
        assert (PAGE.parent / name).is_file(), name
