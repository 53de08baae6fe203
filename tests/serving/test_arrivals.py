"""Where a serving run's requests come from (demos/serving/arrivals.py): the closed loop's counts and
warm-up, the Poisson rate and its seed, both trace readers on the shipped samples (values read against
the files' text), scale and limit, and every bad input refused in one line that names what is wrong."""

from __future__ import annotations

import json
import math
from decimal import Decimal

import pytest

from demos.serving.arrivals import (
    ArrivalSource,
    ClosedLoop,
    Poisson,
    Trace,
    TraceError,
    read_azure,
    read_mooncake,
)
from demos.serving.requests import Request
from tests.support.paths import REPO

DATA = REPO / "demos" / "serving" / "data"
AZURE_CONV = DATA / "azure_conv_head.csv"
AZURE_CODE = DATA / "azure_code_head.csv"
MOONCAKE_CONV = DATA / "mooncake_conversation_head.jsonl"
MOONCAKE_SYNTH = DATA / "mooncake_synthetic_head.jsonl"


# --- the closed loop --------------------------------------------------------------------------------------


def test_a_closed_loop_sends_its_warmup_then_its_measured_requests():
    loop = ClosedLoop(concurrency=8, isl=1024, osl=128, requests=40, warmup=16)
    sent = list(loop)
    assert len(loop) == len(sent) == 56
    assert [r.id for r in sent] == list(range(56))
    assert all(r.arrival_s is None and (r.prompt_tokens, r.output_tokens) == (1024, 128) for r in sent)
    assert (loop.closed, loop.concurrency, loop.warmup) == (True, 8, 16)
    assert list(loop) == sent  # a value: the same requests every time
    assert loop.describe() == (
        "closed loop: 8 clients, 1024 prompt -> 128 output tokens, 40 requests measured after 16 warm-up"
    )


def test_a_closed_loop_without_warmup_sends_only_its_measured_requests():
    loop = ClosedLoop(4, 10, 2, 3)
    assert (len(loop), loop.warmup, [r.id for r in loop]) == (3, 0, [0, 1, 2])
    assert "warm-up" not in loop.describe()


def test_a_closed_loop_with_a_range_ratio_draws_each_requests_lengths_as_inferencexs_client_does():
    """``int(r x L) .. L``, both ends included (InferenceX's ``sample_random_requests``): 4,000 draws of 1,024 x 0.8
    reach 819 and 1,024 and average 921.5 within 1% (the uniform mean's standard error is 0.2% here); the same
    seed gives the same requests, another seed others; the first requests are still sent at once."""
    loop = ClosedLoop(16, 1024, 100, requests=4000, warmup=0, range_ratio=0.8, seed=7)
    sent = list(loop)
    prompts, outputs = [r.prompt_tokens for r in sent], [r.output_tokens for r in sent]
    assert (min(prompts), max(prompts), min(outputs), max(outputs)) == (819, 1024, 80, 100)
    assert sum(prompts) / len(prompts) == pytest.approx((819 + 1024) / 2, rel=0.01)
    assert sum(outputs) / len(outputs) == pytest.approx(90, rel=0.01)
    assert list(loop) == sent and list(ClosedLoop(16, 1024, 100, 4000, 0, range_ratio=0.8, seed=8)) != sent
    assert all(r.arrival_s is None for r in sent) and loop.closed
    assert loop.describe() == (
        "closed loop: 16 clients, 1024 prompt -> 100 output tokens (each drawn from 0.8x to 1x, seed 7), "
        "4000 requests measured"
    )


@pytest.mark.parametrize("ratio", [0, -0.5, 1.01, True, "0.8", math.nan])
def test_a_range_ratio_outside_zero_to_one_is_refused_in_one_line(ratio):
    with pytest.raises(ValueError, match=r"range_ratio must be a number in \(0, 1\]") as e:
        ClosedLoop(4, 10, 2, 3, range_ratio=ratio)
    assert "\n" not in str(e.value)


# --- Poisson ----------------------------------------------------------------------------------------------


def test_poisson_arrivals_keep_the_rate_and_are_exponential():
    """20,000 gaps at 4/s: the mean gap's standard error is 0.7% of it, so 3% is over four of them; an
    exponential gap's standard deviation equals its mean (a constant or uniform gap would not)."""
    source = Poisson(rate=4.0, isl=512, osl=64, requests=20_001, seed=3)
    arrivals = [r.arrival_s for r in source]
    assert arrivals[0] == 0.0
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    assert min(gaps) >= 0
    mean = sum(gaps) / len(gaps)
    sd = math.sqrt(sum((g - mean) ** 2 for g in gaps) / len(gaps))
    assert mean == pytest.approx(1 / 4.0, rel=0.03)
    assert sd / mean == pytest.approx(1.0, rel=0.05)
    assert (source.closed, source.concurrency, source.warmup, len(source)) == (False, None, 0, 20_001)


