"""GPU profiles: datasheet figures of the data-centre GPUs a cluster model is built from.

A ``GpuSpec`` holds one GPU's dense peak math rates per dtype, its HBM, its SM count, the NVLink
bandwidth it has to its NVLink domain, the network (RDMA) bandwidth a typical deployment gives it
and how many GPUs share one node and one NVLink domain. All figures are SI units: FLOP/s, bytes/s,
bytes. Each built-in figure's source is in docs/clusters.md ("GPU profiles").

Conventions (the datasheets mix them, these fields do not):

* Math rates are dense: datasheets quote FP8/FP16/BF16/TF32 Tensor Core rates "with sparsity"
  (2:4 structured), which is twice the dense rate; the built-ins store half of those figures.
  ``fp32`` is the non-tensor (SIMT) FP32 rate. ``fp4``: the dense FP4 (NVFP4) Tensor Core rate, 0 on a GPU
  without FP4 tensor cores (Hopper), whose 4-bit GEMMs dequantize to BF16 and run at its BF16 rate
  (``flops("fp4")`` says so).
* ``nvlink_bandwidth`` is per GPU, per direction, over all of its NVLink links together. NVIDIA
  quotes the bidirectional total (H100: 900 GB/s = 18 links x 25 GB/s each way x 2), so the field
  is half the datasheet figure (H100: 450e9).
* ``nic_bandwidth`` is per GPU, per direction: the line rate of the scale-out NIC(s) that serve one
  GPU in a typical deployment (one 400 Gb/s ConnectX-7 per GPU: 50e9 bytes/s).
* ``family``: "hopper" or "blackwell", the architecture whose measured kernel curves the GPU takes.
* ``gpus_per_node``: GPUs in one server (HGX baseboard: 8; GB200 and GB300 compute tray: 4);
  ``nvlink_domain``: GPUs one GPU reaches over NVLink (HGX: the 8 of its node; GB200 and GB300 NVL72:
  72, over the rack's NVLink switch trays).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any

from dbo.costs import dtype_key

__all__ = ["FAMILIES", "GPUS", "GpuSpec", "get_gpu", "gpus"]

FAMILIES = ("hopper", "blackwell")
"""GPU families: the kernel-time curves fitted to measured tables are per family (``demos.zoo.rooflines``)."""

_RATE_FIELDS = {"fp8": "fp8", "bfloat16": "bf16", "float16": "bf16", "tf32": "tf32", "float32": "fp32"}
"""``DTYPES`` key -> the field holding its rate (FP16 and BF16 share one tensor-core rate)."""


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model's datasheet figures (dense FLOP/s, bytes/s, bytes; see the module docstring for
    how each is counted). ``source`` names where the figures come from, in a few words."""

    name: str
    fp8: float
    bf16: float
    tf32: float
    fp32: float
    hbm_bandwidth: float
    hbm_capacity: float
    sm_count: int
    nvlink_bandwidth: float
    nic_bandwidth: float
    gpus_per_node: int = 8
    nvlink_domain: int = 8
    source: str = ""
    family: str = "hopper"
    fp4: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"GpuSpec.name must be a non-empty string, got {self.name!r}")
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in ("name", "source", "family"):
                continue
            if f.name == "fp4":  # 0: no FP4 tensor cores
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v == 0 or v >= self.fp8):
                    raise ValueError(f"GpuSpec.fp4 must be 0 (none) or a rate >= fp8 ({self.fp8:g}), got {v!r}")
                continue
            if f.name in ("sm_count", "gpus_per_node", "nvlink_domain"):
                if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                    raise ValueError(f"GpuSpec.{f.name} must be an int >= 1, got {v!r}")
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError(f"GpuSpec.{f.name} must be a number, got {type(v).__name__}: {v!r}")
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"GpuSpec.{f.name} must be a finite number > 0, got {v!r}")
        if self.family not in FAMILIES:
            raise ValueError(f"GpuSpec.family must be one of {', '.join(FAMILIES)}, got {self.family!r}")
        if not isinstance(self.source, str):
            raise TypeError(f"GpuSpec.source must be a string, got {type(self.source).__name__}")
        if not self.fp8 >= self.bf16 >= self.tf32:
            raise ValueError(
                f"GpuSpec {self.name!r}: expected fp8 >= bf16 >= tf32 rates, got "
                f"{self.fp8:g}, {self.bf16:g}, {self.tf32:g}"
            )

    def flops(self, dtype: Any) -> float:
        """Dense peak math rate (FLOP/s) of ``dtype``: a torch.dtype or a name (``"fp8"``, ``"bf16"``,
        ``"float16"``, ``"tf32"``, ``"fp32"``, ...). A dtype without a rate here -> ValueError."""
        key = dtype_key(dtype)
        if key == "fp4":  # a GPU without FP4 tensor cores runs 4-bit weights dequantized, at its BF16 rate
            return float(self.fp4 or self.bf16)
        if key == "w4a8":  # 4-bit weights x FP8 activations: the FP8 rate on FP4 tensor cores, else dequantized
            return float(self.fp8 if self.fp4 else self.bf16)
        if key not in _RATE_FIELDS:
            known = ", ".join((*_RATE_FIELDS, "fp4", "w4a8"))
            raise ValueError(f"GpuSpec {self.name!r} has no rate for dtype {dtype!r}; known: {known}")
        return float(getattr(self, _RATE_FIELDS[key]))

    @property
    def has_fp4(self) -> bool:
        """Whether the GPU has FP4 tensor cores (its 4-bit GEMMs run at ``fp4``)."""
        return self.fp4 > 0

    @property
    def dtype_flops(self) -> dict[str, float]:
        """The rates as ``DeviceProfile.dtype_flops`` takes them (keys of ``dbo.costs.DTYPES``)."""
        rates = {key: float(getattr(self, f)) for key, f in _RATE_FIELDS.items()}
        return {**rates, "fp4": self.flops("fp4"), "w4a8": self.flops("w4a8")}

    def sm_share(self, sms: int) -> float:
        """The share of this GPU's SMs that ``sms`` SMs are (a comm kernel taking them from
        compute: ``DeviceProfile.comm_sm_share``). ``sms`` must be an int in [0, sm_count)."""
        if isinstance(sms, bool) or not isinstance(sms, int) or not 0 <= sms < self.sm_count:
            raise ValueError(f"sms must be an int in [0, {self.sm_count}) for {self.name}, got {sms!r}")
        return sms / self.sm_count


