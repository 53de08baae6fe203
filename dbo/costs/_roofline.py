"""Cost model: device and link profiles, kernel and transfer times.

A kernel's modelled time is a roofline: ``launch_overhead + max(flops / peak_flops, bytes /
mem_bandwidth)``. A transfer's modelled time is ``latency + bytes / bandwidth``. Stream backends
turn a kernel's ``cost=`` (None, seconds, ``Work`` or ``Transfer``) into seconds with
``seconds_for``.

The tables of named profiles and links are process-global lookup tables (like a registry of
constants): ``register_profile`` / ``register_link`` add entries, ``get_profile`` / ``get_link``
resolve a name or pass a profile object through.
"""

from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass
from dataclasses import replace as _dc_replace
from typing import Any, Iterable

import torch

from dbo.costs._profiles import DeviceProfile, HostCosts
from dbo.costs._profiles import check_number as _check_number

KERNEL_KINDS = ("compute", "comm")


@dataclass(frozen=True)
class LinkProfile:
    """A link for transfers: latency (s) and effective bandwidth (bytes/s)."""

    name: str
    latency: float
    bandwidth: float

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"link name must be a non-empty string, got {self.name!r}")
        _check_number("latency", self.latency)
        _check_number("bandwidth", self.bandwidth, positive=True)


@dataclass(frozen=True)
class Work:
    """The work of a compute kernel: floating-point operations and bytes moved to/from memory.

    Optional: ``dtype`` of the math (a torch.dtype or a ``DTYPES`` key; else the backend infers it
    from the kernel's tensor arguments) and ``shape`` (M, N, K) when the work is one GEMM, which
    selects the GEMM efficiency curve. A sum of works keeps no shape.

    ``seconds``: the kernel's math time when the caller has it already (a curve fitted to measured
    kernels, or a measured table) instead of its flops: it stands where ``flops / rate`` would, and the
    roofline's other terms still apply (the per-kernel floor, the memory time of ``bytes``). A Work
    carries ``flops`` or ``seconds``, not both; works of the two kinds do not add.
    """

    flops: float = 0
    bytes: float = 0
    dtype: Any = None
    shape: tuple | None = None
    seconds: float | None = None

    def __post_init__(self) -> None:
        _check_number("Work.flops", self.flops)
        _check_number("Work.bytes", self.bytes)
        if self.seconds is not None:
            _check_number("Work.seconds", self.seconds)
            if self.flops:
                raise ValueError("Work takes flops or seconds, not both")
        if self.shape is not None:
            if len(self.shape) != 3:
                raise ValueError(f"Work.shape must be (M, N, K), got {self.shape!r}")
            object.__setattr__(self, "shape", tuple(_check_count("Work.shape", int(x)) for x in self.shape))

    def __add__(self, other: "Work") -> "Work":
        if not isinstance(other, Work):
            return NotImplemented
        if (self.seconds is None) != (other.seconds is None):
            raise TypeError("a Work of seconds and a Work of flops do not add")
        dt = (
            self.dtype
            if self.dtype == other.dtype or other.dtype is None
            else (other.dtype if self.dtype is None else None)
        )
        seconds = None if self.seconds is None else self.seconds + other.seconds
        return Work(self.flops + other.flops, self.bytes + other.bytes, dt, seconds=seconds)

    def __mul__(self, factor: float) -> "Work":
        f = _check_number("factor", factor)
        seconds = None if self.seconds is None else self.seconds * f
        return Work(self.flops * f, self.bytes * f, self.dtype, seconds=seconds)

    __rmul__ = __mul__


@dataclass(frozen=True)
class Transfer:
    """A transfer over the backend's link: ``bytes`` sent."""

    bytes: float

    def __post_init__(self) -> None:
        _check_number("Transfer.bytes", self.bytes)


