"""The simulation model: what a kernel costs on a device, and the profiles that say so.

Parts: ``_roofline`` (kernel work, roofline and transfer times, the named profile and link tables),
``_profiles`` (device, host and link figures; JSON load and save; the built-in figures),
``_fit`` and ``_fit_ops`` (fitting a profile's parameters to measured samples).
"""

from dbo.costs._roofline import DeviceProfile, LinkProfile, Work, Transfer, KERNEL_KINDS, register_profile, register_link, get_profile, get_link, profiles, links, kernel_time, transfer_time, matmul, elementwise, tensor_bytes, iter_tensors, seconds_for, memory_seconds, scale_link, scale_profile, syncs_host, HostCosts, OpCost, DTYPES, dtype_key
from dbo.costs._fit import fit_device, fit_dtype_rates, fit_host, fit_launch_costs, fit_op_costs, fit_profile, fit_scalar, fit_threaded_ops, predict, FitError
from dbo.costs._profiles import check_number

__all__ = ['DeviceProfile', 'LinkProfile', 'Work', 'Transfer', 'KERNEL_KINDS', 'register_profile', 'register_link', 'get_profile', 'get_link', 'profiles', 'links', 'kernel_time', 'transfer_time', 'matmul', 'elementwise', 'tensor_bytes', 'iter_tensors', 'seconds_for', 'memory_seconds', 'scale_link', 'scale_profile', 'syncs_host', 'HostCosts', 'OpCost', 'DTYPES', 'dtype_key', 'fit_device', 'fit_dtype_rates', 'fit_host', 'fit_launch_costs', 'fit_op_costs', 'fit_profile', 'fit_scalar', 'fit_threaded_ops', 'predict', 'FitError', 'check_number']
