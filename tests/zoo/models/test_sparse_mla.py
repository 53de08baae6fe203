"""DeepSeek sparse attention (``SparseMLAAttention``, the ``SparseMLA`` kind; issue 45): DeepSeek-V3.2 and GLM-5.

Published figures: GLM-5 "744B parameters (40B active)" (Z.ai's GLM-5 model card, huggingface.co/zai-org/GLM-5);
DeepSeek-V3.2 671B total and 37B activated, as DeepSeek-V3 (the V3.2 model card: the V3.1-Terminus
architecture plus the indexer; its 685B counts the MTP module, as V3's does).
"""

from __future__ import annotations

import dataclasses

import pytest

from demos.vocabulary import Phase
from demos.zoo import measured
from demos.zoo.attention import SparseMLA, attention_kind
from demos.zoo.fold import Folder
from demos.zoo.hardware import get_gpu
from demos.zoo.kernel_times import KernelTimes
from demos.zoo.memory import kv_bytes_per_token
from demos.zoo.models import MLAAttention, ModelSpecError, SparseMLAAttention, count_params, get_preset
from demos.zoo.models.params import indexer_params
from demos.zoo.profile import gpu_profile
from demos.zoo.work import causal_pairs, sparse_causal_pairs
from demos.zoo.workload import Workload, cluster_for

B = 1e9


def within(value: float, published: float, tolerance: float) -> bool:
    return abs(value - published) <= tolerance * published


def test_glm_5_744b_total_40b_active():
    c = count_params(get_preset("glm-5"))
    assert within(c.total, 744 * B, 0.03)  # 743.91B
    assert within(c.active_non_embedding, 40 * B, 0.03)  # 39.88B: neither table, as Z.ai counts GLM-4.5


def test_deepseek_v3_2_671b_total_37b_active_and_v3_plus_the_indexer():
    v32, v3 = count_params(get_preset("deepseek-v3.2")), count_params(get_preset("deepseek-v3"))
    assert within(v32.total, 671 * B, 0.03) and within(v32.active, 37 * B, 0.03)
    per_layer = 1536 * 64 * 128 + 7168 * 128 + 2 * 128 + 7168 * 64  # wq_b, wk, k_norm, weights_proj
    assert v32.attention - v3.attention == 61 * per_layer


def test_the_indexer_of_glm_5_by_hand():
    assert indexer_params(get_preset("glm-5")) == 2048 * 32 * 128 + 6144 * 128 + 2 * 128 + 6144 * 32
    assert indexer_params(get_preset("deepseek-v3")) == 0


def test_a_sparse_mla_needs_the_query_latent_and_positive_indexer_fields():
    base = dataclasses.asdict(get_preset("deepseek-v3").attention)
    with pytest.raises(ModelSpecError, match="SparseMLAAttention.q_lora_rank"):
        SparseMLAAttention(**{**base, "q_lora_rank": None}, index_heads=64, index_head_dim=128, index_topk=2048)
    with pytest.raises(ModelSpecError, match="SparseMLAAttention.index_topk"):
        SparseMLAAttention(**base, index_heads=64, index_head_dim=128, index_topk=0)
    assert isinstance(get_preset("glm-5").attention, MLAAttention)  # an MLA: its cache, its TP split
    assert isinstance(attention_kind(get_preset("glm-5").attention), SparseMLA)


def _costs(model: str, phase: Phase, context: int, tokens: int = 64):
    g = get_gpu("b200")
    w = Workload(get_preset(model), cluster_for("b200", 1, 8, 8), phase=phase, tokens=tokens, context=context)
    profile = gpu_profile(g)
    fold = Folder(profile, KernelTimes(g, profile))
    return attention_kind(w.spec.attention).costs(w, w.spec.attention, tokens, 5, fold)


def test_a_decode_core_stops_growing_at_topk_and_the_indexer_does_not():
    """The bug this catches: a core that reads the whole context (the sparse model costed as dense MLA) or
    an indexer that reads only its top-k (the scores cost nothing at long context)."""
    short, at_k, long = (_costs("glm-5", Phase.DECODE, c) for c in (1024, 2048, 32768))
    assert long.core_work == at_k.core_work != short.core_work
    index = {c: dict(x.extra)["attn_index"].seconds for c, x in ((1024, short), (2048, at_k), (32768, long))}
    assert index[1024] < index[2048] < index[32768] and index[32768] > 8 * index[2048]
    assert [op for op, _ in long.ops] == ["attn_proj", "attn_index", "attn_core", "attn_out"]


