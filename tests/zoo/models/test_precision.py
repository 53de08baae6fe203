"""demos.zoo.models.precision: with_precision puts a spec's weights and KV cache at other dtypes, and nothing else."""

from __future__ import annotations

import dataclasses

import pytest

from demos.zoo.models import with_precision
from demos.zoo.models.dtypes import DTYPES
from demos.zoo.models.params import count_params, expert_params
from demos.zoo.models.precision import KV_CACHE_DTYPES, WEIGHT_DTYPES
from demos.zoo.models.presets import get_preset
from demos.zoo.models.spec import ModelSpecError, Precision


def expert_weight_bytes(spec) -> float:
    """Bytes of every routed expert of every MoE layer at the spec's expert dtype."""
    return spec.moe_layers * spec.moe.routed_experts * expert_params(spec) * spec.precision.bytes_of("experts")


def non_expert_weight_bytes(spec) -> float:
    c = count_params(spec)
    return (c.attention + c.dense_mlp + c.shared_experts + c.router) * spec.precision.bytes_of("weights")


def test_the_flag_values():
    assert tuple(WEIGHT_DTYPES) == ("bf16", "fp8", "fp4")
    assert tuple(KV_CACHE_DTYPES) == ("bf16", "fp8")
    assert all(d in DTYPES for pair in WEIGHT_DTYPES.values() for d in pair if d is not None)


def test_fp8_halves_the_expert_weight_bytes_of_a_bf16_model():
    bf16 = get_preset("glm-4.5")
    assert bf16.precision == Precision()
    fp8 = with_precision(bf16, weights="fp8")
    assert expert_weight_bytes(fp8) == expert_weight_bytes(bf16) / 2
    assert non_expert_weight_bytes(fp8) == non_expert_weight_bytes(bf16) / 2  # every weight, as DeepSeek's FP8
    # FP8 experts take FP8 inputs: the dispatch goes FP8 too; the combine (activation dtype) and cache stay.
    assert fp8.precision == Precision("fp8_e4m3", "fp8_e4m3", "fp8_e4m3", "bfloat16", "bfloat16")
    assert dataclasses.replace(fp8, precision=bf16.precision) == bf16  # nothing but the precision changed


def test_bf16_undoes_an_fp8_checkpoint():
    fp8 = get_preset("deepseek-v3")
    bf16 = with_precision(fp8, weights="bf16")
    assert bf16.precision == Precision()
    assert expert_weight_bytes(bf16) == 2 * expert_weight_bytes(fp8)


def test_fp4_is_a_4_bit_block_format_for_the_routed_experts_only():
    spec = with_precision(get_preset("deepseek-v3"), weights="fp4")
    # NVIDIA's NVFP4 layout: 18/32 bytes a value (an FP8 scale per 16); the rest in the activation dtype
    assert spec.precision == Precision(experts="nvfp4")
    assert get_preset("gpt-oss-120b").precision == Precision(experts="mxfp4")  # its own 17/32 MXFP4
    bf16 = with_precision(spec, weights="bf16")
    assert expert_weight_bytes(spec) == expert_weight_bytes(bf16) * 18 / 64


def test_kv_cache_alone_changes_only_the_cache():
    spec = get_preset("glm-4.5-air")
    fp8 = with_precision(spec, kv_cache="fp8")
    assert fp8.precision == dataclasses.replace(spec.precision, kv_cache="fp8_e4m3")
    assert fp8.precision.bytes_of("kv_cache") == spec.precision.bytes_of("kv_cache") / 2
    assert with_precision(fp8, kv_cache="bf16").precision == spec.precision


def test_nothing_asked_is_the_same_spec():
    spec = get_preset("qwen3-30b-a3b")
    assert with_precision(spec) is spec
    assert with_precision(spec, weights="bf16", kv_cache="bf16") is spec  # already so


@pytest.mark.parametrize(
    "kwargs,field,fragment",
    [
        ({"weights": "int4"}, "with_precision.weights", "must be one of bf16, fp8, fp4; got 'int4'"),
        ({"weights": "FP8"}, "with_precision.weights", "got 'FP8'"),
        ({"weights": 8}, "with_precision.weights", "got 8"),
        ({"kv_cache": "fp4"}, "with_precision.kv_cache", "must be one of bf16, fp8; got 'fp4'"),
        ({"kv_cache": "bfloat16"}, "with_precision.kv_cache", "got 'bfloat16'"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_argument(kwargs, field, fragment):
    with pytest.raises(ModelSpecError) as info:
        with_precision(get_preset("glm-4.5"), **kwargs)
    assert info.value.field == field and fragment in str(info.value) and "\n" not in str(info.value)


def test_the_spec_must_be_a_spec():
    with pytest.raises(ModelSpecError, match="^with_precision.spec: must be a ModelSpec, got str$"):
        with_precision("glm-4.5", weights="fp8")
