"""Attention TP's collectives: NCCL's ring cost model on NVLink (docs/clusters.md, "Attention tensor
parallelism")."""

from __future__ import annotations

import pytest

from demos.zoo.hardware import DEEPEP_H800, get_gpu
from demos.zoo.hardware.collectives import NCCL_RING_NVLINK, ring_steps, tp_collective

H100 = get_gpu("h100")


def test_a_ring_takes_2_n_minus_1_steps_to_all_reduce_and_n_minus_1_to_scatter_or_gather():
    assert ring_steps("all_reduce", 8) == 14
    assert ring_steps("reduce_scatter", 8) == ring_steps("all_gather", 8) == 7
    assert tp_collective(H100, "all_reduce", 1e6, 1) == 0.0


def test_a_large_all_reduce_sends_2_n_minus_1_over_n_of_the_tensor_at_the_bus_bandwidth():
    nbytes = 1e9
    bus = DEEPEP_H800.nvlink_efficiency * H100.nvlink_bandwidth
    base, hop, share = NCCL_RING_NVLINK["Simple"]
    assert share == 1.0
    expected = base + 14 * hop + 2 * 7 / 8 * nbytes / bus
    assert tp_collective(H100, "all_reduce", nbytes, 8) == pytest.approx(expected)
    # a reduce-scatter and an all-gather move half of it each: together they are one all-reduce
    rs = tp_collective(H100, "reduce_scatter", nbytes, 8)
    ag = tp_collective(H100, "all_gather", nbytes, 8)
    assert rs == ag and rs + ag == pytest.approx(expected + base, rel=1e-9)


def test_a_small_collective_takes_the_low_latency_protocol():
    base, hop, _ = NCCL_RING_NVLINK["LL"]
    t = tp_collective(H100, "reduce_scatter", 1024.0, 8)
    assert base + 7 * hop < t < base + 7 * hop + 1e-6
    assert t < tp_collective(H100, "reduce_scatter", 1024.0 * 1024, 8)  # more bytes, more time


def test_bad_arguments_are_one_line():
    with pytest.raises(ValueError, match="kind"):
        tp_collective(H100, "broadcast", 1.0, 8)
    with pytest.raises(ValueError, match="nbytes"):
        tp_collective(H100, "all_gather", -1.0, 8)
    with pytest.raises(ValueError, match="^n "):
        tp_collective(H100, "all_gather", 1.0, 0)
