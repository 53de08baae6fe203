"""Cost model: profiles, formulas, validation."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

import dbo
import demos.toy  # noqa: F401  (registers the toy's fitted "h200" profile, used below)
from dbo import costs
from dbo.costs import (
    DeviceProfile,
    HostCosts,
    LinkProfile,
    Transfer,
    Work,
    _roofline,  # its process-global profile and link tables: no public name
    elementwise,
    get_link,
    get_profile,
    kernel_time,
    matmul,
    scale_link,
    scale_profile,
    seconds_for,
    syncs_host,
    tensor_bytes,
    transfer_time,
)


@pytest.fixture
def private_tables(monkeypatch):
    """Registrations in a test go to copies of the process-global tables."""
    monkeypatch.setattr(_roofline, "_profiles", dict(_roofline._profiles))
    monkeypatch.setattr(_roofline, "_links", dict(_roofline._links))


def test_builtin_profiles_and_links():
    cpu = get_profile("cpu")
    assert cpu.peak_flops == pytest.approx(100e9) and cpu.mem_bandwidth == pytest.approx(20e9)
    assert cpu.launch_overhead == pytest.approx(5e-6)
    h200 = get_profile("h200")
    assert h200.flops_rate(torch.bfloat16) == pytest.approx(300e12) and h200.mem_bandwidth == pytest.approx(4.3e12)
    assert h200.flops_rate(torch.float32) < h200.flops_rate("tf32") < h200.flops_rate("bf16") < h200.flops_rate("fp8")
    assert h200.host.launch > 0 and h200.host.sync == pytest.approx(5.4e-6) and not h200.host.zero
    assert get_profile("cpu").host.zero  # the cpu profile models no host time
    nv = get_link("nvlink")
    assert nv.bandwidth == pytest.approx(150e9) and nv.latency == pytest.approx(3e-6)
    ib = get_link("ib400")
    assert ib.bandwidth == pytest.approx(45e9) and ib.bandwidth < 50e9  # under the 400 Gb/s line rate
    assert ib.latency == pytest.approx(5e-6)
    assert {"cpu", "h200"} <= set(costs.profiles()) and {"nvlink", "ib400", "loopback"} <= set(costs.links())


def test_objects_pass_through_and_unknown_names_list_the_known_ones():
    p = DeviceProfile("mine", 1e9, 1e9, 0.0)
    assert get_profile(p) is p
    link = LinkProfile("mylink", 0.0, 1e9)
    assert get_link(link) is link
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
    link = costs.register_link(LinkProfile("test-link", 1e-6, 1e9))
    assert get_link("test-link") is link
    with pytest.raises(ValueError, match="replace=True"):
        costs.register_link(LinkProfile("test-link", 2e-6, 1e9))
    with pytest.raises(TypeError):
        costs.register_profile(link)  # type: ignore[arg-type]


def test_kernel_time_is_a_roofline():
    p = DeviceProfile("t", peak_flops=1e12, mem_bandwidth=1e11, launch_overhead=1e-6)
    assert kernel_time(Work(flops=2e9, bytes=1e8), p) == pytest.approx(1e-6 + 2e-3)  # compute-bound
    assert kernel_time(Work(flops=1e9, bytes=3e8), p) == pytest.approx(1e-6 + 3e-3)  # memory-bound
    assert kernel_time(Work(), p) == pytest.approx(1e-6)
    assert kernel_time(Work(flops=1e12), "cpu") == pytest.approx(5e-6 + 10.0)


def test_transfer_time():
    link = LinkProfile("l", latency=2e-6, bandwidth=1e10)
    assert transfer_time(Transfer(1e7), link) == pytest.approx(2e-6 + 1e-3)
    assert transfer_time(Transfer(0), link) == pytest.approx(2e-6)
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
    link = LinkProfile("l", latency=2e-6, bandwidth=1e10)
    x = torch.zeros(1000)  # 4000 bytes
    assert seconds_for("compute", 0.5, (), p, link) == 0.5
    assert seconds_for("comm", 3, (), p, link) == 3.0
    assert seconds_for("compute", Work(2e9, 0), (), p, link) == pytest.approx(1e-6 + 2e-3)
    assert seconds_for("comm", Transfer(1e7), (), p, link) == pytest.approx(2e-6 + 1e-3)
    assert seconds_for("compute", None, (x,), p, link) == pytest.approx(1e-6 + 4000 / 1e11)
    assert seconds_for("comm", None, (x, x), p, link) == pytest.approx(2e-6 + 8000 / 1e10)
    with pytest.raises(ValueError, match="kind"):
        seconds_for("io", None, (), p, link)
    with pytest.raises(ValueError):
        seconds_for("compute", -1.0, (), p, link)
    with pytest.raises(ValueError):
        seconds_for("compute", math.inf, (), p, link)
    with pytest.raises(TypeError):
        seconds_for("compute", "1s", (), p, link)
    with pytest.raises(TypeError):
        seconds_for("compute", True, (), p, link)


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


# --- the device model: dtype rates, efficiency curves, JSON -----------------------------------


def test_gemm_efficiency_is_monotone_and_saturates():
    from dbo.costs import DeviceProfile as DP
    from dbo.costs import kernel_time as kt

    p = DP("e", 1e12, 1e15, 0.0, gemm_knee=(64.0, 32.0, 16.0))
    effs = []
    for m in (1, 4, 16, 64, 256, 1024, 8192):
        w = Work(flops=2 * m * 512 * 512, shape=(m, 512, 512))
        effs.append(w.flops / (kt(w, p) * 1e12))
    assert all(0 < e <= 1 for e in effs)
    assert all(a < b for a, b in zip(effs, effs[1:]))
    assert effs[-1] > 0.9 and effs[0] < 0.05
    # a sum of works drops the GEMM shape (it is no longer one GEMM)
    assert (Work(1, 1, shape=(1, 1, 1)) + Work(1, 1)).shape is None


def test_min_kernel_and_bytes_knee():
    from dbo.costs import DeviceProfile as DP
    from dbo.costs import kernel_time as kt

    p = DP("m", 1e12, 1e12, 1e-6, min_kernel=2e-6, bytes_knee=1e6)
    assert kt(Work(), p) == pytest.approx(1e-6 + 2e-6)
    assert kt(Work(), p, kernels=3) == pytest.approx(1e-6 + 6e-6)
    assert kt(Work(bytes=1e9), p) == pytest.approx(1e-6 + (1e9 + 1e6) / 1e12)
    small = [kt(Work(bytes=b), p) / b for b in (1e4, 1e6, 1e8)]
    assert small[0] > small[1] > small[2]  # seconds per byte fall with size


def test_profile_json_round_trip_and_profile_by_path(tmp_path):
    h = get_profile("h200")
    text = h.to_json()
    assert DeviceProfile.from_json(text) == h
    path = tmp_path / "mine.json"
    mine = DeviceProfile.from_dict({**h.to_dict(), "name": "mine"})
    mine.to_json(path)
    assert get_profile(str(path)) == mine and get_profile(path) == mine
    # and wherever a profile name is accepted: a backend
    with dbo.get_backend("virtual", profile=str(path)) as b:
        assert b.profile == mine


def test_bad_profiles_give_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown device profile field"):
        DeviceProfile.from_dict({"name": "x", "peak_flops": 1, "mem_bandwidth": 1, "launch_overhead": 0, "speed": 3})
    with pytest.raises(ValueError, match="unknown host cost field"):
        DeviceProfile.from_dict(
            {"name": "x", "peak_flops": 1, "mem_bandwidth": 1, "launch_overhead": 0, "host": {"lunch": 1}}
        )
    with pytest.raises(ValueError, match="unknown dtype"):
        DeviceProfile("x", 1, 1, 0, dtype_flops={"float7": 1e12})
    with pytest.raises(ValueError, match="comm_sm_share"):
        DeviceProfile("x", 1, 1, 0, comm_sm_share=1.0)
    with pytest.raises(ValueError, match="cannot read device profile"):
        get_profile(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        get_profile(str(bad))
    with pytest.raises(ValueError, match="HostCosts.sync must be >= 0"):
        HostCosts(sync=-1.0)


def test_syncs_host_marks_functions():
    def f():
        pass

    assert syncs_host(f) is f and f.dbo_syncs_host is True
    with pytest.raises(TypeError, match="cannot mark"):
        syncs_host(len)


def test_op_corrections_and_kernel_sync_round_trip_and_are_checked(tmp_path):
    from dbo.costs import OpCost, scale_profile

    p = DeviceProfile(
        "p", 1e12, 1e12, 0.0, host=HostCosts(kernel_sync=False, ops={"router": OpCost(device=2e-5, scale=3.0)})
    )
    path = tmp_path / "p.json"
    p.to_json(path)
    again = get_profile(str(path))
    assert again == p and again.host.kernel_sync is False and again.host.ops["router"].scale == 3.0
    assert scale_profile(p, 2.0).host.ops["router"].device == pytest.approx(1e-5)
    with pytest.raises(ValueError, match="OpCost.scale must be > 0"):
        OpCost(scale=0.0)
    with pytest.raises(ValueError, match="OpCost.device must be >= 0"):
        OpCost(device=-1.0)
    with pytest.raises(TypeError, match="kernel_sync must be a bool"):
        HostCosts(kernel_sync=1)
