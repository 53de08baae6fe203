"""The layers of the tree (docs/design.md, "Layout"): the runtime at the bottom, the two studies
(real models and the toy) on it, the products that combine them, and the commands on top. An import
may point down or sideways within its layer, never up; the zoo never imports the toy; nothing but a
command imports a command. The import graph is the one the cycle test reads (every import statement,
lazy ones and ``if TYPE_CHECKING:`` ones included)."""

from __future__ import annotations

from pathlib import Path

import pytest

from demos._cli.commands import MODULES
from tests.runtime.test_imports import _modules, import_graph
from tests.support.paths import REPO
from tests.support.sources import parsed

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("runtime", ("dbo", "workspace")),
    (
        "shared",
        (
            "demos",
            "demos._guard",
            "demos._cli",
            "demos.errors",
            "demos.engine_times",
            "demos.tokens",
            "demos.vocabulary",
        ),
    ),
    ("zoo", ("demos.zoo",)),
    ("fits", ("demos.fits",)),
    ("toy", ("demos.toy", "demos.ranks")),
    ("products", ("demos.prediction", "demos.fidelity", "demos.failures", "demos.bench", "demos.serving")),
    (
        "commands",
        tuple(MODULES)
        + (
            "demos.bench.__main__",
            "demos.serving.__main__",
            "demos._overlap_flags",
            "demos._zoo_overlap",
            "demos._gpu_check_plan",
            "demos._gpu_check_verdicts",
            "demos._validate_flags",
            "demos._cli.model_flags",
            "demos._cli.values",
        ),
    ),
)
"""Each layer and the module prefixes it holds (the longest matching prefix decides): the model flags
(``demos._cli.model_flags``) and the typed values (``demos._cli.values``) are the command line's, not
shared with the library, which calls ``demos.zoo.loading``; the bench's command line is its ``__main__``,
the rest of ``demos.bench`` a product."""

MAY_IMPORT: dict[str, set[str]] = {
    "runtime": {"runtime"},
    "shared": {"shared"},
    "zoo": {"runtime", "shared", "zoo"},
    # the fitting writes the zoo's data files; the zoo never imports it (it reads the files)
    "fits": {"runtime", "shared", "zoo", "fits"},
    # the toy prices its host with the H200 host's measured costs (demos.zoo.hardware), nothing else of the zoo
    "toy": {"runtime", "shared", "toy", "zoo:demos.zoo.hardware"},
    # the checks may use the fitting (its row-work formulas, its published tables); the fitting imports no check
    "products": {"runtime", "shared", "zoo", "fits", "toy", "products"},
    "commands": {"runtime", "shared", "zoo", "fits", "toy", "products", "commands"},
}
"""What a module of each layer may import: a layer's name, or ``layer:prefix`` for part of one."""


def layer_of(module: str) -> str:
    best = max(
        ((prefix, name) for name, prefixes in LAYERS for prefix in prefixes if _under(module, prefix)),
        key=lambda x: len(x[0]),
        default=None,
    )
    if best is None:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS (and to docs/design.md)")
    return best[1]


def _under(module: str, prefix: str) -> bool:
    if prefix == "demos":  # the package itself, not everything under it
        return module == "demos"
    return module == prefix or module.startswith(prefix + ".")


def allowed(importer: str, imported: str) -> bool:
    have = MAY_IMPORT[layer_of(importer)]
    target = layer_of(imported)
    return target in have or any(
        rule.startswith(target + ":") and _under(imported, rule.partition(":")[2]) for rule in have
    )


def test_every_module_is_in_a_layer():
    for mod in _modules():
        layer_of(mod)


def test_imports_point_down_or_sideways():
    graph = import_graph(_modules())
    bad = sorted(
        f"{m} ({layer_of(m)}) imports {t} ({layer_of(t)})" for m, ts in graph.items() for t in ts if not allowed(m, t)
    )
    assert not bad, "imports against the layers (docs/design.md, 'Layout'):\n" + "\n".join(bad)


def test_no_library_module_imports_a_command():
    graph = import_graph(_modules())
    commands = {m for m in _modules() if layer_of(m) == "commands"}
    bad = sorted(f"{m} imports {t}" for m, ts in graph.items() if m not in commands for t in ts if t in commands)
    assert not bad, bad


SEAMS = {
    ("demos.serving", "demos.prediction"): {"demos.prediction.engines"},
    ("demos.prediction", "demos.serving"): {"demos.serving.api", "demos.serving.workloads"},
}
"""Two products that import each other, and the only modules each may import of the other (docs/design.md,
"Packages"): a serving run writes the predictor's engine lines, and ``predict(workload=)`` runs a serving
run. Both through ``demos.prediction.workload`` alone on the predictor's side (``SEAM_IMPORTERS``)."""
SEAM_IMPORTERS = {("demos.prediction", "demos.serving"): {"demos.prediction.workload"}}


