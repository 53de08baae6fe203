"""Cost model: profiles, formulas, validation."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from dbo import costs
from dbo.costs import (
    DeviceProfile,
    LinkProfile,
    Transfer,
    Work,
    elementwise,
    get_link,
    get_profile,
    kernel_time,
    matmul,
    scale_link,
    scale_profile,
    seconds_for,
    tensor_bytes,
    transfer_time,
)


@pytest.fixture
def private_tables(monkeypatch):
    """Registrations in a test go to copies of the process-global tables."""
    monkeypatch.setattr(costs, "_profiles", dict(costs._profiles))
    monkeypatch.setattr(costs, "_links", dict(costs._links))


def test_builtin_profiles_and_links():
    cpu = get_profile("cpu")
    assert cpu.peak_flops == pytest.approx(100e9) and cpu.mem_bandwidth == pytest.approx(20e9)
    assert cpu.launch_overhead == pytest.approx(5e-6)
    h200 = get_profile("h200")
    assert h200.peak_flops == pytest.approx(790e12) and h200.mem_bandwidth == pytest.approx(4.3e12)
    assert h200.launch_overhead == pytest.approx(4e-6)
    nv = get_link("nvlink")
    assert nv.bandwidth == pytest.approx(150e9) and nv.latency == pytest.approx(3e-6)
    ib = get_link("ib400")
    assert ib.bandwidth == pytest.approx(45e9) and ib.bandwidth < 50e9  # under the 400 Gb/s line rate
    assert ib.latency == pytest.approx(5e-6)
    assert {"cpu", "h200"} <= set(costs.profiles()) and {"nvlink", "ib400", "loopback"} <= set(costs.links())


def test_objects_pass_through_and_unknown_names_list_the_known_ones():
    p = DeviceProfile("mine", 1e9, 1e9, 0.0)
    assert get_profile(p) is p
    l = LinkProfile("mylink", 0.0, 1e9)
    assert get_link(l) is l
    with pytest.raises(ValueError, match="unknown device profile 'nope'.*cpu.*h200"):
        get_profile("nope")
    with pytest.raises(ValueError, match="unknown link profile 'nope'.*ib400.*nvlink"):
        get_link("nope")


def test_register(private_tables):
    p = costs.register_profile(DeviceProfile("test-dev", 2e9, 3e9, 1e-6))
    assert get_profile("test-dev") is p
    costs.register_profile(DeviceProfile("test-dev", 2e9, 3e9, 1e-6))  # same again: fine
    with pytest.raises(ValueError, match="replace=True"):
        costs.register_profile(DeviceProfile("test-dev", 4e9, 3e9, 1e-6))
    costs.register_profile(DeviceProfile("test-dev", 4e9, 3e9, 1e-6), replace=True)
    assert get_profile("test-dev").peak_flops == 4e9
    l = costs.register_link(LinkProfile("test-link", 1e-6, 1e9))
    assert get_link("test-link") is l
    with pytest.raises(ValueError, match="replace=True"):
        costs.register_link(LinkProfile("test-link", 2e-6, 1e9))
    with pytest.raises(TypeError):
        costs.register_profile(l)  # type: ignore[arg-type]


def test_kernel_time_is_a_roofline():
    p = DeviceProfile("t", peak_flops=1e12, mem_bandwidth=1e11, launch_overhead=1e-6)
    assert kernel_time(Work(flops=2e9, bytes=1e8), p) == pytest.approx(1e-6 + 2e-3)  # compute-bound
    assert kernel_time(Work(flops=1e9, bytes=3e8), p) == pytest.approx(1e-6 + 3e-3)  # memory-bound
    assert kernel_time(Work(), p) == pytest.approx(1e-6)
    assert kernel_time(Work(flops=1e12), "cpu") == pytest.approx(5e-6 + 10.0)


def test_transfer_time():
    l = LinkProfile("l", latency=2e-6, bandwidth=1e10)
    assert transfer_time(Transfer(1e7), l) == pytest.approx(2e-6 + 1e-3)
    assert transfer_time(Transfer(0), l) == pytest.approx(2e-6)
    assert transfer_time(Transfer(150e6), "nvlink") == pytest.approx(3e-6 + 1e-3)


def test_matmul_and_elementwise():
    w = matmul(128, 256, 512)
    assert w.flops == 2 * 128 * 256 * 512
    assert w.bytes == (128 * 512 + 512 * 256 + 128 * 256) * 2  # bf16
    assert matmul(2, 3, 4, dtype=torch.float32).bytes == (8 + 12 + 6) * 4
    e = elementwise(1000, torch.float16, reads=2, writes=1)
    assert e.bytes == 3 * 1000 * 2 and e.flops == 2000
    assert elementwise(10, torch.float32).bytes == 80
    with pytest.raises(ValueError):
        matmul(-1, 2, 3)
    with pytest.raises(TypeError):
        matmul(1.5, 2, 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        elementwise(10, "float32")  # type: ignore[arg-type]


def test_work_arithmetic():
    assert Work(1, 2) + Work(3, 4) == Work(4, 6)
    assert 2 * Work(1, 2) == Work(2, 4) == Work(1, 2) * 2


def test_tensor_bytes_counts_nested_and_meta_tensors():
    a = torch.zeros(10, dtype=torch.float32)
    b = torch.zeros(3, dtype=torch.bfloat16)
    m = torch.empty(100, device="meta", dtype=torch.float16)
    assert tensor_bytes([a, 1, "x", [b], {"k": m}]) == 40 + 6 + 200
    assert tensor_bytes([]) == 0


def test_seconds_for_every_branch():
    p = DeviceProfile("t", peak_flops=1e12, mem_bandwidth=1e11, launch_overhead=1e-6)
    l = LinkProfile("l", latency=2e-6, bandwidth=1e10)
    x = torch.zeros(1000)  # 4000 bytes
    assert seconds_for("compute", 0.5, (), p, l) == 0.5
    assert seconds_for("comm", 3, (), p, l) == 3.0
    assert seconds_for("compute", Work(2e9, 0), (), p, l) == pytest.approx(1e-6 + 2e-3)
    assert seconds_for("comm", Transfer(1e7), (), p, l) == pytest.approx(2e-6 + 1e-3)
    assert seconds_for("compute", None, (x,), p, l) == pytest.approx(1e-6 + 4000 / 1e11)
    assert seconds_for("comm", None, (x, x), p, l) == pytest.approx(2e-6 + 8000 / 1e10)
    with pytest.raises(ValueError, match="kind"):
        seconds_for("io", None, (), p, l)
    with pytest.raises(ValueError):
        seconds_for("compute", -1.0, (), p, l)
    with pytest.raises(ValueError):
        seconds_for("compute", math.inf, (), p, l)
    with pytest.raises(TypeError):
        seconds_for("compute", "1s", (), p, l)
    with pytest.raises(TypeError):
        seconds_for("compute", True, (), p, l)


@pytest.mark.parametrize(
    "make",
    [
        lambda: Work(flops=-1),
        lambda: Work(bytes=-1),
        lambda: Transfer(-5),
        lambda: Transfer(float("nan")),
        lambda: DeviceProfile("x", 0, 1, 0),
        lambda: DeviceProfile("x", 1, -1, 0),
        lambda: DeviceProfile("x", 1, 1, -1e-6),
        lambda: DeviceProfile("", 1, 1, 0),
        lambda: LinkProfile("x", -1, 1),
        lambda: LinkProfile("x", 0, 0),
    ],
)
def test_validation_rejects_bad_numbers(make):
    with pytest.raises(ValueError):
        make()


def test_validation_rejects_bad_types():
    with pytest.raises(TypeError):
        Work(flops="1")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Transfer(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Transfer(True)  # type: ignore[arg-type]


def test_dataclasses_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        get_link("nvlink").bandwidth = 1  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        Work(1, 1).flops = 2  # type: ignore[misc]


@pytest.mark.parametrize("factor", [0.25, 2.0, 10.0])
def test_scale_link_divides_every_transfer_time(factor):
    base = get_link("ib400")
    fast = scale_link("ib400", factor)
    assert fast.name == f"ib400x{factor:g}" and get_link("ib400") == base  # not registered, base unchanged
    for nbytes in (0, 1e3, 1e9):
        assert transfer_time(Transfer(nbytes), fast) == pytest.approx(transfer_time(Transfer(nbytes), base) / factor)
    assert scale_link(base, 2, name="ib800").name == "ib800"
    with pytest.raises(ValueError):
        scale_link(base, 0)


def test_scale_profile_divides_every_kernel_time():
    base = get_profile("h200")
    slow = scale_profile(base, 0.5)
    w = matmul(4096, 4096, 4096)
    assert kernel_time(w, slow) == pytest.approx(kernel_time(w, base) * 2)
