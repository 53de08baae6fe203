"""Every module, name and path that docs/*.md, docs/results/*.md and README.md mention exists.

A dotted name (``dbo.races.enable``, ``workspace.sanitizer``, ``python -m demos.bench``,
``tests.support.race_mutants``) must be an importable module or an attribute of one. A path
(``dbo/streams/base.py``, ``workspace/``, ``tests/runtime/test_context.py::test_x``, ``scripts/...``)
must be an existing file or folder; a ``:line`` suffix is dropped, a glob must match at least one
file, and a ``::name`` suffix must name a function or class defined in that test file. Words that
only look like names are left alone: a page's file name (``workspace.md``), a placeholder
(``demos/<name>``, ``demos.<name>``), the tail of a URL or of another path. A test file named
without its folder (``test_noise.py::test_x``) must be the one file of that name under tests/.

And the map in docs/design.md ("Layout") lists every module of dbo, workspace and demos (a listed
package stands for its ``__init__.py``), and nothing the tree does not have.
"""

from __future__ import annotations

import ast
import functools
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# docs/results/ holds the dated measurement series moved out of the reference pages (fidelity.md).
PAGES = sorted((ROOT / "docs").glob("*.md")) + sorted((ROOT / "docs" / "results").glob("*.md")) + [ROOT / "README.md"]

_LEAD = r"(?<![\w./\-<])"  # not the tail of a longer word, path, URL or placeholder
DOTTED = re.compile(_LEAD + r"((?:dbo|workspace|demos|tests)(?:\.[A-Za-z_]\w*)+)(?![\w<])")
PATH = re.compile(_LEAD + r"((?:dbo|workspace|demos|tests|scripts)/[\w./*\-]*(?:::\w+)*)(?![\w<>])")
TEST_FILE = re.compile(_LEAD + r"(test_\w+\.py(?:::\w+)*)(?![\w<>])")  # a test file named alone
FILE_SUFFIXES = {"md", "py", "txt", "json", "png", "sh", "html", "toml"}


def dotted_names(text: str) -> list[str]:
    """The dotted names of ``text``, in order, a page's file name (``workspace.md``) left out."""
    return [n for n in DOTTED.findall(text) if n.rsplit(".", 1)[1] not in FILE_SUFFIXES]


def _trim(path: str) -> str:
    """``path`` without what follows it in the prose: a sentence's full stop, a bold mark (``**``)."""
    path = path.removesuffix("**")
    return path.rstrip(".") or path


def paths(text: str) -> list[str]:
    """The repository paths of ``text``, in order."""
    return [_trim(p) for p in PATH.findall(text)]


def bare_test_files(text: str) -> list[str]:
    """The test files ``text`` names without their folder (``test_noise.py::test_x``), in order."""
    return TEST_FILE.findall(text)


def test_the_extractors_find_names_and_skip_look_alikes():
    text = (
        "See `dbo.races.enable()`, run `python -m demos.bench --section host`, and\n"
        "`python -m tests.support.race_mutants`. The page workspace.md and [x](design.md); the\n"
        "placeholder demos.<name>; https://example.org/dbo/x.py and the folder demos/. Also\n"
        "`demos/failures/race_cases.py:77`, `tests/runtime/test_context.py::test_a[2-threads]`,\n"
        "`tests/workspace/test_workspace*.py`, dbo-sim, `dbo-stream-<id>-comm` and dbo/streams.\n"
        "- **Library code out of dbo/.** Bold. `test_noise.py::test_ten` and test_split.py."
    )
    assert dotted_names(text) == ["dbo.races.enable", "demos.bench", "tests.support.race_mutants"]
    assert paths(text) == [
        "demos/",
        "demos/failures/race_cases.py",
        "tests/runtime/test_context.py::test_a",
        "tests/workspace/test_workspace*.py",
        "dbo/streams",
        "dbo/",
    ]
    assert bare_test_files(text) == ["test_noise.py::test_ten", "test_split.py"]  # not the tails of the paths above


def resolve_dotted(name: str) -> str | None:
    """None when ``name`` is a module or an attribute of one, else why not."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        module = ".".join(parts[:i])
        try:
            obj = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name is not None and (module == e.name or module.startswith(e.name + ".")):
                continue  # not a module: try the shorter prefix, the rest as attributes
            raise
        for j, attr in enumerate(parts[i:], i):
            if not hasattr(obj, attr):
                return f"module {module!r} has no {'.'.join(parts[i : j + 1])!r}"
            parent, obj = obj, getattr(obj, attr)
            if j == i and not _lives_in(obj, parent, attr):
                return f"{attr!r} is only imported into {module!r}: name it where it lives ({obj.__module__})"
        return None
    return f"no module {parts[0]!r}"


def _lives_in(obj: object, module: object, attr: str) -> bool:
    """Whether ``module`` is where a reader should find ``obj``: where it is defined, or a module
    that exports it (``__all__``). A class or function a module merely imports is not."""
    home = getattr(obj, "__module__", None)
    if not isinstance(home, str) or not (callable(obj) or isinstance(obj, type)):
        return True  # a constant, a module, an instance: nothing says where it lives
    return home == module.__name__ or attr in getattr(module, "__all__", ())


@functools.cache
def _defined_names(path: Path) -> frozenset[str]:
    tree = ast.parse(path.read_text(), str(path))
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return frozenset(n.name for n in ast.walk(tree) if isinstance(n, kinds))


def resolve_path(ref: str) -> str | None:
    """None when ``ref`` names an existing file or folder (and its ``::names`` exist), else why not."""
    path, *names = ref.split("::")
    if any(c in path for c in "*?["):
        return None if list(ROOT.glob(path)) else "no file matches the glob"
    target = ROOT / path
    if not target.exists():
        return "no such file or folder"
    if path.endswith("/") and not target.is_dir():
        return "not a folder"
    missing = [n for n in names if n not in _defined_names(target)]
    return f"{path} defines no {', '.join(missing)}" if missing else None


def resolve_test_file(ref: str) -> str | None:
    """None when exactly one file under tests/ has ``ref``'s name (and defines its ``::names``)."""
    name, *names = ref.split("::")
    found = sorted((ROOT / "tests").rglob(name))
    if len(found) != 1:
        return f"{len(found)} files under tests/ have that name" + (": name its folder" if found else "")
    return resolve_path("::".join([found[0].relative_to(ROOT).as_posix(), *names]))


