"""What an NVFP4 checkpoint quantizes beside its routed experts: ``modelopt_scope`` reads a ModelOpt ignore
list, ``NVFP4_SCOPE`` holds each family's for ``--weights fp4``, and the two agree on the extra's copies; which
checkpoints declare an FP8 KV cache, and the engines that keep it by default (``engine_kv``)."""

from __future__ import annotations

import json

import pytest

from demos.fidelity.served import engine_kv
from demos.zoo import measured
from demos.zoo.models import CHECKPOINTS, count_params, get_preset, load_config, with_precision
from demos.zoo.models.hf_config._quantization import modelopt_scope
from demos.zoo.models.params import attention_out_params
from demos.zoo.models.precision import NVFP4_SCOPE
from demos.zoo.models.presets import KV_CACHE_FP8_CHECKPOINTS

needs_extra = pytest.mark.skipif(not measured.available(), reason="needs the measured extra")

_MLA = ("self_attn.q_a_proj", "self_attn.q_b_proj", "self_attn.kv_a_proj_with_mqa", "self_attn.kv_b_proj")


def test_an_ignore_list_leaves_out_the_parts_any_of_whose_modules_it_names():
    # DeepSeek-V3.1's: the query and latent projections of every layer, and the MTP layer whole
    deepseek = tuple(f"model.layers.{i}.{m}" for i in range(61) for m in _MLA) + ("model.layers.61*", "lm_head")
    assert modelopt_scope(deepseek, 61) == {"mlp", "attention_out"}
    # GLM-5's: o_proj too
    glm = deepseek + tuple(f"model.layers.{i}.self_attn.o_proj" for i in range(61))
    assert modelopt_scope(glm, 61) == {"mlp"}
    # Kimi-K2.6's: the first (dense) layer whole and every MoE layer's shared experts, under the vision
    # wrapper's prefix; o_proj of one layer in 61 ignored stays a quantized part
    kimi = ("language_model.model.layers.0*",) + tuple(
        f"language_model.model.layers.{i}.mlp.shared_experts*" for i in range(1, 61)
    )
    assert modelopt_scope(kimi, 61) == {"attention_out"}
    assert modelopt_scope(("language_model.model.layers.0*",), 61) == {"mlp", "attention_out"}
    # Qwen3.5's singular shared expert and its nested prefix, every layer's
    qwen = tuple(f"model.language_model.layers.{i}.mlp.shared_expert*" for i in range(60))
    assert modelopt_scope(qwen, 60) == {"attention_out"}
    assert modelopt_scope(("*self_attn*",), 60) == {"mlp"}
    # a pattern for a layer past the trunk (the MTP layer) leaves every part in
    assert modelopt_scope(("model.layers.61*",), 61) == {"mlp", "attention_out"}
    # "layers.1*" reaches layers 10-19 too, as fnmatch reads it: 11 of 20 layers
    assert modelopt_scope(("model.layers.1*",), 20) == frozenset()
    assert modelopt_scope(("model.layers.1*",), 30) == {"mlp", "attention_out"}


def _present(spec, parts):
    """The parts ``spec`` has weights for (MiniMax has no dense MLP and no shared expert)."""
    c = count_params(spec)
    has = {"mlp": c.dense_mlp + c.shared_experts > 0, "attention_out": attention_out_params(spec) > 0}
    return {p for p in parts if has[p]}


IGNORE_LISTS = {
    # hf_quant_config.json copy -> (preset whose family it is, its trunk's layers)
    "nvidia--DeepSeek-V3.1-NVFP4": "deepseek-v3",
    "nvidia--DeepSeek-V3.2-NVFP4": "deepseek-v3.2",
    "nvidia--GLM-5-NVFP4": "glm-5",
    "nvidia--Qwen3.5-397B-A17B-NVFP4": "qwen3.5-397b-a17b",
    "nvidia--MiniMax-M2.5-NVFP4": "minimax-m2.5",
}


