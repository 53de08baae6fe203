"""How busy the machine was while a calibration or a validation ran: ``LoadMeter`` and ``MachineLoad``.

A validation's targets assume an idle machine, and two things take the CPUs from a run without it
knowing: other processes, and, in a virtual machine, the hypervisor (CPU *steal*: time a virtual
CPU was ready to run and the host ran something else). Linux counts both in ``/proc/stat``; the
meter reads it before and after the run, with this process's own CPU time (``os.times``), and
``MachineLoad`` gives each as a fraction of the CPUs' time over the run. Where ``/proc/stat`` is
absent (macOS, Windows) the meter measures nothing and says so.

``DISTURBED`` holds the limits above which a run is reported as disturbed. They are a judgement,
not a measurement: on the 2-core development VM a validation whose steal was a few percent missed
its targets where quieter ones met them (docs/fidelity.md, "Is the machine idle?").
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, TypeVar

T = TypeVar("T")

__all__ = [
    "CpuTimes",
    "MachineLoad",
    "LoadMeter",
    "Reruns",
    "DISTURBED",
    "read_cpu_times",
    "parse_proc_stat",
    "run_undisturbed",
    "limits_text",
]

DISTURBED = {"steal": 0.02, "others": 0.10}
"""A run is disturbed when the hypervisor took more than 2% of the CPUs' time, or other processes
more than 10% of it (each over the whole run)."""

_STAT = "/proc/stat"


def limits_text() -> str:
    """``DISTURBED`` in words: ``CPU steal over 2% or other processes over 10% of the CPUs' time``."""
    return (
        f"CPU steal over {DISTURBED['steal'] * 100:g}% or other processes over "
        f"{DISTURBED['others'] * 100:g}% of the CPUs' time"
    )


@dataclass(frozen=True)
class CpuTimes:
    """The machine's CPU time so far, in seconds summed over its CPUs, and this process's."""

    wall: float  # time.monotonic()
    total: float  # every state but guest time (already inside user and nice)
    idle: float  # idle + iowait
    steal: float
    ours: float  # this process's user + system seconds, all its threads
    cpus: int


def parse_proc_stat(text: str, ticks_per_second: float) -> tuple[float, float, float, int]:
    """(total, idle + iowait, steal) seconds and the CPU count from ``/proc/stat``'s text. Raises
    ``ValueError`` on a text without an aggregate ``cpu`` line."""
    agg, cpus = None, 0
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "cpu":
            agg = [float(x) for x in parts[1:]]
        elif parts[0].startswith("cpu") and parts[0][3:].isdigit():
            cpus += 1
    if agg is None or len(agg) < 4:
        raise ValueError("no aggregate 'cpu' line in /proc/stat")
    fields = (agg + [0.0] * 8)[:8]  # user nice system idle iowait irq softirq steal (guest* excluded)
    total = sum(fields)
    return total / ticks_per_second, (fields[3] + fields[4]) / ticks_per_second, fields[7] / ticks_per_second, cpus


def read_cpu_times(path: str = _STAT) -> CpuTimes | None:
    """The machine's and this process's CPU time now, or None where ``path`` cannot be read."""
    try:
        with open(path, encoding="ascii") as f:
            text = f.read()
        hz = float(os.sysconf("SC_CLK_TCK"))
        total, idle, steal, cpus = parse_proc_stat(text, hz)
    except (OSError, ValueError, AttributeError):
        return None
    t = os.times()
    return CpuTimes(time.monotonic(), total, idle, steal, t.user + t.system, cpus or (os.cpu_count() or 1))


