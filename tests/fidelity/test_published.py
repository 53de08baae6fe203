"""``python -m demos.validate published``: every published quantity predicted, judged against its band."""

from __future__ import annotations

import json

import pytest

from demos.fidelity.published import CASES, Case, Quantity, compare, format_table
from demos.validate import main
from tests.support.paths import REPO


def test_every_case_names_its_source_and_sweeps_what_it_quotes():
    publishers = {"lmsys-dsv3-decode-h100-ep72": "lmsys", "atom-gptoss-decode-mi355x": "rocm/atom"}
    assert [c.name for c in CASES] == list(publishers)
    for case in CASES:
        assert publishers[case.name] in case.source.lower()
        for q in case.quantities:
            assert q.kind == "break_even" or q.tokens in case.args["tokens"]


@pytest.mark.slow
def test_the_lmsys_case_is_predicted_quantity_by_quantity(tmp_path):
    out = tmp_path / "p.json"
    assert main(["published", "--no-progress", "--json", str(out)]) == 0
    rows = [r for r in json.loads(out.read_text())["rows"] if r["case"] == "lmsys-dsv3-decode-h100-ep72"]
    assert [r["quantity"] for r in rows] == ["speedup @32", "break_even", "speedup @256", "tok_s_gpu @256"]
    for r in rows:
        assert {"case", "quantity", "predicted", "published", "source"} <= set(r)
        low, high = r["target"]
        assert r["within"] == (r["predicted"] is not None and low <= r["predicted"] <= high)
    assert rows[1]["published"] == [64.0, 128.0]


@pytest.mark.slow
def test_a_quantity_outside_its_band_is_reported_not_hidden():
    far = Case(
        name="planted",
        source="a planted case",
        args=dict(model="deepseek-v3", gpu="h100", nodes=9, ep=72, context=2000, mode="graph", tokens=[32]),
        quantities=(Quantity("speedup", 5.0, tokens=32, target=0.1),),
    )
    rows = compare([far])
    assert rows[0]["within"] is False and rows[0]["error"] < -0.5
    assert "NO" in format_table(rows) and "0 of 1 quantities within their targets" in format_table(rows)


@pytest.mark.long(20)
@pytest.mark.slow
def test_the_ablation_is_what_predict_md_quotes_and_none_is_the_model_without_the_mechanisms(tmp_path, capsys):
    """``--ablation``: a row per variant, "none" the prediction with every mechanism off; docs/predict.md
    quotes the printed table ("What overlapping costs"), line for line."""
    out = tmp_path / "a.json"
    assert main(["published", "--ablation", "--no-progress", "--json", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    ab = [r for r in json.loads(out.read_text())["ablation"] if r["case"] == "lmsys-dsv3-decode-h100-ep72"]
    labels = [r["mechanisms"] for r in ab]
    assert labels == ["all", "without ll_sm", "without tile", "without contention", "none"]
    assert ab[-1]["what_if"] == {"ll_sm": 0.0, "tile": 0.0, "contention": 0.0}
    assert ab[0]["quantities"] != ab[-1]["quantities"]  # the mechanisms move the answer
    page = (REPO / "docs" / "predict.md").read_text()
    block = page.split("`python -m demos.validate --published --ablation`):\n\n```text\n", 1)[1].split("```", 1)[0]
    quoted = [x for x in block.splitlines() if x.strip()]
    assert quoted and all(q in printed for q in quoted), [q for q in quoted if q not in printed]
