"""The engines' own all-reduce (``FamilyFit.custom_all_reduce``, ``.engine_all_reduce``, ``KernelTimes.all_reduce``):
attention TP's all-reduces up to ``CUSTOM_AR_MAX_BYTES`` take the step's engine's fitted line (no engine: the family's
line of all three) where it beats NCCL's ring model, the ring beyond it, and a family without the lines keeps the
ring; the reader gives the graph-captured rows of the three engines; each engine's line keeps its rows within the
documented medians."""

from __future__ import annotations

import statistics
from dataclasses import replace

import pytest

from demos.zoo import measured
from demos.zoo.costs import layer_costs
from demos.zoo.hardware import get_gpu
from demos.zoo.hardware.collectives import CUSTOM_AR_MAX_BYTES, tp_collective
from demos.zoo.kernel_times import KernelTimes
from demos.zoo.models import get_preset
from demos.zoo.profile import gpu_profile
from demos.zoo.rooflines import FITS
from demos.zoo.workload import Workload, cluster_for

needs_tables = pytest.mark.skipif(not measured.available(), reason="needs the measured extra")


def _times(gpu: str, engine: str | None = None, **fit_changes) -> KernelTimes:
    g = get_gpu(gpu)
    fit = replace(FITS[g.family], **fit_changes)
    return KernelTimes(g, gpu_profile(g, fit=fit), fit, engine=engine)


@pytest.mark.parametrize("gpu", ["h200", "b200"])
def test_a_decode_sized_all_reduce_takes_the_engines_kernel_not_the_ring(gpu):
    """8 tokens of a 7,168-wide BF16 row over 8 GPUs: the line, well under NCCL's ring model."""
    kt, nbytes = _times(gpu), 8 * 7168 * 2
    line = FITS[get_gpu(gpu).family].custom_all_reduce
    got, ring = kt.all_reduce(nbytes, 8), tp_collective(gpu, "all_reduce", nbytes, 8)
    assert got == pytest.approx(line.seconds(nbytes, 7)) and got < 0.7 * ring


@pytest.mark.parametrize("gpu", ["h200", "b200"])
def test_a_step_of_a_named_engine_takes_that_engines_line(gpu):
    """vLLM's kernel is the slowest of the three at decode sizes (docs/kernels.md): a vLLM step's all-reduce of
    32 tokens of a 3,072-wide row over 8 GPUs is its own line, longer than SGLang's and than the family's line;
    an engine without a table (AMD's ATOM) and no engine take the family's line."""
    nbytes, fam = 32 * 3072 * 2, FITS[get_gpu(gpu).family]
    got = {e: _times(gpu, e).all_reduce(nbytes, 8) for e in ("vllm", "sglang", "trtllm", "atom", None)}
    for e in ("vllm", "sglang", "trtllm"):
        assert got[e] == pytest.approx(fam.engine_all_reduce[e].seconds(nbytes, 7))
    assert got["atom"] == got[None] == pytest.approx(fam.custom_all_reduce.seconds(nbytes, 7))
    assert got["vllm"] > 1.2 * got["sglang"] and got["vllm"] > got[None]


def test_beyond_the_engines_buffer_and_without_the_line_the_ring_stays():
    kt = _times("h200", "vllm")
    big = 2 * CUSTOM_AR_MAX_BYTES
    assert kt.all_reduce(big, 8) == tp_collective("h200", "all_reduce", big, 8)
    assert kt.all_reduce(65536, 1) == 0.0
    ring_only = _times("h200", custom_all_reduce=None)
    assert ring_only.all_reduce(65536, 8) == tp_collective("h200", "all_reduce", 65536, 8)
    for family in ("cdna3", "cdna4"):
        assert FITS[family].custom_all_reduce is None and FITS[family].engine_all_reduce == {}


