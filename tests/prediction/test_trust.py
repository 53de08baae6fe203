"""The report's ``checked`` line: the recorded validation figures (demos.prediction.trust) are what the
validate commands print now, and each prediction quotes those of its GPU, family and phase."""

from __future__ import annotations

import pytest

from demos.fidelity.published import CASES, compare
from demos.prediction import predict
from demos.prediction.trust import CHECKED_ON, PUBLISHED, SILICON, checked_line
from demos.zoo import measured
from demos.zoo.hardware import get_gpu


def test_the_line_quotes_the_gpu_its_family_or_says_not_checked():
    own = checked_line("h200", "hopper", "decode")
    assert "h200 median -7.3%, max -23.1% over 18 rows" in own and "its family's" not in own
    assert own.count("(validate silicon)") == 1
    assert "4 of 4 quantities within target" in own and CHECKED_ON in own
    kin = checked_line("h20", "hopper", "decode")
    assert "no measured steps on h20: its family's" in kin and "h200 median" in kin
    blackwell = checked_line("gb200", "blackwell", "decode")
    assert "gb200 median -0.8%, max +67.6%" in blackwell and "not checked against published decode" in blackwell
    assert "prefill steps: not checked" in checked_line("h100", "hopper", "prefill")


def test_every_recorded_gpu_and_case_exists():
    assert all(get_gpu(g).family == fam for g, (fam, *_) in SILICON.items())
    names = {c.name: c for c in CASES}
    for case, (fam, phase, _, n) in PUBLISHED.items():
        assert get_gpu(names[case].args["gpu"]).family == fam and len(names[case].quantities) == n


def test_a_prediction_ends_with_its_checked_line():
    pred = predict("deepseek-v3", gpu="h100", nodes=9, ep=72, tokens=[64], what_if={"link": 2})
    assert pred.setup.checked == checked_line("h100", "hopper", "decode")  # a what-if GPU is still an h100
    assert pred.text().splitlines()[-1] == "checked: " + pred.setup.checked
    assert pred.to_dict()["checked"] == pred.setup.checked


@pytest.mark.slow
def test_the_published_figures_are_what_validate_prints():
    rows = compare()
    for case, (_, _, within, n) in PUBLISHED.items():
        mine = [r for r in rows if r["case"] == case]
        assert len(mine) == n and sum(r["within"] for r in mine) == within


@pytest.mark.slow
@pytest.mark.measured
@pytest.mark.skipif(not measured.available(), reason="needs the measured extra")
def test_the_silicon_figures_are_what_validate_prints(validate_json):
    got = {s["gpu"]: s for s in validate_json("silicon")["summary"] if s["phase"] == "decode"}
    for gpu, (_, n, median, worst) in SILICON.items():
        s = got[gpu]
        assert (s["rows"], round(s["median_error"], 3), round(s["max_error"], 3)) == (n, median, worst), gpu
