"""``predict(..., attention_tp=N)`` and ``--attention-tp N``: attention tensor parallelism beside DP attention
(docs/predict.md): checked like every argument, named in the title, and the engine lines in their TP form."""

from __future__ import annotations

import pytest

from demos._cli.model_flags import flag_of
from demos.errors import ConfigError
from demos.predict import PROG, main
from demos.prediction import predict
from demos.prediction.answer import Crossover, recommend
from demos.prediction.engines import Deployment

MODEL = "deepseek-ai/DeepSeek-V3"


def _rec(world: int, tp: int, threshold: float = 100.0) -> dict:
    c = Crossover(threshold, 128, 64, True)
    d = Deployment(MODEL, world, world, world, 1, tp, "decode", "ll")  # one node of every GPU, as before
    return recommend(d, {"graph": c}, {"graph": "r"}, default_mode="graph").as_dict()


def test_the_engine_lines_take_the_tp_form():
    dp = _rec(72, 1)
    assert f"vllm serve {MODEL} --tensor-parallel-size 1 --data-parallel-size 72 --enable-expert-parallel" in dp["vllm"]
    assert "--enable-dbo --dbo-decode-token-threshold 100" in dp["vllm"]
    assert "--tp-size 72 --attn-dp-size 72 --moe-a2a-backend deepep" in dp["sglang"]
    tp = _rec(72, 8)
    assert tp["enable"] and tp["threshold"] == 100
    assert f"vllm serve {MODEL} --tensor-parallel-size 8 --data-parallel-size 9 --enable-expert-parallel" in tp["vllm"]
    assert "--tp-size 72 --attn-dp-size 9 --moe-a2a-backend deepep" in tp["sglang"]
    assert "--enable-two-batch-overlap" in tp["sglang"]
    whole = _rec(8, 8)  # TP over every GPU: no all-to-all (the replicated path), so no overlap in either engine
    commands = [x for x in whole["vllm"].splitlines() if not x.startswith("#")]
    assert commands and "--enable-dbo" not in commands[0] and "--data-parallel-size > 1" in whole["vllm"]
    assert whole["sglang"].endswith("--tp-size 8 --ep-size 8") and "--moe-a2a-backend" not in whole["sglang"]


@pytest.mark.parametrize(
    "value, flag, words",
    [
        (0, "0", "int >= 1"),
        (3, "3", "NVLink domain"),
        (16, "16", "NVLink domain"),
    ],
)
def test_a_bad_attention_tp_is_one_config_error_naming_it_before_any_work(value, flag, words, capsys, monkeypatch):
    def no_work(*a, **k):
        raise AssertionError("a point ran before the arguments were checked")

    monkeypatch.setattr("demos.prediction.api.run_sweep", no_work)
    with pytest.raises(ConfigError) as info:
        predict("deepseek-v3", nodes=2, attention_tp=value)
    message = str(info.value)
    assert message.startswith("attention_tp") and words in message and "\n" not in message, message
    assert main(["--model", "deepseek-v3", "--nodes", "2", "--attention-tp", flag]) == 2
    err = capsys.readouterr().err
    assert err == f"{PROG}: error: {info.value.render(flag_of)}\n" and "--attention-tp" in err


def test_the_toy_refuses_attention_tp():
    for value in (2, True, "1"):
        with pytest.raises(ConfigError, match="^attention_tp applies to real models"):
            predict("toy", profile="cpu", attention_tp=value)


@pytest.mark.slow
def test_a_tp_prediction_names_it_and_gives_the_command_the_same_answer(capsys, tmp_path):
    kw = dict(nodes=2, ep=16, attention_tp=8, tokens=[64, 1024])
    p = predict("deepseek-v3", **kw)
    assert ", attention TP 8," in p.title
    assert "vllm serve" in p.recommendation.vllm
    assert "--tensor-parallel-size 8 --data-parallel-size 2" in p.recommendation.vllm
    dp = predict("deepseek-v3", **{**kw, "attention_tp": 1})
    # the MoE of each rank holds an eighth of the tokens: less all-to-all per rank
    assert p.points[-1].stages["dispatch"] < dp.points[-1].stages["dispatch"]
    assert (
        main(["--model", "deepseek-v3", "--nodes", "2", "--ep", "16", "--attention-tp", "8", "--tokens", "64,1024"])
        == 0
    )
    assert capsys.readouterr().out.strip() == p.text().strip()
