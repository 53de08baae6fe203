"""Which all-reduce kernel an engine build runs (``demos.zoo.engine_allreduce``): SGLang's FlashInfer fusion by
release and architecture (read in its wheels), else its custom kernel of the build; vLLM and TRT-LLM their own;
the serving pricer and the silicon check take the build's line (``KernelTimes.all_reduce``)."""

from __future__ import annotations

import pytest

from demos.zoo.engine_allreduce import FUSED_KERNEL, allreduce_kernel, sglang_release_point
from demos.zoo.kernel_times import KernelTimes
from demos.zoo.models import get_preset
from demos.zoo.profile import gpu_profile
from demos.zoo.rooflines import gpu_fit
from demos.zoo.workload import Workload, cluster_for

OLD = "sglang 0.5.10"


def _w(model: str, gpu: str = "b200", tp: int = 8, nodes: int = 1, per_node: int | None = None, ep: int | None = None):
    per_node = per_node or tp
    return Workload(get_preset(model), cluster_for(gpu, nodes, per_node, ep or tp), tokens=4, attention_tp=tp)


def test_release_points():
    assert sglang_release_point("0.5.9") == ((0, 5, 9), None)
    assert sglang_release_point("0.5.10rc0") == ((0, 5, 10), None)
    assert sglang_release_point("0.5.10.post1") == ((0, 5, 10), None)
    assert sglang_release_point("nightly-dev-20260402-d3bae71e") == (None, "20260402")
    assert sglang_release_point(None) == ((0, 5, 23), None)
    with pytest.raises(ValueError, match="not an SGLang release"):
        sglang_release_point("latest")


@pytest.mark.parametrize(
    "model, release, kernel",
    [
        # DeepSeek-V3 is in the fused list of every release read
        ("deepseek-v3", "0.5.6", FUSED_KERNEL),
        ("deepseek-v3", "0.5.9", FUSED_KERNEL),
        # Qwen3.5 from 0.5.10rc0 (2026-03-27): a nightly before it runs the custom kernel of its build
        ("qwen3.5-397b-a17b", "0.5.9", OLD),
        ("qwen3.5-397b-a17b", "nightly-dev-20260317", OLD),
        ("qwen3.5-397b-a17b", "nightly-dev-20260402", FUSED_KERNEL),
        ("qwen3.5-397b-a17b", "0.5.10.post1", FUSED_KERNEL),
        # GLM-5 from 0.5.11
        ("glm-5", "nightly-dev-20260401", OLD),
        ("glm-5", "0.5.10.post1", OLD),
        ("glm-5", "0.5.11", FUSED_KERNEL),
        ("glm-5", None, FUSED_KERNEL),
        # MiniMax-M2.5 in no list read: the custom kernel, the older one up to 0.5.10 and nightlies before 0.5.11
        ("minimax-m2.5", "0.5.10.post1", OLD),
        ("minimax-m2.5", "nightly-dev-20260506", OLD),
        ("minimax-m2.5", "nightly-dev-20260507", "sglang"),
        ("minimax-m2.5", "0.5.14", "sglang"),
        ("minimax-m2.5", None, "sglang"),
    ],
)
def test_sglangs_kernel_by_release_and_architecture(model, release, kernel):
    tp = 4 if model == "minimax-m2.5" else 8
    assert allreduce_kernel("sglang", release, _w(model, tp=tp)) == kernel


def test_the_fusion_needs_hopper_or_blackwell_one_node_and_no_all_to_all():
    assert allreduce_kernel("sglang", "0.5.9", _w("deepseek-v3", "h200")) == FUSED_KERNEL
    assert allreduce_kernel("sglang", "0.5.9", _w("deepseek-v3", "h20")) == OLD  # H20 is excluded by name
    assert allreduce_kernel("sglang", "0.5.9", _w("deepseek-v3", "mi300x")) == OLD  # not SM90 / SM100
    dp = Workload(get_preset("deepseek-v3"), cluster_for("b200", 1, 8, 8), tokens=4, attention_tp=1)
    assert dp.alltoall and allreduce_kernel("sglang", "0.5.9", dp) == OLD
    # TP 8 over two 4-GPU GB200 trays: two nodes, fused only from 0.5.23 (SM100 across nodes)
    rack = _w("deepseek-v3", "gb200", tp=8, nodes=2, per_node=4)
    assert allreduce_kernel("sglang", "0.5.9", rack) == OLD
    assert allreduce_kernel("sglang", None, rack) == FUSED_KERNEL


