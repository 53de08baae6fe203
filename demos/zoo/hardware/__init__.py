"""Real hardware as data and arithmetic: GPUs, hosts, clusters and the EP all-to-all (docs/clusters.md).

``gpus`` (``GpuSpec``: datasheet figures of data-centre GPUs; ``get_gpu``), ``hosts`` (the host costs
measured on our H200 machine), ``cluster`` (``ClusterSpec``: nodes, EP degree and where a rank's
routed tokens go) and ``alltoall`` (DeepEP's low-latency and normal kernels on a cluster). The virtual
backend's cost model (``dbo.costs``) knows none of this: these build the profiles and the kernel
costs it is given.
"""

from demos.zoo.hardware.alltoall import (
    ALLTOALL_KERNELS,
    DEEPEP_H800,
    DEFAULT_COMM_SMS,
    AllToAll,
    DeepEPParams,
    deepep_low_latency,
    deepep_normal,
    ll_buffer_bytes,
    ll_bytes,
    message_bytes,
    token_bytes,
)
from demos.zoo.hardware.cluster import ClusterSpec, Routing, Traffic, host_layout, oversized_host
from demos.zoo.hardware.gpus import FAMILIES, GPUS, GpuSpec, get_gpu, gpus
from demos.zoo.hardware.hosts import H200_HOST

__all__ = [
    "ALLTOALL_KERNELS",
    "DEEPEP_H800",
    "DEFAULT_COMM_SMS",
    "FAMILIES",
    "GPUS",
    "H200_HOST",
    "AllToAll",
    "ClusterSpec",
    "DeepEPParams",
    "GpuSpec",
    "Routing",
    "Traffic",
    "deepep_low_latency",
    "deepep_normal",
    "get_gpu",
    "gpus",
    "host_layout",
    "ll_buffer_bytes",
    "ll_bytes",
    "message_bytes",
    "oversized_host",
    "token_bytes",
]
