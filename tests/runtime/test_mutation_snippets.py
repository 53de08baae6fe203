"""The hand-written mutation harnesses still apply: every snippet they replace occurs exactly once.

``tests/support/mutation_pass.py`` plants each mutant by replacing one exact snippet of
``dbo/orchestrator.py`` or ``dbo/_context.py``; it is not run in CI, and a snippet that a reformat
or a refactor changed only shows up there as "not applied". These checks read the same files and
fail at once, naming the mutant. ``tests/support/race_mutants.py`` matches no source text (it
intercepts call sites at run time), but it names files whose frames it skips or reads: those must
still exist.
"""

from __future__ import annotations

import functools
import os

import pytest

from tests.support import mutation_pass, race_mutants

MUTANT_IDS = [m[0] for m in mutation_pass.MUTANTS]


@functools.cache
def _source(path: str) -> str:
    return (mutation_pass.ROOT / path).read_text()


def test_mutant_ids_are_unique_and_each_mutant_changes_its_snippet() -> None:
    assert len(set(MUTANT_IDS)) == len(MUTANT_IDS), sorted(m for m in MUTANT_IDS if MUTANT_IDS.count(m) > 1)
    for mid, _path, _what, old, new in mutation_pass.MUTANTS:
        assert old and old != new, f"mutant {mid}: the replacement leaves the source as it is"


@pytest.mark.parametrize("mutant", mutation_pass.MUTANTS, ids=MUTANT_IDS)
def test_the_snippet_of_each_mutant_occurs_exactly_once(mutant: tuple) -> None:
    mid, path, what, old, _new = mutant
    count = _source(path).count(old)
    assert count == 1, (
        f"mutant {mid} ({what}) would not be applied: its snippet occurs {count} times in {path} "
        f"(it must occur exactly once); update the snippet in tests/support/mutation_pass.py:\n{old}"
    )


def test_the_race_harness_names_files_that_exist() -> None:
    for path in (*race_mutants.SKIPPED, race_mutants.MODEL):
        assert os.path.exists(path), f"tests/support/race_mutants.py names {path}, which no longer exists"
