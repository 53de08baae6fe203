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
* ``family``: "hopper", "blackwell" (NVIDIA), "cdna3" or "cdna4" (AMD Instinct), the architecture whose
  measured kernel curves the GPU takes. ``vendor``: "nvidia" or "amd". ``sm_count`` counts AMD's compute
  units where NVIDIA has SMs.
* The scale-up link (``scaleup``): "switch", NVLink through NVSwitch, where one GPU reaches every peer of
  its domain at ``nvlink_bandwidth`` together; or "mesh", AMD's Infinity Fabric, ``links`` point-to-point
  links per GPU, one to each peer of the node, each at ``nvlink_bandwidth / links`` per direction: traffic
  to ``p`` peers uses ``p`` links (``scaleup_bandwidth``). ``nvlink_bandwidth`` keeps its name for both (the
  GPU's whole scale-up bandwidth, per direction).
* ``hw_queues``: the hardware queues streams are mapped onto by default (CUDA's
  ``CUDA_DEVICE_MAX_CONNECTIONS`` 8; HIP's ``GPU_MAX_HW_QUEUES`` 4): more concurrent streams than queues
  share a queue, and kernels of one queue run in order.
* ``hbm_capacity`` is the datasheet's HBM in SI bytes (H100: 80e9); ``device_memory``, where a measured figure
  is known, the bytes the driver reports (H100: 81,559 MiB), else 0 and ``GpuSpec.memory_total`` derives it
  (the datasheets' GB are binary, less the driver's share: ``REPORTED_SHARE``). The memory model fills
  ``memory_total``, what the engines' fractions multiply.
* ``gpus_per_node``: GPUs in one server (HGX baseboard: 8; GB200 and GB300 compute tray: 4);
  ``nvlink_domain``: GPUs one GPU reaches over NVLink (HGX: the 8 of its node; GB200 and GB300 NVL72:
  72, over the rack's NVLink switch trays).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from demos.zoo.hardware.gpu_spec import FAMILIES, SCALEUP, VENDORS, GpuSpec

__all__ = ["FAMILIES", "GPUS", "SCALEUP", "VENDORS", "GpuSpec", "get_gpu", "gpus"]

_GB = 1e9
_MIB = 2**20
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

# AMD Instinct, per GPU, dense (AMD quotes matrix rates dense, with sparsity separately). CDNA3 (MI300X, MI325X:
# one die, 304 CUs at 2.1 GHz, 2,048 BF16 / 4,096 FP8 FLOP per CU per clock; ROCm's MI300 architecture page) and
# CDNA4 (MI350X at 2.2 GHz, MI355X at 2.4 GHz: 256 CUs, 8,192 FP8 FLOP per CU per clock, BF16 half, MXFP4
# twice; derived from the per-CU rate and the clocks, docs/clusters.md). A node's 8 GPUs form a full mesh of
# 7 Infinity Fabric links each; HIP maps streams onto 4 hardware queues by default (``GPU_MAX_HW_QUEUES``).
_CDNA3 = {
    "fp8": 2614.9 * _T,
    "bf16": 1307.4 * _T,
    "tf32": 653.7 * _T,
    "fp32": 163.4 * _T,
    "sm_count": 304,
    "nvlink_bandwidth": 7 * 64 * _GB,  # 7 links of 16 lanes at 32 Gb/s: 64 GB/s each way each
    "nic_bandwidth": _NIC_400G,
    "family": "cdna3",
    "vendor": "amd",
    "scaleup": "mesh",
    "links": 7,
    "hw_queues": 4,
}


def _cdna4(clock_ghz: float) -> dict:
    """A CDNA4 GPU at ``clock_ghz``: 256 CUs of 8,192 FP8 FLOP a clock (BF16 half, MXFP4 twice), MI355X's FP32
    157.3 TFLOP/s at 2.4 GHz scaled to the clock; each rate to 0.1 TFLOP/s."""

    def rate(flop_per_cu_clock: float) -> float:
        return round(flop_per_cu_clock * 256 * clock_ghz / 1e3, 1) * _T

    fp32 = round(157.3 * clock_ghz / 2.4, 1) * _T
    return {
        "fp4": rate(16384),
        "fp8": rate(8192),
        "bf16": rate(4096),
        "tf32": fp32,  # no TF32 matrix rate on CDNA4: TF32 runs as FP32
        "fp32": fp32,
        "sm_count": 256,
        "hbm_bandwidth": 8.0 * _TB,
        "hbm_capacity": 288 * _GB,
        "nvlink_bandwidth": 7 * 76.5 * _GB,  # ~153 GB/s bidirectional a link (secondary: docs/clusters.md)
        "nic_bandwidth": _NIC_400G,
        "family": "cdna4",
        "vendor": "amd",
        "scaleup": "mesh",
        "links": 7,
        "hw_queues": 4,
    }


_BUILTIN = (
    GpuSpec(
        "h100",
        **_HOPPER,
        hbm_bandwidth=3.35 * _TB,
        hbm_capacity=80 * _GB,
        device_memory=81559 * _MIB,
        nvlink_bandwidth=450 * _GB,
        nic_bandwidth=_NIC_400G,
        source="NVIDIA H100 datasheet (SXM5); SMs: H100 architecture whitepaper; NIC: DGX H100 datasheet; "
        "device memory: nvidia-smi's total",
    ),
    GpuSpec(
        "h200",
        **_HOPPER,
        hbm_bandwidth=4.8 * _TB,
        hbm_capacity=141 * _GB,
        device_memory=143771 * _MIB,
        nvlink_bandwidth=450 * _GB,
        nic_bandwidth=_NIC_400G,
        source="NVIDIA H200 datasheet (SXM); NIC: DGX H200 datasheet; device memory: nvidia-smi's total",
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
        device_memory=183359 * _MIB,
        nic_bandwidth=_NIC_400G,
        source="NVIDIA HGX B200 spec table (per GPU, halved from sparse); SMs: device-reported; "
        "NIC: DGX B200 datasheet; device memory: nvidia-smi's total",
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
    GpuSpec(
        "h20-141g",
        fp8=296 * _T,
        bf16=148 * _T,
        tf32=74 * _T,
        fp32=44 * _T,
        sm_count=78,
        hbm_bandwidth=4.8 * _TB,
        hbm_capacity=141 * _GB,
        nvlink_bandwidth=450 * _GB,
        nic_bandwidth=_NIC_400G,
        source="NVIDIA H20 with 141 GB HBM3e (\"H20-3e\"): the H20's dense rates and SMs, the H200's memory; "
        "NIC: assumed as HGX",
    ),
    GpuSpec(
        "mi300x",
        **_CDNA3,
        hbm_bandwidth=5.3 * _TB,
        hbm_capacity=192 * _GB,
        device_memory=206141652992,
        source="AMD ROCm MI300 architecture page (dense matrix rates, 304 CUs, 5.3 TB/s, 7 Infinity Fabric "
        "links); link rate: 16 lanes at 32 Gb/s; NIC: one 400 Gb/s per GPU (MoRI's MI300X+CX7 tables); "
        "device memory: rocm-smi's VRAM total",
    ),
    GpuSpec(
        "mi325x",
        **_CDNA3,
        hbm_bandwidth=6.0 * _TB,
        hbm_capacity=256 * _GB,
        source="the MI300X's die and rates (ROCm GPU specifications: same CUs), 256 GB HBM3E at 6.0 TB/s "
        "(secondary sources); NIC: as MI300X",
    ),
    GpuSpec(
        "mi350x",
        **_cdna4(2.2),
        source="CDNA4 (ROCm GPU specifications: 256 CUs, 288 GB): 8,192 FP8 FLOP per CU per clock at 2.2 GHz "
        "(secondary: ISSCC 2026 and launch reports), 8 TB/s; Infinity Fabric ~153 GB/s a link bidirectional "
        "(secondary); NIC: one 400 Gb/s per GPU",
    ),
    GpuSpec(
        "mi355x",
        **_cdna4(2.4),
        source="CDNA4 (ROCm GPU specifications: 256 CUs, 288 GB): 8,192 FP8 FLOP per CU per clock at 2.4 GHz "
        "(secondary: ISSCC 2026 and launch reports), 8 TB/s; Infinity Fabric ~153 GB/s a link bidirectional "
        "(secondary); NIC: one 400 Gb/s Pollara per GPU (MoRI's MI355X+AINIC tables)",
    ),
)

GPUS: Mapping[str, GpuSpec] = MappingProxyType({g.name: g for g in _BUILTIN})
"""The built-in GPU profiles by name (read-only): h100, h200, h800, h20, b200, gb200, b300, gb300, h20-141g,
mi300x, mi325x, mi350x, mi355x."""


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
