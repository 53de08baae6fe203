"""demos.zoo.models.hf_config: every family from a config.json on disk, and every way a file can be wrong."""

from __future__ import annotations

import dataclasses
import json

import pytest

from demos.zoo.models.hf_config import SUPPORTED_MODEL_TYPES, ModelConfigError, load_config, spec_from_config
from demos.zoo.models.presets import PRESET_NAMES, get_preset, preset_config
from demos.zoo.models.spec import GQAAttention, MLAAttention, Precision

FAMILY_OF = {
    "deepseek-v3": "deepseek_v3",
    "kimi-k2": "kimi_k2",
    "deepseek-v2-lite": "deepseek_v2",
    "qwen3-30b-a3b": "qwen3_moe",
    "qwen3-235b-a22b": "qwen3_moe",
    "mixtral-8x7b": "mixtral",
    "gpt-oss-120b": "gpt_oss",
    "glm-4.5": "glm4_moe",
    "glm-4.5-air": "glm4_moe",
    "kimi-k2.5": "kimi_k25",
    "minimax-m2.5": "minimax_m2",
    "gpt-oss-20b": "gpt_oss",
    "deepseek-v3.2": "deepseek_v32",
    "glm-5": "glm_moe_dsa",
    "qwen3.5-397b-a17b": "qwen3_5_moe",
    "deepseek-v4-flash": "deepseek_v4",
    "deepseek-v4-pro": "deepseek_v4",
    "minimax-m3": "minimax_m3",
    "kimi-k3": "kimi_k3",
}
NO_PRESET = {
    "qwen3_next": "tests/zoo/models/test_linear_attention.py loads a flat copy of Qwen3.5's text model",
    "deepseek_ref": "tests/zoo/models/test_deepseek_v4.py loads SGLang's FP8 copies from the measured extra",
    "kimi_linear": "tests/zoo/models/test_kimi_k3.py loads Kimi-K3's text_config alone",
}
"""Families the loader reads without a preset of their own, and where a test loads one."""

# Fields a real config.json carries that the loader does not read: they must not get in the way.
UNREAD = {
    "rope_scaling": {"type": "yarn", "factor": 40},
    "rope_theta": 10000,
    "bos_token_id": 0,
    "eos_token_id": [1, 2],
    "transformers_version": "4.46.3",
    "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config"},
}