def test_poisson_is_deterministic_for_a_seed():
    one = list(Poisson(2.0, 100, 10, 50, seed=7))
    assert one == list(Poisson(2.0, 100, 10, 50, seed=7))
    assert one != list(Poisson(2.0, 100, 10, 50, seed=8))
    assert [r.id for r in one] == list(range(50))
    assert all((r.prompt_tokens, r.output_tokens) == (100, 10) for r in one)
    assert Poisson(2.5, 100, 10, 50).describe() == (
        "Poisson arrivals: 2.5 requests/s, 100 prompt -> 10 output tokens, 50 requests, seed 0"
    )


# --- the trace readers, on the shipped samples -----------------------------------------------------------


def _azure_text_rows(path):
    """(seconds of the day as a Decimal, context, generated) of each data line, read from the text."""
    rows = []
    for line in path.read_bytes().decode().split("\r\n")[1:]:
        if line:
            stamp, context, generated = line.split(",")
            h, m, s = stamp.split(" ")[1].split(":")
            rows.append((int(h) * 3600 + int(m) * 60 + Decimal(s), int(context), int(generated)))
    return rows


@pytest.mark.parametrize("path", [AZURE_CONV, AZURE_CODE], ids=lambda p: p.name)
def test_read_azure_gives_the_files_rows_in_seconds_after_the_first(path):
    text = _azure_text_rows(path)
    trace = read_azure(path)
    assert len(trace) == len(text) == 300
    assert (trace.kind, trace.source, trace.scale, trace.limited) == ("azure", path.name, 1.0, False)
    assert (trace.closed, trace.concurrency, trace.warmup) == (False, None, 0)
    for request, (seconds, context, generated) in zip(trace, text):
        assert request.arrival_s == pytest.approx(float(seconds - text[0][0]), abs=1e-9)
        assert (request.prompt_tokens, request.output_tokens) == (context, generated)
    assert [r.id for r in trace] == list(range(300))
    assert trace.prompt_tokens == sum(c for _, c, _ in text)
    assert trace.output_tokens == sum(g for _, _, g in text)


def test_the_azure_conv_samples_first_rows_as_written():
    """Its first lines: 18:15:46.6805900,374,44 / 18:15:50.9951690,396,109 / 18:15:51.2224670,879,55."""
    first = list(read_azure(AZURE_CONV))[:3]
    assert first[0] == Request(0, 0.0, 374, 44)
    assert (first[1].prompt_tokens, first[1].output_tokens, first[2].prompt_tokens) == (396, 109, 879)
    assert first[1].arrival_s == pytest.approx(4.314579, abs=1e-12)  # 50.9951690 - 46.6805900, exact
    assert first[2].arrival_s == pytest.approx(4.541877, abs=1e-12)


@pytest.mark.parametrize("path", [MOONCAKE_CONV, MOONCAKE_SYNTH], ids=lambda p: p.name)
def test_read_mooncake_gives_the_files_lines_in_seconds_after_the_first(path):
    text = [json.loads(line) for line in path.read_text().splitlines()]
    trace = read_mooncake(path)
    assert len(trace) == len(text) == 100
    assert (trace.kind, trace.source, trace.limited) == ("mooncake", path.name, False)
    for request, record in zip(trace, text):
        assert request.arrival_s == pytest.approx((record["timestamp"] - text[0]["timestamp"]) / 1000)
        assert (request.prompt_tokens, request.output_tokens) == (record["input_length"], record["output_length"])


def test_the_mooncake_conversation_samples_first_lines_as_written():
    """Its first line: timestamp 0, input_length 6758, output_length 500; line 11 arrives at 3000 ms."""
    trace = read_mooncake(MOONCAKE_CONV)
    assert trace.requests[0] == Request(0, 0.0, 6758, 500)
    assert trace.requests[10].arrival_s == 3.0


@pytest.mark.parametrize("read, path", [(read_azure, AZURE_CONV), (read_mooncake, MOONCAKE_SYNTH)])
def test_scale_multiplies_the_rate_and_halves_the_gaps(read, path):
    base, doubled = read(path), read(path, scale=2.0)
    assert doubled.scale == 2.0
    assert [r.arrival_s for r in doubled] == pytest.approx([r.arrival_s / 2 for r in base])
    assert [(r.prompt_tokens, r.output_tokens) for r in doubled] == [(r.prompt_tokens, r.output_tokens) for r in base]
    assert doubled.span_s == pytest.approx(base.span_s / 2)
    assert doubled.rate == pytest.approx(base.rate * 2)
    assert "rate x2" in doubled.describe()


