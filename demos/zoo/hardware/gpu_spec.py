"""What a GPU profile is (``GpuSpec``): the fields, how each figure is counted and checked, and the families,
vendors and scale-up links a profile may name. The built-in profiles are ``demos.zoo.hardware.gpus``'s; how
each field is counted is that module's docstring (docs/clusters.md, "GPU profiles")."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from dbo.costs import dtype_key

__all__ = ["FAMILIES", "REPORTED_SHARE", "SCALEUP", "VENDORS", "GpuSpec"]

FAMILIES = ("hopper", "blackwell", "cdna3", "cdna4")
"""GPU families: the kernel-time curves fitted to measured tables are per family (``demos.zoo.rooflines``)."""

VENDORS = {"nvidia": ("hopper", "blackwell"), "amd": ("cdna3", "cdna4")}
"""Each vendor's families."""

SCALEUP = ("switch", "mesh")
"""Scale-up links: NVLink through a switch, or a full mesh of point-to-point links (module docstring)."""

REPORTED_SHARE = {"nvidia": 0.9954, "amd": 0.9999}
"""The device memory a driver reports over the datasheet's HBM figure read as binary gigabytes (GiB), per vendor:
the datasheets' "80 GB", "141 GB", "180 GB" and "192 GB" are GiB of HBM, less what the driver keeps. NVIDIA: the mean
of H100's 81,559 MiB, H200's 143,771 MiB and B200's 183,359 MiB (nvidia-smi) over 80, 141 and 180 GiB (0.9956,
0.9957, 0.9948); AMD: MI300X's 206,141,652,992 bytes (rocm-smi) over 192 GiB. docs/clusters.md, "Device memory"."""

_RATE_FIELDS = {"fp8": "fp8", "bfloat16": "bf16", "float16": "bf16", "tf32": "tf32", "float32": "fp32"}
"""``DTYPES`` key -> the field holding its rate (FP16 and BF16 share one tensor-core rate)."""


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model's datasheet figures (dense FLOP/s, bytes/s, bytes; see the module docstring for
    how each is counted) and, where measured, ``device_memory``, the bytes its driver reports (0: derived,
    ``memory_total``). ``source`` names where the figures come from, in a few words."""

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
    vendor: str = "nvidia"
    scaleup: str = "switch"
    links: int = 0
    hw_queues: int = 8
    device_memory: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"GpuSpec.name must be a non-empty string, got {self.name!r}")
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in ("name", "source", "family", "vendor", "scaleup"):
                continue
            if f.name == "links":  # 0: a switch; a mesh has one link per peer
                if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                    raise ValueError(f"GpuSpec.links must be an int >= 0, got {v!r}")
                continue
            if f.name == "device_memory":  # 0: derived from hbm_capacity (memory_total)
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v == 0 or math.isfinite(v) and v > 0):
                    raise ValueError(f"GpuSpec.device_memory must be 0 (derived) or bytes > 0, got {v!r}")
                continue
            if f.name == "fp4":  # 0: no FP4 tensor cores
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v == 0 or v >= self.fp8):
                    raise ValueError(f"GpuSpec.fp4 must be 0 (none) or a rate >= fp8 ({self.fp8:g}), got {v!r}")
                continue
            if f.name in ("sm_count", "gpus_per_node", "nvlink_domain", "hw_queues"):
                if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                    raise ValueError(f"GpuSpec.{f.name} must be an int >= 1, got {v!r}")
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError(f"GpuSpec.{f.name} must be a number, got {type(v).__name__}: {v!r}")
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"GpuSpec.{f.name} must be a finite number > 0, got {v!r}")
        if self.family not in FAMILIES:
            raise ValueError(f"GpuSpec.family must be one of {', '.join(FAMILIES)}, got {self.family!r}")
        if self.vendor not in VENDORS or self.family not in VENDORS[self.vendor]:
            known = ", ".join(v + " (" + "/".join(fs) + ")" for v, fs in VENDORS.items())
            raise ValueError(
                f"GpuSpec {self.name!r}: vendor {self.vendor!r} with family {self.family!r}; known: {known}"
            )
        if self.scaleup not in SCALEUP:
            raise ValueError(f"GpuSpec.scaleup must be one of {', '.join(SCALEUP)}, got {self.scaleup!r}")
        if (self.scaleup == "mesh") != (self.links > 0):
            raise ValueError(
                f"GpuSpec {self.name!r}: a mesh has links (one per peer), a switch none; got "
                f"scaleup {self.scaleup!r} with links={self.links}"
            )
        if self.scaleup == "mesh" and self.links < self.nvlink_domain - 1:
            raise ValueError(
                f"GpuSpec {self.name!r}: a full mesh of {self.nvlink_domain} GPUs needs "
                f"{self.nvlink_domain - 1} links per GPU, got {self.links}"
            )
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
    def memory_total(self) -> float:
        """The device's memory in bytes as its driver reports it (nvidia-smi's and ``torch.cuda.mem_get_info``'s
        total, rocm-smi's VRAM total): what the engines' memory fractions multiply and the memory model fills.
        ``device_memory`` where set, else ``hbm_capacity`` read as binary gigabytes (``REPORTED_SHARE``)."""
        return float(self.device_memory or self.hbm_capacity / 1e9 * 2**30 * REPORTED_SHARE[self.vendor])

    @property
    def has_fp4(self) -> bool:
        """Whether the GPU has FP4 tensor cores (its 4-bit GEMMs run at ``fp4``)."""
        return self.fp4 > 0

    @property
    def dtype_flops(self) -> dict[str, float]:
        """The rates as ``DeviceProfile.dtype_flops`` takes them (keys of ``dbo.costs.DTYPES``)."""
        rates = {key: float(getattr(self, f)) for key, f in _RATE_FIELDS.items()}
        return {**rates, "fp4": self.flops("fp4"), "w4a8": self.flops("w4a8")}

    def scaleup_bandwidth(self, peers: int) -> float:
        """Per-direction bytes/s one GPU moves to ``peers`` peers of its scale-up domain at once: the whole
        ``nvlink_bandwidth`` through a switch whatever ``peers`` is; over a mesh, one link per peer
        (``peers`` of its ``links``). ``peers`` must be an int >= 1."""
        if isinstance(peers, bool) or not isinstance(peers, int) or peers < 1:
            raise ValueError(f"peers must be an int >= 1, got {peers!r}")
        if self.scaleup == "switch":
            return float(self.nvlink_bandwidth)
        return self.nvlink_bandwidth * min(peers, self.links) / self.links

    @property
    def link_name(self) -> str:
        """The scale-up link in words: "NVLink" or "Infinity Fabric"."""
        return "Infinity Fabric" if self.vendor == "amd" else "NVLink"

    def sm_share(self, sms: int) -> float:
        """The share of this GPU's SMs that ``sms`` SMs are (a comm kernel taking them from
        compute: ``DeviceProfile.comm_sm_share``). ``sms`` must be an int in [0, sm_count)."""
        if isinstance(sms, bool) or not isinstance(sms, int) or not 0 <= sms < self.sm_count:
            raise ValueError(f"sms must be an int in [0, {self.sm_count}) for {self.name}, got {sms!r}")
        return sms / self.sm_count