def write(tmp_path, config, name="config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(config) if not isinstance(config, str) else config)
    return path


def test_every_supported_family_has_a_preset():
    assert sorted({*FAMILY_OF.values(), *NO_PRESET}) == sorted(SUPPORTED_MODEL_TYPES)
    assert sorted(FAMILY_OF) == sorted(PRESET_NAMES)


@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_each_family_loads_from_a_file(tmp_path, preset):
    path = write(tmp_path, {**preset_config(preset), **UNREAD})
    spec = load_config(path)
    assert spec.model_type == FAMILY_OF[preset]
    assert spec.source == str(path) and spec.name == FAMILY_OF[preset]
    # The file gives the same model as the preset (which went through spec_from_config with its own source).
    assert dataclasses.replace(spec, name=preset, source=get_preset(preset).source) == get_preset(preset)


def test_deepseek_v3_fields(tmp_path):
    s = load_config(write(tmp_path, preset_config("deepseek-v3")))
    assert (s.hidden_size, s.num_layers, s.vocab_size, s.first_k_dense, s.dense_intermediate_size) == (
        7168,
        61,
        129280,
        3,
        18432,
    )
    assert s.attention == MLAAttention(
        heads=128, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128
    )
    m = s.moe
    assert (m.routed_experts, m.top_k, m.shared_experts, m.intermediate_size) == (256, 8, 1, 2048)
    assert (m.n_group, m.topk_group, m.scoring, m.score_correction_bias, m.routed_scaling_factor) == (
        8,
        4,
        "sigmoid",
        True,
        2.5,
    )
    assert s.mtp_layers == 1 and s.tie_embeddings is False
    # FP8 weights and dispatch (FP8 experts take FP8 inputs), BF16 combine and KV cache.
    assert s.precision == Precision(
        weights="fp8_e4m3", experts="fp8_e4m3", dispatch="fp8_e4m3", combine="bfloat16", kv_cache="bfloat16"
    )


def test_deepseek_v2_lite_has_no_query_compression_and_greedy_routing(tmp_path):
    s = load_config(write(tmp_path, preset_config("deepseek-v2-lite")))
    assert s.attention.q_lora_rank is None
    assert s.moe.score_correction_bias is False and s.moe.scoring == "softmax" and s.moe.norm_topk_prob is False
    assert s.precision == Precision()  # no quantization_config: everything bfloat16
    assert s.mtp_layers == 0  # num_nextn_predict_layers absent


def test_qwen3_mixtral_gpt_oss_fields(tmp_path):
    q = load_config(write(tmp_path, preset_config("qwen3-30b-a3b"), "q.json"))
    assert q.attention == GQAAttention(heads=32, kv_heads=4, head_dim=128, qk_norm=True)
    assert (q.moe.routed_experts, q.moe.top_k, q.moe.intermediate_size, q.moe.shared_experts) == (128, 8, 768, 0)
    assert q.first_k_dense == 0 and q.dense_intermediate_size is None

    m = load_config(write(tmp_path, preset_config("mixtral-8x7b"), "m.json"))
    assert m.attention == GQAAttention(heads=32, kv_heads=8, head_dim=4096 // 32)  # head_dim from hidden / heads
    assert (m.moe.routed_experts, m.moe.top_k, m.moe.intermediate_size) == (8, 2, 14336)

    g = load_config(write(tmp_path, preset_config("gpt-oss-120b"), "g.json"))
    a = g.attention
    assert (a.heads, a.kv_heads, a.head_dim, a.bias, a.sinks, a.sliding_window) == (64, 8, 64, True, True, 128)
    assert [a.window_of(i) for i in range(4)] == [128, None, 128, None]
    assert g.moe.router_bias and g.moe.expert_bias and (g.moe.routed_experts, g.moe.top_k) == (128, 4)
    # MXFP4 covers the experts only; attention, router, embeddings and head stay bfloat16 (no torch_dtype field).
    assert g.precision == Precision(experts="mxfp4")


def test_glm4_moe_fields(tmp_path):
    """GLM-4.5: GQA 96/8 x 128 with q/k/v biases and q/k norms, 3 dense layers then 160 experts top-8 + 1 shared,
    one MTP layer; -Air: no q/k norms, 1 dense layer, 128 experts. Sigmoid routing with the correction bias
    though neither config names scoring_func or topk_method (transformers' Glm4MoeMoE fixes them)."""
    s = load_config(write(tmp_path, preset_config("glm-4.5"), "glm.json"))
    assert s.model_type == "glm4_moe" and "scoring_func" not in preset_config("glm-4.5")
    assert s.attention == GQAAttention(heads=96, kv_heads=8, head_dim=128, bias=True, qk_norm=True)
    assert (s.hidden_size, s.num_layers, s.vocab_size, s.first_k_dense, s.dense_intermediate_size) == (
        5120,
        92,
        151552,
        3,
        12288,
    )
    m = s.moe
    assert (m.routed_experts, m.top_k, m.shared_experts, m.intermediate_size) == (160, 8, 1, 1536)
    assert (m.scoring, m.score_correction_bias, m.routed_scaling_factor, m.n_group, m.topk_group) == (
        "sigmoid",
        True,
        2.5,
        1,
        1,
    )
    assert s.mtp_layers == 1 and s.tie_embeddings is False and s.precision == Precision()
    air = load_config(write(tmp_path, preset_config("glm-4.5-air"), "air.json"))
    assert air.attention == GQAAttention(heads=96, kv_heads=8, head_dim=128, bias=True, qk_norm=False)
    assert (air.first_k_dense, air.dense_intermediate_size, air.moe.routed_experts, air.moe.intermediate_size) == (
        1,
        10944,
        128,
        1408,
    )
    # The two routing fields as GLM-4.7-FP8's config.json spells them load to the same spec.
    named = {**preset_config("glm-4.5"), "scoring_func": "sigmoid", "topk_method": "noaux_tc"}
    assert load_config(write(tmp_path, named, "named.json")).moe == m


def test_dtype_fields_and_an_explicit_precision(tmp_path):
    config = {**preset_config("qwen3-30b-a3b"), "dtype": "float16"}
    del config["torch_dtype"]
    assert load_config(write(tmp_path, config)).precision == Precision(*(["float16"] * 5))
    mine = Precision(dispatch="fp8_e4m3", kv_cache="fp8_e4m3")
    assert load_config(write(tmp_path, preset_config("mixtral-8x7b")), precision=mine).precision == mine
    with pytest.raises(ModelConfigError, match="precision must be a Precision, got str"):
        load_config(write(tmp_path, preset_config("mixtral-8x7b")), precision="bfloat16")


def check_one_line(error: ModelConfigError, path, *fragments: str) -> str:
    message = str(error)
    assert "\n" not in message, message
    assert message.startswith(f"{path}: "), message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_the_documented_missing_field_message(tmp_path):
    config = preset_config("qwen3-30b-a3b")
    del config["num_experts_per_tok"]
    path = write(tmp_path, config)
    with pytest.raises(ModelConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{path}: missing field 'num_experts_per_tok' (model_type qwen3_moe)"


def test_unknown_and_missing_model_type(tmp_path):
    path = write(tmp_path, {**preset_config("mixtral-8x7b"), "model_type": "llama"})
    with pytest.raises(ModelConfigError) as info:
        load_config(path)
    check_one_line(info.value, path, "field 'model_type' is 'llama', not one of", *SUPPORTED_MODEL_TYPES)
    config = preset_config("mixtral-8x7b")
    del config["model_type"]
    path = write(tmp_path, config)
    with pytest.raises(ModelConfigError) as info:
        load_config(path)
    check_one_line(info.value, path, "missing field 'model_type'")


@pytest.mark.parametrize(
    "text,fragment",
    [
        ('{"model_type": "mixtral",', "not valid JSON: "),
        ("", "not valid JSON: Expecting value at line 1 column 1"),
        ("[1, 2]", "top level must be a JSON object, got list"),
        ('"config"', "top level must be a JSON object, got str"),
        ("null", "top level must be a JSON object, got NoneType"),
    ],
)
def test_not_json_and_not_an_object(tmp_path, text, fragment):
    path = write(tmp_path, text)
    with pytest.raises(ModelConfigError) as info:
        load_config(path)
    check_one_line(info.value, path, fragment)


def test_unreadable_file(tmp_path):
    path = tmp_path / "absent" / "config.json"
    with pytest.raises(ModelConfigError) as info:
        load_config(path)
    check_one_line(info.value, path, "cannot read the file")
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ModelConfigError) as info:
        load_config(tmp_path / "binary.json")
    check_one_line(info.value, tmp_path / "binary.json", "cannot read the file")


@pytest.mark.parametrize(
    "preset,field,value,fragment",
    [
        ("deepseek-v3", "hidden_size", "7168", "must be an integer, got str '7168'"),
        ("deepseek-v3", "n_routed_experts", 256.0, "must be an integer, got float 256.0"),
        ("deepseek-v3", "num_experts_per_tok", True, "must be an integer, got bool True"),
        ("deepseek-v3", "q_lora_rank", "1536", "must be an integer or null, got str"),
        ("deepseek-v3", "kv_lora_rank", None, "must be an integer, got NoneType None"),
        ("deepseek-v3", "norm_topk_prob", "true", "must be true or false, got str"),
        ("deepseek-v3", "routed_scaling_factor", "2.5", "must be a number, got str"),
        ("deepseek-v3", "scoring_func", ["sigmoid"], "must be a string, got list"),
        ("deepseek-v3", "topk_method", "random", "is 'random', not one of greedy, group_limited_greedy, noaux_tc"),
        ("deepseek-v3", "torch_dtype", "float64", "is 'float64', not one of bfloat16, float16, float32"),
        ("deepseek-v3", "quantization_config", "fp8", "must be an object or null, got str"),
        ("kimi-k2", "tie_word_embeddings", 0, "must be true or false, got int 0"),
        ("qwen3-30b-a3b", "num_key_value_heads", [4], "must be an integer, got list"),
        ("mixtral-8x7b", "sliding_window", "4096", "must be an integer or null, got str"),
        ("gpt-oss-120b", "layer_types", "sliding_attention", "must be a list of strings, got str"),
        ("gpt-oss-120b", "layer_types", [1, 2], "must be a list of strings, got list"),
        ("glm-4.5", "use_qk_norm", "true", "must be true or false, got str"),
        ("glm-4.5-air", "head_dim", 128.0, "must be an integer, got float 128.0"),
    ],
)
def test_wrong_types(tmp_path, preset, field, value, fragment):
    path = write(tmp_path, {**preset_config(preset), field: value})
    with pytest.raises(ModelConfigError) as info:
        load_config(path)
    check_one_line(info.value, path, f"field '{field}' {fragment}", f"(model_type {FAMILY_OF[preset]})")


def test_nested_field_names_in_quantization_config(tmp_path):
    config = preset_config("deepseek-v3")
    config["quantization_config"] = {**config["quantization_config"], "quant_method": "awq"}
    path = write(tmp_path, config)
    with pytest.raises(ModelConfigError) as info:
        load_config(path)
    check_one_line(
        info.value, path, "field 'quantization_config.quant_method' is 'awq', not one of fp8, mxfp4, compressed-tensors"
    )
    del config["quantization_config"]["quant_method"]
    path = write(tmp_path, config)
    with pytest.raises(ModelConfigError) as info:
        load_config(path)
    check_one_line(info.value, path, "missing field 'quantization_config.quant_method'")


@pytest.mark.parametrize(
    "preset,changes,field,fragment",
    [
        ("deepseek-v3", {"num_experts_per_tok": 300}, "num_experts_per_tok", "must be <= routed_experts (256)"),
        ("deepseek-v3", {"num_experts_per_tok": 200}, "num_experts_per_tok", "experts of topk_group (4) groups"),
        ("deepseek-v3", {"n_group": 7}, "n_group", "must divide routed_experts (256)"),
        ("deepseek-v3", {"first_k_dense_replace": 62}, "first_k_dense_replace", "must be <= num_layers (61)"),
        ("deepseek-v3", {"qk_rope_head_dim": 63}, "qk_rope_head_dim", "must be even"),
        ("deepseek-v2-lite", {"n_shared_experts": -2}, "n_shared_experts", "must be >= 0"),
        ("qwen3-30b-a3b", {"num_key_value_heads": 5}, "num_key_value_heads", "must divide heads (32)"),
        ("qwen3-30b-a3b", {"num_experts": 0}, "num_experts", "must be >= 1"),
        ("mixtral-8x7b", {"intermediate_size": 0}, "intermediate_size", "must be >= 1"),
        ("mixtral-8x7b", {"num_attention_heads": 3}, "num_attention_heads", "must divide hidden_size (4096)"),
        ("gpt-oss-120b", {"layer_types": ["full_attention"] * 35}, "layer_types", "must have num_layers (36)"),
        ("gpt-oss-120b", {"layer_types": ["local"] * 36}, "layer_types", "entry 0 must be one of"),
        ("gpt-oss-120b", {"num_local_experts": 2}, "num_experts_per_tok", "must be <= routed_experts (2)"),
        ("glm-4.5", {"num_key_value_heads": 7}, "num_key_value_heads", "must divide heads (96)"),
        ("glm-4.5", {"first_k_dense_replace": 93}, "first_k_dense_replace", "must be <= num_layers (92)"),
        ("glm-4.5-air", {"num_experts_per_tok": 129}, "num_experts_per_tok", "must be <= routed_experts (128)"),
        ("glm-4.5-air", {"n_shared_experts": -1}, "n_shared_experts", "must be >= 0"),
    ],
)
def test_values_the_spec_rejects_are_named_as_in_the_file(tmp_path, preset, changes, field, fragment):
    path = write(tmp_path, {**preset_config(preset), **changes})
    with pytest.raises(ModelConfigError) as info:
        load_config(path)
    check_one_line(info.value, path, f"field '{field}'", fragment, f"(model_type {FAMILY_OF[preset]})")


@pytest.mark.parametrize(
    "preset,field,value",
    [
        ("deepseek-v3", "moe_layer_freq", 2),
        ("deepseek-v3", "moe_layer_freq", True),
        ("deepseek-v3", "attention_bias", True),
        ("qwen3-30b-a3b", "mlp_only_layers", [0, 4]),
        ("qwen3-30b-a3b", "decoder_sparse_step", 2),
        ("qwen3-235b-a22b", "use_sliding_window", True),
        ("glm-4.5", "scoring_func", "softmax"),
        ("glm-4.5-air", "topk_method", "greedy"),
    ],
)
def test_layouts_the_spec_cannot_express(tmp_path, preset, field, value):
    path = write(tmp_path, {**preset_config(preset), field: value})
    with pytest.raises(ModelConfigError) as info:
        load_config(path)
    check_one_line(info.value, path, f"field '{field}' is {value!r}", "is not supported")


def _fields(config: dict, prefix: str = "") -> list[tuple[str, ...]]:
    """The paths of the embedded fields: every top-level field, and every field of a nested ``text_config``
    (Kimi-K2.5's text model), as key tuples."""
    out: list[tuple[str, ...]] = []
    for key, value in config.items():
        out.append((key,))
        if key == "text_config":
            out += [(key, *path) for path in _fields(value)]
    return out


def _edited(preset: str, path: tuple[str, ...], value=None, *, delete: bool = False) -> dict:
    config = preset_config(preset)
    where = config
    for key in path[:-1]:
        where = where[key]
    if delete:
        del where[path[-1]]
    else:
        where[path[-1]] = value
    return config


@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_deleting_any_field_loads_or_names_that_field(tmp_path, preset):
    """Exhaustive over the embedded fields (a nested text_config's too): a field is optional (loads) or its
    absence is named, as ``text_config.field`` inside the text model."""
    required = []
    for path in _fields(preset_config(preset)):
        name = ".".join(path)
        try:
            spec_from_config(_edited(preset, path, delete=True), source="cfg.json")
        except ModelConfigError as e:
            assert "\n" not in str(e)
            assert str(e).startswith(f"cfg.json: missing field '{name}'"), str(e)
            required.append(path[-1])
    top_k = "num_experts_per_token" if preset == "kimi-k3" else "num_experts_per_tok"  # Kimi Linear's name
    assert "hidden_size" in required and "num_hidden_layers" in required and top_k in required


@pytest.mark.parametrize("preset", PRESET_NAMES)
@pytest.mark.parametrize("bad", [{"x": 1}, "x", -7])
def test_corrupting_any_field_loads_or_names_that_field(preset, bad):
    """Exhaustive over the embedded fields (a nested text_config's too): a value of the wrong kind is ignored
    (unread) or named."""
    named = set()
    for path in _fields(preset_config(preset)):
        if path == ("model_type",):
            continue
        key = ".".join(path)
        try:
            spec_from_config(_edited(preset, path, bad), source="cfg.json")
        except ModelConfigError as e:
            message = str(e)
            assert "\n" not in message
            # The field itself, or one inside it when it is an object (quantization_config.quant_method).
            assert message.startswith((f"cfg.json: field '{key}", f"cfg.json: missing field '{key}.")), message
            named.add(path[-1])
    top_k = "num_experts_per_token" if preset == "kimi-k3" else "num_experts_per_tok"  # Kimi Linear's name
    assert {"hidden_size", "num_hidden_layers", "vocab_size", top_k, "num_attention_heads"} <= named
