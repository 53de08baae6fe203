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
    "glm-4.5": "zai-org/GLM-4.5",
    "glm-4.5-air": "zai-org/GLM-4.5-Air",
    "kimi-k2.5": "moonshotai/Kimi-K2.5",
    "minimax-m2.5": "MiniMaxAI/MiniMax-M2.5",
    "gpt-oss-20b": "openai/gpt-oss-20b",
    "deepseek-v3.2": "deepseek-ai/DeepSeek-V3.2",
    "glm-5": "zai-org/GLM-5-FP8",
    "qwen3.5-397b-a17b": "Qwen/Qwen3.5-397B-A17B",
    "deepseek-v4-flash": "deepseek-ai/DeepSeek-V4-Flash",
    "deepseek-v4-pro": "deepseek-ai/DeepSeek-V4-Pro",
    "minimax-m3": "MiniMaxAI/MiniMax-M3",
    "kimi-k3": "moonshotai/Kimi-K3",
}


def test_the_preset_names():
    assert sorted(PRESET_NAMES) == sorted(REPOS)
    assert ALIASES == {"deepseek-r1": "deepseek-v3", "glm-4.6": "glm-4.5", "minimax-m2.7": "minimax-m2.5"}


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
    assert get_preset("GLM-4.6") == get_preset("glm-4.5")
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


def test_glm_4_5_matches_its_published_architecture():
    """The GLM-4.5 column of the architecture table of Z.ai's GLM-5 report, read as glennklockwood.com/garden/GLM-5
    quotes it (3 dense and 89 MoE layers, 1 MTP layer, hidden 5120, dense 12288, MoE 1536, 96 heads and 8 KV heads
    of 128, 160 experts, 8 routed, 1 shared, vocab 151552); NVIDIA's Megatron-Bridge GLM 4.5 page
    (docs.nvidia.com/nemo/megatron-bridge) says the same and adds the QK layernorm and the 2.5 scaling."""
    s = get_preset("glm-4.5")
    assert (s.first_k_dense, s.moe_layers, s.mtp_layers, s.hidden_size, s.dense_intermediate_size) == (
        3,
        89,
        1,
        5120,
        12288,
    )
    a, m = s.attention, s.moe
    assert (a.heads, a.kv_heads, a.head_dim, a.qk_norm) == (96, 8, 128, True)
    assert (m.intermediate_size, m.routed_experts, m.top_k, m.shared_experts) == (1536, 160, 8, 1)
    assert s.vocab_size == 151552 and m.routed_scaling_factor == 2.5


def test_glm_4_5_air_matches_its_training_arguments():
    """The Megatron arguments of GLM-4.5-Air in THUDM/slime, Z.ai's RL framework, read in forks of it
    (scripts/models/glm4.5-106B-A12B.sh):
    1 dense + 45 MoE layers, hidden 4096, FFN 10944, 96 heads in 8 query groups of 128, q/k/v biases and no
    QK layernorm flag, MoE FFN 1408 with a shared expert of 1408, 128 experts top-8, vocab 151552."""
    s = get_preset("glm-4.5-air")
    assert (s.first_k_dense, s.moe_layers, s.hidden_size, s.dense_intermediate_size) == (1, 45, 4096, 10944)
    a, m = s.attention, s.moe
    assert (a.heads, a.kv_heads, a.head_dim, a.bias, a.qk_norm) == (96, 8, 128, True, False)
    assert (m.intermediate_size, m.shared_experts, m.routed_experts, m.top_k) == (1408, 1, 128, 8)
    assert s.vocab_size == 151552


def test_kimi_k2_5_is_kimi_k2_with_int4_experts():
    """Kimi-K2.5's text_config is Kimi-K2-Instruct's config with INT4 experts (compressed-tensors, groups of 32
    with a BF16 scale each): the same shapes, its own model_type, attention and shared experts in BF16."""
    k2, k25 = get_preset("kimi-k2"), get_preset("kimi-k2.5")
    same = ("hidden_size", "num_layers", "vocab_size", "first_k_dense", "dense_intermediate_size", "attention", "moe")
    assert all(getattr(k2, f) == getattr(k25, f) for f in same)
    assert k25.model_type == "kimi_k25"
    p = k25.precision
    assert (p.weights, p.experts, p.dispatch, p.combine, p.kv_cache) == ("bfloat16", "int4_g32", *["bfloat16"] * 3)
    assert p.bytes_of("experts") == 0.5 + 2 / 32


def test_minimax_m2_5_matches_its_config():
    """MiniMaxAI/MiniMax-M2.5's config.json: 62 layers of GQA 48/8 x 128 with q/k norms, 256 experts of 1536
    top-8, no shared expert, sigmoid routing with the correction bias, FP8 (block 128) but the router."""
    s = get_preset("minimax-m2.5")
    a, m = s.attention, s.moe
    assert (s.num_layers, s.hidden_size, s.vocab_size, s.first_k_dense) == (62, 3072, 200064, 0)
    assert (a.heads, a.kv_heads, a.head_dim, a.qk_norm, a.bias, a.sinks) == (48, 8, 128, True, False, False)
    assert (m.routed_experts, m.top_k, m.intermediate_size, m.shared_experts) == (256, 8, 1536, 0)
    assert (m.scoring, m.score_correction_bias, m.norm_topk_prob, m.routed_scaling_factor) == ("sigmoid", True, True, 1)
    assert s.precision.experts == s.precision.weights == s.precision.dispatch == "fp8_e4m3"
    assert s.mtp_layers == 0  # num_mtp_modules is not read (docs/models.md)
    assert get_preset("minimax-m2.7") == s


def test_gpt_oss_20b_is_the_120b_with_fewer_layers_and_experts():
    big, small = get_preset("gpt-oss-120b"), get_preset("gpt-oss-20b")
    assert (small.num_layers, small.moe.routed_experts, small.moe.top_k) == (24, 32, 4)
    assert small.attention.layer_types == ("sliding_attention", "full_attention") * 12
    assert (small.hidden_size, small.moe.intermediate_size, small.precision) == (
        big.hidden_size,
        big.moe.intermediate_size,
        big.precision,
    )