def seam_crossings(graph: dict[str, set[str]]) -> list[str]:
    """The imports between the two packages of a ``SEAMS`` pair beyond what it allows."""
    out = []
    for (a, b), allowed_targets in SEAMS.items():
        importers = SEAM_IMPORTERS.get((a, b))
        for m, ts in graph.items():
            if not _under(m, a) or layer_of(m) == "commands":
                continue
            for t in ts:
                if _under(t, b) and (t not in allowed_targets or (importers is not None and m not in importers)):
                    out.append(f"{m} imports {t}")
    return sorted(out)


def test_prediction_and_serving_meet_at_one_seam():
    bad = seam_crossings(import_graph(_modules()))
    assert not bad, bad


def test_a_crossing_beside_the_seam_is_caught():
    graph = {
        "demos.serving.run": {"demos.prediction.answer"},
        "demos.prediction.api": {"demos.serving.api"},
        "demos.prediction.workload": {"demos.serving.api", "demos.serving.run"},
        "demos.serving.api": {"demos.prediction.engines"},
    }
    assert seam_crossings(graph) == [
        "demos.prediction.api imports demos.serving.api",
        "demos.prediction.workload imports demos.serving.run",
        "demos.serving.run imports demos.prediction.answer",
    ]


@pytest.mark.parametrize(
    "importer, imported, ok",
    [
        ("demos.zoo.costs", "demos.toy.results", False),  # the zoo never reads the toy
        ("demos.toy.profiles", "demos.zoo.hardware.hosts", True),
        ("demos.toy.model", "demos.zoo.costs", False),  # only the zoo's hardware
        ("dbo.costs", "demos.zoo.hardware", False),
        ("demos.prediction.sweep", "demos.predict", False),
        ("demos.predict", "demos.prediction.sweep", True),
        ("demos.errors", "demos.toy.config", False),
        ("demos.zoo.kernel_times", "demos.fits.rooflines", False),  # the simulator does not import the fits
        ("demos.zoo.attention_module", "demos.fits.module", False),
        ("demos.fits.rooflines", "demos.fidelity.kernels", False),  # the fitting imports no check
        ("demos.fidelity.kernels", "demos.fits.module", True),  # a check may use the fitting
        ("demos.fits.rooflines", "demos.zoo.work", True),  # the fit counts work with the predictor's formulas
        ("demos.prediction.api", "demos._cli.model_flags", False),  # the flags are the command line's
        ("demos.prediction.api", "demos.zoo.loading", True),
        ("demos._guard", "demos._cli.model_flags", False),  # the shared helpers stay below the zoo
        ("demos.bench._suite", "demos.bench.__main__", False),  # the bench's library under its command line
    ],
)
def test_the_rules_themselves(importer, imported, ok):
    """The rules catch what they are for (a planted import of each kind is refused)."""
    assert allowed(importer, imported) is ok


def _private_part(module: str) -> str | None:
    """The package whose private part ``module`` is (``dbo.costs._fit`` -> ``dbo.costs``), else None."""
    parts = module.split(".")
    for i, p in enumerate(parts):
        if p.startswith("_") and not p.startswith("__"):
            return ".".join(parts[:i])
    return None


SHARED_PRIVATE = {"dbo._sites": ("workspace",)}
"""Private parts another package may import, by design (docs/design.md, "Packages"): the stack-frame
walker that names the user's file:line, shared by the runtime and the workspace's messages."""


def private_cross_imports(graph: dict[str, set[str]], shared: dict[str, tuple[str, ...]] = SHARED_PRIVATE) -> list[str]:
    """Imports of another package's private part (a module or package named ``_x``): only the
    package's own modules may import its parts, and the packages ``shared`` names for a part;
    everyone else goes through its ``__init__``."""
    out = []
    for m, ts in graph.items():
        for t in ts:
            owner = _private_part(t)
            if owner is None or any(m == p or m.startswith(p + ".") for p in (owner, *shared.get(t, ()))):
                continue
            out.append(f"{m} imports {t}")
    return sorted(out)


def test_no_module_imports_another_packages_private_part():
    bad = private_cross_imports(import_graph(_modules()))
    assert not bad, bad


def test_no_module_imports_a_private_name_of_another_module():
    """``from x import _name`` across modules: a private name is its module's own."""
    import ast

    bad = []
    for mod, path in _modules().items():
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                for a in node.names:
                    if a.name.startswith("_") and not a.name.startswith("__"):
                        bad.append(f"{mod}: from {node.module} import {a.name}")
    assert not bad, bad


def test_a_private_cross_import_is_caught():
    graph = {
        "demos.toy.model": {"dbo.costs._fit"},
        "dbo.costs": {"dbo.costs._fit"},
        "demos._cli": {"demos._guard"},
    }
    assert private_cross_imports(graph) == ["demos.toy.model imports dbo.costs._fit"]
    shared = {"workspace.manager": {"dbo._sites"}, "demos.toy.model": {"dbo._sites"}}
    assert private_cross_imports(shared) == ["demos.toy.model imports dbo._sites"]


FLAG_PARSING = {"demos._cli"}
"""Outside the commands layer, the one module that may import argparse: the commands' shared
``OneLineParser``."""