@needs_extra
@pytest.mark.parametrize("stem", sorted(IGNORE_LISTS))
def test_the_table_is_what_the_checkpoints_ignore_lists_say(stem):
    preset = get_preset(IGNORE_LISTS[stem])
    path = measured.data_root().parent / "model_configs" / f"{stem}_hf_quant_config.json"
    ignore = tuple(json.loads(path.read_text())["quantization"]["exclude_modules"])
    read = _present(preset, modelopt_scope(ignore, preset.num_layers))
    assert read == _present(preset, NVFP4_SCOPE.get(preset.model_type, frozenset()))


@needs_extra
def test_kimi_k2_5s_nvfp4_config_loads_as_the_preset_at_fp4():
    """nvidia/Kimi-K2.5-NVFP4's config.json carries its ignore list (attention and the LM head): its dense
    layer and shared expert are NVFP4, as ``--weights fp4`` gives the preset."""
    spec = load_config(measured.data_root().parent / "model_configs" / "nvidia--Kimi-K2.5-NVFP4_config.json")
    assert (spec.precision.experts, spec.precision.mlp, spec.precision.attention_out) == ("nvfp4", "nvfp4", None)
    assert spec.precision == with_precision(get_preset("kimi-k2.5"), weights="fp4").precision


def _declares_fp8_kv(stem: str) -> bool | None:
    """Whether the extra's copy of a checkpoint's quantization config declares an FP8 KV cache; None: no copy."""
    root = measured.data_root().parent / "model_configs"
    hf = root / f"{stem}_hf_quant_config.json"
    if hf.exists():
        return json.loads(hf.read_text())["quantization"].get("kv_cache_quant_algo") == "FP8"
    cfg = root / f"{stem}_config.json"
    if not cfg.exists():
        return None
    q = json.loads(cfg.read_text()).get("quantization_config") or {}
    scheme = q.get("kv_cache_scheme") or {}
    return q.get("kv_cache_quant_algo") == "FP8" or (scheme.get("num_bits"), scheme.get("type")) == (8, "float")


@needs_extra
def test_the_fp8_cache_checkpoints_are_those_whose_configs_declare_one():
    repos = {repo for by in CHECKPOINTS.values() for repo in by.values()}
    assert KV_CACHE_FP8_CHECKPOINTS <= repos
    read = {repo: _declares_fp8_kv(repo.replace("/", "--")) for repo in sorted(repos)}
    copied = {repo for repo, v in read.items() if v is not None}
    assert {repo for repo in copied if read[repo]} == KV_CACHE_FP8_CHECKPOINTS & copied
    assert "nvidia/MiniMax-M3-NVFP4" in copied and "nvidia/MiniMax-M3-NVFP4" not in KV_CACHE_FP8_CHECKPOINTS
    assert KV_CACHE_FP8_CHECKPOINTS - copied == {"nvidia/DeepSeek-R1-0528-NVFP4-v2"}  # the one assumption


def test_trtllm_and_vllm_keep_an_nvfp4_checkpoints_fp8_cache_and_sglang_its_own_default():
    assert engine_kv("trtllm", "deepseek-r1", "b200", "fp4") == "fp8"
    assert engine_kv("vllm", "kimi-k2.5", "b300", "fp4") == "fp8"
    assert engine_kv("trtllm", "deepseek-r1", "b200") is None  # DeepSeek's own FP8 checkpoint declares none
    assert engine_kv("vllm", "kimi-k2.5", "b200") is None  # Moonshot's INT4 checkpoint
    assert engine_kv("trtllm", "minimax-m3", "b200", "fp4") is None  # its mixed-precision config declares none
    assert engine_kv("sglang", "deepseek-r1", "b200", "fp4") is None  # SGLang keeps BF16 unless told
    assert engine_kv("sglang", "deepseek-v3.2", "b200", "fp4") == "fp8"  # its DSA rule on Blackwell
