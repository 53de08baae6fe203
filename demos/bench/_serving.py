"""The serving section's measurements (``demos.serving``): a closed-loop row end to end, cold and warm; the
Azure conversation trace on 8 data-parallel ranks; the loop's cost against its steps; the step-time grid's
interpolation error against direct predictor runs. The section's text is ``section_serving``'s docstring
(``demos.bench._suite``).
"""

from __future__ import annotations

import datetime
import gc
import os
import statistics
import tempfile
import time
from typing import Any, Callable

from demos.bench._core import Config, progress, samples_timing, timing_record, value_record
from demos.bench._report import Record

SECTION = "serving"

ROW = dict(
    engine="trtllm",
    concurrency=32,
    isl=1024,
    osl=1024,
    requests=64,
    warmup=32,
    overlap="none",
    search=False,
    gpu="h200",
    nodes=1,
    gpus_per_node=8,
    ep=8,
    attention_tp=1,
)
"""The closed-loop row: aiconfigurator's silicon row ``2026_03_25_deepseek_r1_h200_sxm_trtllm_fp8_agg_1024x1024_
c256_tp8_0_ep8_0_1259`` (DeepSeek-R1 FP8 on 8 x H200, EP 8 with DP attention, TRT-LLM, 1024 -> 1024 tokens at
concurrency 32) as ``python -m demos.validate serving --quick`` simulates it (``demos.fidelity.serving``:
2C measured after C warm-up, no overlap)."""
ROW_MODEL = "deepseek-r1"

TRACE_ENV = "DBO_AZURE_CONV_TRACE"
"""The environment variable the bench reads the full Azure conversation trace's path from (``--azure-trace``
sets it on the command line)."""
TRACE_REQUESTS = 19_366
TRACE_RATE = 5.5301364152832795
"""The full ``AzureLLMInferenceTrace_conv.csv``: its requests and mean rate (19,365 gaps over 3,501.7 s;
demos/serving/data/README.md)."""
TRACE_DEPLOYMENT = dict(engine="vllm", gpu="h200", nodes=1, ep=8, overlap="none", search=False)
"""DeepSeek-V3 on 8 x H200, EP 8: 8 data-parallel ranks under vLLM's scheduler, no overlap (one run)."""


_cpu: list[float] = []  # the process CPU seconds of each _timed call, in order (the machine may be shared)


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """``fn()``'s wall seconds and result; its CPU seconds appended to ``_cpu``."""
    gc.collect()
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn()
    wall = time.perf_counter() - t0
    _cpu.append(time.process_time() - c0)
    return wall, out


def _cpu_record(name: str, cpu: list[float]) -> Record:
    return value_record(SECTION, f"{name}, CPU", statistics.median(cpu), "s")


def _seconds_record(name: str, samples: list[float], target: float | None = None) -> Record:
    t = samples_timing(samples)
    rec = {**timing_record(SECTION, name, t), "unit": "s"}
    rec.update(value=t.median, min=t.min, max=t.max)
    if target is not None:
        rec.update(target=f"< {target:g}", ok=t.median < target)
    return rec


def row_records(cfg: Config) -> list[Record]:
    """(a) The closed-loop row end to end (``simulate``, imports excluded): cold (a fresh step pricer: the
    model, the pricer's setup and every grid point run) and warm (the pricer of the first run reused: the
    loop and its pricing only), each against the 0.5 s target, and each's process CPU time; the grid points
    and what share of the cold run the difference (grid and setup) is."""
    from demos.serving.api import simulate

    n_cold, n_warm = _repeats(cfg)
    cold, warm, pricers = [], [], {}
    for i in range(n_cold):
        progress(f"serving: closed-loop row, cold {i + 1}/{n_cold}")
        pricers = {}
        s, run = _timed(lambda: simulate(ROW_MODEL, pricers=pricers, **ROW))
        cold.append(s)
    cold_cpu = _cpu[-n_cold:]
    points = run.pricer["grid_points"]
    steps = len(run._raw["none"][1].ends)
    for i in range(n_warm):
        progress(f"serving: closed-loop row, warm {i + 1}/{n_warm}")
        warm.append(_timed(lambda: simulate(ROW_MODEL, pricers=pricers, **ROW))[0])
    warm_cpu = _cpu[-n_warm:]
    what = "(a) DeepSeek-R1 8 x H200, C32 1024/1024"
    c, w = statistics.median(cold), statistics.median(warm)
    return [
        _seconds_record(f"{what}: cold (grid computed)", cold, 0.5),
        _cpu_record("(a) cold", cold_cpu),
        _seconds_record(f"{what}: warm (pricer reused)", warm, 0.5),
        _cpu_record("(a) warm", warm_cpu),
        value_record(SECTION, "(a) steps", steps, "count"),
        value_record(SECTION, "(a) grid points run", points, "count"),
        value_record(SECTION, "(a) share of cold not in the loop (grid, setup)", (c - w) / c, "ratio"),
        value_record(SECTION, "(a) warm, per step", 1e6 * w / steps, "us/step"),
    ]