@pytest.mark.parametrize("read, path", [(read_azure, AZURE_CODE), (read_mooncake, MOONCAKE_CONV)])
def test_limit_keeps_the_first_requests(read, path):
    full, first = read(path), read(path, limit=5)
    assert first.requests == full.requests[:5]
    assert first.limited and not full.limited
    assert first.describe().startswith(f"{first.kind} trace first 5 of {path.name}: 5 requests")
    assert not read(path, limit=len(full)).limited  # the limit reached exactly at the file's end


def test_a_trace_all_at_once_has_no_rate():
    trace = Trace("test", "made here", (Request(0, 0.0, 3, 4), Request(1, 0.0, 5, 6)))
    assert (trace.span_s, trace.rate, trace.prompt_tokens, trace.output_tokens) == (0.0, None, 8, 10)
    assert (
        trace.describe() == "test trace made here: 2 requests over 0.0 s (all at 0 s), mean 4 prompt -> 5 output tokens"
    )


def test_a_trace_is_an_arrival_source_like_the_others():
    for source in (ClosedLoop(2, 8, 8, 4), Poisson(1.0, 8, 8, 4), read_azure(AZURE_CONV, limit=4)):
        assert isinstance(source, ArrivalSource)
        assert len(list(source)) == len(source) == 4
        assert "\n" not in source.describe()


