"""``python -m demos.predict``: the crossover and its interpolation, the recommendation, the outputs
(JSON keys of docs/predict.md, CSV, plot, trace), determinism, the what-if knobs, and one-line refusals."""

from __future__ import annotations

import csv
import importlib.util
import json
import math
from types import SimpleNamespace

import pytest

from demos.predict import main
from demos.prediction.answer import Crossover, Recommendation, crossover, recommend
from demos.prediction.engines import SGLANG_VERSION, VLLM_VERSION, Deployment

pytestmark = pytest.mark.timeout(180)

SMALL = ["--model", "deepseek-v3", "--gpu", "h800", "--nodes", "9", "--ep", "72", "--tokens", "16,64,256"]


def _pt(tokens: int, speedup: float):
    return SimpleNamespace(tokens=tokens, point=SimpleNamespace(speedup=speedup))


def test_crossover_interpolates_in_log_tokens_between_the_points_around_it():
    c = crossover([_pt(16, 0.8), _pt(64, 1.2), _pt(256, 1.4)])
    # speedup 0.8 at log2 16 = 4, 1.2 at log2 64 = 6: 1.0 halfway, at 2**5 = 32
    assert c.interpolated and c.at == 64 and c.below == 16
    assert c.tokens == pytest.approx(32.0)
    assert c.threshold == 32


def test_crossover_needs_every_larger_point_to_pay():
    c = crossover([_pt(16, 1.1), _pt(64, 0.9), _pt(256, 1.3)])
    assert c.at == 256 and c.below == 64


def test_crossover_none_when_dbo_never_pays_and_smallest_when_it_always_does():
    assert crossover([_pt(16, 0.5), _pt(64, 0.9)]).tokens is None
    c = crossover([_pt(16, 1.01), _pt(64, 1.2)])
    assert c == Crossover(16.0, 16, None, False)


def test_recommend_says_no_without_ep_and_without_a_crossover():
    cross = {"graph": Crossover(None, None, None, False)}
    r = recommend(_one_node(None, 8), cross, {"graph": "why"}, default_mode="graph")
    assert isinstance(r, Recommendation)
    assert r.enable is False and "do not enable" in r.vllm and "why" in r.vllm
    cmds = [x for x in (r.vllm + "\n" + r.sglang).splitlines() if not x.startswith("#")]
    assert cmds and not any("--enable-dbo" in x or "--enable-two-batch-overlap" in x for x in cmds)
    assert r.vllm.splitlines()[1].startswith("vllm serve <MODEL> ")  # the plain line still runs
    one = recommend(
        _one_node("m", 1), {"graph": Crossover(32.0, 32, None, False)}, {"graph": "x"}, default_mode="graph"
    )
    assert one.enable is False and "data parallel" in one.vllm
    yes = recommend(
        _one_node("org/m", 72), {"graph": Crossover(40.5, 64, 32, True)}, {"graph": "x"}, default_mode="graph"
    )
    assert yes.enable and "--dbo-decode-token-threshold 41" in yes.vllm and "--enable-dbo" in yes.vllm
    assert "--enable-two-batch-overlap" in yes.sglang and any("41" in n for n in yes.notes)
    assert yes.engines == {"vllm": VLLM_VERSION, "sglang": SGLANG_VERSION}


def _one_node(model, world: int) -> Deployment:
    """A decode deployment of ``world`` GPUs on one node, EP over all of them, DP attention, ll."""
    return Deployment(model, world, world, world, 1, 1, "decode", "ll")


