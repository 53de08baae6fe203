"""``--moe-tp N``: MoE tensor parallelism from the command line, its step and the engine lines it serves
(no expert parallelism: vLLM without --enable-expert-parallel, SGLang without --ep-size)."""

from __future__ import annotations

import json

from demos.predict import main
from demos.prediction import predict

QWEN = ["--model", "qwen3.5-397b-a17b", "--gpu", "b200", "--nodes", "1", "--ep", "8", "--weights", "fp8"]


def test_the_flag_runs_the_tensor_parallel_moe_and_drops_expert_parallelism_from_both_lines(capsys, tmp_path):
    out = tmp_path / "p.json"
    assert main([*QWEN, "--attention-tp", "8", "--moe-tp", "8", "--tokens", "4,64", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("qwen3.5-397b-a17b decode on 1 x 8 b200, EP 8, attention TP 8, MoE TP 8,")
    vllm = next(line for line in printed.splitlines() if "vllm serve" in line)
    sglang = next(line for line in printed.splitlines() if "sglang.launch_server" in line)
    assert "--tensor-parallel-size 8 --data-parallel-size 1" in vllm and "--enable-expert-parallel" not in vllm
    assert "--tp-size 8" in sglang and "--ep-size" not in sglang and "--moe-a2a-backend" not in sglang
    assert "every GPU holds every routed expert at 1/8 of its width" in printed
    assert "python -m demos.serving --model qwen3.5-397b-a17b" in printed and "--moe-tp 8" in printed
    assert json.loads(out.read_text())["moe_tp"] == 8


def test_the_experts_cost_their_slices_not_whole_experts():
    """The bug feared: the flag accepted but the experts still sharded whole by EP. Under MoE TP every rank
    reads a slice of every expert; under EP a few experts whole: the two steps differ."""
    kw = dict(gpu="b200", nodes=1, ep=8, attention_tp=8, weights="fp8", tokens=[64], overlap=["none"])
    tp = predict("qwen3.5-397b-a17b", moe_tp=8, **kw).to_dict()
    ep = predict("qwen3.5-397b-a17b", **kw).to_dict()
    assert (tp["moe_tp"], ep["moe_tp"]) == (8, 1)
    assert tp["points"][0]["step_no_dbo_s"] != ep["points"][0]["step_no_dbo_s"]


def test_moe_tp_without_the_matching_attention_tp_is_one_line(capsys):
    assert main([*QWEN, "--moe-tp", "8", "--tokens", "64"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--moe-tp 8" in err[0] and "--attention-tp" in err[0] and "--ep" in err[0]
    assert main(["--model", "toy", "--moe-tp", "2"]) == 2
    assert "--moe-tp applies to real models, not to --model toy" in capsys.readouterr().err
