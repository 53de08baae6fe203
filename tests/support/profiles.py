"""Small device profiles and samples for the cost-model and virtual-backend tests."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from dbo.costs import DeviceProfile, HostCosts, OpCost, get_profile
from dbo.trace import Tracer

US = 1e-6
MS = 1e-3


def host_profile(**host: Any) -> DeviceProfile:
    """A device with 1 TFLOP/s and 1 TB/s, no per-kernel overhead, and the given host costs."""
    return DeviceProfile("t", 1e12, 1e12, 0.0, host=HostCosts(**host))


def kernels_by_name(tr: Tracer) -> dict:
    """The kernels ``tr`` recorded, by name (the last one wins for a repeated name)."""
    return {k.name: k for k in tr.kernels()}


def gemm_sample(m: int, n: int, k: int, dt: str) -> tuple:
    """One gemm measurement's key as the device fit takes it: (op, shape, dtype, bytes moved)."""
    isz = 2 if dt == "bfloat16" else 4
    return ("gemm", (m, n, k), dt, (m * k + k * n + m * n) * isz)


def validation_machine(**ops: OpCost) -> DeviceProfile:
    """The virtual machine the validation tests measure (``truth=``): the ``cpu`` profile with a
    host that costs something and a corrected router, plus ``ops``."""
    host = HostCosts(
        launch=20e-6,
        kernel=2e-6,
        handoff=6e-6,
        thread_start=50e-6,
        thread_join=50e-6,
        kernel_sync=False,
        ops={"router": OpCost(device=40e-6, scale=3.0), **ops},
    )
    return replace(get_profile("cpu"), name="machine", host=host)