@dataclass(frozen=True)
class MachineLoad:
    """Where the CPUs' time went over a run, each a fraction of it (``cpus`` x ``seconds``)."""

    seconds: float
    cpus: int
    steal: float  # taken by the hypervisor
    others: float  # used by other processes (and the kernel on their behalf)
    ours: float  # used by this process
    idle: float

    @classmethod
    def between(cls, a: CpuTimes, b: CpuTimes) -> "MachineLoad | None":
        """The load from reading ``a`` to reading ``b`` (None if no CPU time passed between them)."""
        total = b.total - a.total
        if total <= 0:
            return None
        steal = max(0.0, b.steal - a.steal)
        idle = max(0.0, b.idle - a.idle)
        ours = max(0.0, b.ours - a.ours)
        busy = max(0.0, total - idle - steal)
        others = max(0.0, busy - ours)
        return cls(b.wall - a.wall, b.cpus, steal / total, others / total, min(1.0, ours / total), idle / total)

    @property
    def steal_of_demand(self) -> float:
        """The steal as a share of the time the CPUs ran or were ready to run (busy + steal): how
        much slower the machine's programs ran than on CPUs of their own."""
        demand = self.steal + self.others + self.ours
        return self.steal / demand if demand > 0 else 0.0

    def disturbances(self) -> list[str]:
        """What made the run disturbed, in words (empty: undisturbed by ``DISTURBED``)."""
        out = []
        if self.steal > DISTURBED["steal"]:
            out.append(f"the hypervisor took {self.steal:.1%} of the CPUs' time (> {DISTURBED['steal']:.0%})")
        if self.others > DISTURBED["others"]:
            out.append(f"other processes used {self.others:.1%} of it (> {DISTURBED['others']:.0%})")
        return out

    def describe(self) -> str:
        """One line: ``2 CPUs over 3 min 24 s: steal 5.4% (9% of the time they ran or were ready to),
        other processes 1.2%, this run 55%, idle 38%`` and the verdict."""
        minutes, secs = divmod(round(self.seconds), 60)
        span = f"{minutes} min {secs} s" if minutes else f"{self.seconds:.1f} s"
        text = (
            f"{self.cpus} CPU{'s' if self.cpus != 1 else ''} over {span}: steal {self.steal:.1%} "
            f"({self.steal_of_demand:.0%} of the time they ran or were ready to), "
            f"other processes {self.others:.1%}, this run {self.ours:.0%}, idle {self.idle:.0%}"
        )
        why = self.disturbances()
        return text + (" - disturbed: " + "; ".join(why) if why else " - undisturbed")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {
            "steal_of_demand": self.steal_of_demand,
            "disturbed": bool(self.disturbances()),
            "limits": dict(DISTURBED),
        }


class LoadMeter:
    """``meter = LoadMeter().start()``, the run, then ``meter.stop()``: the ``MachineLoad`` over
    the run (None where the machine's CPU times cannot be read, ``missing`` says why). ``read``:
    the reader (tests pass their own)."""

    def __init__(self, read: Callable[[], CpuTimes | None] = read_cpu_times):
        self._read = read
        self._start: CpuTimes | None = None
        self.missing = ""  # why ``stop`` gave None, in words

    def start(self) -> "LoadMeter":
        self._start = self._read()
        return self

    def stop(self) -> MachineLoad | None:
        end = self._read()
        if self._start is None or end is None:
            self.missing = "the machine's CPU times cannot be read here (no /proc/stat)"
            return None
        load = MachineLoad.between(self._start, end)
        if load is None:
            self.missing = "the run was too short for the machine's CPU counters"
        return load


@dataclass
class Reruns:
    """Runs run again because the machine was disturbed during them (``run_undisturbed``), and how
    many of those were disturbed again."""

    again: int = 0
    still: int = 0

    def note(self) -> str | None:
        """The count in words (None: no run was run again)."""
        if not self.again:
            return None
        one = self.again == 1
        return (
            f"{self.again} run{' was' if one else 's were'} run again: the machine was disturbed during "
            f"{'it' if one else 'them'} (CPU steal or other processes; {self.still} still the second time)"
        )


def run_undisturbed(fn: Callable[[], T], machine: Callable[[], CpuTimes | None] | None, reruns: Reruns) -> T:
    """``fn()``, and once more if ``machine`` (a reader such as ``read_cpu_times``; None: no
    check) shows the machine disturbed during the first call; the second result is kept whatever
    the load then (``reruns`` counts both cases)."""
    if machine is None:
        return fn()
    for attempt in range(2):
        meter = LoadMeter(read=machine).start()
        out = fn()
        load = meter.stop()
        if load is None or not load.disturbances():
            return out
        if attempt == 0:
            reruns.again += 1
        else:
            reruns.still += 1
    return out
