"""ROCm/aiter's screened kernel tables (demos/zoo/vendor_data/aiter.py, README.md): what they hold.

Fast, no network: the CSVs ship beside the reader. The one test that regenerates them from a mirror of the
source (scripts/extract_aiter_tables.py --check) is skipped where the mirror is absent.
"""

from __future__ import annotations

import math
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from demos.zoo.vendor_data.aiter import ARCH_OF, GEMM_DTYPES, SOURCE, AiterGemmRow, AiterMoeRow, gemm_rows, moe_rows

ROOT = Path(__file__).resolve().parents[2]
MIRROR = Path("/work/.mirror/ROCm+aiter/repo")

# The counts README.md states (keep the two in step): GEMM rows per (arch, dtype), MoE rows per arch, and the
# rows each source file gave to the two CSVs together.
GEMM_COUNTS = {
    ("gfx942", "fp8_block"): 1434,
    ("gfx950", "bf16"): 1001,
    ("gfx950", "fp8_block"): 1156,
    ("gfx950", "mxfp4"): 903,
}
MOE_COUNTS = {"gfx942": 64, "gfx950": 1096}
FILE_COUNTS = {
    "aiter/configs/a4w4_blockscale_tuned_gemm.csv": 855,
    "aiter/configs/a8w8_blockscale_bpreshuffle_tuned_gemm.csv": 25,
    "aiter/configs/a8w8_blockscale_tuned_gemm.csv": 49,
    "aiter/configs/bf16_tuned_gemm.csv": 34,
    "aiter/configs/model_configs/a8w8_blockscale_bpreshuffle_tuned_gemm_dsv3.csv": 112,
    "aiter/configs/model_configs/a8w8_blockscale_bpreshuffle_tuned_gemm_glm5.2.csv": 12,
    "aiter/configs/model_configs/a8w8_blockscale_bpreshuffle_tuned_gemm_qwen3.5_397b.csv": 345,
    "aiter/configs/model_configs/a8w8_blockscale_bpreshuffle_tuned_gemm_qwen3_235b.csv": 60,
    "aiter/configs/model_configs/a8w8_blockscale_tuned_fmoe_ds_v3.csv": 8,
    "aiter/configs/model_configs/a8w8_blockscale_tuned_fmoe_glm5.csv": 11,
    "aiter/configs/model_configs/a8w8_blockscale_tuned_fmoe_glm5_1.csv": 27,
    "aiter/configs/model_configs/a8w8_blockscale_tuned_fmoe_minimax-m2_5.csv": 58,
    "aiter/configs/model_configs/a8w8_blockscale_tuned_fmoe_qwen3_235b.csv": 13,
    "aiter/configs/model_configs/a8w8_blockscale_tuned_fmoe_qwen3_5_397b.csv": 14,
    "aiter/configs/model_configs/a8w8_blockscale_tuned_gemm_ds_v3.csv": 558,
    "aiter/configs/model_configs/a8w8_blockscale_tuned_gemm_glm5_1.csv": 202,
    "aiter/configs/model_configs/a8w8_blockscale_tuned_gemm_qwen36_27b.csv": 420,
    "aiter/configs/model_configs/a8w8_blockscale_tuned_gemm_qwen3_235b.csv": 5,
    "aiter/configs/model_configs/a8w8_blockscale_tuned_gemm_qwen3_5_397b_a13b.csv": 26,
    "aiter/configs/model_configs/a8w8_blockscale_tuned_gemm_qwen3_next_80b_a3b.csv": 104,
    "aiter/configs/model_configs/a8w8_blockscale_tuned_gemm_qwen3_vl_235b.csv": 157,
    "aiter/configs/model_configs/a8w8_blockscale_tuned_gemm_qwen3_vl_32b.csv": 360,
    "aiter/configs/model_configs/dsv3_a4w4_blockscale_tuned_gemm.csv": 24,
    "aiter/configs/model_configs/dsv3_bf16_tuned_gemm.csv": 41,
    "aiter/configs/model_configs/dsv3_fp4_tuned_fmoe.csv": 42,
    "aiter/configs/model_configs/dsv4_a8w8_blockscale_bpreshuffle_tuned_gemm.csv": 111,
    "aiter/configs/model_configs/dsv4_a8w8_blockscale_tuned_gemm.csv": 6,
    "aiter/configs/model_configs/dsv4_bf16_tuned_gemm.csv": 126,
    "aiter/configs/model_configs/dsv4_fp8fp4_tuned_fmoe.csv": 168,
    "aiter/configs/model_configs/glm47_bf16_tuned_gemm.csv": 11,
    "aiter/configs/model_configs/glm47_fp8_tuned_fmoe.csv": 68,
    "aiter/configs/model_configs/glm5_a8w8_blockscale_bpreshuffle_tuned_gemm.csv": 38,
    "aiter/configs/model_configs/glm5_bf16_tuned_gemm.csv": 75,
    "aiter/configs/model_configs/glm5_fp4_tuned_fmoe.csv": 53,
    "aiter/configs/model_configs/glm5_mxfp8_tuned_fmoe.csv": 32,
    "aiter/configs/model_configs/gptoss_a16w4_tuned_fmoe.csv": 24,
    "aiter/configs/model_configs/gptoss_bf16_tuned_gemm.csv": 12,
    "aiter/configs/model_configs/gptoss_fp4_tuned_fmoe.csv": 20,
    "aiter/configs/model_configs/gptoss_fp8fp4_tuned_fmoe.csv": 16,
    "aiter/configs/model_configs/kimi_bf16_tuned_gemm.csv": 15,
    "aiter/configs/model_configs/kimik2_bf16_tuned_gemm.csv": 14,
    "aiter/configs/model_configs/kimik2_fp4_tuned_fmoe.csv": 25,
    "aiter/configs/model_configs/kimik2_fp8fp4_tuned_fmoe.csv": 63,
    "aiter/configs/model_configs/kimik2_i4_tuned_fmoe.csv": 60,
    "aiter/configs/model_configs/kimik3_a4w4_blockscale_tuned_gemm.csv": 24,
    "aiter/configs/model_configs/kimik3_a4w4_tuned_fmoe.csv": 17,
    "aiter/configs/model_configs/kimik3_a8w4_tuned_fmoe.csv": 31,
    "aiter/configs/model_configs/kimik3_bf16_tuned_gemm.csv": 106,
    "aiter/configs/model_configs/kimik3_fp4_tuned_fmoe.csv": 32,
    "aiter/configs/model_configs/llama405B_bf16_tuned_gemm.csv": 120,
    "aiter/configs/model_configs/llama70B_bf16_tuned_gemm.csv": 123,
    "aiter/configs/model_configs/mimo_v2_5_pro_tuned_fmoe.csv": 5,
    "aiter/configs/model_configs/minimax_m25_fp4_tuned_fmoe.csv": 54,
    "aiter/configs/model_configs/minimax_m3_eagle_bf16_tuned_gemm.csv": 112,
    "aiter/configs/model_configs/minimax_m3_fp4_tuned_fmoe.csv": 27,
    "aiter/configs/model_configs/minimax_m3_mxfp8_tuned_fmoe.csv": 32,
    "aiter/configs/model_configs/qwen32B_bf16_tuned_gemm.csv": 120,
    "aiter/configs/model_configs/qwen3_235b_bf16_tuned_fmoe.csv": 48,
    "aiter/configs/model_configs/qwen3_5_397b_bf16_tuned_gemm.csv": 82,
    "aiter/configs/model_configs/qwen3_5_397b_fp4_tuned_fmoe.csv": 48,
    "aiter/configs/model_configs/qwen3_8_2400b_fp4_tuned_fmoe.csv": 32,
    "aiter/configs/model_configs/qwen3_8b_bf16_tuned_gemm.csv": 10,
    "aiter/configs/model_configs/qwen3_vl_fp4_tuned_fmoe.csv": 16,
    "aiter/configs/model_configs/qwen3next_80b_fp8_tuned_fmoe.csv": 116,
}
M_PER_SHAPE = {"gfx942": 32, "gfx950": 12}  # the stratification's cap (README.md)