def test_the_lists_name_zoo_model_types_and_the_pinned_release_is_the_lines_one():
    """A typo in a list would leave its model on the custom kernel silently; the pinned build must be the release
    the engine lines are read from (``demos.prediction.engines``)."""
    from demos.prediction.engines._releases import SGLANG_VERSION
    from demos.zoo.engine_allreduce import FUSED_ALLREDUCE_MODELS, SGLANG_PINNED
    from demos.zoo.models import PRESET_NAMES

    zoo = {get_preset(p).model_type for p in PRESET_NAMES}
    for _, _, types in FUSED_ALLREDUCE_MODELS:
        assert types <= zoo, types - zoo
    assert sglang_release_point(SGLANG_VERSION)[0] == SGLANG_PINNED[0]


def test_other_engines_run_their_own_kernel():
    w = _w("qwen3.5-397b-a17b")
    assert allreduce_kernel("vllm", "0.19.0", w) == "vllm" and allreduce_kernel("trtllm", None, w) == "trtllm"
    assert allreduce_kernel(None, None, w) is None


@pytest.mark.parametrize("gpu", ["h200", "b200"])
def test_a_step_takes_its_builds_line(gpu):
    """32 tokens of Qwen3.5's 4,096-wide row over 8 GPUs: SGLang 0.5.9's custom kernel runs longer than the fused
    one 0.5.10.post1 runs (TRT-LLM's line) and than 0.5.14's custom kernel."""
    w, nbytes = _w("qwen3.5-397b-a17b", gpu), 32 * 4096 * 2
    fit = gpu_fit(w.gpu)
    got = {}
    for release in ("0.5.9", "0.5.10.post1", "0.5.14"):
        key = allreduce_kernel("sglang", release, w)
        kt = KernelTimes(w.gpu, gpu_profile(w.gpu), engine="sglang", allreduce=key)
        got[release] = kt.all_reduce(nbytes, 8)
        assert got[release] == pytest.approx(fit.engine_all_reduce[key].seconds(nbytes, 7))
    assert got["0.5.9"] > 1.2 * got["0.5.10.post1"] and got["0.5.9"] > 1.2 * got["0.5.14"]


def test_the_serving_pricer_is_kept_per_build():
    from demos.serving.ranks import prepare

    pricers: dict = {}
    kw = dict(gpu="b200", nodes=1, gpus_per_node=8, ep=8, attention_tp=8, imbalance="auto", weights=None)
    kw |= dict(kernels="roofline", max_seqs=None, pricers=pricers, kv_cache_dtype=None)
    native = get_preset("qwen3.5-397b-a17b")
    old = prepare(native, "sglang", "decode", release="0.5.9", **kw)
    fused = prepare(native, "sglang", "decode", release="0.5.10.post1", **kw)
    assert old.pricer is not fused.pricer and len(pricers) == 2
    assert (old.pricer.kernels.allreduce, fused.pricer.kernels.allreduce) == (OLD, FUSED_KERNEL)


def test_the_serving_report_names_the_kernel_its_release_runs():
    """The run's ``rests on`` line says which all-reduce its steps took: a release changes the answer, and the
    report says why (the bug this catches: the kernel chosen but not said)."""
    from demos.serving.api import simulate

    kw = dict(
        engine="sglang", pool="decode", gpu="b200", ep=8, attention_tp=8, concurrency=4, isl=256, osl=8,
        requests=8, warmup=4, overlap="none", search=False, pricers={}, disable_radix_cache=True,
    )  # fmt: skip
    old = simulate("qwen3.5-397b-a17b", release="0.5.9", **kw)
    fused = simulate("qwen3.5-397b-a17b", release="0.5.10.post1", **kw)
    assert any("SGLang's custom kernel as built up to 0.5.10" in s for s in old.sources)
    assert any("FlashInfer's fused kernel" in s for s in fused.sources)
    assert old.runs[0].tpot_ms.p50 > fused.runs[0].tpot_ms.p50  # the older kernel is the slower one