def test_a_tensor_parallel_moe_layer_all_reduces_at_the_engines_kernel():
    """MiniMax-M2.5 at attention TP 8 = MoE TP 8 on H200, 4 tokens: both of the layer's all-reduces are the
    engines' kernel over its 4 x 3,072 BF16 rows."""
    w = Workload(get_preset("minimax-m2.5"), cluster_for("h200", 1, 8, 8), tokens=4, attention_tp=8, moe_tp=8)
    profile = gpu_profile(w.gpu)
    kt = KernelTimes(w.gpu, profile)
    c = layer_costs(w, 4, 10, profile, kt)
    expected = kt.all_reduce(4 * 3072 * 2, 8)
    assert c.tp_attn_reduce == c.tp_mlp_reduce == pytest.approx(expected)
    assert expected < tp_collective("h200", "all_reduce", 4 * 3072 * 2, 8)


@needs_tables
@pytest.mark.measured
def test_the_reader_gives_each_engines_graph_rows_up_to_the_buffer():
    from demos.zoo.measured_comm import ALLREDUCE_TABLES, custom_allreduce_rows

    for engine in ALLREDUCE_TABLES:
        rows = custom_allreduce_rows("h200", engine)
        assert {r.gpus for r in rows} == {2, 4, 8} and max(r.nbytes for r in rows) == CUSTOM_AR_MAX_BYTES
        assert len(rows) == 48  # 16 sizes from 128 elements (256 B), doubling, per GPU count: the graph rows only
        assert all(1e-6 < r.seconds < 2e-4 for r in rows)
    # GB300's SGLang table also times 8 and 16 GPUs across a rack's 4-GPU trays: one node's rows only, so that
    # its own line is not pulled by them (it put an 8-GPU all-reduce at twice the family's)
    assert {r.gpus for r in custom_allreduce_rows("gb300", "sglang")} == {2, 4}


@needs_tables
@pytest.mark.measured
@pytest.mark.slow
@pytest.mark.parametrize("gpu", ["h200", "b200", "b300"])
def test_each_engines_line_keeps_its_own_kernel_within_the_documented_medians(gpu):
    """docs/kernels.md: each engine's line against its own rows, signed median, SGLang -2.5% to -5.0% and TRT-LLM
    -3.4% to -8.4% on these GPUs, vLLM -2.9% (H200) to -14.2% (B300; its one-shot kernel over 8 GPUs jumps at
    128-256 KB, which a line smooths); B300 is held out of the Blackwell lines. The bounds are sized to those
    figures."""
    from demos.fidelity.engine_comm import ALLREDUCE_OPS, allreduce_rows

    fit = FITS[get_gpu(gpu).family]
    errors: dict[str, list[float]] = {}
    for op, _, p, m in allreduce_rows(gpu, fit, set(ALLREDUCE_OPS.values())):
        errors.setdefault(op, []).append(p / m - 1)
    med = {op: statistics.median(e) for op, e in errors.items()}
    assert abs(med["all-reduce sglang"]) < 0.10 and abs(med["all-reduce trtllm"]) < 0.10
    assert abs(med["all-reduce vllm"]) < 0.16


@needs_tables
@pytest.mark.measured
def test_a_rows_bytes_put_vllms_algorithm_switch_where_its_source_has_it():
    """The tables count elements, not bytes (``demos.zoo.measured_comm``): vLLM's custom all-reduce runs its
    one-stage kernel below 256 KiB over up to 8 GPUs and below 512 KiB over up to 4 (``csrc/custom_all_reduce.cuh``,
    ``REDUCE_CASE``), its two-stage kernel above, whose floor is higher: the largest step up between two sizes of
    a GPU count's rows is where the tensor's bytes cross that threshold. Read as bytes, it sat at half of it."""
    from demos.zoo.measured_comm import custom_allreduce_rows

    rows = custom_allreduce_rows("b200", "vllm")
    for gpus, switch in ((8, 256 * 1024), (4, 512 * 1024)):
        times = sorted((r.nbytes, r.seconds) for r in rows if r.gpus == gpus)
        steps = [(b / a, nb) for (_, a), (nb, b) in zip(times, times[1:])]
        assert max(steps)[1] == switch, (gpus, max(steps))
