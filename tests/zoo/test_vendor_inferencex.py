"""Which measured serving rows InferenceX ran with speculative decoding (``demos.zoo.vendor_data.inferencex``,
written by ``scripts/extract_inferencex_speculative.py``): the matching rule on synthetic configs, the
table's shape, rows whose runs the configs settle, and the table regenerated from a mirror of InferenceX
(skipped where it is absent)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from demos.zoo import measured
from demos.zoo.vendor_data.inferencex import SOURCE, SPECULATIVE, speculative_rows

ROOT = Path(__file__).resolve().parents[2]
MIRROR = Path("/work/.mirror/SemiAnalysisAI+InferenceX/repo")
needs_tables = pytest.mark.skipif(not measured.available(), reason="needs the measured extra")


def _script():
    spec = importlib.util.spec_from_file_location(
        "extract_inferencex", ROOT / "scripts" / "extract_inferencex_speculative.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


X = _script()

CONFIG = """
dsr1-fp8-b200-trt:
  image: nvcr.io#nvidia/tensorrt-llm/release:1.2.0rc6.post2
  model-prefix: dsr1
  runner: b200-trt
  precision: fp8
  framework: trt
  seq-len-configs:
  - isl: 1024
    osl: 1024
    search-space:
    - { tp: 8, ep: 1, conc-start: 4, conc-end: 48 }
dsr1-fp8-b200-trt-mtp:
  image: nvcr.io#nvidia/tensorrt-llm/release:1.2.0rc6.post3
  model-prefix: dsr1
  runner: b200-trt
  precision: fp8
  framework: trt
  scenarios:
    fixed-seq-len:
    - isl: 1024
      osl: 1024
      search-space:
      - { tp: 8, ep: 1, conc-start: 4, conc-end: 8, spec-decoding: mtp }
dsr1-fp8-b200-trt-both:
  image: nvcr.io#nvidia/tensorrt-llm/release:1.2.0rc6.post3
  model-prefix: dsr1
  runner: b200-trt
  precision: fp8
  framework: trt
  seq-len-configs:
  - isl: 1024
    osl: 1024
    search-space:
    - { tp: 8, ep: 1, conc-list: [8] }
dsr1-fp8-b200-dynamo-trt:
  image: nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:0.8.1.post2
  model-prefix: dsr1
  runner: b200-multinode
  precision: fp8
  framework: dynamo-trt
  disagg: true
  seq-len-configs:
  - isl: 1024
    osl: 1024
    search-space:
    - spec-decoding: "mtp"
      conc-list: [16]
      prefill: { num-worker: 1, tp: 4, ep: 4, dp-attn: true }
      decode: { num-worker: 9, tp: 8, ep: 8, dp-attn: false }
