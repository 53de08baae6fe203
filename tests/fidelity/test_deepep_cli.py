"""``python -m demos.validate --deepep [--json PATH]``: DeepEP's published tables against the all-to-all
model, printed and written, with no runs and no calibration."""

from __future__ import annotations

import json

from demos import validate as cli
from demos.fidelity import deepep


def test_deepep_prints_the_table_and_writes_the_records(tmp_path, capsys):
    out = tmp_path / "deepep.json"
    assert cli.main(["--deepep", "--json", str(out)]) == 0
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
    assert cli.main(["--deepep"]) == 0
    assert "json:" not in capsys.readouterr().out
    bad = tmp_path / "missing" / "x.json"
    assert cli.main(["--deepep", "--json", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m demos.validate: error:") and err.count("\n") == 1


def test_deepep_needs_no_gpu_even_with_the_cuda_backend(capsys):
    assert cli.main(["--deepep", "--backend", "cuda"]) == 0
    assert "DeepEP on H800" in capsys.readouterr().out
