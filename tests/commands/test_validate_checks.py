"""``python -m demos.validate CHECK``: one subcommand per check, each with only its own flags, and the old
flag spellings as aliases that run the same library call, print the same and add one note line.

The checks' real outputs are compared in their own tests (tests/fidelity: deepep, published, kernels and
silicon); here the library calls are stubbed, so that every alias is checked in milliseconds."""

from __future__ import annotations

import json

import pytest

from demos import validate as cli
from demos.fidelity import checks

PROG = "python -m demos.validate"


@pytest.mark.parametrize(
    "argv, args, note",
    [
        ([], ["grid"], None),
        (["--quick", "--profile", "h200"], ["grid", "--quick", "--profile", "h200"], None),  # a value, not a check
        (["grid", "--quick"], ["grid", "--quick"], None),
        (["kernels"], ["kernels"], None),
        (["--help"], ["--help"], None),
        (["--kernels", "--json", "k.json"], ["kernels", "--json", "k.json"], "--kernels is now '{p} kernels'"),
        (["--h200", "--profile", "cpu"], ["h200", "--profile", "cpu"], "--h200 is now '{p} h200'"),
        (["--no-progress", "--deepep"], ["deepep", "--no-progress"], "--deepep is now '{p} deepep'"),
        (["--silicon"], ["silicon"], "--silicon is now '{p} silicon'"),
        (
            ["--silicon", "--silicon-kernels", "measured"],
            ["silicon", "--kernels", "measured"],
            "--silicon --silicon-kernels measured is now '{p} silicon --kernels measured'",
        ),
        (
            ["--silicon-kernels=measured", "--silicon"],
            ["silicon", "--kernels=measured"],
            "--silicon --silicon-kernels=measured is now '{p} silicon --kernels=measured'",
        ),
        (["--published"], ["published"], "--published is now '{p} published'"),
        (
            ["--published", "--ablation"],
            ["published", "--ablation"],
            "--published --ablation is now '{p} published --ablation'",
        ),
        (["--silicon-kernels", "measured"], ["grid", "--silicon-kernels", "measured"], None),  # refused by grid
    ],
)
def test_the_old_spelling_maps_to_the_new_one(argv, args, note):
    s = cli.new_spelling(argv)
    assert s.args == args
    assert s.note == (None if note is None else f"{PROG}: note: " + note.format(p=PROG))


def test_two_old_check_flags_are_refused_before_parsing(capsys):
    assert cli.main(["--deepep", "--h200", "--kernels"]) == 2
    assert (
        capsys.readouterr().err
        == f"{PROG}: error: --deepep and --h200 and --kernels are separate checks: pass one of them\n"
    )


class _Result:
    def __init__(self, name: str):
        self.name = name

    def text(self) -> str:
        return f"{self.name}: a table\nof two lines"

    def to_dict(self) -> dict:
        return {"check": self.name, "values": [1.5, None]}


@pytest.fixture
def stubbed(monkeypatch):
    """Each check's library call replaced by one that records its arguments (the progress line left out,
    a profile by its name) and returns a fixed result: the calls, in order."""
    calls = []

    def stub(name):
        def call(*args, **kw):
            kw.pop("progress", None)
            args = [getattr(a, "name", a) for a in args if not isinstance(a, cli.ProgressLine)]
            calls.append((name, args, kw))
            return _Result(name)

        return call

    for name in ("h200_check", "deepep_check", "kernels_check", "silicon_check", "published_check"):
        monkeypatch.setattr(checks, name, stub(name))
    return calls