"""


def _index(first: str = "2026-02-01", last: str = "2026-03-01"):
    """The synthetic config as ``spans`` indexes it, every entry present from ``first`` to ``last``."""
    return X.index({e: (first, last) for e in X.entries(CONFIG)})


def _row(**kw) -> dict:
    image = kw.pop("image", "nvcr.io#nvidia/tensorrt-llm/release:1.2.0rc6.post3")
    day = kw.pop("day", "2026-02-05")
    conc = kw.pop("conc", 4)
    base = dict(
        id="2026_x_deepseek_r1_b200_sxm_trtllm_fp8_agg_1024x1024_c4_tp8_ep1_1",
        silicon_data_source=f"source_file=2026-03-25.csv; silicon_concurrency={conc}; measured={day}T00:00:00Z; "
        f"image={image}",
        backend="trtllm",
        model_path="deepseek-ai/DeepSeek-R1",
        system="b200_sxm",
        precision="fp8",
        mode="agg",
        isl=1024,
        osl=1024,
        tp_size=8.0,
        attention_dp_size=1.0,
        moe_ep_size=1.0,
    )
    return {**base, **kw}


def test_a_range_of_concurrencies_doubles_up_to_its_end_which_always_runs():
    assert X._concurrencies({"conc-start": 4, "conc-end": 48}) == (4, 8, 16, 32, 48)
    assert X._concurrencies({"conc-start": 4, "conc-end": 4}) == (4,)
    assert X._concurrencies({"conc-list": [1214, 6]}) == (1214, 6)
    assert X._concurrencies({"tp": 8}) == ()


def test_entries_read_both_layouts_of_the_file_and_default_to_no_speculation():
    got = X.entries(CONFIG)
    assert ("dsr1", "fp8", "b200", "trt", "1.2.0rc6.post2", 1024, 1024, 48, "agg", 8, 1, False, "none") in got
    assert ("dsr1", "fp8", "b200", "trt", "1.2.0rc6.post3", 1024, 1024, 8, "agg", 8, 1, False, "mtp") in got
    disagg = ("dsr1", "fp8", "b200", "dynamo-trt", "0.8.1.post2", 1024, 1024, 16)
    assert disagg + ("disagg", 1, 4, 4, True, 9, 8, 8, False, "mtp") in got


def test_a_row_only_speculative_configs_match_is_mtp_and_one_both_match_is_unknown():
    by_key, first = _index()
    assert X.classify(_row(conc=4), by_key, first) == "mtp"
    assert X.classify(_row(conc=8), by_key, first) == "unknown"  # the -mtp config and the -both one
    plain = _row(image="nvcr.io#nvidia/tensorrt-llm/release:1.2.0rc6.post2")
    assert X.classify(plain, by_key, first) is None  # only the non-speculative config has that image


def test_a_row_measured_before_any_speculative_config_or_outside_the_configs_days_is_not_listed():
    by_key, first = _index()
    assert X.classify(_row(day="2026-01-20"), by_key, first) is None  # before any -mtp config existed
    late, first_late = _index(first="2026-01-01", last="2026-01-10")
    assert X.classify(_row(day="2026-01-17"), late, first_late) == "mtp"  # a week after its last day
    assert X.classify(_row(day="2026-01-18"), late, first_late) is None


def test_a_row_without_its_image_matches_any_image_and_one_from_elsewhere_is_not_listed():
    by_key, first = _index()
    no_image = _row(conc=16)
    no_image["silicon_data_source"] = "source_file=2026-03-25.csv; silicon_concurrency=16; measured=2026-02-05"
    assert X.classify(no_image, by_key, first) is None  # conc 16 runs only without speculation
    no_image["silicon_data_source"] = no_image["silicon_data_source"].replace("=16", "=8")
    assert X.classify(no_image, by_key, first) == "unknown"
    other = _row()
    other["silicon_data_source"] = "source_file=/data/b200_sxm/trtllm/x.csv; silicon_concurrency=4; measured=2026-02-05"
    assert X.classify(other, by_key, first) is None


def test_a_disaggregated_row_is_matched_by_both_sides_and_its_clients_over_its_decode_workers():
    by_key, first = _index()
    row = _row(
        mode="disagg",
        conc=144,  # 16 per decode worker, as InferenceX's database exports count them
        image="nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:0.8.1.post2",
        prefill_num_workers=1.0,
        prefill_tp_size=1.0,
        prefill_attention_dp_size=4.0,
        prefill_moe_ep_size=4.0,
        decode_num_workers=9.0,
        decode_tp_size=8.0,
        decode_attention_dp_size=1.0,
        decode_moe_ep_size=8.0,
    )
    assert X.classify(row, by_key, first) == "mtp"
    assert X.classify({**row, "decode_num_workers": 8.0}, by_key, first) is None  # another layout


def test_the_table_lists_each_row_once_with_a_known_value_and_names_its_source():
    rows = speculative_rows()
    assert len(rows) > 300 and set(rows.values()) == set(SPECULATIVE)
    text = (ROOT / "demos" / "zoo" / "vendor_data" / "inferencex_speculative.csv").read_text()
    assert len(text.splitlines()) == len(rows) + 1
    assert "843c6254ff69" in SOURCE and "Apache-2.0" in SOURCE
    readme = (ROOT / "demos" / "zoo" / "vendor_data" / "README-inferencex.md").read_text(encoding="utf-8")
    assert X.COMMIT in readme and "Apache" in readme


@needs_tables
def test_rows_the_configs_settle_read_as_the_configs_say():
    """DeepSeek-R1 FP8 on B200 under TensorRT-LLM at 4 clients, 1,024 in and 8,192 out, TP 8: InferenceX ran
    it from release 1.2.0rc6.post2 without MTP and from 1.2.0rc6.post3 (its -mtp config's image only) with
    it; the second row measures 4.4 ms a token against the first's 10.1."""
    rows = {r.id: r for r in measured.silicon_rows()}
    mtp = rows["2026_04_06_deepseek_r1_b200_sxm_trtllm_fp8_agg_1024x8192_c4_tp8_ep1_68"]
    plain = rows["2026_03_25_deepseek_r1_b200_sxm_trtllm_fp8_agg_1024x8192_c4_tp8_0_ep1_0_1187"]
    assert (mtp.speculative, plain.speculative) == ("mtp", "none")
    assert mtp.tpot_s < 0.5 * plain.tpot_s
    assert set(speculative_rows()) <= set(rows)  # every listed id is a row of the extra's table
    assert sum(r.speculative != "none" for r in rows.values()) == len(speculative_rows())


@pytest.mark.slow
@pytest.mark.long(80)
@pytest.mark.timeout(300)
@needs_tables
@pytest.mark.skipif(not MIRROR.exists(), reason=f"needs a git mirror of SemiAnalysisAI/InferenceX at {MIRROR}")
def test_the_table_regenerates_from_the_mirror():
    pytest.importorskip("yaml")
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "extract_inferencex_speculative.py"), "--repo", str(MIRROR), "--check"],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _record(model, source, system="b200_sxm", precision="fp8", mode="agg", backend="sglang"):
    return {
        "backend": backend,
        "model_path": model,
        "silicon_data_source": source,
        "system": system,
        "precision": precision,
        "mode": mode,
    }


