"""The generic transformer runs every architecture: at full size on virtual (meta, nothing proportional to
tokens allocated) and shrunken with real math on threads and inline, where DBO's outputs equal the same
split run one ubatch after another bitwise."""

from __future__ import annotations

import json
import math
import tracemalloc

import pytest

from demos.zoo.loading import shrunk_spec
from demos.zoo.models import PRESET_NAMES, CompressedAttention, SparseMLAAttention, get_preset, load_config
from demos.zoo.models.presets import preset_config
from demos.zoo.run import ZooRun
from demos.zoo.workload import Workload, cluster_for

pytestmark = [pytest.mark.timeout(120), pytest.mark.long(95)]  # about 95 CPU-seconds in all: a file to start first

CLUSTER = cluster_for("h100", 2, 8, 16)


def _expected_kernels(w: Workload) -> int:
    """Kernels of one ubatch's forward: embed, 3 attention kernels per layer (4 with a sparse MLA's
    indexer, 4 in a hybrid model's Gated DeltaNet layers: projections, conv, delta rule, out; DeepSeek-V4's
    one more with a compressor and two more with its indexer (its own compressor and the rest), and four
    hyper-connection kernels a layer), the dense MLP or the MoE block: ll router, dispatch's SM-held send
    half, flight and receive, experts, the same three of the combine, finalize; ht router, dispatch,
    experts, combine, the combine's copy, finalize; both the shared experts when there are, and a latent
    MoE's two projections (Kimi-K3, whose KDA layers are linear layers too)."""
    s = w.spec
    moe = (9 if w.schedule == "ll" else 6) + (1 if s.moe and s.moe.shared_experts else 0)
    moe += 2 if s.moe and s.moe.latent_size else 0  # a latent MoE's projections down and back up
    attention = 4 if isinstance(s.attention, SparseMLAAttention) else 3
    linear = sum(getattr(s.attention, "is_linear", lambda i: False)(i) for i in range(s.num_layers))
    if getattr(s.attention, "block_sparse", None) is not None:
        linear += sum(s.attention.is_block_sparse(i) for i in range(s.num_layers))  # the index
    if isinstance(s.attention, CompressedAttention):
        linear = sum((r > 0) + 2 * (r == 4) for r in s.attention.compress_ratios)  # compressor, indexer
    wide = 4 * s.num_layers if s.hc_mult > 1 else 0
    return 1 + attention * s.num_layers + linear + wide + s.first_k_dense + moe * s.moe_layers


@pytest.mark.parametrize("phase", ["decode", "prefill"])
@pytest.mark.parametrize("name", PRESET_NAMES)
def test_every_preset_runs_at_full_size_on_virtual(name, phase):
    w = Workload(get_preset(name), CLUSTER, phase=phase, tokens=64 if phase == "decode" else 2048, context=1024)
    with ZooRun(w) as r:
        no, yes = r.step(False), r.step(True)
        assert r.model.meta and r.model.moe.buffers == [None, None]
        slots = r.slot_sizes()
    for s in (no, yes):
        assert math.isfinite(s.seconds) and s.seconds > 0
        assert s.stages["attention"] > 0 and s.stages["mlp"] > 0
        assert s.stages["dispatch"] > 0 and s.stages["combine"] > 0
    assert no.kernels == _expected_kernels(w)
    assert yes.kernels == 2 * _expected_kernels(w)
    assert len(slots) == 2 and slots[0] == slots[1] > 0  # the slots grow in lockstep


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["decode", "prefill"])
@pytest.mark.parametrize("name", PRESET_NAMES)
def test_every_preset_shrunk_is_bitwise_exact_on_threads(name, phase):
    spec = shrunk_spec(get_preset(name), 32)
    w = Workload(spec, CLUSTER, phase=phase, tokens=12, context=8)
    with ZooRun(w, backend="threads") as r:
        same, diff = r.check_exact()
        out = r.model.hidden
        assert bool(out.isfinite().all())
        assert float(out.abs().max()) > 0
        # the layers did something: the output is not the input
        assert not bool((out == r.model.x0).all())
    assert same and diff == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("schedule", ["ll", "ht"])
def test_inline_is_bitwise_exact_too(schedule):
    w = Workload(shrunk_spec(get_preset("deepseek-v3"), 32), CLUSTER, tokens=10, context=8, schedule=schedule)
    with ZooRun(w, backend="inline") as r:
        assert r.check_exact() == (True, 0.0)


def test_a_config_json_runs_like_its_preset(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(preset_config("qwen3-30b-a3b")))
    spec = load_config(path)
    w = Workload(spec, CLUSTER, tokens=32)
    ref = Workload(get_preset("qwen3-30b-a3b"), CLUSTER, tokens=32)
    times = []
    for work in (w, ref):  # one at a time: each run owns the process-global workspace manager
        with ZooRun(work) as r:
            times.append(r.step(True).seconds)
    assert times[0] == times[1]


@pytest.mark.slow
def test_ubatches_sharing_their_buffers_are_caught():
    """The planted bug: both ubatches keep their MoE state in one buffer set. The DBO step then
    interleaves their writes, and the exactness check sees it."""
    w = Workload(shrunk_spec(get_preset("mixtral-8x7b"), 32), CLUSTER, tokens=16, context=8)
    with ZooRun(w, backend="threads") as r:
        r.model.moe.buffers[1] = r.model.moe.buffers[0]
        same, diff = r.check_exact()
    assert not same and diff > 0


def test_a_two_million_token_step_allocates_nothing_proportional_to_tokens():
    w = Workload(get_preset("deepseek-v2-lite"), cluster_for("h100", 1, 8, 8), phase="prefill", tokens=2_000_000)
    tracemalloc.start()
    try:
        with ZooRun(w) as r:
            s = r.step(True)
            _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert s.seconds > 0
    assert peak < 64 * 2**20  # a real hidden state alone would be 2e6 x 2048 x 2 bytes = 8 GB


def test_the_same_flags_give_the_same_times():
    w = Workload(get_preset("kimi-k2"), cluster_for("h800", 4, 8, 32), tokens=96)
    runs = []
    for _ in range(2):
        with ZooRun(w, mode="graph") as r:
            runs.append((r.step(False).seconds, r.step(True).seconds))
    assert runs[0] == runs[1]
