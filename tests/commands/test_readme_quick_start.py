"""README.md starts with the quick start the developers' guide fixes: exactly two commands in one block
(install and run the main job; run the tests), each said what it downloads, and the CPU-only torch route
given before the command that would pull the 3 GB CUDA build."""

from __future__ import annotations

import re

from tests.support.paths import REPO

INSTALL = "python -m pip install -e '.[dev]' && python -m demos.overlap"
CPU_TORCH = "python -m pip install torch --index-url https://download.pytorch.org/whl/cpu"


def _quick_start(text: str) -> str:
    m = re.search(r"^## Quick start\n(.*?)(?=^## )", text, flags=re.S | re.M)
    assert m, "README.md has no '## Quick start' section"
    return m.group(1)


def quick_start_problems(text: str) -> list[str]:
    """What is wrong with a README's quick start (empty: nothing)."""
    section = _quick_start(text)
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    problems = []
    if not blocks or blocks[0].splitlines() != [INSTALL, "python -m pytest"]:
        problems.append(f"the first block is not exactly the two commands: {blocks[:1]}")
    if CPU_TORCH not in section or section.index(CPU_TORCH) > section.index("```bash"):
        problems.append("the CPU-only torch route does not come before the install command")
    for said in ("190 MB", "3 GB", "pytest-timeout"):
        if said not in section:
            problems.append(f"the quick start does not say {said!r} of what it downloads")
    return problems


def test_the_readme_quick_start_is_two_commands_with_the_cpu_route_first():
    text = (REPO / "README.md").read_text()
    assert text.startswith("# dbo-sim\n\n## Quick start\n")
    assert quick_start_problems(text) == []


def test_the_check_catches_the_cpu_route_after_the_install_command():
    """The order the issue found: the CUDA install first, the sentence on avoiding it after."""
    text = (REPO / "README.md").read_text()
    section = _quick_start(text)
    route = next(line for line in section.splitlines() if CPU_TORCH in line)
    moved = text.replace(route + "\n", "", 1).replace("python -m pytest\n```\n", f"python -m pytest\n```\n{route}\n", 1)
    assert "the CPU-only torch route does not come before the install command" in quick_start_problems(moved)
    three = text.replace("python -m pytest\n```", "python -m pytest\npython -m demos.predict\n```", 1)
    assert any("exactly the two commands" in p for p in quick_start_problems(three))