# --- built-in profiles -------------------------------------------------------------------------
# "cpu": a modest CPU doing the math in torch (one socket, a few cores): ~100 GFLOP/s, ~20 GB/s of
#   memory bandwidth, ~5 us per op of dispatch overhead.
# "nvlink": intranode all-to-all over NVLink as DeepEP's normal kernels measure it (~153-158 GB/s
#   per GPU on H800, DeepEP README): 150 GB/s effective, ~3 us latency.
# "ib400": one 400 Gb/s InfiniBand (ConnectX-7) NIC per GPU: 50 GB/s line rate; DeepEP measures
#   43-58 GB/s RDMA, so 45 GB/s effective; ~5 us latency.
# "loopback": a copy within one host's memory (same order as the "cpu" profile's bandwidth).
_BUILTIN_PROFILES = (
    # kernel functions run on executor threads on a CPU: a syncs_host kernel does not stop the host
    DeviceProfile("cpu", peak_flops=100e9, mem_bandwidth=20e9, launch_overhead=5e-6, host=HostCosts(kernel_sync=False)),
)
_BUILTIN_LINKS = (
    LinkProfile("nvlink", latency=3e-6, bandwidth=150e9),
    LinkProfile("ib400", latency=5e-6, bandwidth=45e9),
    LinkProfile("loopback", latency=1e-6, bandwidth=20e9),
)

_tables_lock = threading.Lock()
_profiles: dict[str, DeviceProfile] = {p.name: p for p in _BUILTIN_PROFILES}
_links: dict[str, LinkProfile] = {lp.name: lp for lp in _BUILTIN_LINKS}


def _register(table: dict, obj: Any, cls: type, what: str, replace: bool) -> Any:
    if not isinstance(obj, cls):
        raise TypeError(f"expected a {cls.__name__}, got {type(obj).__name__}")
    with _tables_lock:
        old = table.get(obj.name)
        if old is not None and old != obj and not replace:
            raise ValueError(f"a different {what} named {obj.name!r} exists; pass replace=True")
        table[obj.name] = obj
    return obj


def _resolve(table: dict, name_or_obj: Any, cls: type, what: str, known_label: str) -> Any:
    if isinstance(name_or_obj, cls):
        return name_or_obj
    with _tables_lock:
        found = table.get(name_or_obj) if isinstance(name_or_obj, str) else None
        known = sorted(table)
    if found is None:
        raise ValueError(f"unknown {what} {name_or_obj!r}; known {known_label}: {', '.join(known)}")
    return found


def register_profile(profile: DeviceProfile, *, replace: bool = False) -> DeviceProfile:
    """Add ``profile`` to the named table. A different profile under a taken name needs ``replace=True``."""
    return _register(_profiles, profile, DeviceProfile, "device profile", replace)


def register_link(link: LinkProfile, *, replace: bool = False) -> LinkProfile:
    """Add ``link`` to the named table. A different link under a taken name needs ``replace=True``."""
    return _register(_links, link, LinkProfile, "link profile", replace)


def get_profile(name_or_obj: str | DeviceProfile) -> DeviceProfile:
    """Resolve a device profile by name, or load it from a JSON file when given a path (a string
    ending in ``.json`` or containing a path separator, or an ``os.PathLike``); a ``DeviceProfile``
    passes through. Unknown name or unreadable file -> ValueError."""
    if isinstance(name_or_obj, os.PathLike) or (
        isinstance(name_or_obj, str) and (name_or_obj.endswith(".json") or os.sep in name_or_obj)
    ):
        return DeviceProfile.from_json(os.fspath(name_or_obj))
    return _resolve(_profiles, name_or_obj, DeviceProfile, "device profile", "profiles")


def get_link(name_or_obj: str | LinkProfile) -> LinkProfile:
    """Resolve a link profile by name (a ``LinkProfile`` passes through). Unknown -> ValueError."""
    return _resolve(_links, name_or_obj, LinkProfile, "link profile", "links")


def profiles() -> dict[str, DeviceProfile]:
    """A copy of the named device profiles."""
    with _tables_lock:
        return dict(_profiles)


def links() -> dict[str, LinkProfile]:
    """A copy of the named link profiles."""
    with _tables_lock:
        return dict(_links)


# --- formulas ----------------------------------------------------------------------------------