_GB = 1e9
_TB = 1e12
_T = 1e12  # TFLOP/s
_NIC_400G = 400e9 / 8  # one 400 Gb/s ConnectX-7: 50 GB/s each way
_NIC_800G = 800e9 / 8  # one 800 Gb/s ConnectX-8: 100 GB/s each way

# Hopper SXM5 Tensor Core rates, dense (the H100/H200/H800 datasheets quote 3,958 / 1,979 / 989
# TFLOPS "with sparsity" for FP8 / BF16 / TF32; FP32 67 TFLOPS is non-tensor).
_HOPPER = {"fp8": 1979 * _T, "bf16": 989.5 * _T, "tf32": 494.5 * _T, "fp32": 67 * _T, "sm_count": 132}

# Blackwell and Blackwell Ultra, per GPU, dense: an HGX board's (B200, B300) and an NVL72 rack's (GB200,
# GB300) rates, NVLink-5 (1.8 TB/s bidirectional) and node/domain. Blackwell Ultra keeps these rates but its
# dense FP4 (B300 14, GB300 15 PFLOPS: each GPU's own below; it cuts FP64, not a field here); HBM, SMs and
# NIC are each GPU's own.
_BLACKWELL_HGX = {
    "fp4": 9000 * _T,
    "fp8": 4500 * _T,
    "bf16": 2250 * _T,
    "tf32": 1100 * _T,
    "fp32": 75 * _T,
    "nvlink_bandwidth": 900 * _GB,
    "family": "blackwell",
}
_BLACKWELL_NVL72 = {
    "fp4": 10000 * _T,
    "fp8": 5000 * _T,
    "bf16": 2500 * _T,
    "tf32": 1250 * _T,
    "fp32": 80 * _T,
    "nvlink_bandwidth": 900 * _GB,
    "gpus_per_node": 4,
    "nvlink_domain": 72,
    "family": "blackwell",
}