@pytest.mark.slow
def test_the_outputs_carry_the_documented_keys(tmp_path, capsys):
    j, c, p, t = (tmp_path / n for n in ("p.json", "p.csv", "p.png", "p.trace.json"))
    has_plot = importlib.util.find_spec("matplotlib") is not None  # the dev extra has none
    plot = ["--plot", str(p)] if has_plot else []
    assert main([*SMALL, "--mode", "both", "--json", str(j), "--csv", str(c), *plot, "--trace", str(t)]) == 0
    out, err = capsys.readouterr()
    assert all(f"wrote {f}" in err for f in (j, c, t))  # each written file is confirmed on stderr
    rep = json.loads(j.read_text())
    assert len(rep["points"]) == 6
    for pt in rep["points"]:
        for key in (
            "tokens",
            "mode",
            "ubatches",
            "step_no_dbo_s",
            "step_dbo_s",
            "speedup",
            "tokens_per_s_gpu_no_dbo",
            "tokens_per_s_gpu_dbo",
            "fits",
            "stages",
        ):
            assert key in pt
        assert set(pt["stages"]) >= {"attention", "dispatch", "mlp", "combine"}
        assert pt["speedup"] == pytest.approx(pt["step_no_dbo_s"] / pt["step_dbo_s"])
        assert pt["mode"] in ("graph", "eager")
    assert set(rep["crossover"]) == {"graph", "eager"}
    assert {"vllm", "sglang", "reason"} <= set(rep["recommendation"])
    assert rep["recommendation"]["mode"] == "graph"  # vLLM runs DBO decode in graphs
    assert "vllm serve deepseek-ai/DeepSeek-V3" in out or "do not enable" in out
    rows = list(csv.DictReader(c.open()))
    assert len(rows) == 6 and float(rows[0]["speedup"]) == pytest.approx(rep["points"][0]["speedup"])
    assert (p.exists() and p.stat().st_size > 1000) if has_plot else not p.exists()
    events = json.loads(t.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    phases = {e.get("ph") for e in events}
    assert "X" in phases and {"s", "f"} <= phases  # kernels and spans; handoff flows


@pytest.mark.slow
def test_the_same_flags_give_the_same_json(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert main([*SMALL, "--json", str(a)]) == 0
    assert main([*SMALL, "--json", str(b)]) == 0
    assert a.read_text() == b.read_text()


@pytest.mark.slow
def test_a_slower_link_moves_the_crossover(tmp_path, capsys):
    base, slow = tmp_path / "a.json", tmp_path / "b.json"
    args = ["--model", "deepseek-v3", "--gpu", "h800", "--nodes", "9", "--ep", "72", "--tokens", "8,16,32,64,128"]
    assert main([*args, "--json", str(base)]) == 0
    assert main([*args, "--what-if", "link=0.25", "--json", str(slow)]) == 0
    x, y = (json.loads(p.read_text()) for p in (base, slow))
    sx, sy = (math.prod(pt["step_no_dbo_s"] for pt in r["points"]) for r in (x, y))
    assert sy > sx  # every no-DBO step waits longer for its all-to-all
    cx, cy = x["crossover"]["graph"], y["crossover"]["graph"]
    assert cx is not None and cy is not None and cy["tokens"] < cx["tokens"]  # more to hide: DBO pays earlier
    assert y["what_if"] == {"link": 0.25}


def test_the_toy_sweeps_with_a_profile(tmp_path, capsys):
    j = tmp_path / "t.json"
    assert main(["--model", "toy", "--profile", "cpu", "--tokens", "8,512", "--mode", "eager", "--json", str(j)]) == 0
    rep = json.loads(j.read_text())
    assert rep["model"] == "toy" and [p["tokens"] for p in rep["points"]] == [8, 512]
    assert "graph" not in rep["crossover"]


@pytest.mark.parametrize(
    "args, word",
    [
        (["--model", "llama"], "--model"),
        (["--model", "deepseek-v3", "--gpu", "a100"], "--gpu"),
        (["--model", "deepseek-v3", "--tokens", "8,x"], "--tokens"),
        (["--model", "deepseek-v3", "--what-if", "warp=2"], "--what-if"),
        (["--model", "deepseek-v3", "--what-if", "link"], "--what-if"),
        (["--model", "deepseek-v3", "--profile", "cpu"], "--profile"),
        (["--model", "deepseek-v3", "--json", "/proc/x/y.json"], "--json"),
        (["--model", "deepseek-v3", "--ep", "5"], "--ep"),
        (["--model", "deepseek-v3", "--ubatches", "2,100000"], "--ubatches"),
        (["--model", "toy"], "--profile"),
        (["--model", "toy", "--profile", "cpu", "--ep", "8"], "--ep"),
        (["--model", "deepseek-v3", "--phase", "decode", "--comm-sms", "20"], "--comm-sms"),
    ],
)
def test_bad_flags_are_one_line_before_any_work(capsys, args, word):
    assert main(args) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("python -m demos.predict: error: ") and word in err[0], err