# Dense peaks (demos/zoo/hardware/gpus.py): MI300X for gfx942; MI355X, the faster CDNA4 part, for gfx950.
PEAK = {
    ("gfx942", "fp8_block"): 2614.9e12,
    ("gfx950", "fp8_block"): 5033e12,
    ("gfx942", "bf16"): 1307.4e12,
    ("gfx950", "bf16"): 2516.6e12,
    ("gfx950", "mxfp4"): 10066e12,
}
MOE_PEAK_DTYPE = {  # a fused MoE at its activations' rate
    "bfloat16": "bf16",
    "float8_e4m3fnuz": "fp8_block",
    "float8_e4m3fn": "fp8_block",
    "float4_e2m1fn_x2": "mxfp4",
}
ALL_GPUS = tuple(ARCH_OF)


def _all_gemm() -> list[AiterGemmRow]:
    return gemm_rows("mi300x") + gemm_rows("mi355x")


def _all_moe() -> list[AiterMoeRow]:
    return moe_rows("mi300x") + moe_rows("mi355x")


def test_every_row_is_positive_and_finite():
    for r in _all_gemm():
        assert min(r.m, r.n, r.k) > 0 and 0 < r.seconds < 1 and math.isfinite(r.seconds), r
        assert r.dtype in GEMM_DTYPES and r.file.startswith("aiter/configs/") and "untuned" not in r.file, r
    for r in _all_moe():
        assert min(r.tokens, r.hidden, r.inter, r.experts, r.top_k) > 0, r
        assert r.top_k <= r.experts and 0 < r.seconds < 1 and math.isfinite(r.seconds), r
        assert "fmoe" in r.file and "untuned" not in r.file, r


