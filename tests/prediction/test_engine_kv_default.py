"""The KV cache dtype the engine lines keep: SGLang leaves DeepSeek-V4's cache, and DeepSeek sparse attention's
on Blackwell, in FP8 E4M3 at ``--kv-cache-dtype auto`` (``SGLANG_FP8_KV_DEFAULT``), so where the prediction ran
BF16 its line says so; the serving check runs SGLang's rows at that default (``engine_kv``)."""

from __future__ import annotations

import pytest

from demos.fidelity.served import engine_kv
from demos.prediction.api import predict
from demos.prediction.engines import sglang_kv_default


@pytest.mark.parametrize(
    "model_type, family, kv",
    [
        ("deepseek_v4", "hopper", "fp8"),
        ("deepseek_v4", "cdna4", "fp8"),
        ("glm_moe_dsa", "hopper", "bf16"),
        ("glm_moe_dsa", "blackwell", "fp8"),
        ("deepseek_v32", "blackwell", "fp8"),
        ("deepseek_v3", "blackwell", "bf16"),
        (None, "blackwell", "bf16"),
    ],
)
def test_sglangs_default_kv_cache_by_model_and_gpu(model_type, family, kv):
    assert sglang_kv_default(model_type, family) == kv


def test_the_serving_check_runs_sglangs_rows_at_its_default_and_the_others_at_the_models():
    assert engine_kv("sglang", "glm-5", "b200") == "fp8"
    assert engine_kv("sglang", "glm-5", "h200") is None
    assert engine_kv("vllm", "glm-5", "b200") is None
    assert engine_kv("sglang", "deepseek-v4-flash", "h100") == "fp8"


@pytest.mark.slow  # three whole predictions
def test_a_bf16_prediction_of_a_dsa_model_pins_sglangs_cache_and_an_fp8_one_asks_both_engines():
    bf16 = predict("glm-5", gpu="b200", nodes=2, ep=16, tokens=[64]).recommendation
    assert " --kv-cache-dtype bfloat16" in bf16.sglang and "--kv-cache-dtype" not in bf16.vllm
    fp8 = predict("glm-5", gpu="b200", nodes=2, ep=16, tokens=[64], kv_cache_dtype="fp8").recommendation
    assert " --kv-cache-dtype fp8_e4m3" in fp8.sglang and " --kv-cache-dtype fp8" in fp8.vllm
    assert "bfloat16" not in fp8.sglang
    r1 = predict("deepseek-r1", gpu="b200", nodes=2, ep=16, tokens=[64]).recommendation
    assert "--kv-cache-dtype" not in r1.sglang


@pytest.mark.slow  # two whole predictions
def test_a_bf16_prediction_of_an_nvfp4_checkpoint_says_vllm_keeps_its_declared_fp8_cache():
    """NVIDIA's NVFP4 checkpoints declare an FP8 KV cache, which vLLM keeps when its line sets none: the line
    says so where the prediction sized BF16, and not where it sized FP8 (the flag then on both lines)."""
    note = "declares an FP8 KV cache in its quantization config, which vLLM keeps"
    bf16 = predict("deepseek-r1", gpu="b200", nodes=2, ep=16, tokens=[64], weights="fp4").recommendation
    assert any(note in n for n in bf16.notes) and "--kv-cache-dtype" not in bf16.vllm
    fp8 = predict("deepseek-r1", gpu="b200", nodes=2, ep=16, tokens=[64], weights="fp4", kv_cache_dtype="fp8")
    assert not any(note in n for n in fp8.recommendation.notes) and " --kv-cache-dtype fp8" in fp8.recommendation.vllm
