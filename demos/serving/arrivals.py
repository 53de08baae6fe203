"""Where a serving run's requests come from: a closed loop at fixed concurrency, an open-loop Poisson rate,
or a request trace read from a file. See docs/serving.md ("Arrivals").

Every source keeps one contract (``ArrivalSource``):

* ``iter(source)`` yields its ``Request``s in the order they are sent, ids ``0 .. len(source) - 1``; every
  iteration yields the same requests (a source is a value, not a stream that runs dry);
* ``len(source)``: how many requests it yields, warm-up included;
* ``closed``: True for a closed loop: its requests carry ``arrival_s=None`` and the run sends the next one
  when a client's previous request finishes (the run sets the arrival); False for an open loop: every
  request carries its ``arrival_s``, non-decreasing, the first at 0;
* ``concurrency``: the closed loop's number of clients; None for an open loop;
* ``warmup``: how many of the first requests are warm-up, sent but left out of the run's metrics (0 for
  the open-loop sources);
* ``describe()``: one line that says what the source is.

Sources (one idea each):

* ``ClosedLoop(concurrency, isl, osl, requests, warmup=0)``: a benchmark client at fixed concurrency (aiperf
  and genai-perf ``--concurrency``, ``vllm bench serve --max-concurrency``; aiconfigurator's silicon rows
  carry the concurrency they were measured at): ``concurrency`` clients each send a request, and each
  sends its next one when its previous one finishes; ``warmup`` requests first, then ``requests``
  measured ones, every one ``isl`` prompt tokens and ``osl`` output tokens, or with ``range_ratio`` r < 1
  each request's lengths drawn uniformly from ``int(r x isl) .. isl`` and ``int(r x osl) .. osl`` (both ends
  included; ``random.Random(seed)``), as InferenceX's benchmark client draws them (its ``--random-range-ratio``);
* ``Poisson(rate, isl, osl, requests, seed=0)``: open loop, exponential gaps at ``rate`` requests per second
  (the first request at 0), the same arrivals for the same seed;
* ``Trace``: the requests of a recorded trace, read by ``read_azure`` (Azure LLM inference trace 2023, CSV
  ``TIMESTAMP,ContextTokens,GeneratedTokens``) or ``read_mooncake`` (Mooncake's FAST'25 traces, JSON lines
  with ``timestamp`` in milliseconds, ``input_length``, ``output_length``). Arrivals are relative to the
  first request; ``scale`` multiplies the rate (divides every gap); ``limit`` keeps the first requests.

Bad input is a one-line ``ValueError``: a bad parameter names it; a bad file is a ``TraceError`` (a
``ValueError``) that names the file, and the line and the column or field at fault where there is one.
A trace file is read line by line, never whole; only its requests are kept.

The formats' records are read by ``demos.serving.trace_formats``. Only the standard library,
``demos.serving.requests`` and ``demos.serving.trace_formats`` are imported here.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from demos.serving.requests import Request
from demos.serving.trace_formats import (
    AZURE_COLUMNS,
    MOONCAKE_FIELDS,
    AzureRecords,
    MooncakeRecords,
    TraceError,
    open_trace,
)

__all__ = [
    "AZURE_COLUMNS",
    "MOONCAKE_FIELDS",
    "ArrivalSource",
    "ClosedLoop",
    "Poisson",
    "Trace",
    "TraceError",
    "read_azure",
    "read_mooncake",
    "valid_range_ratio",
]


@runtime_checkable
class ArrivalSource(Protocol):
    """What the run reads of any source (module docstring)."""

    @property
    def closed(self) -> bool: ...

    @property
    def concurrency(self) -> int | None: ...

    @property
    def warmup(self) -> int: ...

    def __iter__(self) -> Iterator[Request]: ...

    def __len__(self) -> int: ...

    def describe(self) -> str: ...


def _count(name: str, value: object, low: int) -> int:
    """``value`` if it is an integer >= ``low`` (not a bool), else a ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return value


def _positive(name: str, value: object) -> float:
    """``value`` as a float if it is a finite number > 0 (not a bool), else a ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value < math.inf):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def valid_range_ratio(value: object) -> bool:
    """Whether ``value`` is a closed loop's ``range_ratio``: a number in (0, 1]."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and 0 < value <= 1