def kernel_time(work: Work, profile: DeviceProfile | str, dtype: Any = None, kernels: int = 1) -> float:
    """Device seconds of ``work`` issued as ``kernels`` device kernels:
    ``launch_overhead + max(kernels * min_kernel, math, memory)`` with
    math = flops / (rate(dtype) * efficiency) (or ``work.seconds`` where it is given) and memory =
    (bytes + bytes_knee) / mem_bandwidth.
    Efficiency: ``M/(M+m0) * N/(N+n0) * K/(K+k0)`` for a GEMM ``shape``, else ``F/(F+flops_knee)``.
    ``work.dtype`` wins over ``dtype``. With the default fields this is the plain roofline."""
    if not isinstance(work, Work):
        raise TypeError(f"expected Work, got {type(work).__name__}")
    p = get_profile(profile)
    return _device_seconds(work, p, dtype, kernels)


def _device_seconds(work: Work, p: DeviceProfile, dtype: Any, kernels: int) -> float:
    f, b = work.flops, work.bytes
    math_t = 0.0
    if work.seconds is not None:
        math_t = work.seconds
    elif f > 0:
        rate = p.flops_rate(work.dtype if work.dtype is not None else dtype)
        if work.shape is not None:
            eff = 1.0
            for x, x0 in zip(work.shape, p.gemm_knee):
                eff *= x / (x + x0) if x0 > 0 else 1.0
            math_t = f / (rate * eff) if eff > 0 else math.inf
        else:
            math_t = (f + p.flops_knee) / rate
    mem_t = (b + p.bytes_knee) / p.mem_bandwidth if b > 0 else 0.0
    return p.launch_overhead + max(kernels * p.min_kernel, math_t, mem_t)


def transfer_time(transfer: Transfer, link: LinkProfile | str) -> float:
    """Transfer seconds: ``latency + bytes / bandwidth``."""
    if not isinstance(transfer, Transfer):
        raise TypeError(f"expected Transfer, got {type(transfer).__name__}")
    lp = get_link(link)
    return lp.latency + transfer.bytes / lp.bandwidth


def _itemsize(dtype: torch.dtype) -> int:
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"expected a torch.dtype, got {dtype!r}")
    return torch.empty((), dtype=dtype, device="meta").element_size()


