"""``python -m demos.validate deepep [--json PATH]``: DeepEP's published tables against the all-to-all
model, printed and written, with no runs and no calibration."""

from __future__ import annotations

import json

import pytest

from demos import validate as cli
from demos.fidelity import deepep


def test_deepep_prints_the_table_and_writes_the_records(tmp_path, capsys):
    out = tmp_path / "deepep.json"
    assert cli.main(["deepep", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "DeepEP on H800" in text and "max |error|" in text and f"json: {out}" in text
    records = json.loads(out.read_text())["deepep"]
    want = deepep.compare()
    assert len(records) == len(want) == 28
    for got, row in zip(records, want):
        assert {"kernel", "mode", "ep", "predicted", "published"} <= set(got)
        assert got == row  # the records as compare() gives them, through JSON
        line = f"{row['mode']:<12}{row['kernel']:<10}{row['ep']:>5}"
        assert line in text
    current = [r for r in records if r["source"] == deepep.SOURCE]
    assert len(current) == 20 and all(abs(r["predicted"] / r["published"] - 1) <= 0.15 for r in current)


def test_deepep_without_json_and_with_an_unwritable_path(tmp_path, capsys):
    assert cli.main(["deepep"]) == 0
    assert "json:" not in capsys.readouterr().out
    bad = tmp_path / "missing" / "x.json"
    assert cli.main(["deepep", "--json", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m demos.validate: error:") and err.count("\n") == 1


def test_deepep_takes_no_backend_it_would_not_use(capsys, monkeypatch):
    """It runs nothing, so no backend: ``--backend`` (ignored by ``--deepep`` before the checks became
    subcommands) is refused in one line, in both spellings, before the check runs."""
    monkeypatch.setattr(deepep, "compare", lambda *a, **k: pytest.fail("ran despite a flag it does not take"))
    for argv in (["deepep", "--backend", "cuda"], ["--deepep", "--backend", "cuda"]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert (
            err == "python -m demos.validate: error: deepep takes no --backend cuda "
            "(python -m demos.validate deepep --help lists its flags)\n"
        )


def test_the_old_spelling_prints_the_same_and_one_note(tmp_path, capsys):
    """``--deepep`` is an alias of ``deepep``: the same stdout and JSON bytes, and one more line on stderr
    naming the new spelling. The bug this catches: an alias that runs another check, drops ``--json`` or
    says nothing (or says more than one line)."""
    outs = {}
    for argv in (["deepep"], ["--deepep"]):
        path = tmp_path / f"{argv[0].strip('-')}-{len(argv[0])}.json"
        assert cli.main([*argv, "--json", str(path)]) == 0
        cap = capsys.readouterr()
        outs[argv[0]] = (cap.out.replace(str(path), "PATH"), path.read_bytes(), cap.err.replace(str(path), "PATH"))
    new, old = outs["deepep"], outs["--deepep"]
    assert old[:2] == new[:2]
    assert new[2] == "python -m demos.validate: wrote PATH (--json)\n"
    assert old[2] == new[2] + "python -m demos.validate: note: --deepep is now 'python -m demos.validate deepep'\n"
