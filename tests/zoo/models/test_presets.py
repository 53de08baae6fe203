"""demos.zoo.models.presets: names, aliases, sources, and the embedded fields against the model cards' own words."""

from __future__ import annotations

import pytest

from demos.zoo.models import presets
from demos.zoo.models.presets import ALIASES, PRESET_NAMES, UnknownPresetError, get_preset, preset_config, preset_source

REPOS = {
    "deepseek-v3": "deepseek-ai/DeepSeek-V3",
    "kimi-k2": "moonshotai/Kimi-K2-Instruct",
    "deepseek-v2-lite": "deepseek-ai/DeepSeek-V2-Lite",
    "qwen3-30b-a3b": "Qwen/Qwen3-30B-A3B",
    "qwen3-235b-a22b": "Qwen/Qwen3-235B-A22B",
    "mixtral-8x7b": "mistralai/Mixtral-8x7B-v0.1",
    "gpt-oss-120b": "openai/gpt-oss-120b",
}


def test_the_preset_names():
    assert sorted(PRESET_NAMES) == sorted(REPOS)
    assert ALIASES == {"deepseek-r1": "deepseek-v3"}


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_each_preset_names_its_huggingface_repo_and_file(name):
    spec = get_preset(name)
    assert spec.name == name
    assert spec.source == preset_source(name) == f"huggingface.co/{REPOS[name]} config.json"


def test_presets_go_through_the_loader(monkeypatch):
    seen = []
    real = presets.spec_from_config

    def spy(config, **kwargs):
        seen.append((config["model_type"], kwargs["source"]))
        return real(config, **kwargs)

    monkeypatch.setattr(presets, "spec_from_config", spy)
    get_preset("qwen3-30b-a3b")
    assert seen == [("qwen3_moe", "huggingface.co/Qwen/Qwen3-30B-A3B config.json")]


def test_alias_and_case():
    assert get_preset("deepseek-r1") == get_preset("deepseek-v3")
    assert get_preset(" Mixtral-8x7B ") == get_preset("mixtral-8x7b")


@pytest.mark.parametrize("bad", ["llama-3-70b", "", None, 7])
def test_unknown_name_is_one_line_listing_the_known_names(bad):
    with pytest.raises(UnknownPresetError) as info:
        get_preset(bad)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"unknown model preset {bad!r}; known: ")
    for name in (*PRESET_NAMES, *ALIASES):
        assert name in message


def test_preset_config_is_a_copy():
    config = preset_config("deepseek-v3")
    config["hidden_size"] = 1
    config["quantization_config"]["quant_method"] = "awq"
    assert get_preset("deepseek-v3").hidden_size == 7168
    assert get_preset("deepseek-v3").precision.experts == "fp8_e4m3"


# Each model card's own architecture summary, a second source for the embedded config fields.
def test_deepseek_v2_lite_matches_its_model_card():
    """huggingface.co/deepseek-ai/DeepSeek-V2-Lite README, section 5 (Model Architecture)."""
    s = get_preset("deepseek-v2-lite")
    assert (s.num_layers, s.hidden_size, s.attention.heads) == (27, 2048, 16)
    assert s.attention.qk_nope_head_dim == 128 and s.attention.kv_lora_rank == 512
    assert s.attention.q_lora_rank is None  # "it does not compress the queries"
    assert s.attention.qk_rope_head_dim == 64
    assert s.first_k_dense == 1  # "all FFNs except for the first layer are replaced with MoE layers"
    assert (s.moe.shared_experts, s.moe.routed_experts, s.moe.intermediate_size, s.moe.top_k) == (2, 64, 1408, 6)


def test_kimi_k2_matches_its_model_summary():
    """github.com/MoonshotAI/Kimi-K2 README, section 2 (Model Summary)."""
    s = get_preset("kimi-k2")
    assert (s.num_layers, s.first_k_dense, s.hidden_size, s.moe.intermediate_size) == (61, 1, 7168, 2048)
    assert (s.attention.heads, s.moe.routed_experts, s.moe.top_k, s.moe.shared_experts) == (64, 384, 8, 1)
    assert s.attention.kind == "mla"
    assert round(s.vocab_size / 1024) == 160  # "Vocabulary Size 160K" (163840 = 160 x 1024)


@pytest.mark.parametrize(
    "name,layers,heads,kv_heads,experts,active",
    [("qwen3-30b-a3b", 48, 32, 4, 128, 8), ("qwen3-235b-a22b", 94, 64, 4, 128, 8)],
)
def test_qwen3_matches_its_model_overview(name, layers, heads, kv_heads, experts, active):
    """huggingface.co/Qwen/<model> README, Model Overview: layers, GQA heads, experts, activated experts."""
    s = get_preset(name)
    assert (s.num_layers, s.attention.heads, s.attention.kv_heads) == (layers, heads, kv_heads)
    assert (s.moe.routed_experts, s.moe.top_k, s.moe.shared_experts) == (experts, active, 0)


def test_gpt_oss_alternates_sliding_and_full_attention():
    a = get_preset("gpt-oss-120b").attention
    assert a.layer_types == ("sliding_attention", "full_attention") * 18
    assert a.sliding_window == 128 and a.sinks and a.bias
