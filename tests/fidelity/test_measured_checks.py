"""``python -m demos.validate kernels`` and ``silicon``: their JSON as the issue fixes it, their skip
reasons, and one line without the measured extra."""

from __future__ import annotations

import pytest

from demos.fidelity.silicon import SiliconCheck, _step_seconds, decode_tokens, gap_fits, silicon_summaries
from demos.validate import main
from demos.zoo import measured

needs_tables = pytest.mark.skipif(not measured.available(), reason="needs the measured extra")


def test_without_the_extra_both_checks_are_one_line_naming_the_install(monkeypatch, capsys):
    def missing():
        raise measured.MeasuredTablesError(measured.INSTALL_HINT)

    monkeypatch.setattr(measured, "_modules", missing)
    for check in ("kernels", "--kernels", "silicon", "--silicon"):  # the old spelling's note is no second line
        assert main([check, "--no-progress"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "pip install -e '.[measured]'" in err[0]


def test_two_checks_at_once_are_refused(capsys):
    assert main(["--kernels", "--silicon"]) == 2
    assert "--kernels and --silicon are separate checks" in capsys.readouterr().err
    assert main(["kernels", "silicon"]) == 2
    assert "kernels takes no silicon (one check per run" in capsys.readouterr().err


def _checked_json(check: str, validate_json, row_keys: set[str]) -> dict:
    """The JSON ``validate check --json`` writes (the session's run: tests/conftest.py), its first row
    holding at least ``row_keys``."""
    data = validate_json(check)
    assert row_keys <= set(data["rows"][0])
    return data


@pytest.mark.slow
@pytest.mark.measured
@needs_tables
def test_kernels_json_has_rows_and_summaries_per_gpu_and_op(validate_json):
    data = _checked_json("kernels", validate_json, {"gpu", "op", "shape", "predicted_s", "measured_s"})
    pairs = {(s["gpu"], s["op"]) for s in data["summary"]}
    for gpu in ("h100", "h200", "b200", "gb200"):
        for op in (
            "gemm fp8",
            "gemm bf16",
            "mla decode",
            "mla prefill",
            "dsa module",
            "experts",
            "dispatch",
            "combine",
        ):
            assert (gpu, op) in pairs
    for s in data["summary"]:
        assert s["rows"] > 0 and abs(s["median_error"]) <= abs(s["max_error"])


@pytest.mark.slow
@pytest.mark.measured
@needs_tables
def test_silicon_json_predicts_decode_rows_of_two_engines_on_each_gpu(validate_json):
    keys = {"gpu", "engine", "phase", "model", "tokens", "predicted_s", "measured_s", "gap_s"}
    data = _checked_json("silicon", validate_json, keys)
    decode = {s["gpu"]: s for s in data["summary"] if s["phase"] == "decode"}
    for gpu in ("b200", "gb200", "gb300"):
        assert decode[gpu]["rows"] >= 10 and len(decode[gpu]["engines"]) >= 2
    # H200's three SGLang decode rows are InferenceX runs with and without MTP (``SiliconRow.speculative``)
    assert decode["h200"]["rows"] >= 10 and decode["h200"]["engines"] == ["trtllm"]
    for gpu, d in decode.items():  # the per-engine summaries split each GPU's decode rows, none lost
        mine = [e for e in data["by_engine"] if e["gpu"] == gpu]
        assert sum(e["rows"] for e in mine) == d["rows"] and sorted(e["engine"] for e in mine) == d["engines"]
    assert any("MTP speculative decoding" in reason for reason in data["skipped"])
    assert any("MoE tensor parallelism" in reason for reason in data["skipped"])
    assert silicon_summaries([]) == []
    for g in data["gaps"]:  # the gap's shape per row class, each class fitted on its own decode rows
        rows = [
            r
            for r in data["rows"]
            if r["phase"] == "decode"
            and (r["gpu"], r["engine"], r["attention_tp"], r["ep"], r["context"])
            == (g["gpu"], g["engine"], g["attention_tp"], g["ep"], g["context"])
        ]
        assert g["rows"] == len(rows) and g["tokens"] == [
            min(r["tokens"] for r in rows),
            max(r["tokens"] for r in rows),
        ]
    assert {g["gpu"] for g in data["gaps"]} >= {"h200", "b200", "gb200"}


def _check(tokens: int, gap_s: float, *, context: int = 1536, tp: int = 1, phase: str = "decode") -> SiliconCheck:
    return SiliconCheck("x", "h200", "sglang", phase, "m", tokens, context, 8, tp, 0.030, 0.030 + gap_s)


def test_the_gap_fit_separates_a_per_step_term_from_a_per_token_one():
    """The bug this catches: a fit that mixes row classes (here two contexts with different gaps) or
    reads the gap with the wrong sign would report a per-token term where each class has a constant."""
    line = [_check(t, 0.002 + 100e-6 * t) for t in (4, 16, 64)]
    flat = [_check(t, 0.003, context=8704) for t in (8, 32, 96)]
    two = [_check(t, 0.0, tp=8) for t in (4, 8)]  # two batches: too few to fit, left out
    prefill = [_check(t, 1.0, phase="prefill") for t in (1024, 2048, 4096)]
    fits = {g["context"]: g for g in gap_fits(line + flat + two + prefill)}
    assert set(fits) == {1536, 8704}
    assert fits[1536]["per_step_s"] == pytest.approx(0.002) and fits[1536]["per_token_s"] == pytest.approx(100e-6)
    assert fits[8704]["per_step_s"] == pytest.approx(0.003) and fits[8704]["per_token_s"] == pytest.approx(
        0.0, abs=1e-12
    )
    assert fits[1536]["tokens"] == [4, 64] and fits[1536]["rows"] == 3


def test_the_decode_batch_is_what_the_measured_ttft_leaves_of_the_configured_one():
    """Little's law over a closed-loop run: each request spends its TTFT before it decodes for
    ``(osl - 1) x TPOT``. The bug this catches: a prefill-starved run (TTFT 75 s against 21 s of decode)
    predicted at the batch it was configured for, 192, when its decode side held about 42."""
    row = measured.SiliconRow(
        "x", "sglang", "m", "gb200", "fp8", "disagg", 8192, 1024, 192, 1, 32, 32, 1, None, 75.8, 0.0207
    )
    decode = 1023 * 0.0207
    assert decode_tokens(row) == round(192 * decode / (decode + 75.8)) == 42
    assert decode_tokens(row._replace(ttft_s=0.0)) == 192
    assert decode_tokens(row._replace(ttft_s=None)) == 192  # no TTFT: the configured batch
    assert decode_tokens(row._replace(batch=1, ttft_s=1e6)) == 1  # never below one request


def test_the_silicon_kernel_source_goes_with_silicon_only(capsys):
    assert main(["--published", "--silicon-kernels", "measured"]) == 2
    assert "published takes no --silicon-kernels measured (--silicon-kernels is silicon's --kernels now" in (
        capsys.readouterr().err
    )
    assert main(["published", "--kernels", "measured"]) == 2
    assert "published takes no --kernels measured (--kernels roofline|measured goes with silicon" in (
        capsys.readouterr().err
    )


def test_the_silicon_kernel_source_and_routing_reach_the_predicted_steps(monkeypatch):
    seen = []

    def rows(progress=None, *, kernels="roofline", imbalance="auto"):
        seen.append((kernels, imbalance))
        return [], {}

    monkeypatch.setattr("demos.fidelity.silicon.silicon_rows", rows)
    assert main(["silicon", "--kernels", "measured", "--no-progress"]) == 0
    assert main(["--silicon", "--silicon-kernels", "measured", "--no-progress"]) == 0
    assert main(["--silicon", "--silicon-kernels=measured", "--no-progress"]) == 0
    assert main(["silicon", "--no-progress"]) == 0
    assert main(["silicon", "--imbalance", "power-law", "--no-progress"]) == 0
    measured, roofline = ("measured", "auto"), ("roofline", "auto")
    assert seen == [measured, measured, measured, roofline, ("roofline", "power-law")]


def test_the_serving_routing_model_reaches_the_simulated_rows(monkeypatch):
    seen = []

    def rows(progress=None, *, quick=False, full=False, imbalance="auto"):
        seen.append((quick, imbalance))
        return [], {}

    monkeypatch.setattr("demos.fidelity.serving.serving_rows", rows)
    assert main(["serving", "--no-progress"]) == 0
    assert main(["serving", "--quick", "--imbalance", "power-law", "--no-progress"]) == 0
    assert seen == [(False, "auto"), (True, "power-law")]
    assert main(["serving", "--imbalance", "zipf", "--no-progress"]) == 2


@pytest.mark.slow
@pytest.mark.measured
@needs_tables
def test_a_silicon_step_on_the_measured_source_takes_the_tables_times():
    """The diagnostic fidelity.md quotes: the same step, its GEMMs and MLA cores from the B200 tables."""
    plan = dict(preset="deepseek-v3", gpu="b200", ep=8, tp=1, tokens=32, context=8704)
    curves, tables = (_step_seconds("decode", plan, k) for k in ("roofline", "measured"))
    assert tables != curves and abs(tables / curves - 1) < 0.2


def test_a_silicon_step_runs_at_the_plans_weights_and_kv_cache():
    """A row served at FP4 experts or an FP8 KV cache is timed at them: FP4 experts stream fewer bytes than
    the config's FP8 ones at a decode batch, an FP8 cache fewer than BF16 at a long context."""
    plan = dict(preset="deepseek-r1", gpu="b200", ep=8, tp=1, tokens=32, context=8704)
    native = _step_seconds("decode", plan)
    assert _step_seconds("decode", {**plan, "weights": "fp4"}) < native
    assert _step_seconds("decode", {**plan, "kv_cache_dtype": "fp8"}) < native
    # on Hopper the FP8 cache's MLA core is each engine's own: TRT-LLM's cheaper than BF16, SGLang's dearer
    hopper = {**plan, "gpu": "h200", "kv_cache_dtype": "fp8"}
    trt, sgl = (_step_seconds("decode", {**hopper, "engine": e}) for e in ("trtllm", "sglang"))
    assert trt < _step_seconds("decode", {**hopper, "kv_cache_dtype": None, "engine": "trtllm"}) < sgl


@pytest.mark.measured
@needs_tables
def test_a_gpu_is_checked_on_its_own_curves_and_with_family_on_its_familys_pooled_ones(capsys):
    """B300's MLA prefill rows: its family's curves (fitted on B200 and GB200, B300 held out) put them 16%
    slow in median; its own curves, which the predictor takes, within 3%. ``--family`` checks the former."""
    from demos.fidelity.checks import KernelsResult
    from demos.fidelity.kernels import kernel_rows, summaries
    from demos.zoo.rooflines import family_fit

    own = summaries(kernel_rows("b300", ops=("mla prefill",)))[0]
    pooled = summaries(kernel_rows("b300", family_fit("blackwell"), ("mla prefill",)))[0]
    assert abs(own["median_error"]) < 0.03 and pooled["median_error"] > 0.12
    assert own["rows"] == pooled["rows"] > 1000
    text = KernelsResult([], [pooled], family=True).text()
    assert "each family's pooled curves" in text and "B300 and GB300 held out" in text
    assert KernelsResult([], [own]).to_dict()["curves"] == "own"


@pytest.mark.slow
@pytest.mark.measured
@needs_tables
def test_the_cross_validation_predicts_each_gpu_with_every_gpus_stored_own_curves(monkeypatch):
    """No refit: each GPU's own curves as ``rooflines.json`` stores them; a GPU on its own curves puts its
    fitted ops' median on them, and H100's curves put H200's GEMMs fast (H200's tables run slower)."""
    from demos.fidelity import kernels
    from demos.zoo.rooflines import GPU_FITS

    monkeypatch.setattr(kernels, "GPU_FITS", {g: GPU_FITS[g] for g in ("h100", "h200")})
    lines = kernels.cross_validation()
    assert len(lines) == 4 * 5  # (fitted on, predicted) pairs x op families
    own = [x for x in lines if x.startswith("fit h200  -> h200  gemm fp8")]
    assert len(own) == 1 and ("median  +0.0%" in own[0] or "median  -0.0%" in own[0])
    other = next(x for x in lines if x.startswith("fit h100  -> h200  gemm fp8"))
    assert float(other.split("median ")[2].split("%")[0]) < -2.0
