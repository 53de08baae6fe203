"""``predict`` learns from the serving run (issue 44, item 3): without a workload the answer says that vLLM's
threshold rests on one forward step, and names the ``python -m demos.serving`` line of the same model and
cluster; with ``workload=`` (``--workload SPEC``) it runs that serving run and the vLLM line takes the run's
best threshold. The command and the function agree, and a bad SPEC is one line before any work.

DeepSeek-V2-Lite on 2 x 8 H100 (EP 16), a small closed loop: a few seconds per run."""

from __future__ import annotations

import json
import shlex

import pytest

from demos.errors import ConfigError
from demos.predict import main
from demos.prediction import predict
from demos.prediction.answer import ONE_STEP, WORKLOAD
from demos.serving.__main__ import main as serving_main
from demos.serving.workloads import WorkloadSpec

pytestmark = pytest.mark.timeout(300)

MODEL = "deepseek-v2-lite"
CLUSTER = dict(nodes=2, tokens=[64, 512])
CLUSTER_FLAGS = ["--nodes", "2", "--tokens", "64,512"]
SPEC = "closed:32:512:32"  # 2 clients per rank: their prompts (1,024 tokens per rank) split, their decodes do not
RUN = dict(workload=SPEC, requests=32)
RUN_FLAGS = ["--workload", SPEC, "--requests", "32"]


def _commands(line: str) -> list[str]:
    """The command lines of an engine's answer (its ``#`` comment lines left out)."""
    return [x for x in line.splitlines() if x and not x.startswith("#")]


@pytest.fixture(scope="module")
def one_step():
    return predict(MODEL, **CLUSTER)


@pytest.fixture(scope="module")
def with_workload():
    return predict(MODEL, **CLUSTER, **RUN)


def test_without_a_workload_the_answer_says_it_rests_on_one_step(one_step):
    rec = one_step.recommendation
    assert rec.enable and rec.threshold == one_step.crossovers["graph"].threshold  # DBO pays from ~300 here
    assert rec.threshold_basis == ONE_STEP == one_step.to_dict()["recommendation"]["threshold_basis"]
    serving = "python -m demos.serving --model deepseek-v2-lite --nodes 2 --concurrency <C> --isl <ISL> --osl <OSL>"
    assert rec.basis == (
        "the threshold rests on one forward step at the crossover; a serving run decides per step (vLLM's DP "
        f"vote, idle ranks, mixed batches): {serving}, or this prediction with --workload closed:<C>:<ISL>:<OSL>"
    )
    assert f"basis    {rec.basis}" in one_step.text().splitlines()
    assert one_step.workload is None and one_step.to_dict()["workload"] is None


def test_with_a_workload_the_vllm_line_takes_the_runs_best_threshold(one_step, with_workload):
    rec, run = with_workload.recommendation, with_workload.workload.run
    best = run.best["by_throughput"]
    none, dbo = run.runs
    assert (none.overlap, dbo.overlap) == ("none", "dbo") and best["output_tokens_per_s"] > none.output_tokens_per_s
    assert rec.enable and rec.threshold == best["decode_threshold"] != one_step.recommendation.threshold
    vllm = _commands(rec.vllm)
    assert len(vllm) == 2 and all(
        x.endswith(f"--enable-dbo --dbo-decode-token-threshold {rec.threshold}") for x in vllm
    )
    assert rec.threshold_basis == WORKLOAD
    assert "rests on one forward step" not in with_workload.text()
    assert rec.basis.startswith("the serving run of closed:32:512:32 (vllm's rule, 32 requests): DBO at ")
    assert rec.basis.endswith(f"; one step's crossover: ~{one_step.recommendation.threshold}")
    # the rest of the answer is the one step's: the sweep, and SGLang's line (its overlap has no threshold)
    assert with_workload.points == one_step.points and rec.sglang == one_step.recommendation.sglang


def test_the_json_nests_the_serving_runs_own_json(with_workload):
    got = with_workload.to_dict()["workload"]
    run = with_workload.workload.run
    assert got == {"spec": SPEC, "command": with_workload.workload.command, **run.to_dict()}
    assert {"runs", "best", "engine", "pool", "workload"} <= set(got) and got["engine"] == "vllm"
    assert [r["overlap"] for r in got["runs"]] == ["none", "dbo"] and got["runs"][0]["requests"] == 32
    json.dumps(with_workload.to_dict())
    text = with_workload.text().splitlines()
    assert any(x.startswith("workload closed:32:512:32: closed loop: 32 clients") for x in text)
    best = got["best"]["by_throughput"]["decode_threshold"]
    assert any(x.startswith(f"best     --dbo-decode-token-threshold {best} by throughput") for x in text)


def test_the_serving_command_it_prints_runs_the_same_run(with_workload, tmp_path, capsys):
    command = with_workload.workload.command
    assert command == (
        "python -m demos.serving --model deepseek-v2-lite --nodes 2 --concurrency 32 --isl 512 --osl 32 --requests 32"
    )
    path = tmp_path / "s.json"
    assert serving_main([*shlex.split(command)[3:], "--json", str(path)]) == 0
    capsys.readouterr()
    assert json.loads(path.read_text()) == json.loads(json.dumps(with_workload.workload.run.to_dict()))