def test_arch_and_cu_num_agree_and_only_cdna3_304_and_cdna4_256():
    pairs = {(r.arch, r.cu_num) for r in _all_gemm()} | {(r.arch, r.cu_num) for r in _all_moe()}
    assert pairs == {("gfx942", 304), ("gfx950", 256)}


def test_no_duplicate_keys():
    gemm = Counter((r.arch, r.dtype, r.m, r.n, r.k) for r in _all_gemm())
    assert [k for k, n in gemm.items() if n > 1] == []
    moe = Counter(r[:11] for r in _all_moe())
    assert [k for k, n in moe.items() if n > 1] == []


def test_no_tuner_artefact_run_is_left():
    """The screening rule re-applied: one time at >= 3 values of M (tokens), all else equal, would be a copy."""
    runs = defaultdict(set)
    for r in _all_gemm():
        runs[(r.arch, r.dtype, r.n, r.k, r.seconds)].add(r.m)
    for r in _all_moe():
        runs[(*r[:2], *r[3:11], r.seconds)].add(r.tokens)
    assert [k for k, ms in runs.items() if len(ms) >= 3] == []


def test_counts_match_readme():
    assert Counter((r.arch, r.dtype) for r in _all_gemm()) == GEMM_COUNTS
    assert Counter(r.arch for r in _all_moe()) == MOE_COUNTS
    assert Counter(r.file for r in _all_gemm() + _all_moe()) == FILE_COUNTS
    assert sum(GEMM_COUNTS.values()) + sum(MOE_COUNTS.values()) == sum(FILE_COUNTS.values()) == 5654


def test_both_arches_have_fp8_block_gemms_and_moe():
    for gpu in ALL_GPUS:
        assert len(gemm_rows(gpu, "fp8_block")) > 1000
        assert moe_rows(gpu)
    assert gemm_rows("mi300x", "bf16") == [] and gemm_rows("mi300x", "mxfp4") == []  # none at 304 CUs
    assert {r.dtype for r in gemm_rows("mi355x")} == set(GEMM_DTYPES)


def test_names_of_one_die_read_the_same_rows():
    assert gemm_rows("mi300x") == gemm_rows("mi325x") and moe_rows("mi300x") == moe_rows("mi325x")
    assert gemm_rows("mi350x") == gemm_rows("mi355x") and moe_rows("mi350x") == moe_rows("mi355x")
    assert gemm_rows(" MI300X ") == gemm_rows("mi300x")
    assert {r.arch for r in gemm_rows("mi325x")} == {"gfx942"} and {r.arch for r in moe_rows("mi350x")} == {"gfx950"}