ALIASES = [
    (["--h200"], ["h200"], ("h200_check", [], {})),
    (["--h200", "--profile", "cpu"], ["h200", "--profile", "cpu"], ("h200_check", ["cpu", "--profile cpu"], {})),
    (["--deepep"], ["deepep"], ("deepep_check", [], {})),
    (
        ["--kernels", "--no-progress"],
        ["kernels", "--no-progress"],
        ("kernels_check", [], {"cross_validation": False, "family": False}),
    ),
    (["--silicon"], ["silicon"], ("silicon_check", ["roofline", "auto"], {})),
    (
        ["--silicon", "--silicon-kernels", "measured", "--no-progress"],
        ["silicon", "--kernels", "measured", "--no-progress"],
        ("silicon_check", ["measured", "auto"], {}),
    ),
    (["--published"], ["published"], ("published_check", [], {"ablation": False})),
    (["--published", "--ablation"], ["published", "--ablation"], ("published_check", [], {"ablation": True})),
]


@pytest.mark.parametrize("old, new, call", ALIASES, ids=[" ".join(o) for o, _, _ in ALIASES])
def test_an_old_spelling_is_the_same_check_with_one_note(old, new, call, stubbed, tmp_path, capsys):
    """The same library call with the same arguments, the same stdout and JSON bytes, and on stderr one
    more line: the note naming the new spelling. The bug this catches: an alias that drops a flag
    (``--silicon-kernels``, ``--ablation``, ``--profile``), runs another check, or says nothing."""
    seen = {}
    for argv in (new, old):
        path = tmp_path / ("old.json" if argv is old else "new.json")
        assert cli.main([*argv, "--json", str(path)]) == 0
        cap = capsys.readouterr()
        seen[argv is old] = (cap.out.replace(str(path), "P"), path.read_bytes(), cap.err.replace(str(path), "P"))
    assert stubbed == [call, call]
    assert seen[True][:2] == seen[False][:2]
    assert seen[False][0] == f"{call[0]}: a table\nof two lines\njson: P\n"
    assert json.loads(seen[False][1]) == {"check": call[0], "values": [1.5, None]}
    note = cli.new_spelling(old).note  # its words: test_the_old_spelling_maps_to_the_new_one
    assert note is not None and note.startswith(f"{PROG}: note: {old[0]}") and f"is now '{PROG} {new[0]}" in note
    assert seen[False][2] == f"{PROG}: wrote P (--json)\n"
    assert seen[True][2] == seen[False][2] + note + "\n"


def test_a_refused_old_spelling_is_one_line_without_the_note(stubbed, tmp_path, capsys):
    assert cli.main(["--kernels", "--json", str(tmp_path / "no" / "k.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not exist" in err and "note" not in err
    assert stubbed == []


FLAGS = {
    "grid": {
        "--backend",
        "--profile",
        "--quick",
        "--sizes",
        "--ratios",
        "--schedules",
        "--steps",
        "--min-time",
        "--repeats",
        "--no-held-out",
        "--no-rerun",
        "--breakdown",
        "--json",
        "--no-progress",
    },
    "h200": {"--profile", "--json"},
    "deepep": {"--json"},
    "kernels": {"--json", "--no-progress", "--cross-validation", "--family"},
    "silicon": {"--kernels", "--imbalance", "--json", "--no-progress"},
    "serving": {"--quick", "--full", "--peer", "--imbalance", "--json", "--no-progress"},
    "published": {"--ablation", "--json", "--no-progress"},
}
"""The flags each check takes: only those that apply to it (``--help`` aside)."""


def test_each_check_takes_only_its_own_flags():
    parser = cli.build_parser()
    (sub,) = [a for a in parser._actions if a.dest == "check"]
    assert tuple(sub.choices) == cli.CHECKS
    for check, p in sub.choices.items():
        flags = {s for a in p._actions for s in a.option_strings} - {"-h", "--help"}
        assert flags == FLAGS[check], check


def test_the_help_names_every_check_and_the_default(capsys):
    assert cli.main(["--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "grid is the default check" in text and f"{PROG} [grid flags] runs it" in text
    for check in cli.CHECKS:
        assert f" {check} " in text
    assert " grid (the default) run a grid" in text  # its line in the list of checks
