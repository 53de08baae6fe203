"""The simulation model: what a kernel costs on a device, and the profiles that say so.

Parts: ``_roofline`` (kernel work, roofline and transfer times, the named profile and link tables),
``_profiles`` (device, host and link figures; JSON load and save; the built-in figures),
``_fit`` and ``_fit_ops`` (fitting a profile's parameters to measured samples), ``_legacy_ops``
(old profiles' per-op keys), ``_gpus`` (GPU datasheet profiles), ``_cluster`` (nodes, EP degree, and
where routed tokens go) and ``_alltoall`` (DeepEP's low-latency and normal all-to-all kernels).
"""

from dbo.costs._roofline import DeviceProfile, LinkProfile, Work, Transfer, KERNEL_KINDS, register_profile, register_link, get_profile, get_link, profiles, links, kernel_time, transfer_time, matmul, elementwise, tensor_bytes, iter_tensors, seconds_for, memory_seconds, scale_link, scale_profile, syncs_host, HostCosts, OpCost, DTYPES, dtype_key
from dbo.costs._fit import fit_device, fit_dtype_rates, fit_host, fit_launch_costs, fit_op_costs, fit_profile, fit_scalar, fit_threaded_ops, predict, FitError
from dbo.costs._profiles import check_number
from dbo.costs._gpus import GPUS, GpuSpec, get_gpu, gpus
from dbo.costs._cluster import ClusterSpec, Routing, Traffic
from dbo.costs._alltoall import (ALLTOALL_KERNELS, DEEPEP_H800, DEFAULT_COMM_SMS, AllToAll, DeepEPParams, deepep_low_latency,
                                 deepep_normal, ll_buffer_bytes, message_bytes, token_bytes)

__all__ = ['DeviceProfile', 'LinkProfile', 'Work', 'Transfer', 'KERNEL_KINDS', 'register_profile', 'register_link', 'get_profile', 'get_link', 'profiles', 'links', 'kernel_time', 'transfer_time', 'matmul', 'elementwise', 'tensor_bytes', 'iter_tensors', 'seconds_for', 'memory_seconds', 'scale_link', 'scale_profile', 'syncs_host', 'HostCosts', 'OpCost', 'DTYPES', 'dtype_key', 'fit_device', 'fit_dtype_rates', 'fit_host', 'fit_launch_costs', 'fit_op_costs', 'fit_profile', 'fit_scalar', 'fit_threaded_ops', 'predict', 'FitError', 'check_number', 'GPUS', 'GpuSpec', 'get_gpu', 'gpus', 'ClusterSpec', 'Routing', 'Traffic', 'ALLTOALL_KERNELS', 'DEEPEP_H800', 'DEFAULT_COMM_SMS', 'AllToAll', 'DeepEPParams', 'deepep_low_latency', 'deepep_normal', 'll_buffer_bytes', 'message_bytes', 'token_bytes']