@dataclass(frozen=True)
class ClosedLoop:
    """``concurrency`` clients, each sending its next request when its previous one finishes (module
    docstring). Yields ``warmup + requests`` requests of ``isl`` prompt and ``osl`` output tokens (``range_ratio``
    below 1: drawn per request from ``int(range_ratio x L) .. L`` with ``seed``) with ``arrival_s=None``; the
    first ``warmup`` are warm-up. The run sends the first ``concurrency`` at once."""

    concurrency: int
    isl: int
    osl: int
    requests: int
    warmup: int = 0
    range_ratio: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("concurrency", "isl", "osl", "requests"):
            _count(name, getattr(self, name), 1)
        _count("warmup", self.warmup, 0)
        _count("seed", self.seed, 0)
        if not valid_range_ratio(self.range_ratio):
            raise ValueError(f"range_ratio must be a number in (0, 1], got {self.range_ratio!r}")

    @property
    def closed(self) -> bool:
        return True

    def __len__(self) -> int:
        return self.warmup + self.requests

    def __iter__(self) -> Iterator[Request]:
        rng = random.Random(self.seed)  # a ratio of 1 draws each length from itself alone
        for i in range(len(self)):
            isl = rng.randint(max(1, int(self.isl * self.range_ratio)), self.isl)
            osl = rng.randint(max(1, int(self.osl * self.range_ratio)), self.osl)
            yield Request(i, None, isl, osl)

    def describe(self) -> str:
        warm = f" after {self.warmup} warm-up" if self.warmup else ""
        spread = f" (each drawn from {self.range_ratio:g}x to 1x, seed {self.seed})" if self.range_ratio < 1 else ""
        return (
            f"closed loop: {self.concurrency} clients, {self.isl} prompt -> {self.osl} output tokens{spread}, "
            f"{self.requests} requests measured{warm}"
        )


@dataclass(frozen=True)
class Poisson:
    """Open loop: ``requests`` requests of ``isl`` prompt and ``osl`` output tokens, the first at 0 s and
    each next one an exponential gap of mean ``1 / rate`` seconds later, drawn from ``random.Random(seed)``:
    the same seed gives the same arrivals."""

    rate: float
    isl: int
    osl: int
    requests: int
    seed: int = 0

    def __post_init__(self) -> None:
        _positive("rate", self.rate)
        for name in ("isl", "osl", "requests"):
            _count(name, getattr(self, name), 1)
        _count("seed", self.seed, 0)

    @property
    def closed(self) -> bool:
        return False

    @property
    def concurrency(self) -> None:
        return None

    @property
    def warmup(self) -> int:
        return 0

    def __len__(self) -> int:
        return self.requests

    def __iter__(self) -> Iterator[Request]:
        draw = random.Random(self.seed).expovariate
        t = 0.0
        for i in range(self.requests):
            if i:
                t += draw(self.rate)
            yield Request(i, t, self.isl, self.osl)

    def describe(self) -> str:
        return (
            f"Poisson arrivals: {self.rate:g} requests/s, {self.isl} prompt -> {self.osl} output tokens, "
            f"{self.requests} requests, seed {self.seed}"
        )


