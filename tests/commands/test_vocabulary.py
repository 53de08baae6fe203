"""The vocabulary is typed (``demos.vocabulary``): no module compares a phase, schedule, mode, overlap
strategy or kernel source with its spelled string; each is a member of its enumeration, compared as one
(``w.schedule is Schedule.LL``). A typo in a spelled string compares false silently; a misspelled member
fails where it is written.

The check reads every module of ``demos`` with ``ast``: a comparison (``==``, ``!=``, ``in``, ``not in``,
``is``) one of whose sides is a string constant, or a tuple, list or set of them, that spells a word of
the vocabulary, anywhere but in ``demos/vocabulary.py``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from demos.vocabulary import KernelSource, Mode, Overlap, Phase, Schedule, Stage, Word
from tests.support.paths import REPO

WORDS = {m.value for kind in (Phase, Schedule, Mode, Overlap, KernelSource) for m in kind}
"""The spelled words no comparison may use outside the enumerations' module."""


def _strings(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for e in node.elts for s in _strings(e)]
    return []


def spelled_comparisons(source: str, filename: str = "<src>") -> list[tuple[int, str]]:
    """(line, word) of every comparison with a spelled word of the vocabulary in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                found += [(node.lineno, s) for s in _strings(side) if s in WORDS]
    return found


def test_the_check_finds_a_planted_comparison():
    planted = 'if w.schedule == "ll":\n    pass\nok = x in ("graph", "eager")\nfine = y == "lll"\n'
    assert spelled_comparisons(planted) == [(1, "ll"), (3, "graph"), (3, "eager")]


def test_no_module_compares_a_spelled_word_of_the_vocabulary():
    bad = []
    for path in sorted((REPO / "demos").rglob("*.py")):
        if path == REPO / "demos" / "vocabulary.py":
            continue
        rel = path.relative_to(REPO).as_posix()
        bad += [f"{rel}:{line}: {word!r}" for line, word in spelled_comparisons(path.read_text(), rel)]
    assert not bad, "compare members of demos.vocabulary, not their spelled strings:\n" + "\n".join(bad)


@pytest.mark.parametrize("kind", [Phase, Schedule, Mode, Overlap, KernelSource, Stage])
def test_a_member_behaves_as_its_value_wherever_a_string_did(kind):
    import json

    for m in kind:
        assert m == m.value and hash(m) == hash(m.value) and {m.value: 1}[m] == 1
        assert f"{m}" == str(m) == m.value and f"{m:>9}" == f"{m.value:>9}"
        assert json.dumps({m: m}) == json.dumps({m.value: m.value})
        assert kind(m.value) is m and kind.parse(m.value, "x") is m
    with pytest.raises(ValueError, match="^schedule must be one of ll, ht, got 'LL'$"):
        Schedule.parse("LL", "schedule")


def test_every_word_is_a_member():
    assert issubclass(Phase, Word) and Path(__file__).name == "test_vocabulary.py"
