"""``validate serving`` (``demos.fidelity.serving``): a measured row is simulated as its benchmark ran
(its engine, its concurrency, its lengths, its parallelism as hosts of the GPU's server), the rows the
predictor cannot express are counted with the reason, the errors are predicted / measured - 1, and the
side-by-side table compares both estimators on the same rows only."""

from __future__ import annotations

import pytest

from demos.fidelity import served, serving
from demos.zoo import measured
from demos.zoo.measured_rows import row_release, source_concurrency

pytestmark = pytest.mark.timeout(600)
needs_tables = pytest.mark.skipif(not measured.available(), reason="needs the measured extra")


def _row(**kw) -> measured.SiliconRow:
    base = dict(
        id="r0",
        engine="vllm",
        model="Qwen/Qwen3-235B-A22B-FP8",
        system="h200_sxm",
        precision="fp8",
        mode="agg",
        isl=256,
        osl=8,
        batch=8,
        tp=1,
        attention_dp=8,
        moe_ep=8,
        moe_tp=1,
        prefill=None,
        ttft_s=0.2,
        tpot_s=0.03,
    )
    return measured.SiliconRow(**{**base, **kw})


def test_the_served_table_holds_every_published_checkpoint_at_its_precision():
    assert served.SERVED[("Qwen/Qwen3-235B-A22B-FP8", "fp8")] == ("qwen3-235b-a22b", "fp8")
    assert served.SERVED[("deepseek-ai/DeepSeek-R1", "fp4")] == ("deepseek-r1", "fp4")
    assert served.SERVED[("deepseek-ai/DeepSeek-V3", "fp8")] == ("deepseek-v3", None)
    assert served.SERVED[("nvidia/DeepSeek-R1-NVFP4", "fp4")] == ("deepseek-r1", "fp4")
    assert served.SERVED[("openai/gpt-oss-120b", "fp4")] == ("gpt-oss-120b", None)


@pytest.mark.parametrize(
    "kw, preset, weights, kv",
    [
        # DeepSeek-R1 at FP4 on B200 under SGLang: the deepseek-r1 preset with FP4 experts, the config's KV cache
        (dict(model="deepseek-ai/DeepSeek-R1", precision="fp4", engine="sglang"), "deepseek-r1", "fp4", None),
        # the same row whose launch script set an FP8 KV cache
        (
            dict(model="deepseek-ai/DeepSeek-R1", precision="fp4", engine="sglang", kv_cache="fp8"),
            "deepseek-r1",
            "fp4",
            "fp8",
        ),
        # GLM-5 (DeepSeek sparse attention; its config is FP8) on Blackwell under SGLang: the engine's FP8 default
        (dict(model="zhipuai/GLM-5", precision="fp8", engine="sglang"), "glm-5", None, "fp8"),
        (dict(model="deepseek-ai/DeepSeek-V3", precision="fp8", engine="trtllm"), "deepseek-v3", None, None),
    ],
)
def test_both_checks_express_a_row_at_the_same_preset_weights_and_kv_cache(kw, preset, weights, kv):
    """``validate silicon`` and ``validate serving`` read one mapping (``demos.fidelity.served``): a row's
    preset, weights and KV cache are the same in both plans."""
    from demos.fidelity import silicon

    row = _row(system="b200_sxm", mode="disagg", tp=8, attention_dp=1, moe_ep=8, **kw)
    s = silicon._plan(row)
    a = serving._plan(row._replace(mode="agg"))
    assert (s["preset"], s["weights"], s["kv_cache_dtype"]) == (preset, weights, kv)
    assert (a["model"], a["weights"], a["kv_cache_dtype"]) == (preset, weights, kv)


def test_a_row_no_preset_serves_is_skipped_by_both_checks_with_one_reason():
    from demos.fidelity import silicon

    row = _row(model="meta-llama/Llama-3.1-70B", mode="disagg")
    assert silicon._plan(row) == serving._plan(row) == "no preset for meta-llama/Llama-3.1-70B at fp8"