def _repeats(cfg: Config) -> tuple[int, int]:
    """How many cold and warm runs of the row (``--quick``: fewer)."""
    return (1, 3) if cfg.quick else (3, 5)


def scaling_records(cfg: Config) -> list[Record]:
    """(c) The loop's cost against its steps: the row without warm-up at N = 64 and 2N = 128 measured
    requests (2 and 4 cohorts of 32: twice the steps), warm (the grid computed first), interleaved: the steps'
    ratio, the time's, and the time per step's (wall: target <= 1.15; and CPU)."""
    from demos.serving.api import simulate

    pricers: dict = {}
    simulate(ROW_MODEL, pricers=pricers, **dict(ROW, requests=64, warmup=0))
    n_warm = _repeats(cfg)[1]
    sizes = {n: dict(ROW, requests=n, warmup=0) for n in (64, 128)}
    times: dict[int, list[float]] = {n: [] for n in sizes}
    cpu: dict[int, list[float]] = {n: [] for n in sizes}
    count: dict[int, int] = {}
    for i in range(n_warm):
        progress(f"serving: N and 2N requests, repeat {i + 1}/{n_warm}")
        for n, kw in sizes.items():
            s, r = _timed(lambda kw=kw: simulate(ROW_MODEL, pricers=pricers, **kw))
            times[n].append(s)
            cpu[n].append(_cpu[-1])
            count[n] = len(r._raw["none"][1].ends)
    t1, t2 = statistics.median(times[64]), statistics.median(times[128])
    per_step = (t2 / count[128]) / (t1 / count[64])
    per_step_cpu = (statistics.median(cpu[128]) / count[128]) / (statistics.median(cpu[64]) / count[64])
    return [
        _seconds_record("(c) N = 64 requests, warm", times[64]),
        _seconds_record("(c) 2N = 128 requests, warm", times[128]),
        value_record(SECTION, "(c) 2N / N: steps", count[128] / count[64], "ratio"),
        value_record(SECTION, "(c) 2N / N: wall time", t2 / t1, "ratio"),
        value_record(SECTION, "(c) 2N / N: wall time per step", per_step, "ratio", "<= 1.15"),
        value_record(SECTION, "(c) 2N / N: CPU time per step", per_step_cpu, "ratio"),
    ]