def test_dtype_filter():
    rows = gemm_rows("mi355x")
    for dtype in GEMM_DTYPES:
        assert gemm_rows("mi355x", dtype) == [r for r in rows if r.dtype == dtype]


@pytest.mark.parametrize(
    ("call", "names"),
    [
        (lambda: gemm_rows("h100"), ALL_GPUS),
        (lambda: moe_rows("mi308x"), ALL_GPUS),
        (lambda: gemm_rows("mi300x", "fp8"), GEMM_DTYPES),
    ],
)
def test_unknown_gpu_or_dtype_is_a_one_line_value_error(call, names):
    with pytest.raises(ValueError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message and all(name in message for name in names), message


def test_returned_lists_are_copies():
    rows = gemm_rows("mi300x")
    rows.clear()
    assert gemm_rows("mi300x")
    moe = moe_rows("mi355x")
    moe.pop()
    assert len(moe_rows("mi355x")) == MOE_COUNTS["gfx950"]


def test_every_gemm_stays_below_its_gpu_dense_peak():
    """Planted check: no row's 2 m n k / seconds reaches the dense peak (fp8_block: MI300X 2614.9 TFLOP/s,
    MI355X 5033 TFLOP/s); a row that did would be a mislabelled shape, not a time."""
    worst = defaultdict(float)
    for r in _all_gemm():
        rate = 2.0 * r.m * r.n * r.k / r.seconds
        worst[(r.arch, r.dtype)] = max(worst[(r.arch, r.dtype)], rate / PEAK[(r.arch, r.dtype)])
    assert set(worst) >= {("gfx942", "fp8_block"), ("gfx950", "fp8_block")}
    assert all(v < 1.0 for v in worst.values()), dict(worst)
    # As README.md states: the best FP8 block-scaled GEMMs reach about 40% (MI300X) and 47% (MI355X) of peak.
    assert 0.35 < worst[("gfx942", "fp8_block")] < 0.45 and 0.4 < worst[("gfx950", "fp8_block")] < 0.5


def test_every_fused_moe_stays_below_its_activation_dtype_peak():
    """6 tokens top_k hidden inter FLOP (gate+up and down) per call, held to the activations' dense peak."""
    for r in _all_moe():
        rate = 6.0 * r.tokens * r.top_k * r.hidden * r.inter / r.seconds
        assert rate < PEAK[(r.arch, MOE_PEAK_DTYPE[r.a_dtype])], r


def test_stratified_shapes_keep_at_most_the_cap_of_m():
    ms = defaultdict(set)
    for r in _all_gemm():
        ms[(r.arch, r.dtype, r.n, r.k)].add(r.m)
    assert all(len(v) <= M_PER_SHAPE[key[0]] for key, v in ms.items())
    # DeepSeek-V3's MI300X table is kept whole (its shapes have 23 to 29 M values each).
    ds_v3 = [r for r in gemm_rows("mi300x") if r.file.endswith("a8w8_blockscale_tuned_gemm_ds_v3.csv")]
    assert len(ds_v3) == 295


def test_one_known_row():
    """One row of DeepSeek-V3's MI300X table as the source has it: M 1, N 3072, K 1536 at 6.6154 us."""
    [row] = [r for r in gemm_rows("mi300x", "fp8_block") if (r.m, r.n, r.k) == (1, 3072, 1536)]
    assert row.seconds == 6.6154e-06 and row.file == "aiter/configs/model_configs/a8w8_blockscale_tuned_gemm_ds_v3.csv"


def test_source_names_the_commit_and_licence():
    assert "e4048607" in SOURCE and "MIT" in SOURCE and "README.md" in SOURCE
    readme = (ROOT / "demos" / "zoo" / "vendor_data" / "README.md").read_text(encoding="utf-8")
    assert "e4048607a535ace3a2b51ded31b1c8c2d45c0879" in readme and "Copyright" in readme


@pytest.mark.skipif(not MIRROR.exists(), reason="needs a git mirror of ROCm/aiter at /work/.mirror/ROCm+aiter/repo")
def test_csvs_regenerate_from_the_mirror():
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "extract_aiter_tables.py"), "--repo", str(MIRROR), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