@pytest.mark.parametrize(
    "kw, reason",
    [
        (dict(model="meta-llama/Llama-3.1-70B"), "no preset for meta-llama/Llama-3.1-70B at fp8"),
        (dict(system="a100_sxm"), "no GPU profile for a100_sxm"),
        (dict(mode="disagg"), "disaggregated"),
        (dict(moe_tp=8, moe_ep=1), "MoE tensor parallelism"),
    ],
)
def test_a_row_the_predictor_cannot_express_says_why(kw, reason):
    assert reason in serving._plan(_row(**kw))


def test_a_gb200_worker_is_hosts_of_four():
    plan = serving._plan(_row(system="gb200", attention_dp=8, moe_ep=8))
    assert (plan["nodes"], plan["gpus_per_node"], plan["ep"], plan["attention_tp"]) == (2, 4, 8, 1)


@pytest.mark.slow  # a whole run (the fast tier leaves it out: docs/testing.md)
@needs_tables
def test_rows_run_as_their_benchmark_and_the_side_by_side_keeps_to_common_rows(monkeypatch):
    rows = [_row(id="a"), _row(id="b", engine="sglang", osl=6), _row(id="c", system="a100_sxm")]
    monkeypatch.setattr(measured, "silicon_rows", lambda: tuple(rows))
    checks, skipped = serving.serving_rows()
    assert [c.id for c in checks] == ["a", "b"] and skipped == {"no GPU profile for a100_sxm": 1}
    for c in checks:
        assert c.ttft_predicted_s > 0 and c.tpot_predicted_s > 0
        assert c.tpot_error == pytest.approx(c.tpot_predicted_s / 0.03 - 1)
    (summary,) = [s for s in serving.serving_summaries(checks) if s["engine"] == "vllm"]
    assert summary["rows"] == 1 and summary["tpot"]["rows"] == 1
    text = serving.format_serving(serving.serving_summaries(checks), skipped)
    assert "h200   sglang  agg" in text and "no GPU profile for a100_sxm" in text


def test_a_row_runs_at_its_benchmarks_concurrency_not_its_batch():
    """On attention-DP rows the configured batch is per DP rank: 16 per rank of 8 is 128 clients. The bug
    this catches: a closed loop of 16 clients for a benchmark of 128, an eighth of its load."""
    assert serving.clients(_row(batch=16, attention_dp=8, concurrency=128)) == 128
    assert serving.clients(_row(batch=16, attention_dp=8, concurrency=None)) == 128  # not recorded: batch x DP
    assert serving.clients(_row(batch=16, attention_dp=0, tp=8, concurrency=None)) == 16
    assert serving.clients(_row(batch=56, attention_dp=0, tp=4, concurrency=224)) == 224  # as recorded


def test_the_concurrency_is_read_from_the_rows_source():
    assert source_concurrency("db-dump/2026-04-27; config_id=759; silicon_concurrency=4; measured=x") == 4
    assert source_concurrency("silicon_concurrency=128") == 128
    assert source_concurrency("config_id=1; other_concurrency=7") is None
    assert source_concurrency(float("nan")) is None


def test_the_release_is_the_rows_version_or_its_images_tag():
    """A row's release decides its engine's host behaviour (``demos.serving.host``): the recorded version
    where it is one, else the image the source names; an undated nightly says nothing."""
    assert row_release("0.5.9", "image=lmsysorg/sglang:v0.5.10-cu130") == "0.5.9"
    assert row_release("0.5.10.post1", "") == "0.5.10.post1"
    image = "model=GLM-5; image=lmsysorg/sglang:nightly-dev-cu13-20260401-b6fe0cca"
    assert row_release("nightly-dev", image) == "nightly-dev-20260401"
    assert row_release("nightly-dev-20260216-d3bae71e", "") == "nightly-dev-20260216"
    assert row_release(float("nan"), "x; image=lmsysorg/sglang:v0.5.9-cu130-amd64") == "0.5.9"
    assert row_release("nightly-dev", "source_file=x.csv; aic_database_mode=SILICON") is None
    assert row_release("glm5-hopper", float("nan")) is None


