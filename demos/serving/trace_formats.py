"""The two published request-trace formats, record by record (``demos.serving.arrivals`` reads them into a
``Trace``): Azure's LLM inference trace 2023, a CSV (``AzureRecords``), and Mooncake's FAST'25 traces, JSON
lines (``MooncakeRecords``). A file that cannot be read as one is a ``TraceError`` (a ``ValueError``) naming
the file, and the line and the column or field at fault where there is one.

Only the standard library is imported here.
"""

from __future__ import annotations

import csv
import datetime
import json
import math
import os
from collections.abc import Iterator
from typing import IO

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")  # arrival, prompt tokens, output tokens
MOONCAKE_FIELDS = ("timestamp", "input_length", "output_length")  # milliseconds, prompt tokens, output tokens


class TraceError(ValueError):
    """A trace file that cannot be read as a trace: the message names the file (and the line, the column)."""


def open_trace(path: str | os.PathLike[str], newline: str | None = None) -> IO[str]:
    """The file opened for reading as UTF-8 text (a leading byte-order mark dropped), or a one-line TraceError."""
    try:
        return open(path, encoding="utf-8-sig", newline=newline)
    except FileNotFoundError:
        raise TraceError(f"{os.fspath(path)}: no such file") from None
    except IsADirectoryError:
        raise TraceError(f"{os.fspath(path)}: is a folder, not a trace file") from None
    except OSError as e:
        raise TraceError(f"{os.fspath(path)}: cannot be read ({e.strerror or e})") from None


def token_count(raw: object, field: str, name: str, number: int) -> int:
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


class AzureRecords:
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
            token_count(prompt, "ContextTokens", self.name, number),
            token_count(output, "GeneratedTokens", self.name, number),
        )


class MooncakeRecords:
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
            token_count(prompt, "input_length", self.name, number),
            token_count(output, "output_length", self.name, number),
        )