@dataclass(frozen=True)
class Trace:
    """The requests of a recorded trace, in arrival order (module docstring).

    ``kind``: the trace's format (``"azure"``, ``"mooncake"``, or any name for one built in code);
    ``source``: the file it was read from (its name); ``requests``: the requests, ids ``0 .. n - 1``,
    every ``arrival_s`` set and non-decreasing, the first at 0; ``scale``: the factor the recorded rate was
    multiplied by; ``limited``: True when ``limit`` stopped the reading before the file's end.
    """

    kind: str
    source: str
    requests: tuple[Request, ...]
    scale: float = 1.0
    limited: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "requests", tuple(self.requests))
        object.__setattr__(self, "scale", _positive("scale", self.scale))
        if not self.requests:
            raise ValueError(f"trace {self.source!r} has no requests")
        last = 0.0
        for i, r in enumerate(self.requests):
            if not isinstance(r, Request) or r.id != i or r.arrival_s is None or r.arrival_s < last:
                raise ValueError(
                    f"trace {self.source!r}: request {i} must be a Request with id {i} and an arrival_s >= "
                    f"the previous one's ({last}), got {r!r}"
                )
            last = r.arrival_s
        if self.requests[0].arrival_s != 0:
            raise ValueError(f"trace {self.source!r}: the first request must arrive at 0, got {self.requests[0]!r}")

    @property
    def closed(self) -> bool:
        return False

    @property
    def concurrency(self) -> None:
        return None

    @property
    def warmup(self) -> int:
        return 0

    def __len__(self) -> int:
        return len(self.requests)

    def __iter__(self) -> Iterator[Request]:
        return iter(self.requests)

    @property
    def span_s(self) -> float:
        """Seconds from the first arrival to the last."""
        last = self.requests[-1].arrival_s
        assert last is not None  # every request's arrival is set (__post_init__)
        return last

    @property
    def rate(self) -> float | None:
        """Mean arrival rate in requests per second over the span; None when every request arrives at 0."""
        return (len(self) - 1) / self.span_s if self.span_s > 0 else None

    @property
    def prompt_tokens(self) -> int:
        return sum(r.prompt_tokens for r in self.requests)

    @property
    def output_tokens(self) -> int:
        return sum(r.output_tokens for r in self.requests)

    def describe(self) -> str:
        n = len(self)
        rate = f"{self.rate:.3g} requests/s" if self.rate is not None else "all at 0 s"
        first = f"first {n} of " if self.limited else ""
        scaled = f", rate x{self.scale:g}" if self.scale != 1 else ""
        return (
            f"{self.kind} trace {first}{self.source}: {n} requests over {self.span_s:.1f} s ({rate}{scaled}), "
            f"mean {self.prompt_tokens / n:.0f} prompt -> {self.output_tokens / n:.0f} output tokens"
        )


# --- reading trace files ------------------------------------------------------------------------------


def _read(
    kind: str, reader: type[AzureRecords] | type[MooncakeRecords], path: object, scale: object, limit: object
) -> Trace:
    """The Trace of the file at ``path``: arrivals divided by ``scale``, at most ``limit`` requests, each
    record's time no earlier than the one before (a trace out of order is a TraceError, not sorted)."""
    scale = _positive("scale", scale)
    limit = None if limit is None else _count("limit", limit, 1)
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"path must be a file path, got {path!r}")
    name = os.fspath(path)
    requests: list[Request] = []
    previous = 0.0
    limited = False
    with open_trace(name, reader.newline) as handle:
        source = reader(name, handle)
        for number, raw in source.records():
            if len(requests) == limit:
                limited = True
                break
            seconds, prompt, output = source.parse(number, raw)  # type: ignore[arg-type]  # a record of its own
            if seconds < previous:
                raise TraceError(
                    f"{name}:{number}: {source.time_name} is {previous - seconds:g} s before the previous "
                    "row's: the trace must be in arrival order"
                )
            previous = seconds
            requests.append(Request(len(requests), seconds / scale, prompt, output))
    if not requests:
        raise TraceError(f"{name}: no requests (only a header or blank lines)")
    return Trace(kind, os.path.basename(name), tuple(requests), scale, limited)


def read_azure(path: str | os.PathLike[str], *, scale: float = 1.0, limit: int | None = None) -> Trace:
    """The Azure LLM inference trace 2023 at ``path`` (``AzureLLMInferenceTrace_code.csv`` or ``_conv.csv``
    of ``Azure/AzurePublicDataset``; CSV with the columns ``TIMESTAMP`` (``YYYY-MM-DD HH:MM:SS.fffffff``),
    ``ContextTokens`` and ``GeneratedTokens``, in any order, other columns ignored) as a ``Trace``:
    arrivals in seconds after the first row's, divided by ``scale``; the first ``limit`` rows when given."""
    return _read("azure", AzureRecords, path, scale, limit)


def read_mooncake(path: str | os.PathLike[str], *, scale: float = 1.0, limit: int | None = None) -> Trace:
    """A Mooncake trace at ``path`` (``FAST25-release/traces/*.jsonl`` of ``kvcache-ai/Mooncake``; one JSON
    object a line with ``timestamp`` (milliseconds), ``input_length`` and ``output_length``; ``hash_ids``
    and any other field are ignored) as a ``Trace``: arrivals in seconds after the first line's, divided by
    ``scale``; the first ``limit`` lines when given."""
    return _read("mooncake", MooncakeRecords, path, scale, limit)