def _check_count(what: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, got {type(value).__name__}: {value!r}")
    if value < 0:
        raise ValueError(f"{what} must be >= 0, got {value}")
    return value


def matmul(m: int, n: int, k: int, dtype: torch.dtype = torch.bfloat16) -> Work:
    """Work of C[m, n] = A[m, k] @ B[k, n]: 2*m*n*k flops; bytes of A, B and C once each; the dtype
    and the GEMM shape (m, n, k) for the profile's per-dtype rate and GEMM efficiency."""
    m, n, k = (_check_count(w, v) for w, v in (("m", m), ("n", n), ("k", k)))
    return Work(flops=2 * m * n * k, bytes=(m * k + k * n + m * n) * _itemsize(dtype), dtype=dtype, shape=(m, n, k))


def elementwise(numel: int, dtype: torch.dtype = torch.float32, reads: int = 1, writes: int = 1) -> Work:
    """Work of an elementwise op over ``numel`` elements: one flop per element per input read
    (at least one), ``(reads + writes) * numel * itemsize`` bytes."""
    numel = _check_count("numel", numel)
    reads = _check_count("reads", reads)
    writes = _check_count("writes", writes)
    return Work(flops=numel * max(reads, 1), bytes=(reads + writes) * numel * _itemsize(dtype))


def iter_tensors(args: Iterable[Any]) -> Iterable[torch.Tensor]:
    """The tensors in ``args``, also one level into lists, tuples and dict values."""
    for a in args:
        if isinstance(a, torch.Tensor):
            yield a
        elif isinstance(a, (list, tuple)):
            yield from (x for x in a if isinstance(x, torch.Tensor))
        elif isinstance(a, dict):
            yield from (x for x in a.values() if isinstance(x, torch.Tensor))


def tensor_bytes(args: Iterable[Any]) -> int:
    """Sum of ``nbytes`` of the tensors in ``args`` (also one level into lists, tuples, dict values)."""
    return sum(t.numel() * t.element_size() for t in iter_tensors(args))


def seconds_for(
    kind: str,
    cost: None | float | Work | Transfer,
    args: Iterable[Any],
    profile: DeviceProfile | str,
    link: LinkProfile | str,
    *,
    dtype: Any = None,
    kernels: int = 1,
) -> float:
    """Modelled seconds of a kernel, the formula every backend shares.

    * float / int: that many seconds.
    * ``Work``: ``kernel_time(work, profile, dtype, kernels)``; ``Transfer``:
      ``transfer_time(transfer, link)`` (the cost's type picks the formula, whatever ``kind`` is).
    * None: derived from the tensor args' bytes B: compute -> ``kernel_time(Work(bytes=B))``
      (``launch_overhead + B / mem_bandwidth`` on a plain profile); comm -> ``latency + B / bandwidth``.
    """
    if kind not in KERNEL_KINDS:
        raise ValueError(f"kernel kind must be one of {KERNEL_KINDS}, got {kind!r}")
    if cost is None:
        nbytes = tensor_bytes(args)
        if kind == "compute":
            p = get_profile(profile)
            return _device_seconds(Work(bytes=nbytes), p, dtype, kernels)
        lp = get_link(link)
        return lp.latency + nbytes / lp.bandwidth
    if isinstance(cost, Work):
        return _device_seconds(cost, get_profile(profile), dtype, kernels)
    if isinstance(cost, Transfer):
        return transfer_time(cost, link)
    if isinstance(cost, bool) or not isinstance(cost, (int, float)):
        raise TypeError(f"cost must be None, seconds, Work or Transfer; got {type(cost).__name__}: {cost!r}")
    v = _check_number("cost (seconds)", cost)
    if math.isinf(v):
        raise ValueError("cost (seconds) must be finite")
    return v


def memory_seconds(kind: str, cost: Any, args: Iterable[Any], profile: DeviceProfile | str) -> float:
    """The memory part of a compute kernel's device model: ``(bytes + bytes_knee) / mem_bandwidth``
    of its ``Work`` (for ``cost=None``: its tensor arguments' bytes); 0 for a comm kernel, a
    transfer, a time in seconds or a Work without bytes (``OpCost.memory_scale`` multiplies it)."""
    if kind != "compute":
        return 0.0
    if cost is None:
        nbytes = tensor_bytes(args)
    elif isinstance(cost, Work):
        nbytes = cost.bytes
    else:
        return 0.0
    if nbytes <= 0:
        return 0.0
    p = get_profile(profile)
    return (nbytes + p.bytes_knee) / p.mem_bandwidth


def syncs_host(fn: Any) -> Any:
    """Mark kernel function ``fn`` as one that makes a host sync (e.g. ``tensor.tolist()`` on a
    device tensor): on virtual, launching it waits on the host for the stream's earlier work.
    Returns ``fn`` (usable as a decorator)."""
    try:
        fn.dbo_syncs_host = True
    except AttributeError:
        raise TypeError(f"cannot mark {fn!r} as syncing: it takes no attributes") from None
    return fn


def scale_link(link: LinkProfile | str, factor: float, name: str | None = None) -> LinkProfile:
    """A link ``factor`` times faster (``factor`` < 1: slower): bandwidth * factor, latency / factor,
    so every transfer time divides by exactly ``factor``. Not registered; pass it as ``link=``."""
    lp = get_link(link)
    f = _check_number("factor", factor, positive=True)
    return _dc_replace(lp, name=name or f"{lp.name}x{factor:g}", latency=lp.latency / f, bandwidth=lp.bandwidth * f)


def scale_profile(profile: DeviceProfile | str, factor: float, name: str | None = None) -> DeviceProfile:
    """A device ``factor`` times faster: every math rate and the memory bandwidth * factor,
    launch_overhead and min_kernel / factor (so every device kernel time divides by ``factor``).
    The host costs stay as they are (the host is not the device), but per-op fixed device
    seconds (``OpCost.device``) divide by ``factor`` too."""
    p = get_profile(profile)
    f = _check_number("factor", factor, positive=True)
    ops = {k: _dc_replace(v, device=v.device / f) for k, v in p.host.ops.items()}
    return _dc_replace(
        p,
        host=_dc_replace(p.host, ops=ops),
        name=name or f"{p.name}x{factor:g}",
        peak_flops=p.peak_flops * f,
        mem_bandwidth=p.mem_bandwidth * f,
        launch_overhead=p.launch_overhead / f,
        dtype_flops={k: v * f for k, v in p.dtype_flops.items()},
        min_kernel=p.min_kernel / f,
    )