def test_a_gated_deltanet_row_on_sglang_without_its_release_is_skipped_with_that_reason():
    qwen = dict(model="Qwen/Qwen3.5-397B-A17B", engine="sglang", tp=8, attention_dp=1, moe_ep=8, batch=4)
    if ("Qwen/Qwen3.5-397B-A17B", "fp8") not in served.SERVED:
        pytest.skip("Qwen3.5's checkpoint is not served")
    assert "release not recorded" in serving._plan(_row(**qwen, release=None))
    assert isinstance(serving._plan(_row(**qwen, release=None, radix_cache=False)), dict)  # overlap on at any release
    assert isinstance(serving._plan(_row(**qwen, release="0.5.9")), dict)
    assert isinstance(serving._plan(_row(release=None)), dict)  # a model without Gated DeltaNet layers


@pytest.mark.parametrize(
    "speculative, reason",
    [("mtp", "ran with MTP speculative decoding"), ("unknown", "with and without MTP speculative decoding")],
)
def test_a_row_that_decoded_speculatively_or_may_have_is_skipped_by_both_checks_with_that_reason(speculative, reason):
    """Speculative decoding is not modelled: a row InferenceX ran with MTP, or ran both ways without saying
    which, is not judged (``demos.zoo.vendor_data.inferencex``); the same row without it is."""
    from demos.fidelity import silicon

    row = _row(model="deepseek-ai/DeepSeek-V3", speculative=speculative)
    assert reason in serving._plan(row)
    assert reason in silicon._plan(row._replace(mode="disagg"))
    assert isinstance(serving._plan(row._replace(speculative="none")), dict)
    assert isinstance(silicon._plan(row._replace(mode="disagg", speculative="none")), dict)


def test_a_copy_of_a_speculative_run_is_skipped_with_it_and_each_run_counts_once(monkeypatch):
    """A gap-analysis copy rounds InferenceX's figures and records no speculation: it is the same run, so it is
    skipped as the run is (``demos.zoo.measured_copies``), and the copy is counted once under its own reason."""
    from demos.zoo.measured_copies import COPIES

    run = dict(model="deepseek-ai/DeepSeek-V3", tpot_s=0.0312345, ttft_s=0.2012345)
    rows = [_row(id="gap", **{**run, "tpot_s": 0.03123, "ttft_s": 0.20123}), _row(id="ix", speculative="mtp", **run)]
    monkeypatch.setattr(measured, "silicon_rows", lambda: tuple(rows))
    checks, skipped = serving.serving_rows()
    assert checks == []
    assert skipped == {"ran with MTP speculative decoding (InferenceX's config): not modelled": 1, COPIES: 1}


@needs_tables
def test_every_attention_dp_row_records_the_batch_times_its_ranks():
    rows = [r for r in measured.silicon_rows() if r.mode == "agg" and r.attention_dp > 1 and r.concurrency]
    assert len(rows) > 100
    assert sum(r.concurrency == r.batch * r.attention_dp for r in rows) / len(rows) > 0.9


@pytest.mark.slow  # a whole run (the fast tier leaves it out: docs/testing.md)
@needs_tables
def test_a_disaggregated_row_runs_whole_and_is_sampled_as_the_others(monkeypatch):
    """A disaggregated row with its workers' counts runs as a coupled deployment (its GPUs: both sides'),
    one without them is skipped with that reason, and ``--quick`` samples it like any row."""
    disagg = dict(mode="disagg", batch=2, attention_dp=8, prefill=(1, 8, 8, 1, 1), concurrency=16, osl=6)
    rows = [  # three runs: their measured figures differ (rows with the same figures are one run's copies)
        _row(id="d1", workers=(1, 1), tpot_s=0.010, **disagg),
        _row(id="d2", workers=(1, 1), tpot_s=0.011, **disagg),  # the same deployment and lengths: sampled out
        _row(id="d3", workers=None, tpot_s=0.012, **disagg),
    ]
    monkeypatch.setattr(measured, "silicon_rows", lambda: tuple(rows))
    checks, skipped = serving.serving_rows(quick=True)
    assert [c.id for c in checks] == ["d1"] and checks[0].mode == "disagg" and checks[0].gpus == 16
    assert checks[0].ttft_predicted_s > 0 and checks[0].tpot_predicted_s > 0
    assert skipped == {
        "--quick: a sampled row of the same deployment and lengths ran": 1,
        "disaggregated without its workers' counts recorded": 1,
    }