IX_0324 = "source_file=2026-03-25.csv; measured=2026-03-24T00:00:00Z; image=x:v0.5.9"
IX_DB = "db-dump/2026-04-27; config_id=1; measured={}T00:00:00.000Z; workflow_run_id=1"


@pytest.mark.parametrize(
    "record, off",
    [
        (_record("Qwen/Qwen3.5-397B-A17B", IX_0324), True),
        (_record("Qwen/Qwen3.5-397B-A17B", "db-dump/x; measured=2026-04-03T00:00:00Z", system="b300_sxm"), False),
        (_record("Qwen/Qwen3.5-397B-A17B", "db-dump/x; measured=2026-04-17T00:00:00Z", system="b300_sxm"), True),
        (_record("Qwen/Qwen3.5-397B-A17B", "db-dump/2026-04-27; config_id=1; measured=2026-02-19T00:00:00.000Z"), True),
        (_record("Qwen/Qwen3.5-397B-A17B", "source_file=2026-03-25.csv; measured=2026-02-18T10:00:00Z"), False),
        (_record("Qwen/Qwen3.5-397B-A17B", "source_file=qwen3.5-397b-gap-analysis.csv; measured=2026-03-24"), False),
        (_record("Qwen/Qwen3.5-397B-A17B", "source_file=2026-03-25.csv"), False),
        (_record("Qwen/Qwen3.5-397B-A17B", float("nan")), False),
        (_record("zhipuai/GLM-5", IX_0324), True),  # glm5_fp8_b200.sh, from 2026-03-20
        (_record("zhipuai/GLM-5", "source_file=2026-03-25.csv; measured=2026-03-19T00:00:00Z"), False),
        (_record("zhipuai/GLM-5", IX_0324, system="h200_sxm"), False),  # glm5_fp8_h200.sh keeps the cache
        (_record("zhipuai/GLM-5", "db-dump/x; measured=2026-03-29T00:00:00Z", precision="fp4"), False),
        (_record("zhipuai/GLM-5", "db-dump/x; measured=2026-04-09T00:00:00Z", precision="fp4"), True),
        (_record("zhipuai/GLM-5", "db-dump/x; measured=2026-04-03T00:00:00Z", system="b300_sxm"), False),
        (_record("deepseek-ai/DeepSeek-R1", "source_file=2025-11-20.csv; measured=2025-11-19T00:00:00Z"), True),
        (_record("deepseek-ai/DeepSeek-V3", "db-dump/x; measured=2026-04-17T00:00:00Z", system="b300_sxm"), True),
        (_record("deepseek-ai/DeepSeek-R1", IX_0324, system="h200_sxm"), True),
        (_record("deepseek-ai/DeepSeek-R1", IX_0324, mode="disagg"), False),  # the disaggregated recipes: not read
        (_record("deepseek-ai/DeepSeek-R1", IX_0324, system="gb200"), False),
        (_record("deepseek-ai/DeepSeek-R1", IX_0324, backend="trtllm"), False),  # the SGLang scripts only
    ],
)
def test_inferencex_rows_of_the_scripts_that_disable_the_radix_cache_ran_without_it(record, off):
    """A co-located InferenceX export of a model, GPU and precision whose single-node SGLang script passes
    --disable-radix-cache, measured from the script's day, ran without it; every other row records nothing
    (the default)."""
    from demos.zoo.vendor_data.inferencex import radix_cache_off

    assert radix_cache_off(record) is off


