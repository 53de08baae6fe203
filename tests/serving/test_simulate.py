"""``simulate`` and ``python -m demos.serving`` end to end on a small deployment: the JSON holds the
interface's names, every strategy the engine has for the model runs, DBO's steps are split by the engine's
own rule (below its threshold none is), the best threshold comes with a vLLM line that sets it, and bad
input is one line and status 2 before any step runs."""

from __future__ import annotations

import csv
import json

import pytest

from demos.errors import ConfigError
from demos.serving.__main__ import main
from demos.serving.api import CSV_COLUMNS, simulate
from demos.serving.run import Percentiles

pytestmark = pytest.mark.timeout(600)

SMALL = dict(gpu="h100", concurrency=32, isl=256, osl=16, requests=48, warmup=8)
RUN_KEYS = {
    "overlap",
    "requests",
    "output_tokens_per_s",
    "output_tokens_per_s_gpu",
    "ttft_ms",
    "tpot_ms",
    "itl_ms",
    "e2e_ms",
    "split_share",
    "not_split",
}


@pytest.fixture(scope="module")
def vllm_run():
    return simulate("qwen3-30b-a3b", engine="vllm", **SMALL)


def test_the_json_holds_the_interfaces_names(vllm_run):
    rep = vllm_run.to_dict()
    assert [r["overlap"] for r in rep["runs"]] == ["none", "dbo"]
    for r in rep["runs"]:
        assert RUN_KEYS <= set(r) and set(r["ttft_ms"]) == {"p50", "p90", "p99"}
        assert r["requests"] == 48 and r["output_tokens_per_s"] > 0
    json.dumps(rep)
    assert {"by_throughput", "by_p99_itl", "vllm"} <= set(rep["best"])


def test_dbo_splits_by_vllms_rule_and_the_best_threshold_comes_with_its_line(vllm_run):
    none, dbo = vllm_run.runs
    assert none.split_share == 0.0 and set(none.not_split) == {"disabled"}
    # 32 clients over 8 ranks: their prompts (4 x 256 = 1,024 tokens per rank) reach the prefill threshold
    # (512) and split; their decodes (4 per rank) stay under the decode threshold (32) and do not
    assert 0.0 < dbo.split_share < 0.5 and dbo.not_split.get("below_threshold", 0) > 0
    best = vllm_run.best
    t = best["by_throughput"]["decode_threshold"]
    assert f"--dbo-decode-token-threshold {max(t, 2)}" in best["vllm"]
    assert set(best["thresholds"]) == {"2", "8", "16", "32", "64", "128", "256", "512", "1024"}


@pytest.mark.slow  # a whole run (the fast tier leaves it out: docs/testing.md)
def test_sglang_runs_its_own_overlaps_for_the_model():
    run = simulate("qwen3-30b-a3b", engine="sglang", search=False, **SMALL)
    assert [r.overlap for r in run.runs] == ["none", "dbo"]  # Qwen3-MoE: two-batch overlap, no SBO
    with pytest.raises(ConfigError, match="sglang has no sbo for qwen3_moe"):
        simulate("qwen3-30b-a3b", engine="sglang", overlap="sbo", **SMALL)


def test_vllm_has_no_dbo_for_a_multimodal_model():
    """vLLM 0.34.0 refuses DBO for multimodal models: Kimi-K2.5 (its vision tower) runs without it."""
    with pytest.raises(ConfigError, match=r"vllm has no dbo for kimi_k25 \(it has none\)"):
        simulate("kimi-k2.5", engine="vllm", overlap="dbo", **SMALL)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(concurrency=8), "give isl and osl"),
        (dict(concurrency=8, rate=2.0, isl=10, osl=10), "give one"),
        (dict(isl=10, osl=10), "give concurrency"),
        (dict(concurrency=0, isl=10, osl=10), "concurrency must be a positive integer"),
        (dict(rate=-1.0, isl=10, osl=10), "rate must be a positive number"),
        (dict(engine="tgi", concurrency=8, isl=10, osl=10), "engine must be one of vllm, sglang, trtllm"),
        (dict(pool="both", concurrency=8, isl=10, osl=10), "pool must be one of colocated, prefill, decode"),
        (dict(trace="/nonexistent/trace.csv"), "trace /nonexistent/trace.csv"),
        (dict(concurrency=8, isl=10, osl=10, dbo_decode_token_threshold=1), "must be at least 2"),
        (dict(concurrency=8, isl=10, osl=10, range_ratio=0.0), r"range_ratio must be a number in \(0, 1\]"),
        (dict(concurrency=8, isl=10, osl=10, range_ratio=1.5), r"range_ratio must be a number in \(0, 1\]"),
        (dict(rate=2.0, isl=10, osl=10, range_ratio=0.8), "range_ratio draws a closed loop's lengths"),
    ],
)
def test_bad_arguments_are_one_line_before_any_step(kwargs, message):
    with pytest.raises(ConfigError, match=message) as e:
        simulate("qwen3-30b-a3b", gpu="h100", **kwargs)
    assert "\n" not in str(e.value)


