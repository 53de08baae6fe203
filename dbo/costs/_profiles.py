"""Device profiles: the device model (per-dtype rates, efficiency curves, comm SM share) and the
host model (launch, stream switch, handoff, thread, sync costs), with JSON load/save.

See docs/fidelity.md for the model and the JSON format. ``dbo.costs`` re-exports these names.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Mapping

from dbo.costs._dtypes import DTYPES, dtype_key
from dbo.costs._profile_json import check_json_fields


def _refuse_kernel_function_keys(ops: Mapping[str, Any]) -> None:
    """Profiles written before launches declared their op keyed some entries ``"<op>/<kernel function>"``;
    their mapping to declared ops is gone (docs/changelog.md, 0.1): such a key is one line that says to
    calibrate again."""
    old = sorted(str(k) for k in ops if "/" in str(k))
    if old:
        raise ValueError(
            f"device profile op key {old[0]!r} names a kernel function (the format before launches declared "
            "their op): re-run `python -m demos.calibrate` to write the profile again"
        )


def check_number(what: str, value: Any, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number, got {type(value).__name__}: {value!r}")
    v = float(value)
    if math.isnan(v):
        raise ValueError(f"{what} must not be NaN")
    if positive and not v > 0:
        raise ValueError(f"{what} must be > 0, got {value!r}")
    if v < 0:
        raise ValueError(f"{what} must be >= 0, got {value!r}")
    return v


@dataclass(frozen=True)
class OpCost:
    """What one op (the ``op`` a launch through dbo declares) costs beyond one plain launch:
    ``kernels`` device kernels it issues (each a host ``HostCosts.kernel`` and a device
    ``min_kernel``), plus ``host`` seconds of other host work (Python, allocator).

    Device correction (fitted by calibration, ``demos.fidelity.calibration``): the op's device time is
    ``device + scale * (the device model's time of its declared cost) + memory_scale * (its memory
    time, bytes / bandwidth)``: ``device`` seconds of fixed work per launch (the op's many small
    library calls), ``scale`` for how far the op's mix runs from the fitted rates, ``memory_scale``
    for memory traffic that does not hide under the math (a CPU GEMM of a few rows streams its
    weights once per row). The defaults (0, 1, 0) leave the device model as it is.

    ``gil_calls``: torch calls in the op's kernel function that each need the interpreter lock
    back when they return (counted by calibration); on a host whose Python keeps the device
    waiting (``HostCosts.idle_hold`` > 0: the threads backend) each such return waits while the
    host runs Python (``dbo.streams.virtual._gil``). 0: the kernel never waits for the host."""

    kernels: int = 1
    host: float = 0.0
    device: float = 0.0
    scale: float = 1.0
    memory_scale: float = 0.0
    gil_calls: int = 0

    def __post_init__(self) -> None:
        for name in ("kernels", "gil_calls"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"OpCost.{name} must be an int >= 0, got {v!r}")
        check_number("OpCost.host", self.host)
        check_number("OpCost.device", self.device)
        check_number("OpCost.scale", self.scale, positive=True)
        check_number("OpCost.memory_scale", self.memory_scale)

    def seconds(self, model: float, memory: float = 0.0, fixed_factor: float = 1.0) -> float:
        """The op's corrected device time: ``device * fixed_factor + scale * model + memory_scale *
        memory`` (``model``: the device model's time of its declared cost, ``memory`` that time's
        memory part, ``fixed_factor``: ``DeviceProfile.fixed_threaded`` while ubatch threads run)."""
        return self.device * fixed_factor + self.scale * model + self.memory_scale * memory


@dataclass(frozen=True)
class HostCosts:
    """Seconds of host (CPU) time per event; all zero: a host that costs nothing.

    ``launch``: a launch through a dbo stream (the per-launch floor: stream context, bookkeeping);
    ``kernel``: each device kernel the launch issues (one by default, ``OpCost.kernels`` for named
    ops); ``ops``: per-op extras by the op a launch declares; ``stream_switch``: a
    stream becoming a thread's current stream; ``handoff``: one turn handoff between ubatch threads;
    ``thread_start`` / ``thread_join``: per ubatch thread per step; ``sync``: a host sync (stream,
    event or in-kernel), on top of the wait for the device; ``event``: an event record or wait;
    ``threaded``: factor on launch costs while two or more ubatch threads are live (a DBO step's
    host work runs slower than the same work on one thread; 1: no effect); ``kernel_sync``:
    whether launching a kernel function marked with ``dbo.costs.syncs_host`` makes a host sync
    (True on a GPU, where the kernel function runs on the host thread; False where kernel functions
    run on an executor thread, as on the threads backend); ``idle_hold``: how long the host's
    running code keeps an idle device asleep. A kernel launched while every engine is idle starts
    when the host next blocks (a sync, a turn handoff, a thread join), or ``idle_hold`` seconds after
    its launch, whichever is first. On the threads backend the engines are Python threads: the
    host's Python holds the GIL until it blocks or the interpreter's switch interval runs out
    (5 ms by default). On a GPU it is 0 (the device never waits for the host's code). ``replay_op``:
    each op (launch, event record or wait) a replay of a captured step re-issues: 0 for a CUDA graph
    (the replay is one launch); on the threads backend the replay re-issues each op from Python.
    """

    launch: float = 0.0
    kernel: float = 0.0
    stream_switch: float = 0.0
    handoff: float = 0.0
    thread_start: float = 0.0
    thread_join: float = 0.0
    sync: float = 0.0
    event: float = 0.0
    threaded: float = 1.0
    ops: Mapping[str, OpCost] = field(default_factory=dict)
    kernel_sync: bool = True
    idle_hold: float = 0.0
    replay_op: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.kernel_sync, bool):
            raise TypeError(f"HostCosts.kernel_sync must be a bool, got {self.kernel_sync!r}")
        for f in fields(self):
            if f.name not in ("ops", "kernel_sync"):
                check_number(f"HostCosts.{f.name}", getattr(self, f.name))
        if self.threaded < 1:
            raise ValueError(f"HostCosts.threaded must be >= 1, got {self.threaded}")
        ops = {}
        for k, v in dict(self.ops).items():
            if isinstance(v, Mapping):
                v = OpCost(**v)
            if not isinstance(v, OpCost):
                raise TypeError(f"HostCosts.ops[{k!r}] must be an OpCost, got {type(v).__name__}")
            ops[str(k)] = v
        object.__setattr__(self, "ops", ops)

    def __hash__(self) -> int:
        return hash((self.launch, self.kernel, tuple(sorted(self.ops))))

    def launch_cost(self, op: str | None) -> tuple[float, int]:
        """(host seconds, device kernels) of one launch of op ``op``."""
        oc = self.ops.get(op) if op is not None else None
        if oc is None:
            return self.launch + self.kernel, 1
        return self.launch + oc.kernels * self.kernel + oc.host, oc.kernels

    @property
    def zero(self) -> bool:
        return not self.ops and all(
            getattr(self, f.name) == 0 for f in fields(self) if f.name not in ("ops", "threaded", "kernel_sync")
        )


@dataclass(frozen=True)
class DeviceProfile:
    """A device: math rates, memory bandwidth, efficiency curves, and its host's costs.

    Positional fields keep the plain roofline (``peak_flops`` is the rate of a dtype with no
    ``dtype_flops`` entry). The rest default to "no effect":

    * ``dtype_flops``: math rate per dtype key (``DTYPES``).
    * ``min_kernel``: the least device time of one kernel (seconds).
    * ``gemm_knee`` (m0, n0, k0): GEMM efficiency ``M/(M+m0) * N/(N+n0) * K/(K+k0)``.
    * ``flops_knee``: efficiency ``F/(F+f0)`` of math with no GEMM shape (F flops).
    * ``bytes_knee``: memory efficiency ``B/(B+b0)`` (B bytes): ``(B + b0) / mem_bandwidth``.
    * ``comm_sm_share``: share of the compute engine a comm kernel takes while it runs: compute
      overlapping comm runs ``1 / (1 - share)`` times longer.
    * ``event_latency``: seconds from an event's completion until work on another stream that
      waits for it can start (a wake-up across engines; on the threads backend an executor thread
      being woken, on a GPU a few microseconds).
    * ``fixed_threaded``: factor on the per-op fixed device seconds (``OpCost.device``) while two
      or more ubatch threads are live (on the threads backend that part is Python and library
      dispatch, which then competes for the GIL; fitted by calibration; 1: no effect).
    * ``event_latency_threaded``: added to ``event_latency`` while two or more ubatch threads are
      live (on the threads backend their Python competes with the executor threads for the GIL and
      the cores, and a woken executor waits for them; fitted to DBO steps by calibration).
    * ``engine_gap``: seconds an engine takes between the end of one kernel and the start of the
      next one that was already waiting for it (on the threads backend the executor's bookkeeping
      between two kernels; on a GPU about nothing), and ``engine_gap_threaded`` added to it while two
      or more ubatch threads are live. Both measured by calibration from the model's steps.
    * ``host``: ``HostCosts`` (virtual backend's host clock).
    """

    name: str
    peak_flops: float
    mem_bandwidth: float
    launch_overhead: float
    dtype_flops: Mapping[str, float] = field(default_factory=dict)
    min_kernel: float = 0.0
    gemm_knee: tuple[float, float, float] = (0.0, 0.0, 0.0)
    flops_knee: float = 0.0
    bytes_knee: float = 0.0
    comm_sm_share: float = 0.0
    host: HostCosts = field(default_factory=HostCosts)
    event_latency: float = 0.0
    event_latency_threaded: float = 0.0
    fixed_threaded: float = 1.0
    engine_gap: float = 0.0
    engine_gap_threaded: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"profile name must be a non-empty string, got {self.name!r}")
        check_number("peak_flops", self.peak_flops, positive=True)
        check_number("mem_bandwidth", self.mem_bandwidth, positive=True)
        check_number("launch_overhead", self.launch_overhead)
        rates = {}
        for k, v in dict(self.dtype_flops).items():
            key = dtype_key(k)
            if key is None:
                raise ValueError(f"dtype_flops: unknown dtype {k!r}; known: {', '.join(DTYPES)}")
            rates[key] = check_number(f"dtype_flops[{k!r}]", v, positive=True)
        object.__setattr__(self, "dtype_flops", rates)
        knee = tuple(self.gemm_knee)
        if len(knee) != 3:
            raise ValueError(f"gemm_knee must be (m0, n0, k0), got {self.gemm_knee!r}")
        object.__setattr__(self, "gemm_knee", tuple(check_number("gemm_knee", x) for x in knee))
        for name in (
            "min_kernel",
            "flops_knee",
            "bytes_knee",
            "event_latency",
            "event_latency_threaded",
            "engine_gap",
            "engine_gap_threaded",
        ):
            check_number(name, getattr(self, name))
        if check_number("fixed_threaded", self.fixed_threaded) < 1:
            raise ValueError(f"fixed_threaded must be >= 1, got {self.fixed_threaded}")
        share = check_number("comm_sm_share", self.comm_sm_share)
        if share >= 1:
            raise ValueError(f"comm_sm_share must be in [0, 1), got {share}")
        host = self.host
        if isinstance(host, Mapping):
            host = HostCosts(**host)
        if not isinstance(host, HostCosts):
            raise TypeError(f"host must be HostCosts, got {type(host).__name__}")
        object.__setattr__(self, "host", host)

    def __hash__(self) -> int:
        return hash((self.name, self.peak_flops, self.mem_bandwidth))

    def flops_rate(self, dtype: Any = None) -> float:
        """Peak math rate (FLOP/s) of ``dtype`` (``peak_flops`` when unknown or absent)."""
        key = dtype_key(dtype)
        return self.dtype_flops.get(key, self.peak_flops) if key is not None else self.peak_flops

    # --- JSON ---------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        d = asdict(self)
        d["gemm_knee"] = list(self.gemm_knee)
        d["host"]["ops"] = {k: asdict(v) for k, v in self.host.ops.items()}
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "DeviceProfile":
        if not isinstance(d, Mapping):
            raise TypeError(f"a device profile must be a JSON object, got {type(d).__name__}")
        check_json_fields(cls, d, "device profile", "")  # one line naming the field and the type it wants
        kw = dict(d)
        host = kw.get("host")
        if isinstance(host, Mapping):
            check_json_fields(HostCosts, host, "host cost", "host.")
            if isinstance(host.get("ops"), Mapping):
                _refuse_kernel_function_keys(host["ops"])
                for k, v in host["ops"].items():
                    check_json_fields(OpCost, v, "op cost", f"host.ops[{k!r}].")
            kw["host"] = HostCosts(**host)
        if "gemm_knee" in kw:
            kw["gemm_knee"] = tuple(kw["gemm_knee"])
        try:
            return cls(**kw)
        except TypeError as e:
            raise ValueError(f"bad device profile: {e}") from None

    def to_json(self, path: str | os.PathLike | None = None) -> str:
        """The profile as JSON text; also written to ``path`` when given."""
        text = json.dumps(self.to_dict(), indent=2, sort_keys=True)
        if path is not None:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text + "\n")
        return text

    @classmethod
    def from_json(cls, text_or_path: str | os.PathLike) -> "DeviceProfile":
        """A profile from JSON text, or from a file when given a path (ends in .json or exists)."""
        s = os.fspath(text_or_path)
        if not s.lstrip().startswith("{"):
            try:
                with open(s, encoding="utf-8") as f:
                    s = f.read()
            except OSError as e:
                raise ValueError(f"cannot read device profile {text_or_path!r}: {e}") from None
        try:
            d = json.loads(s)
        except json.JSONDecodeError as e:
            raise ValueError(f"device profile is not valid JSON: {e}") from None
        return cls.from_dict(d)