@needs_tables
def test_the_measured_qwen35_rows_read_their_radix_cache_from_their_source():
    rows = [r for r in measured.silicon_rows() if r.model == "Qwen/Qwen3.5-397B-A17B"]
    off = [r for r in rows if not r.radix_cache]
    # kept: NVIDIA's own 76 gap-analysis runs and B300's 24 of 2026-04-03, before the B300 scripts were added
    assert len(off) == 251 and len(rows) - len(off) == 100
    assert {r.system for r in rows if r.radix_cache} == {"b200_sxm", "h200_sxm", "b300_sxm"}
    early = [r for r in rows if r.system == "b300_sxm" and r.radix_cache]
    assert len(early) == 24 and all(r.id.startswith("2026_03_25_qwen3_5_397b_b300") for r in early)


@needs_tables
def test_the_measured_glm5_and_deepseek_r1_sglang_rows_read_their_radix_cache_from_their_scripts():
    rows = [r for r in measured.silicon_rows() if r.engine == "sglang" and r.mode == "agg"]
    glm = Counter((r.system, r.precision, r.radix_cache) for r in rows if r.model == "zhipuai/GLM-5")
    # B200 FP8 from its script's first day; FP4 measured before its script disabled the cache; H200's keeps it;
    # B300's measured 2026-04-03, before glm5_fp8_b300.sh was added
    assert glm == {
        ("b200_sxm", "fp8", False): 36,
        ("b200_sxm", "fp4", True): 10,
        ("h200_sxm", "fp8", True): 30,
        ("b300_sxm", "fp8", True): 10,
    }
    dsr1 = [r for r in rows if r.model in ("deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-V3")]
    assert sum(not r.radix_cache for r in dsr1) == 342
    assert {r.system for r in dsr1 if r.radix_cache} == {"gb200"}  # NVIDIA's own GB200 runs record no flags