def test_the_request_rows_hold_every_request_and_give_back_the_runs_figures(vllm_run):
    rows = [dict(zip(CSV_COLUMNS, r)) for r in vllm_run.request_rows()]
    for run in vllm_run.runs:
        mine = [r for r in rows if r["overlap"] == run.overlap]
        assert [r["request_id"] for r in mine] == list(range(56))  # 8 warm-up and 48 measured, by id
        assert sum(r["warmup"] for r in mine) == 8 and all(r["finished"] for r in mine)
        measured = [r for r in mine if not r["warmup"]]
        assert all(r["prompt_tokens"] == 256 and r["generated_tokens"] == r["output_tokens"] == 16 for r in measured)
        for key, figure in (("ttft_ms", run.ttft_ms), ("tpot_ms", run.tpot_ms), ("e2e_ms", run.e2e_ms)):
            got = Percentiles.of([r[key] / 1e3 for r in measured])
            assert (got.p50, got.p90, got.p99) == pytest.approx((figure.p50, figure.p90, figure.p99), rel=1e-12)


@pytest.mark.slow  # a whole run (the fast tier leaves it out: docs/testing.md)
def test_the_command_prints_the_table_writes_the_json_and_csv_and_refuses_in_one_line(tmp_path, capsys):
    out, table = tmp_path / "run.json", tmp_path / "requests.csv"
    args = ["--model", "qwen3-30b-a3b", "--gpu", "H100", "--concurrency", "16", "--isl", "256", "--osl", "8"]
    args += ["--requests", "16", "--warmup", "0", "--no-search"]
    assert main(args + ["--json", str(out), "--csv", str(table)]) == 0
    text = capsys.readouterr().out
    assert "TTFT p50/p99 ms" in text and "\nnone " in text and "\ndbo " in text
    assert [r["overlap"] for r in json.loads(out.read_text())["runs"]] == ["none", "dbo"]
    with open(table, newline="") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == CSV_COLUMNS and len(rows) == 2 * 16
    assert {r["overlap"] for r in rows} == {"none", "dbo"} and {r["finished"] for r in rows} == {"True"}
    assert main(["--model", "qwen3-30b-a3b", "--concurrency", "4"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "give --isl and --osl" in err
    # a --csv path that cannot be written is refused before any step, and nothing else is written
    assert main(args + ["--json", str(tmp_path / "second.json"), "--csv", str(tmp_path / "no" / "r.csv")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--csv" in err and not (tmp_path / "second.json").exists()


@pytest.mark.long(20)
@pytest.mark.slow
def test_a_steady_closed_loop_reproduces_the_predictors_step_and_its_dbo_speedup():
    """LMSYS's decode cluster (DeepSeek-V3, 9 x 8 H100, EP 72) as a decode pool at 32 and 256 requests per
    rank, every step split (vLLM's threshold at its floor, 2): the run's TPOT is the predictor's no-DBO
    step at those tokens and a 2,000-token context, and TPOT without over TPOT with DBO is its speedup
    (0.780 and 1.296, the figures validate published checks against LMSYS). The bug this catches: the
    serving run pricing a step other than the one predict answers for (padding, context, graph mode)."""
    from demos.prediction.api import predict

    p = predict("deepseek-v3", gpu="h100", nodes=9, ep=72, tokens=(32, 256), context=2000, mode="graph")
    for point in p.to_dict()["points"]:
        tokens, osl = point["tokens"], 9
        r = simulate(
            "deepseek-v3", engine="vllm", pool="decode", gpu="h100", nodes=9, ep=72, concurrency=72 * tokens,
            isl=2000 - osl // 2, osl=osl, requests=72 * tokens, warmup=0, overlap=("none", "dbo"),
            dbo_decode_token_threshold=2, search=False,
        )  # fmt: skip
        none, dbo = r.runs
        assert dbo.split_share == 1.0
        assert none.tpot_ms.p50 == pytest.approx(1e3 * point["step_no_dbo_s"], rel=0.005), tokens
        assert none.tpot_ms.p50 / dbo.tpot_ms.p50 == pytest.approx(point["speedup"], rel=0.005), tokens


@pytest.mark.slow
def test_a_range_ratio_breaks_the_closed_loops_waves():
    """Every request of the same lengths finishes on the same step as the others sent with it, so a fixed-length
    closed loop sends its clients in waves whose prompts queue behind each other; drawn lengths (InferenceX's 0.8)
    spread them: fewer requests arrive together with the one before, and the mean TTFT falls. Measured here:
    114 -> 47 of 127 arrivals at the same instant as the previous one, TTFT 171 -> 131 ms."""
    import statistics

    def run(ratio: float) -> tuple[int, float]:
        r = simulate(
            "qwen3-30b-a3b",
            gpu="h100",
            concurrency=32,
            isl=4096,
            osl=64,
            requests=128,
            warmup=64,
            overlap="none",
            search=False,
            range_ratio=ratio,
        )
        lives = sorted(r._raw["none"][0], key=lambda x: (x.arrival_s, x.request.id))[64:]
        arrivals = [x.arrival_s for x in lives]
        together = sum(b - a < 1e-9 for a, b in zip(arrivals, arrivals[1:]))
        return together, statistics.fmean(x.first_token_s - x.arrival_s for x in lives)

    (waves, ttft_fixed), (spread, ttft_drawn) = run(1.0), run(0.8)
    assert waves > 100 and spread < 0.6 * waves
    assert ttft_drawn < 0.9 * ttft_fixed
