"""The shared experts on a side stream where the engine runs them there (``demos.zoo.side_streams``): which
engine, model and step take it; that the step launches the plan's ``shared_side`` on the side stream, beside
the routed experts, and joins it before the finalize; and what it saves.

The bugs these catch: a finalize that does not wait for the side stream (the sum read before the shared
experts wrote it), the side op launched on the compute stream (no overlap) or after the routed path (no
share taken), an engine or model given the side stream that its source does not fork, or a fused shared
expert (SGLang's) run beside."""

from __future__ import annotations

from collections import Counter

import pytest

from demos.vocabulary import Mode
from demos.zoo import plan as plan_module
from demos.zoo.kernel_times import KernelTimes
from demos.zoo.launch import SIDE_STREAM
from demos.zoo.models import get_preset
from demos.zoo.overlap_costs import step_profile
from demos.zoo.run import ZooRun
from demos.zoo.side_streams import VLLM_SIDE_TOKENS, sglang_fuses_shared, shared_beside
from demos.zoo.workload import Workload, cluster_for

pytestmark = pytest.mark.timeout(180)

DSV3, KIMI = get_preset("deepseek-v3"), get_preset("kimi-k2.5")


def _tp(spec=DSV3, tokens=16, phase="decode", moe_tp=1, gpu="h200"):
    """Attention TP 8 over an EP group of 8 (no all-to-all); ``moe_tp`` 8: the experts tensor-parallel."""
    return Workload(
        spec, cluster_for(gpu, 1, 8, 8), phase=phase, tokens=tokens, context=1024, attention_tp=8, moe_tp=moe_tp
    )


def test_each_engine_forks_where_its_source_does():
    w = _tp()
    assert shared_beside("trtllm", w, 16) and shared_beside("vllm", w, 16) and shared_beside("sglang", w, 16)
    assert not shared_beside(None, w, 16)  # no engine named: the predictor's own step keeps them in series
    assert not shared_beside("trtllm", _tp(get_preset("glm-5")), 16)  # TRT-LLM's other classes: not read
    assert shared_beside("sglang", _tp(KIMI), 16) and shared_beside("trtllm", _tp(KIMI), 16)
    assert shared_beside("sglang", _tp(get_preset("qwen3.5-397b-a17b")), 16)
    assert not shared_beside("vllm", _tp(get_preset("qwen3-30b-a3b")), 16)  # no shared experts
    assert not shared_beside("vllm", _tp(phase="prefill", tokens=64), 64)  # decode only


def test_vllm_forks_up_to_its_threshold_of_rows():
    w = _tp(tokens=VLLM_SIDE_TOKENS + 1)
    assert shared_beside("vllm", w, VLLM_SIDE_TOKENS) and not shared_beside("vllm", w, VLLM_SIDE_TOKENS + 1)
    assert shared_beside("trtllm", w, VLLM_SIDE_TOKENS + 1)  # TRT-LLM has no threshold


def test_no_side_stream_with_an_all_to_all():
    w = Workload(DSV3, cluster_for("h200", 2, 8, 16), tokens=32, context=1024)
    assert w.alltoall and not any(shared_beside(e, w, 32) for e in ("vllm", "sglang", "trtllm"))


def test_sglang_fuses_deepseeks_shared_expert_at_expert_parallelism_one():
    fused = _tp(moe_tp=8)  # the experts tensor-parallel over the 8 ranks: expert parallelism 1
    assert sglang_fuses_shared(fused) and not shared_beside("sglang", fused, 16)
    assert shared_beside("trtllm", fused, 16) and shared_beside("vllm", fused, 16)  # they do not fuse it
    assert not sglang_fuses_shared(_tp()) and shared_beside("sglang", _tp(), 16)  # experts split over 8
    assert not sglang_fuses_shared(_tp(KIMI, moe_tp=8))  # 384 experts: not fusable


def _run(w, engine, side=True, monkeypatch=None):
    profile = step_profile(w)
    if not side:
        monkeypatch.setattr(plan_module, "shared_beside", lambda *a: False)
    with ZooRun(w, mode=Mode.GRAPH, profile=profile, kernels=KernelTimes(w.gpu, profile, engine=engine)) as run:
        step = run.step(False)
        return step, run.model.plan, profile


def test_the_step_runs_the_shared_experts_beside_the_routed_path_and_joins_them(monkeypatch):
    w = _tp()
    step, plan, _ = _run(w, "trtllm")
    moe = [(i, lp) for i, lp in enumerate(plan.ubatch(w.tokens).layers) if lp.moe]
    assert moe and all("shared_side" in lp.plain and "shared" not in lp.plain for _, lp in moe)
    assert list(moe[0][1].plain).index("shared_side") < list(moe[0][1].plain).index("router")
    by = {}
    for r in step.records:
        by.setdefault((r.layer, r.op), []).append(r)
    launched = Counter(r.op for r in step.records if r.layer == moe[0][0])
    assert launched == Counter(list(moe[0][1].plain))  # the plan's ops, each once
    for i, _ in moe:
        (side,), (fin,) = by[(i, "shared_side")], by[(i, "finalize")]
        (experts,) = by.get((i, "experts_ll")) or by[(i, "experts")]
        assert side.stream == SIDE_STREAM and experts.stream != SIDE_STREAM
        assert side.start < experts.end and experts.start < side.end  # they overlap
        assert fin.start >= side.end  # the join: the sum waits for the shared experts
    alone, _, _ = _run(w, "trtllm", side=False, monkeypatch=monkeypatch)
    assert step.seconds < alone.seconds


def test_what_the_side_stream_saves_is_the_shared_experts_time_less_their_bytes(monkeypatch):
    w = _tp()
    step, plan, profile = _run(w, "trtllm")
    lp = next(lp for lp in plan.ubatch(w.tokens).layers if lp.moe)
    seconds = plan.seconds(lp.plain)["shared_side"]
    nbytes = lp.plain["shared_side"].bytes
    hidden = seconds - nbytes / profile.mem_bandwidth  # what overlaps: its floors, not its bytes
    layers = sum(1 for lp in plan.ubatch(w.tokens).layers if lp.moe)
    alone, _, _ = _run(w, "trtllm", side=False, monkeypatch=monkeypatch)
    saved = alone.seconds - step.seconds
    # the join's event latency is paid back per layer, so the saving is the hidden time less a little
    assert saved == pytest.approx(layers * hidden, rel=0.15)
    assert 0 < hidden < seconds


def test_the_finalize_waits_for_shared_experts_that_outlast_the_routed_path(monkeypatch):
    from dbo.costs import Work

    launches = plan_module.layer_launches

    def long_side(w, c, **kw):  # shared experts of 2 ms: far past the routed path
        out = dict(launches(w, c, **kw))
        if "shared_side" in out:
            out["shared_side"] = Work(seconds=2e-3)
        return out

    monkeypatch.setattr(plan_module, "layer_launches", long_side)
    step, plan, _ = _run(_tp(), "trtllm")
    ends = {(r.layer, r.op): r for r in step.records}
    moe = [i for i, lp in enumerate(plan.ubatch(16).layers) if lp.moe]
    for i in moe:
        assert ends[(i, "finalize")].start >= ends[(i, "shared_side")].end
    assert step.seconds >= 2e-3 * len(moe)  # the side stream's time is on the step's path