@pytest.mark.slow  # four short runs (the fast tier leaves them out: docs/testing.md)
@needs_tables
def test_skewed_routing_reaches_the_steps_of_co_located_and_disaggregated_runs(monkeypatch):
    """``validate serving --imbalance power-law``: both kinds of run take the routing model. The runs are
    deterministic, so any change in the predicted TPOT is the model's; at 16 requests a rank over 8 EP ranks the
    power law loads the busiest rank more than uniform routing (1.44 against 1.18); at fewer requests a rank it
    loads it less (1.33 against 1.36 at 4), so the disaggregated run, whose decode steps range over both, is only
    held to differ."""
    disagg = dict(mode="disagg", batch=16, attention_dp=8, prefill=(1, 8, 8, 1, 1), concurrency=128, osl=6)
    rows = [_row(id="c", batch=16, concurrency=128), _row(id="d", workers=(1, 1), tpot_s=0.01, **disagg)]
    monkeypatch.setattr(measured, "silicon_rows", lambda: tuple(rows))
    uniform, _ = serving.serving_rows()
    skewed, _ = serving.serving_rows(imbalance="power-law")
    assert [c.id for c in uniform] == [c.id for c in skewed] == ["c", "d"]
    (cu, du), (ck, dk) = uniform, skewed
    assert ck.tpot_predicted_s > cu.tpot_predicted_s
    assert dk.tpot_predicted_s != pytest.approx(du.tpot_predicted_s, rel=1e-6)


def test_the_errors_are_summarized_per_model_too():
    def check(i, model, tpot):
        return serving.ServingCheck(f"r{i}", "h200", "vllm", "agg", model, 256, 8, 8, 8, 0.1, 0.2, tpot, 0.01)

    rows = [check(0, "a", 0.011), check(1, "a", 0.013), check(2, "b", 0.008)]
    by = serving.serving_summaries(rows, ("model",))
    assert [(s["model"], s["rows"]) for s in by] == [("a", 2), ("b", 1)]
    assert by[0]["tpot"]["median_error"] == pytest.approx(0.2) and by[1]["tpot"]["median_error"] == pytest.approx(-0.2)
    text = serving.format_grouped(by)
    assert "a" in text and "+20.0%" in text and "-20.0%" in text


def test_the_errors_are_summarized_per_kind_of_engine_build():
    """A numbered release, a dated nightly image and a row that records none are three groups (the nightlies are
    the first builds of a new model's support, whose rows read apart)."""
    assert [serving.release_kind(r) for r in ("0.5.9", "nightly-dev-20260401", None)] == [
        "release",
        "nightly",
        "not recorded",
    ]

    def check(i, release, tpot):
        return serving.ServingCheck(
            f"r{i}", "b200", "sglang", "agg", "glm-5", 1024, 8, 8, 8, 0.1, 0.2, tpot, 0.01, release
        )

    rows = [check(0, "0.5.9", 0.009), check(1, "nightly-dev-20260317", 0.007), check(2, None, 0.008)]
    by = serving.serving_summaries(rows, ("engine", "mode", "release_kind"))
    assert [(s["release_kind"], s["rows"]) for s in by] == [("nightly", 1), ("not recorded", 1), ("release", 1)]
    assert [round(s["tpot"]["median_error"], 6) for s in by] == [-0.3, -0.2, -0.1]
    text = serving.format_grouped(by, "per engine build:", ("engine", "mode", "release_kind"))
    assert "sglang agg nightly" in text and "-30.0%" in text and "sglang agg release" in text
