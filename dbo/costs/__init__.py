"""The virtual backend's cost model: what a kernel costs on a device, and the profiles that say so.

Parts: ``_roofline`` (kernel work, roofline and transfer times, the named profile and link tables),
``_profiles`` (device, host and op figures; JSON load and save), ``_dtypes`` (the dtype keys of the
math rates), ``_profile_json`` (a profile JSON's fields checked first) and ``_fit`` / ``_fit_ops``
(fitting a profile's parameters to measured samples). Real GPUs, clusters and the EP all-to-all are
the zoo's (``demos.zoo.hardware``); the toy's fitted H200 figures are a data file beside the toy.
"""

from dbo.costs._fit import (
    fit_device,
    fit_dtype_rates,
    fit_host,
    fit_launch_costs,
    fit_profile,
    predict,
)
from dbo.costs._fit_ops import FitError, fit_op_costs, fit_scalar, fit_threaded_ops
from dbo.costs._profiles import DTYPES, DeviceProfile, HostCosts, OpCost, check_number, dtype_key
from dbo.costs._roofline import (
    KERNEL_KINDS,
    LinkProfile,
    Transfer,
    Work,
    elementwise,
    get_link,
    get_profile,
    iter_tensors,
    kernel_time,
    links,
    matmul,
    memory_seconds,
    profiles,
    register_link,
    register_profile,
    scale_link,
    scale_profile,
    seconds_for,
    syncs_host,
    tensor_bytes,
    transfer_time,
)

__all__ = [
    "DeviceProfile",
    "LinkProfile",
    "Work",
    "Transfer",
    "KERNEL_KINDS",
    "register_profile",
    "register_link",
    "get_profile",
    "get_link",
    "profiles",
    "links",
    "kernel_time",
    "transfer_time",
    "matmul",
    "elementwise",
    "tensor_bytes",
    "iter_tensors",
    "seconds_for",
    "memory_seconds",
    "scale_link",
    "scale_profile",
    "syncs_host",
    "HostCosts",
    "OpCost",
    "DTYPES",
    "dtype_key",
    "fit_device",
    "fit_dtype_rates",
    "fit_host",
    "fit_launch_costs",
    "fit_op_costs",
    "fit_profile",
    "fit_scalar",
    "fit_threaded_ops",
    "predict",
    "FitError",
    "check_number",
]