_BUILTIN = (
    GpuSpec(
        "h100",
        **_HOPPER,
        hbm_bandwidth=3.35 * _TB,
        hbm_capacity=80 * _GB,
        nvlink_bandwidth=450 * _GB,
        nic_bandwidth=_NIC_400G,
        source="NVIDIA H100 datasheet (SXM5); SMs: H100 architecture whitepaper; NIC: DGX H100 datasheet",
    ),
    GpuSpec(
        "h200",
        **_HOPPER,
        hbm_bandwidth=4.8 * _TB,
        hbm_capacity=141 * _GB,
        nvlink_bandwidth=450 * _GB,
        nic_bandwidth=_NIC_400G,
        source="NVIDIA H200 datasheet (SXM); NIC: DGX H200 datasheet",
    ),
    GpuSpec(
        "h800",
        **_HOPPER,
        hbm_bandwidth=3.35 * _TB,
        hbm_capacity=80 * _GB,
        nvlink_bandwidth=200 * _GB,
        nic_bandwidth=_NIC_400G,
        source="NVIDIA H800 SXM5 product brief (NVLink 400 GB/s bidirectional); NIC: DeepEP README, DeepSeek-V3 report",
    ),
    GpuSpec(
        "h20",
        fp8=296 * _T,
        bf16=148 * _T,
        tf32=74 * _T,
        fp32=44 * _T,
        sm_count=78,
        hbm_bandwidth=4.0 * _TB,
        hbm_capacity=96 * _GB,
        nvlink_bandwidth=450 * _GB,
        nic_bandwidth=_NIC_400G,
        source="NVIDIA H20 partner spec sheet (dense rates); SMs: Geekbench listing; NIC: assumed as HGX",
    ),
    GpuSpec(
        "b200",
        **_BLACKWELL_HGX,
        sm_count=148,
        hbm_bandwidth=7.7 * _TB,
        hbm_capacity=180 * _GB,
        nic_bandwidth=_NIC_400G,
        source="NVIDIA HGX B200 spec table (per GPU, halved from sparse); SMs: device-reported; "
        "NIC: DGX B200 datasheet",
    ),
    GpuSpec(
        "gb200",
        **_BLACKWELL_NVL72,
        sm_count=152,
        hbm_bandwidth=8.0 * _TB,
        hbm_capacity=186 * _GB,
        nic_bandwidth=_NIC_400G,
        source="NVIDIA GB200 NVL72 spec table (per GPU, halved from sparse); SMs: device-reported; "
        "NIC: one ConnectX-7 400 Gb/s per GPU per compute tray",
    ),
    GpuSpec(
        "b300",
        **{**_BLACKWELL_HGX, "fp4": 14000 * _T},
        sm_count=160,
        hbm_bandwidth=7.75 * _TB,
        hbm_capacity=288 * _GB,
        nic_bandwidth=_NIC_800G,
        source="NVIDIA HGX B300 (Blackwell Ultra) spec table, per GPU, dense; HBM bandwidth: 62 TB/s per "
        "8-GPU board (aiconfigurator-core's b300_sxm system); SMs: the full Blackwell Ultra GPU (not the "
        "shipping count); NIC: one ConnectX-8 800 Gb/s per GPU",
    ),
    GpuSpec(
        "gb300",
        **{**_BLACKWELL_NVL72, "fp4": 15000 * _T},
        sm_count=160,
        hbm_bandwidth=8.0 * _TB,
        hbm_capacity=288 * _GB,
        nic_bandwidth=_NIC_800G,
        source="NVIDIA GB300 NVL72 spec table, per GPU, dense; SMs: the full Blackwell Ultra GPU (not the "
        "shipping count); NIC: one ConnectX-8 800 Gb/s per GPU per compute tray",
    ),
)

GPUS: Mapping[str, GpuSpec] = MappingProxyType({g.name: g for g in _BUILTIN})
"""The built-in GPU profiles by name (read-only): h100, h200, h800, h20, b200, gb200, b300, gb300."""


def get_gpu(name_or_spec: str | GpuSpec) -> GpuSpec:
    """A built-in GPU profile by name (in any case, ``H200`` or ``GB200``, spaces around it ignored); a
    ``GpuSpec`` passes through. Unknown -> ValueError."""
    if isinstance(name_or_spec, GpuSpec):
        return name_or_spec
    found = GPUS.get(name_or_spec.strip().lower()) if isinstance(name_or_spec, str) else None
    if found is None:
        raise ValueError(f"unknown GPU {name_or_spec!r}; known GPUs: {', '.join(GPUS)}")
    return found


def gpus() -> dict[str, GpuSpec]:
    """A copy of the built-in GPU profiles by name."""
    return dict(GPUS)
