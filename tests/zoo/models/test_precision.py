"""demos.zoo.models.precision: with_precision puts a spec's weights and KV cache at other dtypes, and nothing else."""

from __future__ import annotations

import dataclasses

import pytest

from demos.zoo.costs import layer_costs
from demos.zoo.memory import memory_estimate
from demos.zoo.models import with_precision
from demos.zoo.models.dtypes import DTYPES
from demos.zoo.models.params import attention_out_params, count_params, expert_params
from demos.zoo.models.precision import KV_CACHE_DTYPES, WEIGHT_DTYPES
from demos.zoo.models.presets import get_preset
from demos.zoo.models.spec import ModelSpecError, Precision
from demos.zoo.profile import gpu_profile
from demos.zoo.workload import Workload, cluster_for


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


def test_fp4_is_a_4_bit_block_format_for_the_routed_experts_and_the_parts_the_checkpoint_quantizes():
    spec = with_precision(get_preset("qwen3.5-397b-a17b"), weights="fp4")
    # NVIDIA's NVFP4 layout: 18/32 bytes a value (an FP8 scale per 16); the rest in the activation dtype
    assert spec.precision == Precision(experts="nvfp4")
    assert get_preset("gpt-oss-120b").precision == Precision(experts="mxfp4")  # its own 17/32 MXFP4
    bf16 = with_precision(spec, weights="bf16")
    assert expert_weight_bytes(spec) == expert_weight_bytes(bf16) * 18 / 64
    # DeepSeek's NVFP4 checkpoints quantize the dense and shared MLPs and o_proj too; GLM-5's and
    # Kimi-K2.5's the MLPs only (NVFP4_SCOPE)
    ds = with_precision(get_preset("deepseek-r1"), weights="fp4").precision
    assert ds == Precision(experts="nvfp4", mlp="nvfp4", attention_out="nvfp4")
    assert (ds.store("weights"), ds.store("mlp"), ds.store("attention_out")) == ("bfloat16", "nvfp4", "nvfp4")
    for name in ("glm-5", "kimi-k2.5"):
        p = with_precision(get_preset(name), weights="fp4").precision
        assert (p.mlp, p.attention_out) == ("nvfp4", None), name
    # another precision clears the overrides: every weight at FP8 again
    fp8 = with_precision(with_precision(get_preset("deepseek-r1"), weights="fp4"), weights="fp8").precision
    assert fp8 == get_preset("deepseek-r1").precision and fp8.store("mlp") == "fp8_e4m3"


def test_the_quantized_parts_are_stored_and_multiplied_in_their_dtype():
    """The memory model and the step's GEMMs read the dense MLPs, shared experts and o_proj at the checkpoint's
    dtype: DeepSeek-R1 at NVFP4 holds (7.2B o_proj + 1.2B dense + 2.6B shared parameters) x (2 - 18/32) bytes
    less than with those in BF16, and its dense MLP and o_proj read fewer weight bytes."""
    fp4 = with_precision(get_preset("deepseek-r1"), weights="fp4")
    experts_only = dataclasses.replace(fp4, precision=Precision(experts="nvfp4"))
    assert attention_out_params(fp4) == 61 * 128 * 128 * 7168
    c = count_params(fp4)
    saved = (attention_out_params(fp4) + c.dense_mlp + c.shared_experts) * (2 - 18 / 32)
    works = [Workload(s, cluster_for("b200", 1, 8, 8), tokens=64) for s in (experts_only, fp4)]
    mems = [memory_estimate(w).weights for w in works]
    assert mems[0] - mems[1] == pytest.approx(saved, rel=1e-9)
    dense = [layer_costs(w, 64, 0, gpu_profile(w.gpu)) for w in works]
    assert dense[1].dense_mlp.bytes < 0.4 * dense[0].dense_mlp.bytes
    assert dense[1].attn_out.bytes < 0.5 * dense[0].attn_out.bytes
    assert dense[1].attn_proj.bytes == dense[0].attn_proj.bytes  # the query and latent projections stay BF16


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