def test_prefill_reads_at_most_topk_keys_per_query():
    assert sparse_causal_pairs(4096, 4096, 2048) == 2048 * 2049 / 2 + 2048 * 2048
    assert sparse_causal_pairs(3000, 1000, 2048) == causal_pairs(3000, 1000)  # requests within the top-k
    assert sparse_causal_pairs(5000, 4096, 2048) == (2048 * 2049 / 2 + 2048 * 2048) + 904 * 905 / 2
    dense, sparse = (_costs(m, Phase.PREFILL, 8192, tokens=8192) for m in ("deepseek-v3", "deepseek-v3.2"))
    assert sparse.core_work[0] < 0.5 * dense.core_work[0]


def test_the_cache_holds_the_indexer_key_beside_the_latent():
    spec = get_preset("glm-5")
    w = Workload(spec, cluster_for("b200", 1, 8, 8), tokens=8, context=1024)
    assert kv_bytes_per_token(w) == 78 * ((512 + 64) * 2 + 128 + 4)  # BF16 latent + FP8 key and its scale


@pytest.mark.slow
def test_with_real_math_the_selection_changes_the_output_and_dbo_stays_bitwise():
    """Shrunk GLM-5 on threads with a top-k below the cached context: the DBO step equals its ubatches run
    one after another bitwise, and the output differs from the same model reading every cached token (the
    indexer's selection reached the core)."""
    from demos.zoo.loading import shrunk_spec
    from demos.zoo.run import ZooRun

    spec = shrunk_spec(get_preset("glm-5"), 32)
    outs = {}
    for topk in (3, 8):
        s = dataclasses.replace(spec, attention=dataclasses.replace(spec.attention, index_topk=topk))
        w = Workload(s, cluster_for("h100", 2, 8, 16), tokens=12, context=8)
        with ZooRun(w, backend="threads") as r:
            same, diff = r.check_exact()
            outs[topk] = r.model.hidden.clone()
        assert same and diff == 0.0
    assert not bool((outs[3] == outs[8]).all())


def test_the_answer_says_the_indexer_is_an_extrapolation():
    from demos.prediction import predict

    sparse = predict("glm-5", gpu="b200", nodes=2, ep=16, tokens=[64]).text()
    dense = predict("deepseek-v3", gpu="b200", nodes=2, ep=16, tokens=[64]).text()
    assert "the sparse attention's indexer scores timed on the FP8 GEMM curve (an extrapolation" in sparse
    assert "indexer" not in dense


DSA_SHORT = ("h200", "b200", "gb200")
"""The GPUs whose DSA modules the composed op misses by more than 10% (signed median -11.2% to -12.6%) since
the MLA module's fixed time stopped stacking on its kernels' floors (docs/kernels.md): what is left is the
indexer's side (SGLang's decode launches about 16 kernels for it, 12 on a side stream, against the op's 5; and
the rows past 64 requests run 16-29% short on every GPU). Issue 45's 10% target, kept visible here: a strict
expected failure, which fails the suite when one of them comes within it."""


@pytest.mark.slow
@pytest.mark.measured
@pytest.mark.skipif(not measured.available(), reason="needs the measured extra")
def test_the_composed_op_stays_near_sglangs_measured_modules_on_every_gpu(validate_json):
    """``validate kernels``' ``dsa module``: SGLang's whole DeepSeek-V3.2 and GLM-5 decode modules against the
    predictor's sparse attention op, fitted to none of them, within 15% (signed median) on every GPU with
    tables, both models in its rows (the 10% target: the test below)."""
    data = validate_json("kernels")
    dsa = {s["gpu"]: s for s in data["summary"] if s["op"] == "dsa module"}
    assert set(dsa) == set(measured.SYSTEMS) >= {"h100", "h200", "b200", "gb200", "b300", "gb300"}
    for gpu, s in dsa.items():
        assert s["rows"] > 1000 and abs(s["median_error"]) <= 0.15, (gpu, s["median_error"])
    shapes = {r["shape"].split()[0] for r in data["rows"] if r["op"] == "dsa module"}
    assert shapes == {"deepseek-v3.2", "glm-5"}


@pytest.mark.slow
@pytest.mark.measured
@pytest.mark.skipif(not measured.available(), reason="needs the measured extra")
@pytest.mark.parametrize(
    "gpu",
    [
        pytest.param(g, marks=pytest.mark.xfail(strict=True, reason="the DSA indexer's kernel chain (DSA_SHORT)"))
        if g in DSA_SHORT
        else g
        for g in ("h100", "h200", "b200", "gb200", "b300", "gb300")
    ],
)
def test_the_composed_op_meets_sglangs_measured_modules_within_10_percent(validate_json, gpu):
    s = next(s for s in validate_json("kernels")["summary"] if s["op"] == "dsa module" and s["gpu"] == gpu)
    assert abs(s["median_error"]) <= 0.10, (gpu, s["median_error"])