def test_the_resolvers_tell_real_names_from_planted_ones():
    assert resolve_dotted("dbo.races.enable") is None
    assert resolve_dotted("demos.bench") is None
    assert resolve_dotted("dbo.races.no_such_name") is not None
    assert resolve_dotted("dbo.no_such_module.x") is not None
    assert resolve_dotted("dbo.orchestrator.get_backend") is not None  # imported there, lives in dbo.streams
    assert resolve_path("dbo/streams/base.py") is None
    assert resolve_path("tests/runtime/") is None
    assert (
        resolve_path("tests/runtime/test_docs_names.py::test_the_resolvers_tell_real_names_from_planted_ones") is None
    )
    assert resolve_path("tests/runtime/test_docs_names.py::no_such_test") is not None
    assert resolve_path("dbo/no_such_file.py") is not None
    assert resolve_path("tests/no_such_folder/test_*.py") is not None
    assert resolve_test_file("test_docs_names.py::resolve_test_file") is None
    assert resolve_test_file("test_no_such_file.py") is not None


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_name_and_path_on_the_page_exists(page: Path):
    text = page.read_text()
    where = page.relative_to(ROOT).as_posix()
    bad = [f"{where}: {n}: {why}" for n in dict.fromkeys(dotted_names(text)) if (why := resolve_dotted(n))]
    bad += [f"{where}: {p}: {why}" for p in dict.fromkeys(paths(text)) if (why := resolve_path(p))]
    bad += [f"{where}: {t}: {why}" for t in dict.fromkeys(bare_test_files(text)) if (why := resolve_test_file(t))]
    assert not bad, f"{len(bad)} name(s) on {where} that the tree does not have:\n" + "\n".join(bad)


LAYOUT_PAGE = ROOT / "docs" / "design.md"
_ENTRY = re.compile(r"^( {0,19})(\S+/|\S+\.(?:py|sh))(?:\s|$)")  # a folder or a file in the map's first columns


def layout_entries(text: str) -> list[str]:
    """The paths the ``## Layout`` map of design.md lists: its entries (a folder ends in ``/``),
    nested by indentation; a line that starts with anything else continues the one above."""
    section = text.split("\n## Layout", 1)[1].split("\n## ", 1)[0]
    block = section.split("```", 2)[1]
    out: list[str] = []
    parents: list[tuple[int, str]] = []  # (indent, folder path) of the open folders
    for line in block.splitlines()[1:]:
        m = _ENTRY.match(line)
        if not m:
            continue
        indent, name = len(m.group(1)), m.group(2)
        while parents and parents[-1][0] >= indent:
            parents.pop()
        path = (parents[-1][1] if parents else "") + name
        out.append(path)
        if name.endswith("/"):
            parents.append((indent, path))
    return out


def test_the_layout_parser_nests_by_indentation():
    text = (
        "\n## Layout\n\n```\n"
        "pkg/          the package\n"
        "  a.py        a module that\n"
        "              wraps\n"
        "  sub/        a folder\n"
        "    b.py      b\n"
        "  c.py        c\n"
        "scripts/x.sh  x\n"
        "```\n\n## Next\n"
    )
    assert layout_entries(text) == ["pkg/", "pkg/a.py", "pkg/sub/", "pkg/sub/b.py", "pkg/c.py", "scripts/x.sh"]


def test_the_layout_map_lists_every_module_and_only_modules_that_exist():
    listed = layout_entries(LAYOUT_PAGE.read_text())
    missing_on_disk = [p for p in listed if not (ROOT / p).exists()]
    modules = sorted(
        p.relative_to(ROOT).as_posix() for pkg in ("dbo", "workspace", "demos") for p in (ROOT / pkg).rglob("*.py")
    )
    folders = {p for p in listed if p.endswith("/")}  # a listed package stands for its __init__.py
    unlisted = [
        m
        for m in modules
        if m not in set(listed) and not (m.endswith("/__init__.py") and m[: -len("__init__.py")] in folders)
    ]
    assert not missing_on_disk, "docs/design.md (Layout) lists what the tree does not have: " + ", ".join(
        missing_on_disk
    )
    assert not unlisted, "docs/design.md (Layout) does not list these modules: " + ", ".join(unlisted)
