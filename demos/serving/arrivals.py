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
  measured ones, every one ``isl`` prompt tokens and ``osl`` output tokens;
* ``Poisson(rate, isl, osl, requests, seed=0)``: open loop, exponential gaps at ``rate`` requests per second
  (the first request at 0), the same arrivals for the same seed;
* ``Trace``: the requests of a recorded trace, read by ``read_azure`` (Azure LLM inference trace 2023, CSV
  ``TIMESTAMP,ContextTokens,GeneratedTokens``) or ``read_mooncake`` (Mooncake's FAST'25 traces, JSON lines
  with ``timestamp`` in milliseconds, ``input_length``, ``output_length``). Arrivals are relative to the
  first request; ``scale`` multiplies the rate (divides every gap); ``limit`` keeps the first requests.

Bad input is a one-line ``ValueError``: a bad parameter names it; a bad file is a ``TraceError`` (a
``ValueError``) that names the file, and the line and the column or field at fault where there is one.
A trace file is read line by line, never whole; only its requests are kept.

Only the standard library and ``demos.serving.requests`` are imported here.
"""

from __future__ import annotations

import csv
import datetime
import json
import math
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Protocol, runtime_checkable

from demos.serving.requests import Request

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
]

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")  # arrival, prompt tokens, output tokens
MOONCAKE_FIELDS = ("timestamp", "input_length", "output_length")  # milliseconds, prompt tokens, output tokens


class TraceError(ValueError):
    """A trace file that cannot be read as a trace: the message names the file (and the line, the column)."""


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


@dataclass(frozen=True)
class ClosedLoop:
    """``concurrency`` clients, each sending its next request when its previous one finishes (module
    docstring). Yields ``warmup + requests`` requests of ``isl`` prompt and ``osl`` output tokens with
    ``arrival_s=None``; the first ``warmup`` are warm-up. The run sends the first ``concurrency`` at once."""

    concurrency: int
    isl: int
    osl: int
    requests: int
    warmup: int = 0

    def __post_init__(self) -> None:
        for name in ("concurrency", "isl", "osl", "requests"):
            _count(name, getattr(self, name), 1)
        _count("warmup", self.warmup, 0)

    @property
    def closed(self) -> bool:
        return True

    def __len__(self) -> int:
        return self.warmup + self.requests

    def __iter__(self) -> Iterator[Request]:
        for i in range(len(self)):
            yield Request(i, None, self.isl, self.osl)

    def describe(self) -> str:
        warm = f" after {self.warmup} warm-up" if self.warmup else ""
        return (
            f"closed loop: {self.concurrency} clients, {self.isl} prompt -> {self.osl} output tokens, "
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


def _open(path: str | os.PathLike[str], newline: str | None = None) -> IO[str]:
    """The file opened for reading as UTF-8 text (a leading byte-order mark dropped), or a one-line TraceError."""
    try:
        return open(path, encoding="utf-8-sig", newline=newline)
    except FileNotFoundError:
        raise TraceError(f"{os.fspath(path)}: no such file") from None
    except IsADirectoryError:
        raise TraceError(f"{os.fspath(path)}: is a folder, not a trace file") from None
    except OSError as e:
        raise TraceError(f"{os.fspath(path)}: cannot be read ({e.strerror or e})") from None


def _tokens(raw: object, field: str, name: str, number: int) -> int:
    """A token count: a whole number >= 1, digits in a CSV field (``str``) or a JSON integer (``int``);
    else a TraceError at the file ``name``'s line ``number``. A JSON reader refuses a string before it
    calls this."""
    if isinstance(raw, str):
        text = raw.strip()
        if text.isdecimal() and text.isascii() and (value := int(text)) >= 1:
            return value
    elif isinstance(raw, int) and not isinstance(raw, bool) and raw >= 1:
        return raw
    raise TraceError(f"{name}:{number}: {field} must be a whole number >= 1, got {raw!r}")


# A reader of one format splits its file into records, ``(line number, raw text)`` per request in file order,
# without reading their values (``records()``), and parses one into (seconds after the first record, prompt
# tokens, output tokens) (``parse(number, raw)``). Two steps so that a limit stops before the first record
# it leaves out is parsed: a bad row after the limit is no error.


class _Azure:
    """The records of an Azure LLM inference trace CSV (``read_azure``) and their parsing."""

    time_name = "TIMESTAMP"
    newline = ""  # the csv module reads line ends itself (a quoted field may hold one)

    def __init__(self, name: str, handle: IO[str]) -> None:
        self.name, self.handle = name, handle
        self.columns = (0, 1, 2)  # the positions of AZURE_COLUMNS in the header (records() reads them)
        self.width = 3  # the header's fields
        self.need = 3  # the fields a row needs: up to the last of AZURE_COLUMNS
        self.first: datetime.datetime | None = None  # the first row's whole second
        self.first_ns: int | None = None  # the first row's time, nanoseconds after its whole second
        self.head, self.head_ns = "", 0  # the last whole second parsed, nanoseconds after the first's

    def records(self) -> Iterator[tuple[int, list[str]]]:
        name = self.name
        reader = csv.reader(self.handle)
        try:
            header = next(reader, None)
            if header is None:
                raise TraceError(f"{name}: empty file (expected the header {','.join(AZURE_COLUMNS)})")
            header = [h.strip() for h in header]
            for column in AZURE_COLUMNS:
                if column not in header:
                    raise TraceError(f"{name}: no column {column!r} (the header is {','.join(header)!r})")
            self.columns = tuple(header.index(c) for c in AZURE_COLUMNS)
            self.width, self.need = len(header), max(self.columns) + 1
            for row in reader:
                if row and (len(row) > 1 or row[0].strip()):  # not a blank line
                    yield reader.line_num, row
        except csv.Error as e:
            raise TraceError(f"{name}:{reader.line_num}: not CSV ({e})") from None
        except UnicodeDecodeError as e:
            raise TraceError(f"{name}: not UTF-8 text ({e.reason} at byte {e.start})") from None

    def nanoseconds(self, raw: str, number: int) -> int:
        """``YYYY-MM-DD HH:MM:SS[.fraction]`` as whole nanoseconds after the first row's whole second, so
        that a gap is exact before its one division to seconds (the published files write seven digits of
        fraction, the last always 0; fractions subtracted as floats come out 0.051999... for 0.052); else a
        TraceError. A whole second is parsed once for the rows that share it."""
        head, dot, fraction = raw.strip().partition(".")
        if head != self.head:
            try:
                whole = datetime.datetime.fromisoformat(head)
            except ValueError:
                whole = None
            if whole is None or whole.tzinfo is not None:
                raise TraceError(
                    f"{self.name}:{number}: TIMESTAMP must be a date and time without a time zone "
                    f"(YYYY-MM-DD HH:MM:SS.fff), got {raw!r}"
                )
            if self.first is None:
                self.first = whole
            delta = whole - self.first
            self.head, self.head_ns = head, (delta.days * 86400 + delta.seconds) * 10**9
        if not dot:
            return self.head_ns
        if not (fraction.isdecimal() and fraction.isascii()):
            raise TraceError(f"{self.name}:{number}: TIMESTAMP's fraction of a second must be digits, got {raw!r}")
        return self.head_ns + int(fraction[:9].ljust(9, "0"))

    def parse(self, number: int, row: list[str]) -> tuple[float, int, int]:
        i_time, i_prompt, i_output = self.columns
        if len(row) < self.need:
            raise TraceError(f"{self.name}:{number}: {len(row)} fields, the header has {self.width}")
        ns = self.nanoseconds(row[i_time], number)
        if self.first_ns is None:
            self.first_ns = ns
        prompt, output = row[i_prompt], row[i_output]
        if prompt.isdecimal() and output.isdecimal() and int(prompt) and int(output):  # the common row, fast
            return (ns - self.first_ns) / 1e9, int(prompt), int(output)
        return (
            (ns - self.first_ns) / 1e9,
            _tokens(prompt, "ContextTokens", self.name, number),
            _tokens(output, "GeneratedTokens", self.name, number),
        )


class _Mooncake:
    """The records of a Mooncake JSON-lines trace (``read_mooncake``) and their parsing."""

    time_name = "timestamp"
    newline = None

    def __init__(self, name: str, handle: IO[str]) -> None:
        self.name, self.handle = name, handle
        self.first: float | None = None  # the first line's timestamp, milliseconds

    def records(self) -> Iterator[tuple[int, str]]:
        number = 0
        try:
            for number, line in enumerate(self.handle, 1):
                if line.strip():
                    yield number, line
        except UnicodeDecodeError as e:
            raise TraceError(f"{self.name}:{number + 1}: not UTF-8 text ({e.reason})") from None

    def parse(self, number: int, line: str) -> tuple[float, int, int]:
        where = f"{self.name}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise TraceError(f"{where}: not a JSON object ({e.msg} at column {e.colno})") from None
        if not isinstance(record, dict):
            raise TraceError(f"{where}: not a JSON object, got {type(record).__name__}")
        for field in MOONCAKE_FIELDS:
            if field not in record:
                raise TraceError(f"{where}: no field {field!r} (the line has {', '.join(map(repr, record))})")
        ms = record["timestamp"]
        if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not (0 <= ms < math.inf):
            raise TraceError(f"{where}: timestamp must be a number of milliseconds >= 0, got {ms!r}")
        if self.first is None:
            self.first = ms
        prompt, output = record["input_length"], record["output_length"]
        for field, value in (("input_length", prompt), ("output_length", output)):
            if isinstance(value, str):  # a JSON integer, not text
                raise TraceError(f"{where}: {field} must be a whole number >= 1, got {value!r}")
        return (
            (ms - self.first) / 1000.0,
            _tokens(prompt, "input_length", self.name, number),
            _tokens(output, "output_length", self.name, number),
        )


def _read(kind: str, reader: type[_Azure] | type[_Mooncake], path: object, scale: object, limit: object) -> Trace:
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
    with _open(name, reader.newline) as handle:
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
    return _read("azure", _Azure, path, scale, limit)


def read_mooncake(path: str | os.PathLike[str], *, scale: float = 1.0, limit: int | None = None) -> Trace:
    """A Mooncake trace at ``path`` (``FAST25-release/traces/*.jsonl`` of ``kvcache-ai/Mooncake``; one JSON
    object a line with ``timestamp`` (milliseconds), ``input_length`` and ``output_length``; ``hash_ids``
    and any other field are ignored) as a ``Trace``: arrivals in seconds after the first line's, divided by
    ``scale``; the first ``limit`` lines when given."""
    return _read("mooncake", _Mooncake, path, scale, limit)
