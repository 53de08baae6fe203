"""MiniMax-M3's block-sparse attention (issue 45): the loader, the kind per layer (its core capped at the picked
blocks, its index growing with the context), its cache, its ops, and the held-out check against SGLang's
measured decode modules."""

from __future__ import annotations

import pytest

from demos.predict import main
from demos.prediction.engines import Deployment, overlap_flags, serve_lines, served_model
from demos.zoo import measured
from demos.zoo.attention import layer_attention
from demos.zoo.memory import kv_bytes_per_token
from demos.zoo.models import BlockSparse, get_preset, spec_from_config
from demos.zoo.models.presets import preset_config
from demos.zoo.plan import StepPlan
from demos.zoo.profile import gpu_profile
from demos.zoo.workload import Workload, cluster_for

needs_extra = pytest.mark.skipif(not measured.available(), reason="needs the measured extra")
CLUSTER = cluster_for("b200", 2, 8, 16)


def test_the_loader_reads_the_sparse_layers_the_dense_first_layers_and_the_shared_expert():
    s = get_preset("minimax-m3")
    a = s.attention
    assert a.layer_types.count("full_attention") == 3 and a.layer_types.count("block_sparse_attention") == 57
    assert a.block_sparse == BlockSparse(4, 128, 128, 16, local_blocks=1, init_blocks=0)
    assert a.block_sparse.read_tokens == 17 * 128
    assert (s.first_k_dense, s.dense_intermediate_size, s.moe.shared_experts, s.moe.intermediate_size) == (
        3,
        12288,
        1,
        3072,
    )
    assert [layer_attention(a, i)[0].label for i in (0, 2, 3, 59)] == ["GQA", "GQA"] + ["block-sparse GQA"] * 2


@pytest.mark.parametrize(
    "field,value,fragment",
    [
        ("moe_layer_freq", [1, 0] + [1] * 58, "must be dense layers (0) first, then MoE layers (1)"),
        ("shared_intermediate_size", 1024, "must equal moe_intermediate_size (3072), got 1024"),
        ("attention_output_gate", True, "an attention output gate is not supported"),
    ],
)
def test_layouts_the_spec_cannot_express_are_one_line_naming_the_field(field, value, fragment):
    with pytest.raises(Exception) as info:
        spec_from_config({**preset_config("minimax-m3"), field: value}, source="config.json")
    message = str(info.value)
    assert "\n" not in message and f"'{field}'" in message and fragment in message


def _plan(context, tokens=64):
    w = Workload(get_preset("minimax-m3"), CLUSTER, tokens=tokens, context=context)
    return w, StepPlan(w, gpu_profile(w.gpu)).ubatch(tokens)


def test_only_the_sparse_layers_launch_the_index_and_their_core_stops_at_the_picked_blocks():
    _, short = _plan(2048)
    _, long = _plan(65536)
    assert "attn_index" not in short.layers[0].plain and "attn_index" in short.layers[3].plain
    # past 17 blocks of 128 a query reads no more; the index scores every cached token
    assert long.layers[3].costs.attn_core.bytes == _plan(4096)[1].layers[3].costs.attn_core.bytes
    assert long.layers[0].costs.attn_core.bytes > 10 * long.layers[3].costs.attn_core.bytes  # a full layer reads all
    index = {c: dict(p.layers[3].costs.attention_ops)["attn_index"].seconds for c, p in ((2048, short), (65536, long))}
    assert index[65536] > 4 * index[2048]


def test_the_cache_holds_the_index_key_beside_keys_and_values_on_the_sparse_layers():
    w, _ = _plan(2048)
    a = w.spec.attention
    kv = 2 * a.kv_heads * a.head_dim * 2  # BF16 keys and values of the 4 KV heads
    assert kv_bytes_per_token(w) == 60 * kv + 57 * 128 * 2


def test_predict_answers_for_minimax_m3_with_lines_its_engines_accept(capsys):
    assert main(["--model", "minimax-m3", "--gpu", "b200", "--nodes", "2", "--ep", "16", "--tokens", "64,256"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("minimax-m3 decode on 2 x 8 b200, EP 16")
    assert "vllm serve MiniMaxAI/MiniMax-M3 " in out and "--model-path MiniMaxAI/MiniMax-M3 " in out


def test_sglang_has_no_two_batch_overlap_for_minimax_m3_and_vllm_runs_dbo():
    spec = get_preset("minimax-m3")
    w = Workload(spec, CLUSTER, tokens=256, context=2048)
    model_id, served = served_model("minimax-m3", spec, spec)
    d = Deployment.of(w, model_id, served=served)
    assert overlap_flags(d)["dbo"] == (
        "vLLM --enable-dbo with the threshold below; SGLang 0.5.23 has no two-batch overlap for minimax_m3"
    )
    lines = serve_lines(d, "dbo", 256)
    assert "--enable-dbo" in lines.vllm and "--enable-two-batch-overlap" not in lines.sglang


@needs_extra
def test_the_block_sparse_decode_module_is_within_10_percent_median_on_every_gpu_with_tables():
    from demos.fidelity.kernels import kernel_rows, summaries

    for gpu in ("h100", "h200", "b200", "gb200"):
        (s,) = summaries(kernel_rows(gpu, ops=("msa module",)))
        assert s["rows"] > 600 and abs(s["median_error"]) < 0.10, (gpu, s["median_error"])