def modules_importing(name: str, mods: dict) -> set[str]:
    """The modules of ``mods`` (module -> path) with an ``import name`` or ``from name import ...``."""
    import ast

    out = set()
    for mod, path in mods.items():
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.Import) and any(a.name == name for a in node.names):
                out.add(mod)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == name:
                out.add(mod)
    return out


def test_only_the_commands_parse_flags():
    """A flag belongs to a command line: a library module with argparse would parse or name flags
    (docs/design.md, "Packages")."""
    bad = sorted(m for m in modules_importing("argparse", _modules()) if layer_of(m) != "commands")
    assert [m for m in bad if m not in FLAG_PARSING] == [], bad


def test_a_library_module_with_argparse_is_caught(tmp_path):
    (tmp_path / "loading.py").write_text("from __future__ import annotations\n\nimport argparse\n")
    (tmp_path / "costs.py").write_text("from argparse import ArgumentTypeError\n")
    (tmp_path / "other.py").write_text("import json  # argparse in a comment\n")
    mods = {f"demos.zoo.{p.stem}": p for p in tmp_path.glob("*.py")}
    assert modules_importing("argparse", mods) == {"demos.zoo.loading", "demos.zoo.costs"}


# --- module size (issue 43) -------------------------------------------------------------------------------
# No module over MAX_LINES lines, and none kept under it by a trick: a module near the limit may not hold a
# formatter escape (``# fmt: skip`` or ``# fmt: off``) that keeps lines joined the formatter would split.

MAX_LINES = 400
NEAR_LIMIT = 390
"""Over this many lines, a module may hold no ``# fmt: skip`` / ``# fmt: off``."""

TOO_LONG_FOR_NOW: frozenset[str] = frozenset()
"""The modules still over ``MAX_LINES``, each to be split: the list only shrinks (an entry back under the limit
fails too, until it is taken off)."""

FORMATTER_ESCAPES = ("# fmt: skip", "# fmt: off")


def line_count(text: str) -> int:
    """Lines as ``wc -l`` counts them, and a last line without its newline."""
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


def size_problems(
    paths: dict[str, Path], allowed: set[str] | frozenset[str] = frozenset(TOO_LONG_FOR_NOW)
) -> list[str]:
    """What breaks the size rule among ``paths`` (repository-relative path -> file): a module over
    ``MAX_LINES`` not in ``allowed``, an entry of ``allowed`` no longer over it (or gone), and a module over
    ``NEAR_LIMIT`` lines with a formatter escape."""
    out = []
    for rel, path in sorted(paths.items()):
        text = path.read_text(encoding="utf-8")
        n = line_count(text)
        if n > MAX_LINES and rel not in allowed:
            out.append(f"{rel}: {n} lines, over {MAX_LINES}: split it into modules of one idea each")
        if n > NEAR_LIMIT and any(e in text for e in FORMATTER_ESCAPES):
            out.append(f"{rel}: {n} lines with a formatter escape ({' or '.join(FORMATTER_ESCAPES)})")
    for rel in sorted(allowed):
        if rel not in paths or line_count(paths[rel].read_text(encoding="utf-8")) <= MAX_LINES:
            out.append(f"{rel} is not over {MAX_LINES} lines any more: take it off TOO_LONG_FOR_NOW")
    return out


def test_no_module_is_over_the_line_limit():
    """Every module of demos/, dbo/ and workspace/ is at most ``MAX_LINES`` lines (but ``TOO_LONG_FOR_NOW``),
    and none near it holds a formatter escape (docs/design.md, "Layout")."""
    paths = {p.relative_to(REPO).as_posix(): p for p in _modules().values()}
    bad = size_problems(paths)
    assert not bad, "\n".join(bad)


def test_a_module_over_the_limit_is_caught(tmp_path):
    def module(name: str, lines: int, last: str = "x = 0") -> str:
        (tmp_path / name).write_text("\n".join([f"# {i}" for i in range(lines - 1)] + [last]) + "\n")
        return name

    paths = {
        n: tmp_path / n
        for n in (
            module("at_limit.py", 400),
            module("over.py", 401),
            module("escaped.py", 391, "x = (1,)  # fmt: skip"),
            module("escaped_block.py", 395, "# fmt: off"),
            module("small_escaped.py", 390, "x = (1,)  # fmt: skip"),
            module("listed.py", 500),
            module("listed_short.py", 10),
        )
    }
    no_newline = tmp_path / "no_newline.py"
    no_newline.write_text("\n".join(["x = 0"] * 401))
    paths["no_newline.py"] = no_newline
    assert size_problems(paths, {"listed.py", "listed_short.py", "gone.py"}) == [
        "escaped.py: 391 lines with a formatter escape (# fmt: skip or # fmt: off)",
        "escaped_block.py: 395 lines with a formatter escape (# fmt: skip or # fmt: off)",
        "no_newline.py: 401 lines, over 400: split it into modules of one idea each",
        "over.py: 401 lines, over 400: split it into modules of one idea each",
        "gone.py is not over 400 lines any more: take it off TOO_LONG_FOR_NOW",
        "listed_short.py is not over 400 lines any more: take it off TOO_LONG_FOR_NOW",
    ]
