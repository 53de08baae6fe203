"""dbo.costs: recover a known device model from noisy synthetic samples, and extrapolate."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dbo.costs import (
    DeviceProfile,
    FitError,
    Work,
    fit_device,
    fit_host,
    fit_launch_costs,
    fit_profile,
    kernel_time,
    predict,
)
from tests.support.profiles import gemm_sample as _gemm

TRUE = DeviceProfile(
    "true",
    peak_flops=600e12,
    mem_bandwidth=3.0e12,
    launch_overhead=0.0,
    dtype_flops={"bfloat16": 600e12, "float32": 50e12},
    min_kernel=3e-6,
    gemm_knee=(64.0, 32.0, 48.0),
    bytes_knee=2e5,
)


def _samples(noise: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    desc = []
    for dt in ("bfloat16", "float32"):
        for m in (8, 32, 128, 512, 2048):
            for n in (256, 1024, 4096):
                for k in (128, 1024, 4096):
                    desc.append(_gemm(m, n, k, dt))
    for b in (1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9):
        desc.append(("elementwise", None, "float32", b))
    out = []
    for op, sh, dt, b in desc:
        t = predict(TRUE, op, sh, dt, b)
        out.append((op, sh, dt, b, t * float(np.exp(rng.normal(0, noise)))))
    return out


def test_fit_recovers_the_parameters_of_a_known_device():
    p = fit_device(_samples(noise=0.03), name="fit")
    assert p.flops_rate("bfloat16") == pytest.approx(600e12, rel=0.08)
    assert p.flops_rate("float32") == pytest.approx(50e12, rel=0.08)
    assert p.mem_bandwidth == pytest.approx(3.0e12, rel=0.08)
    assert p.min_kernel == pytest.approx(3e-6, rel=0.1)
    for got, want in zip(p.gemm_knee, TRUE.gemm_knee):
        assert got == pytest.approx(want, rel=0.35)


@pytest.mark.parametrize(
    "op,shape,dt,nbytes",
    [
        _gemm(8192, 8192, 8192, "bfloat16"),  # far larger than any sample
        _gemm(4, 12288, 2048, "bfloat16"),  # decode-sized M, unmeasured N
        _gemm(16, 8192, 8192, "float32"),  # small M, compute-bound: the M knee decides
        _gemm(2048, 2048, 24, "float32"),  # small K: the K knee decides
        _gemm(4096, 12, 4096, "float32"),  # small N: the N knee decides
        _gemm(3000, 700, 300, "float32"),
        ("elementwise", None, "float32", 5e9),
        ("elementwise", None, "float32", 3e4),
    ],
)
def test_fitted_model_extrapolates_to_unmeasured_shapes(op, shape, dt, nbytes):
    p = fit_device(_samples(noise=0.03, seed=1))
    assert predict(p, op, shape, dt, nbytes) == pytest.approx(predict(TRUE, op, shape, dt, nbytes), rel=0.12)


def test_predict_matches_kernel_time():
    w = Work(flops=2 * 64 * 128 * 256, bytes=1e6, dtype=torch.bfloat16, shape=(64, 128, 256))
    assert predict(TRUE, "gemm", {"M": 64, "N": 128, "K": 256}, torch.bfloat16, 1e6) == pytest.approx(
        kernel_time(w, TRUE)
    )


def test_fit_host_from_micro_benchmarks():
    h = fit_host(
        {
            "launch_add_us": 6.0,
            "stream_ctx_us": 9.0,
            "lock_pingpong_us": 7.0,
            "event_record_wait_us": 1.5,
            "idle_device_sync_us": 5.0,
        },
        thread_start=5e-5,
    )
    assert (
        h.kernel == pytest.approx(6e-6) and h.launch == pytest.approx(9e-6) and h.stream_switch == pytest.approx(4.5e-6)
    )
    assert h.handoff == pytest.approx(7e-6) and h.event == pytest.approx(0.75e-6) and h.sync == pytest.approx(5e-6)
    assert h.thread_start == pytest.approx(5e-5)
    with pytest.raises(FitError, match="launch_add_us"):
        fit_host({"launch_add_us": -1})


def test_fit_launch_costs_from_steps():
    launch, kernel = 12e-6, 17e-6
    steps = [(L, K, L * launch + K * kernel) for L, K in ((100, 870), (180, 1630), (50, 200), (300, 900))]
    got = fit_launch_costs(steps)
    assert got == pytest.approx((launch, kernel), rel=1e-6)


def test_fit_profile_and_bad_samples():
    p = fit_profile(
        "mine", _samples(0.0), {"idle_device_sync_us": 5.0}, base=DeviceProfile("b", 1, 1, 0, comm_sm_share=0.2)
    )
    assert p.name == "mine" and p.host.sync == pytest.approx(5e-6) and p.comm_sm_share == 0.2
    assert DeviceProfile.from_json(p.to_json()) == p
    with pytest.raises(FitError, match="no samples"):
        fit_device([])
    with pytest.raises(FitError, match="op_kind"):
        fit_device([("conv", None, "float32", 1, 1.0)] * 10)
    with pytest.raises(FitError, match="shape"):
        fit_device([("gemm", (1, 2), "float32", 1, 1.0)] * 10)
    with pytest.raises(FitError, match="seconds"):
        fit_device([("elementwise", None, "float32", 1, -1.0)] * 10)
