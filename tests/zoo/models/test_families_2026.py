"""The 2026 families (issue 45) that need only a loader: Kimi-K2.5 (``kimi_k25``: Kimi K2's text model in
``text_config``, INT4 or NVFP4 experts), MiniMax-M2.5/M2.7 (``minimax_m2``), gpt-oss-20b; and those of the
sparse MLA kind (tests/zoo/models/test_sparse_mla.py): DeepSeek-V3.2 (``deepseek_v32``) and GLM-5
(``glm_moe_dsa``); the published
parameter counts; every such config.json the measured extra ships; and the families still refused, each in
one line saying what the spec cannot express.

Published figures: Kimi-K2.5 "1T total parameters, 32B activated" (huggingface.co/moonshotai/Kimi-K2.5, Model
Summary: the Kimi K2 text model, whose figures github.com/MoonshotAI/Kimi-K2 states the same way);
MiniMax-M2.5 "230B total parameters with 10B active" (the MiniMax-M2 line's model cards); gpt-oss-20b "21B
parameters with 3.6B active parameters" (huggingface.co/openai/gpt-oss-20b README).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from demos.predict import main
from demos.zoo import measured
from demos.zoo.models import count_params, get_preset, load_config
from demos.zoo.models.hf_config import NOT_EXPRESSIBLE, ModelConfigError, spec_from_config
from demos.zoo.models.presets import preset_config

B = 1e9
needs_extra = pytest.mark.skipif(not measured.available(), reason="needs the measured extra")


def within(value: int, published: float, tolerance: float) -> bool:
    return abs(value - published) <= tolerance * published


def model_configs() -> Path:
    """The HuggingFace config.json copies the measured extra ships."""
    return measured.data_root().parent / "model_configs"


# ---- published counts, each with its publisher's convention for active parameters ----


def test_kimi_k2_5_1t_total_32b_active():
    c = count_params(get_preset("kimi-k2.5"))
    assert within(c.total, 1000 * B, 0.03)  # 1026.41B: +2.6%
    assert within(c.active, 32 * B, 0.03)  # 31.69B: the input table out, as Moonshot (and DeepSeek) count
    assert c == count_params(get_preset("kimi-k2"))  # Kimi K2's text model; the vision tower is not counted


def test_minimax_m2_5_230b_total_10b_active():
    c = count_params(get_preset("minimax-m2.5"))
    assert within(c.total, 230 * B, 0.03)  # 228.69B: -0.6%, the MTP modules out
    assert within(c.active_non_embedding, 10 * B, 0.03)  # 9.80B: neither table, as Z.ai counts
    assert not within(c.active, 10 * B, 0.03)  # the head in: 10.42B, +4.2%


def test_gpt_oss_20b_21b_total_3_6b_active():
    c = count_params(get_preset("gpt-oss-20b"))
    assert within(c.total, 21 * B, 0.03)  # 20.91B
    assert within(c.active, 3.6 * B, 0.03)  # 3.61B: the input table out, as for gpt-oss-120b
    assert not within(c.active_with_embedding, 3.6 * B, 0.05)


# ---- the loader, from the preset's fields and from the extra's copies ----


def test_kimi_k2_5_reads_its_nested_text_config_and_names_its_fields(tmp_path):
    config = preset_config("kimi-k2.5")
    del config["text_config"]["n_routed_experts"]
    with pytest.raises(
        ModelConfigError, match=r"missing field 'text_config\.n_routed_experts' \(model_type kimi_k25\)"
    ):
        spec_from_config(config, source="cfg.json")
    config = preset_config("kimi-k2.5")
    config["text_config"]["num_experts_per_tok"] = 400
    with pytest.raises(ModelConfigError, match=r"field 'text_config\.num_experts_per_tok' is invalid: must be <="):
        spec_from_config(config, source="cfg.json")
    config = preset_config("kimi-k2.5")
    config["text_config"]["model_type"] = "llama"
    with pytest.raises(
        ModelConfigError, match=r"'text_config\.model_type' is 'llama', not one of kimi_k2, deepseek_v3"
    ):
        spec_from_config(config, source="cfg.json")


@pytest.mark.parametrize(
    "path,value,fragment",
    [
        (
            ("format",),
            "float-quantized",
            "a compressed-tensors format other than pack-quantized or mxfp4-pack-quantized is not supported",
        ),
        (("config_groups", "group_0", "weights", "group_size"), 128, "a group size other than 32 is not supported"),
        (("config_groups", "group_0", "weights", "num_bits"), 8, "a bit width other than 4 is not supported"),
        (("config_groups", "group_0", "weights", "symmetric"), False, "asymmetric INT4"),
        (("config_groups", "group_0", "input_activations"), {"num_bits": 8}, "quantized activations"),
    ],
)
def test_int4_layouts_other_than_kimis_are_refused_naming_the_field(path, value, fragment):
    config = preset_config("kimi-k2.5")
    where = config["text_config"]["quantization_config"]
    for key in path[:-1]:
        where = where[key]
    where[path[-1]] = value
    with pytest.raises(ModelConfigError) as info:
        spec_from_config(config, source="cfg.json")
    message = str(info.value)
    field = "text_config.quantization_config." + ".".join(path)
    assert "\n" not in message and f"field '{field}'" in message and fragment in message, message


@pytest.mark.parametrize(
    "field,value,fragment",
    [
        ("attn_type_list", [0, 1] * 31, "lightning (linear) attention is not supported"),
        ("shared_intermediate_size", 1536, "a shared expert is not supported"),
        ("qk_norm_type", "per_head", "a q/k norm other than per_layer is not supported"),
    ],
)
def test_minimax_layouts_the_spec_cannot_express(field, value, fragment):
    with pytest.raises(ModelConfigError) as info:
        spec_from_config({**preset_config("minimax-m2.5"), field: value}, source="cfg.json")
    assert f"field '{field}'" in str(info.value) and fragment in str(info.value)


def _shape(spec):
    return dataclasses.replace(spec, name="x", source="x", precision=get_preset("kimi-k2").precision)


LOADED = {
    "moonshotai--Kimi-K2.5": ("kimi-k2.5", "kimi_k25", "bfloat16", "int4_g32"),
    "nvidia--Kimi-K2.5-NVFP4": ("kimi-k2.5", "kimi_k25", "bfloat16", "nvfp4"),
    "nvidia--Kimi-K2.6-NVFP4": ("kimi-k2.5", "kimi_k25", "bfloat16", "nvfp4"),
    "nvidia--Kimi-K2.7-Code-NVFP4": ("kimi-k2.5", "kimi_k25", "bfloat16", "nvfp4"),
    "MiniMaxAI--MiniMax-M2.5": ("minimax-m2.5", "minimax_m2", "fp8_e4m3", "fp8_e4m3"),
    "MiniMaxAI--MiniMax-M2.7": ("minimax-m2.5", "minimax_m2", "fp8_e4m3", "fp8_e4m3"),
    "nvidia--MiniMax-M2.5-NVFP4": ("minimax-m2.5", "minimax_m2", "bfloat16", "nvfp4"),
    "nvidia--MiniMax-M2.7-NVFP4": ("minimax-m2.5", "minimax_m2", "bfloat16", "nvfp4"),
    "openai--gpt-oss-20b": ("gpt-oss-20b", "gpt_oss", "bfloat16", "mxfp4"),
    "deepseek-ai--DeepSeek-V3.2": ("deepseek-v3.2", "deepseek_v32", "fp8_e4m3", "fp8_e4m3"),
    "zai-org--GLM-5": ("glm-5", "glm_moe_dsa", "bfloat16", "bfloat16"),
    "zai-org--GLM-5-FP8": ("glm-5", "glm_moe_dsa", "fp8_e4m3", "fp8_e4m3"),
    "nvidia--GLM-5.1-NVFP4": ("glm-5", "glm_moe_dsa", "bfloat16", "nvfp4"),
    "MiniMaxAI--MiniMax-M3": ("minimax-m3", "minimax_m3", "bfloat16", "bfloat16"),
    "deepseek-ai--DeepSeek-V4-Flash": ("deepseek-v4-flash", "deepseek_v4", "fp8_e4m3", "mxfp4"),
    "deepseek-ai--DeepSeek-V4-Pro": ("deepseek-v4-pro", "deepseek_v4", "fp8_e4m3", "mxfp4"),
    "nvidia--DeepSeek-V4-Flash-NVFP4": ("deepseek-v4-flash", "deepseek_v4", "fp8_e4m3", "nvfp4"),
    "nvidia--DeepSeek-V4-Pro-NVFP4": ("deepseek-v4-pro", "deepseek_v4", "fp8_e4m3", "nvfp4"),
    "moonshotai--Kimi-K3": ("kimi-k3", "kimi_k3", "bfloat16", "mxfp4_w4a16"),
}
"""The extra's config.json copies of each new family -> (the preset of its architecture, model_type, weights,
experts)."""


@needs_extra
@pytest.mark.parametrize("stem", sorted(LOADED))
def test_each_new_familys_config_in_the_extra_loads(stem):
    preset, model_type, weights, experts = LOADED[stem]
    spec = load_config(model_configs() / f"{stem}_config.json")
    assert (spec.model_type, spec.precision.weights, spec.precision.experts) == (model_type, weights, experts)
    assert _shape(spec) == _shape(get_preset(preset))


@needs_extra
def test_the_presets_embed_the_extras_copies():
    """The preset's embedded fields, read by the loader, give the same spec as the extra's whole config.json."""
    for stem, preset in (
        ("moonshotai--Kimi-K2.5", "kimi-k2.5"),
        ("MiniMaxAI--MiniMax-M2.5", "minimax-m2.5"),
        ("openai--gpt-oss-20b", "gpt-oss-20b"),
        ("deepseek-ai--DeepSeek-V3.2", "deepseek-v3.2"),
        ("zai-org--GLM-5-FP8", "glm-5"),
        ("MiniMaxAI--MiniMax-M3", "minimax-m3"),
        ("deepseek-ai--DeepSeek-V4-Flash", "deepseek-v4-flash"),
        ("deepseek-ai--DeepSeek-V4-Pro", "deepseek-v4-pro"),
        ("moonshotai--Kimi-K3", "kimi-k3"),
    ):
        whole = json.loads((model_configs() / f"{stem}_config.json").read_text())
        assert spec_from_config(whole, source="x") == spec_from_config(preset_config(preset), source="x"), stem


# ---- the families the spec cannot express: one line each, saying what is missing ----

REFUSED = {
    "nvidia--MiniMax-M3-NVFP4": ("minimax_m3_vl", "multimodal wrapper"),
}


def test_every_refused_family_says_what_the_spec_lacks():
    for model_type, (model, missing) in NOT_EXPRESSIBLE.items():
        with pytest.raises(ModelConfigError) as info:
            spec_from_config({"model_type": model_type}, source="config.json")
        assert str(info.value) == (
            f"config.json: model_type {model_type!r} ({model}) is not supported: the spec cannot express its {missing}"
        )


@needs_extra
@pytest.mark.parametrize("stem", sorted(REFUSED))
def test_the_extras_configs_of_refused_families_are_one_line(stem):
    model_type, fragment = REFUSED[stem]
    path = model_configs() / f"{stem}_config.json"
    with pytest.raises(ModelConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}: model_type {model_type!r} (")
    assert "is not supported: the spec cannot express its " in message and fragment in message


@needs_extra
def test_predict_refuses_a_refused_family_in_one_line_with_status_2(capsys):
    path = model_configs() / "nvidia--MiniMax-M3-NVFP4_config.json"
    assert main(["--model", str(path), "--gpu", "b200", "--nodes", "2", "--ep", "16"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.strip().splitlines()
    head = f"python -m demos.predict: error: --model: {path}: model_type 'minimax_m3_vl' (MiniMax-M3's NVFP4 copy)"
    assert line.startswith(head)
    assert "is not supported: the spec cannot express its multimodal wrapper" in line


# ---- predict: each new model's default sweep prints an answer with lines its engines accept ----

SERVED = {
    "kimi-k2.5": ("moonshotai/Kimi-K2.5", "# vLLM 0.34.0 refuses DBO for kimi_k25", "--enable-two-batch-overlap"),
    "minimax-m2.5": ("MiniMaxAI/MiniMax-M2.5", "", "# SGLang 0.5.23 runs two-batch overlap only"),
    "gpt-oss-20b": ("openai/gpt-oss-20b", "", "# SGLang 0.5.23 runs two-batch overlap only"),
    "glm-5": ("zai-org/GLM-5-FP8", "", "--enable-two-batch-overlap"),
    "deepseek-v4-flash": (
        "deepseek-ai/DeepSeek-V4-Flash",
        "",
        "# SGLang 0.5.23 runs two-batch overlap for DeepSeek-V4",
    ),
    "deepseek-v4-pro": ("deepseek-ai/DeepSeek-V4-Pro", "", "# SGLang 0.5.23 runs two-batch overlap for DeepSeek-V4"),
}
"""Each new preset -> its repository in both lines, what the vLLM line starts with ("" for nothing said: DBO
runs) and what the SGLang part holds (its two-batch overlap, or the # line saying it has none)."""


def _check_answer(printed: str, model: str) -> None:
    repo, vllm_head, sglang_has = SERVED[model]
    assert printed.startswith(f"{model} decode on 2 x 8 b200, EP 16")
    assert "\ncrossover (graph): " in printed and "\nbest     graph: " in printed
    vllm = printed.split("\nvLLM 0.34.0\n", 1)[1].split("\nSGLang 0.5.23\n", 1)
    assert vllm[0].lstrip().startswith(vllm_head or "# vLLM on the head node")
    assert f"vllm serve {repo} " in vllm[0] and ("--enable-dbo" in vllm[0]) == (not vllm_head)
    sglang = vllm[1].split("\nnotes ", 1)[0]
    assert f"--model-path {repo} " in sglang and sglang_has in sglang


@pytest.mark.parametrize("model", sorted(SERVED))
def test_predict_answers_for_each_new_model_at_two_counts(model, capsys):
    counts = "256,1024" if model.startswith("deepseek-v4") else "64,256"  # V4's DBO pays from about 320 on
    argv = ["--model", model, "--gpu", "b200", "--nodes", "2", "--ep", "16", "--tokens", counts]
    assert main(argv) == 0
    _check_answer(capsys.readouterr().out, model)


@pytest.mark.slow
@pytest.mark.parametrize("model", sorted(SERVED))
def test_the_default_predict_sweep_of_each_new_model_prints_an_answer(model, capsys):
    assert main(["--model", model, "--gpu", "b200", "--nodes", "2", "--ep", "16"]) == 0
    _check_answer(capsys.readouterr().out, model)
