"""Memory-aware advice: DBO is recommended only where it both pays and fits, a cluster the model fits
nowhere is one line before any run, and a plot that cannot be drawn is refused before the sweep."""

from __future__ import annotations

import importlib.util

import pytest

from demos.errors import ConfigError
from demos.predict import main
from demos.prediction import predict
from demos.prediction.answer import Crossover, memory_advice, recommend
from demos.prediction.engines import Deployment


def _rec(t: int, speedup: float, fits: bool, fits_without: bool = True) -> dict:
    return {"tokens": t, "speedup": speedup, "fits": fits, "fits_without_dbo": fits_without}


def test_dbo_that_pays_only_beyond_memory_is_not_recommended():
    recs = [_rec(32, 0.8, True), _rec(64, 0.95, True), _rec(128, 1.2, False), _rec(256, 1.3, False, False)]
    cross = Crossover(100.0, 128, 64, True)
    text, ok = memory_advice(recs, cross)
    assert not ok and "does not pay within memory" in text and "up to 64" in text
    d = Deployment("org/m", 16, 16, 8, 2, 1, "decode", "ll")
    r = recommend(d, {"graph": cross}, {"graph": "x"}, default_mode="graph", memory={"graph": (text, ok)})
    assert r.enable is False and r.threshold is None and r.reason == text and r.memory == text
    assert all("--enable-dbo" not in x for x in r.vllm.splitlines() if not x.startswith("#"))


def test_the_range_where_dbo_pays_and_fits_and_a_marginal_gain_are_named():
    recs = [_rec(32, 0.9, True), _rec(64, 1.02, True), _rec(128, 1.03, True), _rec(256, 1.4, False)]
    text, ok = memory_advice(recs, Crossover(50.0, 64, 32, True))
    assert ok and "pays and fits at 64-128" in text and "x1.03, marginal" in text
    assert "up to 256 tokens per GPU without DBO and up to 128 with DBO" in text
    both = [_rec(32, 1.2, True), _rec(64, 1.3, True)]
    text, ok = memory_advice(both, Crossover(32.0, 32, None, False))
    assert ok and "both steps fit at every swept count" in text and "marginal" not in text
    assert memory_advice([{**r, "fits": None} for r in both], Crossover(32.0, 32, None, False)) == ("", True)


def test_a_cluster_the_model_fits_nowhere_is_one_line_before_any_run():
    with pytest.raises(ConfigError, match=r"does not fit on 1 x 8 h100 at EP 8: .* GB usable") as e:
        predict("deepseek-v3", gpu="h100", nodes=1, ep=8, tokens=[8])
    assert "\n" not in str(e.value)


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is not None, reason="matplotlib is installed")
def test_a_plot_without_matplotlib_is_refused_before_the_sweep(tmp_path, capsys):
    out = tmp_path / "p.png"
    args = ["--model", "deepseek-v3", "--gpu", "h100", "--nodes", "9", "--ep", "72", "--tokens", "16"]
    assert main([*args, "--plot", str(out)]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and "matplotlib" in cap.err and len(cap.err.strip().splitlines()) == 1
    assert not out.exists()


@pytest.mark.slow
def test_qwen3_235b_on_16_h200_is_told_dbo_does_not_pay_within_memory():
    """The issue's case: DBO pays from ~115 tokens per GPU, but at context 4096 nothing above 64 fits."""
    pred = predict("qwen3-235b-a22b", gpu="h200", nodes=2, ep=16, context=4096, tokens=[32, 64, 128, 256])
    rec = pred.recommendation
    assert rec.enable is False and "does not pay within memory" in rec.memory
    assert "pays from 128" in rec.memory and "fits up to 64" in rec.memory