def _replicated_head(folder: str) -> tuple[str, float]:
    """The shipped head of the Azure conversation trace (300 requests) repeated, each copy one head's span
    plus its mean gap after the last, to ``TRACE_REQUESTS`` requests, written as an Azure CSV in ``folder``
    (read back by the same reader as the full trace); and the scale that brings its rate to ``TRACE_RATE``."""
    from demos.serving import arrivals

    head = arrivals.read_azure(os.path.join(os.path.dirname(arrivals.__file__), "data", "azure_conv_head.csv"))
    period = head.span_s * len(head) / (len(head) - 1)
    start = datetime.datetime(2023, 11, 16)
    path = os.path.join(folder, "azure_conv_head_repeated.csv")
    with open(path, "w", encoding="utf-8") as f:
        f.write(",".join(arrivals.AZURE_COLUMNS) + "\n")
        for i in range(TRACE_REQUESTS):
            r = head.requests[i % len(head)]
            at = start + datetime.timedelta(seconds=(i // len(head)) * period + r.arrival_s)
            f.write(f"{at:%Y-%m-%d %H:%M:%S.%f}0,{r.prompt_tokens},{r.output_tokens}\n")
    return path, TRACE_RATE / head.rate


def trace_records(cfg: Config) -> list[Record]:
    """(b) The Azure conversation trace on DeepSeek-V3's 8 data-parallel ranks (``TRACE_DEPLOYMENT``): one
    run, no overlap, cold and warm, each against the 30 s target (and each's CPU time), with its steps and
    grid points. The full
    trace where ``cfg.azure_trace`` names it; else the shipped head repeated to its request count and
    scaled to its rate (``_replicated_head``), named so in the records. ``--quick``: the first 2,000
    requests."""
    from demos.serving.api import simulate

    limit = 2_000 if cfg.quick else None
    with tempfile.TemporaryDirectory(prefix="bench-serving-") as tmp:
        if cfg.azure_trace:
            path, scale, label = cfg.azure_trace, None, "Azure conv trace"
        else:
            path, scale = _replicated_head(tmp)
            label = "shipped Azure conv head, repeated"
        pricers: dict = {}
        kw = dict(TRACE_DEPLOYMENT, trace=path, rate=scale, requests=limit, pricers=pricers)
        progress(f"serving: {label}, cold")
        cold, run = _timed(lambda: simulate("deepseek-v3", **kw))
        progress(f"serving: {label}, warm")
        warm, _ = _timed(lambda: simulate("deepseek-v3", **kw))
        cold_cpu, warm_cpu = _cpu[-2:]
    n = run.runs[0].requests
    steps = len(run._raw["none"][1].ends)
    what = f"(b) {label}, {n:,} requests"
    return [
        _seconds_record(f"{what}: cold (grid computed)", [cold], 30.0),
        _cpu_record("(b) cold", [cold_cpu]),
        _seconds_record(f"{what}: warm (pricer reused)", [warm], 30.0),
        _cpu_record("(b) warm", [warm_cpu]),
        value_record(SECTION, "(b) steps", steps, "count"),
        value_record(SECTION, "(b) grid points run", run.pricer["grid_points"], "count"),
        value_record(SECTION, "(b) share of cold not in the loop (grid, setup)", (cold - warm) / cold, "ratio"),
        value_record(SECTION, "(b) warm, per step", 1e6 * warm / steps, "us/step"),
    ]


INTERPOLATION_CASES = (
    ("DeepSeek-V3 8 x H200", "deepseek-v3", dict(gpu="h200", nodes=1, ep=8)),
    ("Qwen3-30B-A3B 8 x H100", "qwen3-30b-a3b", dict(gpu="h100", nodes=1, ep=8)),
)
DECODE_SAMPLES = ((5, 1536), (10, 3000), (20, 1536), (40, 700), (80, 3000), (160, 1536))
"""(tokens per rank, context): each between grid points in both (tokens 4-6, 8-12, ...; contexts between
powers of two), decode replayed from a CUDA graph."""
PREFILL_SAMPLES = ((640, 640), (1280, 1280), (2560, 2560), (5120, 3000), (10240, 1536))
"""(tokens, context: the mean end of the step's prompts): between grid points in both, eager."""


def interpolation_records(cfg: Config) -> list[Record]:
    """(d) The step-time grid's interpolation against direct predictor runs (``StepPricer.
    interpolation_error``): the plain step at points between grid points in tokens and context, decode
    (graph) and prefill (eager), for each of ``INTERPOLATION_CASES``: median and largest |error|."""
    from demos.serving.step_times import StepPricer
    from demos.vocabulary import Mode, Phase
    from demos.zoo.loading import load_model, workload_for

    out: list[Record] = []
    per = 2 if cfg.quick else None
    for label, model, where in INTERPOLATION_CASES:
        base = workload_for(
            load_model(model),
            phase=Phase.DECODE,
            context=2048,
            imbalance="auto",
            comm_sms=None,
            schedule=None,
            tokens=64,
            ubatches=2,
            gpus_per_node=None,
            attention_tp=1,
            weights=None,
            kv_cache_dtype=None,
            **where,
        )
        pricer = StepPricer(base)
        for phase, mode, samples in (
            (Phase.DECODE, Mode.GRAPH, DECODE_SAMPLES),
            (Phase.PREFILL, Mode.EAGER, PREFILL_SAMPLES),
        ):
            progress(f"serving: interpolation, {label}, {phase}")
            err = pricer.interpolation_error([(phase, t, c, mode) for t, c in samples[:per]])
            name = f"(d) interpolation |error|, {label}, {phase} ({err['samples']} points)"
            out += [
                value_record(SECTION, f"{name}: median", 100 * err["median"], "%"),
                value_record(SECTION, f"{name}: max", 100 * err["max"], "%"),
            ]
    return out