@pytest.mark.slow  # a whole run (the fast tier leaves it out: docs/testing.md)
def test_the_command_and_the_function_agree(with_workload, tmp_path, capsys):
    path = tmp_path / "p.json"
    assert main(["--model", MODEL, *CLUSTER_FLAGS, *RUN_FLAGS, "--json", str(path)]) == 0
    printed = capsys.readouterr().out
    assert json.dumps(with_workload.to_dict(), indent=2) == path.read_text()
    assert with_workload.text() + "\n" == printed


def test_where_dbo_loses_the_run_the_vllm_line_stays_without_it():
    """One node (the all-to-all within NVLink): DBO loses this workload at every threshold."""
    pred = predict(MODEL, tokens=[64], workload="closed:16:256:16", requests=16)
    rec = pred.recommendation
    assert rec.threshold_basis == WORKLOAD and rec.enable is False and rec.threshold is None
    assert "--enable-dbo" not in rec.vllm
    assert rec.vllm.startswith("# do not enable DBO for decode: the serving run of closed:16:256:16")
    assert "DBO does not pay for this workload" in rec.basis


@pytest.mark.slow  # a whole run (the fast tier leaves it out: docs/testing.md)
def test_another_engines_run_leaves_vllms_threshold_on_one_step(one_step):
    pred = predict(MODEL, **CLUSTER, workload=SPEC, requests=16, engine="trtllm")
    rec = pred.recommendation
    assert [r.overlap for r in pred.workload.run.runs] == ["none"] and pred.workload.run.best == {}
    assert rec.threshold_basis == ONE_STEP and rec.vllm == one_step.recommendation.vllm
    assert rec.basis.endswith(
        "--nodes 2 --concurrency 32 --isl 512 --osl 32 --requests 16 (vLLM's rule; this run took trtllm's, which "
        "has no DBO threshold)"
    )


@pytest.mark.parametrize(
    "text, spec",
    [
        ("closed:64:1k:1k", WorkloadSpec("closed", concurrency=64, isl=1024, osl=1024)),
        ("poisson:2.5:2k:256", WorkloadSpec("poisson", rate=2.5, isl=2048, osl=256)),
        (
            " trace:demos/serving/data/azure_code_head.csv",
            WorkloadSpec("trace", trace="demos/serving/data/azure_code_head.csv"),
        ),
    ],
)
def test_a_spec_reads_as_simulates_arrivals(text, spec):
    got = WorkloadSpec.parse(text)
    assert got == spec and WorkloadSpec.parse(str(got)) == got
    flags = got.flags()
    assert dict(zip(flags[::2], flags[1::2])) == {
        f"--{k}": f"{v:g}" if k == "rate" else str(v) for k, v in got.arrivals().items()
    }


BAD = [
    (dict(workload="closed:64:1k"), "workload: closed:CONCURRENCY:ISL:OSL takes three values, got 'closed:64:1k'"),
    (
        dict(workload="open:8:1k:1k"),
        "workload: expected closed:CONCURRENCY:ISL:OSL, poisson:RATE:ISL:OSL or trace:PATH",
    ),
    (dict(workload="closed:0:1k:1k"), "workload: 'closed:0:1k:1k': CONCURRENCY must be a positive integer, got '0'"),
    (dict(workload="poisson:-1:1k:1k"), "RATE must be a positive number of requests per second, got '-1'"),
    (dict(workload="closed:8:0.3k:1k"), "not a whole number of tokens: '0.3k' is 307.2"),
    (dict(workload="trace:"), "workload: trace:PATH needs the trace's path"),
    (dict(workload=64), "workload: expected a string"),
    (dict(workload="trace:/nonexistent/t.csv"), "workload trace:/nonexistent/t.csv: /nonexistent/t.csv: no such file"),
    (dict(workload=SPEC, engine="tgi"), "engine must be one of vllm, sglang, trtllm, got 'tgi'"),
    (dict(workload=SPEC, requests=0), "requests must be a positive integer, got 0"),
    (dict(engine="sglang"), "engine shapes a workload run: give workload too"),
    (dict(requests=8), "requests shapes a workload run: give workload too"),
    (dict(workload=SPEC, phase="prefill"), "workload searches vLLM's decode threshold over a serving run: it takes"),
]


@pytest.mark.parametrize("kwargs, message", BAD, ids=[m[:40] for _, m in BAD])
def test_a_bad_workload_is_one_line_before_any_work(kwargs, message, monkeypatch):
    def never(*a, **k):
        raise AssertionError("a step ran")

    monkeypatch.setattr("demos.prediction.api.run_sweep", never)
    monkeypatch.setattr("demos.serving.api.serve", never)
    with pytest.raises(ConfigError) as info:
        predict(MODEL, **kwargs)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_the_toy_takes_no_workload():
    with pytest.raises(ConfigError, match=r"^workload applies to real models, not to model toy$"):
        predict("toy", profile="cpu", workload=SPEC)


@pytest.mark.parametrize(
    "args, line",
    [
        (["--workload", "closed:64:1k"], "error: --workload: closed:CONCURRENCY:ISL:OSL takes three values"),
        (["--engine", "sglang"], "error: --engine shapes a workload run: give --workload too"),
        (["--workload", SPEC, "--requests", "x"], "argument --requests: invalid int value: 'x'"),
    ],
)
def test_the_command_refuses_in_one_line_with_status_2(args, line, capsys):
    assert main(["--model", MODEL, *args]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("python -m demos.predict: ") and line in err[0], err
