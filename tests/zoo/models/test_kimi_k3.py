"""Kimi-K3: KDA linear attention beside gated MLA, a latent MoE whose all-to-all carries half-width rows, and
block attention residuals, from its config.json to a prediction."""

from __future__ import annotations

import dataclasses

import pytest

from demos.predict import main
from demos.vocabulary import Phase
from demos.zoo.attention import layer_attention
from demos.zoo.costs import attn_res_sources, layer_costs
from demos.zoo.memory import kv_bytes_per_token, memory_estimate, state_bytes_per_request
from demos.zoo.models import (
    HybridMLAAttention,
    KimiDeltaAttention,
    ModelConfigError,
    count_params,
    get_preset,
    spec_from_config,
)
from demos.zoo.models.presets import preset_config
from demos.zoo.plan import layer_launches
from demos.zoo.profile import gpu_profile
from demos.zoo.workload import Workload, cluster_for

CLUSTER = cluster_for("b300", 2, 8, 16)


def _costs(spec, layer: int, t: int = 256, phase: str = Phase.DECODE):
    w = Workload(spec, CLUSTER, phase=phase, tokens=t, context=4096)
    return w, layer_costs(w, t, layer, gpu_profile(w.gpu))


def test_the_layers_are_kda_and_mla_as_linear_attn_config_numbers_them_from_one():
    s = get_preset("kimi-k3")
    a = s.attention
    assert isinstance(a, HybridMLAAttention) and isinstance(a.linear, KimiDeltaAttention)
    kinds = [layer_attention(a, i)[0].label for i in range(s.num_layers)]
    assert kinds.count("KDA") == 69 and kinds.count("MLA") == 24
    assert kinds[:4] == ["KDA", "KDA", "KDA", "MLA"] and kinds[-2:] == ["MLA", "MLA"]  # layers 1-3, 4; 92, 93
    assert a.output_gate and a.linear.full_rank_gate and (a.linear.heads, a.linear.head_dim) == (96, 128)
    assert (s.moe.latent_size, s.moe.routed_experts, s.moe.top_k, s.moe.shared_experts) == (3584, 896, 16, 2)
    assert s.attn_res_block == 12 and s.first_k_dense == 1 and s.precision.experts == "mxfp4_w4a16"


def test_a_layer_in_both_lists_or_in_neither_is_one_line():
    text = preset_config("kimi-k3")["text_config"]
    lin = text["linear_attn_config"]
    for kda in ([*lin["kda_layers"], 4], lin["kda_layers"][1:], [0, *lin["kda_layers"][1:]]):
        config = {**text, "linear_attn_config": {**lin, "kda_layers": kda}}
        with pytest.raises(ModelConfigError) as info:
            spec_from_config(config, source="config.json")
        assert "\n" not in str(info.value) and "linear_attn_config.kda_layers" in str(info.value)


def test_the_parameters_counted_part_by_part():
    """Each part against its own arithmetic from the checkpoint's weight names (no published total to check:
    Moonshot's figure was not found; the count is 2.78T total, 104B active)."""
    s, h = get_preset("kimi-k3"), 7168
    c = count_params(s)
    p, d = 96 * 128, 128
    kda = 3 * h * p + 3 * p * 4 + h * d + d * p + 96 + p + h * 96 + h * p + d + p * h
    mla = h * 1536 + 1536 + 1536 * 96 * 192 + h * 576 + 512 + 512 * 96 * 256 + 96 * 128 * h + h * 96 * 128
    assert c.attention == 69 * kda + 24 * mla
    assert c.routed_experts == 92 * 896 * 3 * 3584 * 3072  # the routed experts at the latent width
    assert c.shared_experts == 92 * 2 * 3 * h * 3072  # the shared ones at the hidden width
    assert c.latent == 92 * (2 * h * 3584 + 3584)
    assert c.norms == 93 * (2 * h + 4 * h) + h  # two norms and two attention-residual pairs a layer
    assert round(c.total / 1e9) == 2779 and round(c.active / 1e9) == 104