@pytest.mark.parametrize(
    "record, fp8",
    [
        (_record("deepseek-ai/DeepSeek-R1", "source_file=2025-11-20.csv; measured=2025-11-19T00:00:00Z"), True),
        (_record("deepseek-ai/DeepSeek-R1", "source_file=x.csv; measured=2025-09-15T00:00:00Z"), False),  # 09-23
        (_record("deepseek-ai/DeepSeek-R1", IX_0324, system="h200_sxm"), False),  # dsr1_fp8_h200.sh: the default
        (_record("Qwen/Qwen3.5-397B-A17B", IX_0324), True),
        (_record("Qwen/Qwen3.5-397B-A17B", IX_0324, precision="bf16"), False),
        (_record("zhipuai/GLM-5", IX_0324, mode="disagg"), False),
        (_record("zhipuai/GLM-5", "source_file=qwen-gap-analysis.csv; measured=2026-03-24"), False),
        # TensorRT-LLM's DeepSeek-R1 scripts write kv_cache_config dtype fp8 from their first versions (their
        # *_trt_slurm.sh names of September 2025 included), on B200 and H200
        (_record("deepseek-ai/DeepSeek-R1", IX_DB.format("2025-11-02"), precision="fp4", backend="trtllm"), True),
        (_record("deepseek-ai/DeepSeek-V3", IX_DB.format("2025-12-15"), "h200_sxm", backend="trtllm"), True),
        (_record("deepseek-ai/DeepSeek-R1", IX_DB.format("2025-09-13"), precision="fp4", backend="trtllm"), False),
        # vLLM's MiniMax-M2.5 and Kimi-K2.5 scripts pass --kv-cache-dtype fp8 from their day, not on Hopper
        (_record("MiniMaxAI/MiniMax-M2.5", IX_DB.format("2026-03-11"), backend="vllm"), False),
        (_record("MiniMaxAI/MiniMax-M2.5", IX_DB.format("2026-03-28"), backend="vllm"), True),
        (_record("MiniMaxAI/MiniMax-M2.5", IX_DB.format("2026-04-03"), precision="fp4", backend="vllm"), False),
        (_record("MiniMaxAI/MiniMax-M2.5", IX_DB.format("2026-04-08"), precision="fp4", backend="vllm"), True),
        (_record("MiniMaxAI/MiniMax-M2.5", IX_DB.format("2026-04-03"), "b300_sxm", backend="vllm"), False),
        (_record("MiniMaxAI/MiniMax-M2.5", IX_DB.format("2026-04-17"), "b300_sxm", backend="vllm"), True),
        (_record("MiniMaxAI/MiniMax-M2.5", IX_DB.format("2026-03-28"), "h200_sxm", backend="vllm"), False),
        (_record("moonshotai/Kimi-K2.5", IX_DB.format("2026-03-27"), precision="fp4", backend="vllm"), False),
        (_record("moonshotai/Kimi-K2.5", IX_DB.format("2026-04-20"), precision="fp4", backend="vllm"), True),
        (_record("moonshotai/Kimi-K2.5", IX_DB.format("2026-04-20"), "b300_sxm", "fp4", backend="vllm"), False),
    ],
)
def test_inferencex_rows_of_the_scripts_that_set_an_fp8_kv_cache_read_it(record, fp8):
    from demos.zoo.vendor_data.inferencex import kv_cache_fp8

    assert kv_cache_fp8(record) is fp8


@needs_tables
def test_the_serving_check_plans_a_row_at_its_scripts_kv_cache_else_at_the_engines_default():
    from demos.fidelity.serving import _plan

    rows = {r.id: r for r in measured.silicon_rows()}
    dsr1 = next(r for r in rows.values() if r.kv_cache == "fp8" and r.model == "deepseek-ai/DeepSeek-R1")
    assert _plan(dsr1)["kv_cache_dtype"] == "fp8"  # the model's own (BF16) without its script
    h200 = next(r for r in rows.values() if r.engine == "sglang" and r.system == "h200_sxm" and "DeepSeek" in r.model)
    assert h200.kv_cache is None and _plan(h200)["kv_cache_dtype"] is None
    counts = Counter((r.engine, r.mode, r.kv_cache) for r in rows.values())
    assert counts["sglang", "agg", "fp8"] == 519
    assert (counts["trtllm", "agg", "fp8"], counts["vllm", "agg", "fp8"]) == (366, 321)  # their scripts' too
    # the disaggregated rows whose srt-slurm recipes set it (DISAGG_KV_CACHE_FP8)
    assert {(e, m): n for (e, m, kv), n in counts.items() if kv and m == "disagg"} == {
        ("sglang", "disagg"): DISAGG_SGLANG,
        ("trtllm", "disagg"): DISAGG_TRTLLM,
        ("vllm", "disagg"): 14,
    }


