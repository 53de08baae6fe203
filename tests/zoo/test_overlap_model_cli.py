"""``python -m demos.overlap --model``: a real model's step from the command line, its JSON report, and its
one-line refusals (a toy flag, an unknown model, a broken config.json, a flag without --model)."""

from __future__ import annotations

import json

import pytest

from demos.overlap import main
from demos.zoo.models.presets import preset_config
from demos.zoo.ops import DENSE_GROUPS, MOE_GROUPS

pytestmark = pytest.mark.timeout(120)

DSV3 = ["--model", "deepseek-v3", "--gpu", "h800", "--nodes", "9", "--ep", "72", "--tokens", "128"]


def _refused(capsys, *args: str) -> str:
    assert main(list(args)) == 2
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("python -m demos.overlap: error: "), lines[0]
    return lines[0]


def test_the_json_report_has_the_issue_fields(tmp_path, capsys):
    path = tmp_path / "r.json"
    assert main([*DSV3, "--graph", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    rep = json.loads(path.read_text())
    for key in ("model", "gpu", "nodes", "ep", "phase", "memory", "params_total", "params_active"):
        assert key in rep
    assert rep["model"] == "deepseek-v3" and rep["gpu"] == "h800" and rep["ep"] == 72 and rep["nodes"] == 9
    assert abs(rep["params_total"] / 671e9 - 1) < 0.02 and abs(rep["params_active"] / 37e9 - 1) < 0.02
    assert rep["mode"] == "graph" and rep["schedule"] == "ll" and rep["phase"] == "decode"
    assert rep["speedup"] == pytest.approx(rep["step_no_dbo_s"] / rep["step_dbo_s"])
    assert set(rep["stages"]) >= {"attention", "dispatch", "mlp", "combine"}
    assert rep["memory"]["fits"] is True and rep["memory"]["weights"] > 0
    assert "speedup" in out and "memory" in out
    assert list(rep["moe_layer_s"]) == list(MOE_GROUPS) and list(rep["dense_layer_s"]) == list(DENSE_GROUPS)
    assert rep["moe_layer_s"]["dispatch"] > 0 and rep["moe_layer_s"]["shared"] > 0
    assert "per op" not in out  # the table is --detail's


def test_detail_prints_the_ops_of_one_moe_and_one_dense_layer(tmp_path, capsys):
    path = tmp_path / "r.json"
    assert main(["--model", "qwen3-30b-a3b", "--ep", "1", "--tokens", "32", "--detail", "--json", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    rep = json.loads(path.read_text())
    moe = rep["moe_layer_s"]
    assert rep["dense_layer_s"] is None  # every layer of Qwen3-30B-A3B is an MoE layer
    assert moe["dispatch"] == moe["combine"] == 0.0 and moe["shared"] == 0.0  # EP 1; no shared experts
    i = out.index(next(line for line in out if line.startswith("per op")))
    rows = {line.split()[0]: line.split()[1:] for line in out[i + 2 :]}
    assert list(rows) == [*MOE_GROUPS, "mlp", "total"]
    assert all(float(rows[op][0]) == pytest.approx(moe[op] * 1e3, abs=1e-4) and rows[op][1] == "-" for op in MOE_GROUPS)
    assert float(rows["total"][0]) == pytest.approx(sum(moe.values()) * 1e3, abs=1e-4)


def test_detail_without_a_model_is_refused(capsys):
    line = _refused(capsys, "--detail")
    assert "--detail" in line and "--model" in line


@pytest.mark.slow
def test_threads_runs_the_shrunken_model_and_checks_it_bitwise(tmp_path, capsys):
    path = tmp_path / "r.json"
    args = ["--model", "qwen3-30b-a3b", "--backend", "threads", "--tokens", "16", "--context", "8"]
    assert main([*args, "--phase", "prefill", "--json", str(path)]) == 0
    rep = json.loads(path.read_text())
    assert rep["exact"] == {"bitwise_equal": True, "max_abs_diff": 0.0}
    assert rep["model"] == "qwen3-30b-a3b/32"
    assert "bitwise equal" in capsys.readouterr().out


def test_a_config_json_path_is_a_model(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(preset_config("mixtral-8x7b")))
    assert main(["--model", str(path), "--tokens", "32"]) == 0
    assert "mixtral" in capsys.readouterr().out.lower()


@pytest.mark.parametrize("flag", [["--hidden", "64"], ["--experts", "8"], ["--profile", "h200"], ["--link", "ib400"]])
def test_toy_flags_are_refused_with_a_real_model(capsys, flag):
    line = _refused(capsys, *DSV3, *flag)
    assert flag[0] in line and "toy" in line


@pytest.mark.parametrize("flag", [["--gpu", "h100"], ["--nodes", "2"], ["--phase", "prefill"], ["--imbalance", "2"]])
def test_cluster_flags_without_a_model_are_refused(capsys, flag):
    line = _refused(capsys, *flag)
    assert flag[0] in line and "--model" in line


def test_an_unknown_model_names_the_presets(capsys):
    line = _refused(capsys, "--model", "llama-9")
    assert "llama-9" in line and "deepseek-v3" in line


def test_a_broken_config_json_names_the_file_and_the_field(tmp_path, capsys):
    cfg = preset_config("qwen3-30b-a3b")
    del cfg["num_experts"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    line = _refused(capsys, "--model", str(path))
    assert str(path) in line and "num_experts" in line
    path.write_text("{not json")
    assert str(path) in _refused(capsys, "--model", str(path))


@pytest.mark.parametrize(
    "args, words",
    [
        (["--ep", "7"], "--ep"),
        (["--gpu", "a100"], "--gpu"),
        (["--tokens", "0"], "--tokens"),
        (["--ubatches", "200"], "--ubatches"),
        (["--imbalance", "0.5"], "--imbalance"),
        (["--comm-sms", "500"], "--comm-sms"),
        (["--shrink", "4"], "--shrink"),
        (["--json", "/proc/nope/r.json"], "--json"),
    ],
)
def test_bad_values_are_one_line_naming_the_flag(capsys, args, words):
    assert words in _refused(capsys, "--model", "qwen3-30b-a3b", *args)


def test_model_toy_is_the_default_command(capsys):
    # --model toy takes the toy's path: a toy flag is accepted, a cluster flag refused as without --model
    assert "--gpu" in _refused(capsys, "--model", "toy", "--gpu", "h100")