def test_the_all_to_all_carries_latent_rows_and_the_experts_run_at_that_width():
    """The bug feared: a latent MoE dispatching hidden-width rows. The same model without the latent width
    sends twice the bytes and multiplies twice the expert flops; its two projections are in the plan."""
    k3 = get_preset("kimi-k3")
    wide = dataclasses.replace(k3, moe=dataclasses.replace(k3.moe, latent_size=None))
    w, lat = _costs(k3, 8)
    _, full = _costs(wide, 8)
    # the rows halve; the routing metadata (indices, weights) per token does not
    assert lat.dispatch_bytes == pytest.approx(full.dispatch_bytes / 2, rel=2e-3)
    assert lat.combine_bytes == pytest.approx(full.combine_bytes / 2, rel=2e-3)
    assert lat.dispatch < full.dispatch and lat.experts.seconds < full.experts.seconds
    assert full.latent is None and lat.latent is not None
    ops = list(layer_launches(w, lat))
    assert ops.index("router") < ops.index("latent_down") < ops.index("dispatch_send")
    assert ops.index("combine_recv") < ops.index("latent_up") == ops.index("finalize") - 1


def test_kda_layers_hold_a_fixed_state_and_only_mla_layers_cache():
    s = get_preset("kimi-k3")
    w = Workload(s, CLUSTER, tokens=64, context=8192)
    assert kv_bytes_per_token(w) == 24 * (512 + 64) * 2  # the 24 MLA layers' latent, BF16
    state = 69 * (96 * 128 * 128 * 4 + 3 * 96 * 128 * 3 * 2)  # FP32 states, the conv's last 3 tokens in BF16
    assert state_bytes_per_request(w) == state
    small = Workload(s, CLUSTER, tokens=64, context=1024)
    assert memory_estimate(small).kv_cache < memory_estimate(w).kv_cache  # the MLA cache grows, the state not


def test_attention_residuals_read_more_blocks_deeper_in_the_model():
    assert [attn_res_sources(i, 12) for i in (0, 11, 12, 92)] == [2, 2, 3, 9]
    assert attn_res_sources(50, 0) == 0
    k3 = get_preset("kimi-k3")
    plain = dataclasses.replace(k3, attn_res_block=0)
    for layer in (1, 90):
        _, res = _costs(k3, layer)
        _, none = _costs(plain, layer)
        assert res.router.bytes - none.router.bytes == 256 * 7168 * 2 * (attn_res_sources(layer, 12) + 1)


def test_four_bit_experts_leave_the_shared_experts_at_the_weights_dtype_unless_the_checkpoint_quantizes_them():
    """INT4 and MXFP4 checkpoints quantize the routed experts only: K3's shared experts read BF16 weights, and
    NVFP4 experts alone leave them so too; a checkpoint that quantizes the MLPs (``Precision.mlp``) stores them
    in NVFP4."""
    k3 = get_preset("kimi-k3")
    _, c = _costs(k3, 8, t=2)
    assert c.shared.bytes >= 2 * 3 * 7168 * 6144  # two shared experts of 3072, gate/up/down, 2 bytes each
    experts_only = dataclasses.replace(k3, precision=dataclasses.replace(k3.precision, experts="nvfp4"))
    assert _costs(experts_only, 8, t=2)[1].shared.bytes == c.shared.bytes
    mlp = dataclasses.replace(k3, precision=dataclasses.replace(k3.precision, experts="nvfp4", mlp="nvfp4"))
    _, n = _costs(mlp, 8, t=2)
    assert n.shared.bytes < 0.3 * c.shared.bytes


def test_predict_answers_with_vllm_refusing_dbo_for_kimi_k3(capsys):
    argv = ["--model", "kimi-k3", "--gpu", "b300", "--nodes", "2", "--ep", "16", "--tokens", "64,512"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("kimi-k3 decode on 2 x 8 b300, EP 16")
    assert "vLLM 0.34.0 refuses DBO for kimi_k3" in out and "SGLang 0.5.23 has no two-batch overlap for kimi_k3" in out
    assert "vllm serve moonshotai/Kimi-K3 " in out and "--enable-dbo" not in out
    assert "GEMM, MLA and KDA tables" in out