DISAGG_SGLANG, DISAGG_TRTLLM = 232, 878
"""The measured disaggregated rows at an FP8 cache by engine (copies included), pinned by the test above."""


@pytest.mark.parametrize(
    "record, fp8",
    [
        # TensorRT-LLM's DeepSeek-R1 recipes set kv_cache_config.dtype fp8 on every GPU, Hopper too, from 2026-01-27
        (_record("deepseek-ai/DeepSeek-R1", IX_DB.format("2026-01-29"), "b200_sxm", "fp4", "disagg", "trtllm"), True),
        (_record("deepseek-ai/DeepSeek-V3", IX_DB.format("2026-02-08"), "h200_sxm", "fp8", "disagg", "trtllm"), True),
        (_record("deepseek-ai/DeepSeek-R1", IX_DB.format("2025-12-19"), "gb200", "fp4", "disagg", "trtllm"), False),
        (_record("deepseek-ai/DeepSeek-R1", IX_DB.format("2026-02-01"), "gb300", "fp8", "disagg", "trtllm"), False),
        (_record("deepseek-ai/DeepSeek-R1", IX_DB.format("2026-02-03"), "gb300", "fp8", "disagg", "trtllm"), True),
        # SGLang's: fp8_e4m3 on Blackwell (B200 from its recipes' first version), the default (BF16) on Hopper
        (_record("deepseek-ai/DeepSeek-R1", IX_DB.format("2026-02-09"), "gb300", "fp4", "disagg"), True),
        (_record("deepseek-ai/DeepSeek-R1", IX_DB.format("2026-02-07"), "b200_sxm", "fp4", "disagg"), False),
        (_record("deepseek-ai/DeepSeek-R1", IX_DB.format("2026-03-10"), "b200_sxm", "fp4", "disagg"), True),
        (_record("deepseek-ai/DeepSeek-R1", IX_DB.format("2026-02-07"), "h200_sxm", "fp8", "disagg"), False),
        (_record("deepseek-ai/DeepSeek-R1", IX_DB.format("2026-02-08"), "gb200", "fp4", "disagg"), True),
        (_record("deepseek-ai/DeepSeek-R1", IX_DB.format("2026-02-01"), "gb200", "fp8", "disagg"), False),
        # Kimi-K2.5 NVFP4 on GB200: the TensorRT-LLM and vLLM recipes InferenceX named from April 2026
        (_record("moonshotai/Kimi-K2.5", IX_DB.format("2026-04-18"), "gb200", "fp4", "disagg", "trtllm"), True),
        (_record("moonshotai/Kimi-K2.5", IX_DB.format("2026-04-02"), "gb200", "fp4", "disagg", "trtllm"), False),
        (_record("moonshotai/Kimi-K2.5", IX_DB.format("2026-04-07"), "gb200", "fp4", "disagg", "vllm"), True),
        # a co-located row is its script's (KV_CACHE_FP8), not a recipe's; GLM-5's recipes were not read
        (_record("deepseek-ai/DeepSeek-R1", IX_DB.format("2026-03-10"), "gb200", "fp4", "agg", "trtllm"), False),
        (_record("zhipuai/GLM-5", IX_DB.format("2026-04-18"), "gb200", "fp4", "disagg", "trtllm"), False),
        # NVIDIA's own rows are no InferenceX export
        (
            _record(
                "deepseek-ai/DeepSeek-R1", "source_file=x.csv; measured=2026-03-10", "gb200", "fp4", "disagg", "trtllm"
            ),
            False,
        ),
    ],
)
def test_disaggregated_inferencex_rows_of_recipes_that_set_an_fp8_kv_cache_read_it(record, fp8):
    from demos.zoo.vendor_data.inferencex import kv_cache_fp8

    assert kv_cache_fp8(record) is fp8