def test_a_limit_stops_before_a_bad_row(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00,5,6\n2023-11-16 18:00:01,x,6\n")
    assert len(read_azure(path, limit=1)) == 1
    with pytest.raises(TraceError, match=r"t\.csv:3: ContextTokens"):
        read_azure(path)


def test_columns_in_another_order_and_extra_columns_are_read(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(
        "GeneratedTokens,Model,TIMESTAMP,ContextTokens\n7,a,2023-11-16 18:00:00,5\n\n9,b,2023-11-16 18:00:02.5,3\n"
    )
    assert read_azure(path).requests == (Request(0, 0.0, 5, 7), Request(1, 2.5, 3, 9))


# --- bad input: one line that names what is wrong ---------------------------------------------------------

HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
ROW = "2023-11-16 18:15:46.6805900,374,44\n"


def _jsonl(*records: dict) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


MOONCAKE = {"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [0]}

BAD_FILES = [
    # (name, reader, file text (None: no file), what the message must say after the file's name)
    ("missing file", read_azure, None, "no such file"),
    ("empty csv", read_azure, "", "empty file"),
    ("header only", read_azure, HEADER, "no requests"),
    ("missing column", read_azure, "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,374\n", "no column 'GeneratedTokens'"),
    ("non-numeric tokens", read_azure, HEADER + ROW + "2023-11-16 18:15:47,abc,44\n", ":3: ContextTokens"),
    ("negative tokens", read_azure, HEADER + ROW + "2023-11-16 18:15:47,374,-4\n", ":3: GeneratedTokens"),
    ("zero tokens", read_azure, HEADER + "2023-11-16 18:15:47,0,4\n", ":2: ContextTokens must be a whole number >= 1"),
    ("fractional tokens", read_azure, HEADER + "2023-11-16 18:15:47,3.5,4\n", ":2: ContextTokens"),
    ("bad timestamp", read_azure, HEADER + "yesterday,3,4\n", ":2: TIMESTAMP must be a date and time"),
    ("bad fraction", read_azure, HEADER + "2023-11-16 18:15:47.5x,3,4\n", ":2: TIMESTAMP's fraction"),
    ("time zone", read_azure, HEADER + "2023-11-16 18:15:47+01:00,3,4\n", ":2: TIMESTAMP must be"),
    ("short row", read_azure, HEADER + ROW + "2023-11-16 18:15:47,3\n", ":3: 2 fields, the header has 3"),
    ("out of order", read_azure, HEADER + ROW + "2023-11-16 18:15:40,3,4\n", ":3: TIMESTAMP is 6.68059 s before"),
    ("not utf-8", read_azure, b"TIMESTAMP,ContextTokens,GeneratedTokens\n\xff\xfe,1,2\n", "not UTF-8"),
    ("empty jsonl", read_mooncake, "", "no requests"),
    ("not json", read_mooncake, _jsonl(MOONCAKE) + "{timestamp: 1}\n", ":2: not a JSON object"),
    ("json list", read_mooncake, "[1, 2]\n", ":1: not a JSON object, got list"),
    ("missing field", read_mooncake, '{"timestamp": 0, "input_length": 10}\n', ":1: no field 'output_length'"),
    ("negative timestamp", read_mooncake, _jsonl({**MOONCAKE, "timestamp": -3}), ":1: timestamp must be"),
    ("string timestamp", read_mooncake, _jsonl({**MOONCAKE, "timestamp": "3"}), ":1: timestamp must be"),
    ("nan timestamp", read_mooncake, _jsonl({**MOONCAKE, "timestamp": math.nan}), ":1: timestamp must be"),
    ("negative length", read_mooncake, _jsonl(MOONCAKE, {**MOONCAKE, "input_length": -1}), ":2: input_length"),
    ("string length", read_mooncake, _jsonl({**MOONCAKE, "input_length": "12"}), ":1: input_length"),
    ("bool length", read_mooncake, _jsonl({**MOONCAKE, "output_length": True}), ":1: output_length"),
    ("float length", read_mooncake, _jsonl({**MOONCAKE, "output_length": 2.0}), ":1: output_length"),
    ("jsonl out of order", read_mooncake, _jsonl({**MOONCAKE, "timestamp": 9}, MOONCAKE), ":2: timestamp is 0.009 s"),
]


@pytest.mark.parametrize("reader, text, says", [b[1:] for b in BAD_FILES], ids=[b[0] for b in BAD_FILES])
def test_a_bad_file_is_one_line_naming_the_file_and_what_is_wrong(tmp_path, reader, text, says):
    path = tmp_path / "trace.file"
    if isinstance(text, bytes):
        path.write_bytes(text)
    elif text is not None:
        path.write_text(text)
    with pytest.raises(TraceError) as caught:
        reader(path)
    message = str(caught.value)
    assert isinstance(caught.value, ValueError)
    assert "\n" not in message
    assert message.startswith(str(path)), message
    assert says in message, message


def test_a_folder_is_not_a_trace(tmp_path):
    with pytest.raises(TraceError, match="is a folder"):
        read_mooncake(tmp_path)


BAD_PARAMETERS = [
    (lambda: ClosedLoop(0, 1, 1, 1), "concurrency must be an integer >= 1, got 0"),
    (lambda: ClosedLoop(1, 0, 1, 1), "isl must be an integer >= 1, got 0"),
    (lambda: ClosedLoop(1, 1, -2, 1), "osl must be an integer >= 1, got -2"),
    (lambda: ClosedLoop(1, 1, 1, 0), "requests must be an integer >= 1, got 0"),
    (lambda: ClosedLoop(1, 1, 1, 1, warmup=-1), "warmup must be an integer >= 0, got -1"),
    (lambda: ClosedLoop(2.0, 1, 1, 1), "concurrency must be an integer >= 1, got 2.0"),
    (lambda: ClosedLoop(True, 1, 1, 1), "concurrency must be an integer >= 1, got True"),
    (lambda: Poisson(0, 1, 1, 1), "rate must be a finite number > 0, got 0"),
    (lambda: Poisson(-1.0, 1, 1, 1), "rate must be a finite number > 0, got -1.0"),
    (lambda: Poisson(math.inf, 1, 1, 1), "rate must be a finite number > 0, got inf"),
    (lambda: Poisson("2", 1, 1, 1), "rate must be a finite number > 0, got '2'"),
    (lambda: Poisson(1.0, 0, 1, 1), "isl must be an integer >= 1, got 0"),
    (lambda: Poisson(1.0, 1, 1, 0), "requests must be an integer >= 1, got 0"),
    (lambda: Poisson(1.0, 1, 1, 1, seed=-1), "seed must be an integer >= 0, got -1"),
    (lambda: read_azure(AZURE_CONV, scale=0), "scale must be a finite number > 0, got 0"),
    (lambda: read_mooncake(MOONCAKE_CONV, scale=math.nan), "scale must be a finite number > 0, got nan"),
    (lambda: read_azure(AZURE_CONV, limit=0), "limit must be an integer >= 1, got 0"),
    (lambda: read_mooncake(MOONCAKE_CONV, limit=2.5), "limit must be an integer >= 1, got 2.5"),
    (lambda: read_azure(None), "path must be a file path, got None"),
    (lambda: Trace("x", "t", ()), "trace 't' has no requests"),
    (lambda: Trace("x", "t", (Request(0, 1.0, 1, 1),)), "the first request must arrive at 0"),
    (lambda: Trace("x", "t", (Request(0, 0.0, 1, 1), Request(1, None, 1, 1))), "request 1 must be a Request"),
    (lambda: Trace("x", "t", (Request(0, 2.0, 1, 1), Request(1, 1.0, 1, 1))), "request 1 must be a Request"),
]


@pytest.mark.parametrize(
    "make, says", BAD_PARAMETERS, ids=[b[1].split(" ")[0] + f"-{i}" for i, b in enumerate(BAD_PARAMETERS)]
)
def test_a_bad_parameter_is_one_line_naming_it(make, says):
    with pytest.raises(ValueError) as caught:
        make()
    assert "\n" not in str(caught.value)
    assert says in str(caught.value)
