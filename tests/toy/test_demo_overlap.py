"""python -m demos.overlap: end to end, exact outputs, the reference's overlap patterns, and a
speedup that matches an independent simulation of the schedule on the virtual backend."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from dataclasses import replace

import pytest

from demos.overlap import ConfigError, OverlapConfig, main, run_overlap
from tests.support.paths import ROOT, python_env
from tests.support.timing import slack

REQUIRED_KEYS = {
    "backend",
    "schedule",
    "num_ubatches",
    "time_no_dbo_s",
    "time_dbo_s",
    "speedup",
    "bound_s",
    "hidden_fraction",
    "exact",
    "allocations_after_lock",
    "slot_sizes",
    "config",
    "tolerance",
}
SMALL = dict(layers=4, tokens=64, hidden=64, experts=4, topk=2, steps=1)


def small(**kw) -> OverlapConfig:
    return OverlapConfig(**{**SMALL, **kw})


# --- end to end -------------------------------------------------------------------------------------


@pytest.mark.parametrize("schedule", ["ll", "ht"])
@pytest.mark.parametrize("backend", ["virtual", "threads"])
def test_runs_end_to_end_with_exact_outputs(backend, schedule):
    rep = run_overlap(small(backend=backend, schedule=schedule, layers=2 if backend == "threads" else 4))
    assert REQUIRED_KEYS <= rep.keys()
    assert rep["backend"] == backend and rep["schedule"] == schedule and rep["num_ubatches"] == 2
    assert rep["exact"] == {"bitwise_equal": True, "max_abs_diff": 0.0}
    assert rep["allocations_after_lock"] == 0
    assert rep["workspace"]["grows"] == rep["workspace"]["grows_in_warmup"]
    sizes = rep["slot_sizes"]
    assert len(sizes) == 2 and sizes[0] == sizes[1] > 0
    assert rep["time_no_dbo_s"] > 0 and rep["time_dbo_s"] > 0
    assert rep["bound_s"] <= rep["time_dbo_s"] + 1e-12  # the ideal DBO step, from its own kernels
    assert any(set(line) & set("01") for line in rep["timeline"])
    json.dumps(rep)  # everything in the report is JSON


@pytest.mark.parametrize(
    "kw",
    [
        dict(tokens=37, ubatches=3),  # uneven split, three ubatches
        dict(tokens=24, experts=8, topk=3, hidden=32),  # experts with 1-3 rows (padded GEMM window)
        dict(stream_layout="shared", schedule="ll"),  # the non-default layout
        dict(stream_layout="shared", schedule="ht", shared_chunk=24),
    ],
)
def test_outputs_with_and_without_dbo_are_identical(kw):
    rep = run_overlap(small(backend="virtual", **kw))
    assert rep["exact"]["max_abs_diff"] == 0.0, rep["exact"]
    assert rep["allocations_after_lock"] == 0


@pytest.mark.slow
def test_subprocess_virtual_writes_json(tmp_path):
    out = tmp_path / "report.json"
    trace = tmp_path / "trace.json"
    cmd = [
        sys.executable,
        "-m",
        "demos.overlap",
        "--backend",
        "virtual",
        "--layers",
        "3",
        "--tokens",
        "32",
        "--hidden",
        "32",
        "--experts",
        "4",
        "--steps",
        "1",
        "--json",
        str(out),
        "--trace",
        str(trace),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=python_env(), capture_output=True, text=True, timeout=slack(60))
    assert proc.returncode == 0, proc.stderr
    assert "speedup" in proc.stdout and "timeline" in proc.stdout
    rep = json.loads(out.read_text())
    assert REQUIRED_KEYS <= rep.keys()
    assert rep["exact"]["max_abs_diff"] == 0.0 and rep["allocations_after_lock"] == 0
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e.get("cat") == "comm" for e in events) and any(e.get("cat") == "compute" for e in events)


def test_meta_tensors_skip_the_math():
    rep = run_overlap(small(backend="virtual", meta=True, hidden=512, experts=16, topk=4))
    assert rep["config"]["meta"] is True and rep["config"]["dtype"] == "bfloat16"
    assert rep["exact"] is None
    assert rep["speedup"] > 1.0 and rep["allocations_after_lock"] == 0


def test_comm_ratio_calibrates_the_link_on_virtual():
    for ratio in (0.5, 2.0):
        rep = run_overlap(small(backend="virtual", comm_ratio=ratio))
        assert rep["comm_ratio_measured"] == pytest.approx(ratio, rel=1e-9)


def test_explicit_link_is_used_as_given():
    rep = run_overlap(small(backend="virtual", link="ib400", profile="h200"))
    assert rep["calibration"] is None
    assert rep["link"]["bandwidth_Bps"] == 45e9 and rep["config"]["comm_ratio"] is None


# --- the reference's overlap patterns (virtual timeline) ----------------------------------------------


def _spans(records, op, layer, ubatch):
    """(start, end) of the kernels that declared one of ``op`` and ``layer``, owned by ``ubatch``."""
    ops = op if isinstance(op, tuple) else (op,)
    out = []
    for r in records:
        if r.op in ops and r.layer == layer and r.ubatch == ubatch and r.end > r.start:
            out.append((r.start, r.end))
    assert out, f"no {ops} kernels of layer {layer} ubatch {ubatch}"
    return out


def _intersect(a, b) -> bool:
    return any(max(s1, s2) < min(e1, e2) for s1, e1 in a for s2, e2 in b)


ATTN = ("attn_qkv", "attn_context", "attn_query", "attn_out", "router")


@pytest.mark.parametrize("layout", ["shared", "per-ubatch"])
def test_ll_overlap_pattern(layout):
    details = {}
    run_overlap(small(backend="virtual", schedule="ll", stream_layout=layout), details=details)
    recs = details["records_dbo"]
    for layer in range(SMALL["layers"]):
        d0, d1 = _spans(recs, "dispatch_ll", layer, 0), _spans(recs, "dispatch_ll", layer, 1)
        c0 = _spans(recs, "combine_ll", layer, 0)
        assert _intersect(d0, _spans(recs, ATTN, layer, 1)), "dispatch u0 must overlap attention u1"
        assert _intersect(d1, _spans(recs, "experts_ll", layer, 0)), "dispatch u1 must overlap experts u0"
        assert _intersect(c0, _spans(recs, "experts_ll", layer, 1)), "combine u0 must overlap experts u1"


@pytest.mark.parametrize("layout", ["shared", "per-ubatch"])
def test_ht_overlap_pattern(layout):
    details = {}
    run_overlap(small(backend="virtual", schedule="ht", stream_layout=layout), details=details)
    recs = details["records_dbo"]
    for layer in range(SMALL["layers"]):
        d0, d1 = _spans(recs, "dispatch", layer, 0), _spans(recs, "dispatch", layer, 1)
        c0, c1 = _spans(recs, "combine", layer, 0), _spans(recs, "combine", layer, 1)
        assert _intersect(d0, _spans(recs, ATTN, layer, 1)), "D0 ~ A(u1)"
        assert _intersect(d1, _spans(recs, "experts", layer, 0)), "D1 ~ E(u0)"
        assert _intersect(c0, _spans(recs, "experts", layer, 1)), "C0 ~ E(u1)"
        after = _spans(recs, "shared", layer, 1)
        if layer + 1 < SMALL["layers"]:
            after += _spans(recs, ATTN, layer + 1, 0)
        assert _intersect(c1, after), "C1 ~ S(u1) + next A(u0)"


# --- the measured speedup equals an independent simulation of the schedule -----------------------------


class _Sim:
    """A from-scratch model of the virtual device: streams run in order; a kernel starts when its
    stream is ready and its engine (one for compute, one for the link) has finished every kernel
    launched before it; an event is the stream's ready time when recorded."""

    def __init__(self, durations, kinds):
        self.dur, self.kinds = durations, kinds
        self.ready = defaultdict(float)
        self.engine = {"compute": 0.0, "comm": 0.0}
        self.used = set()

    def k(self, stream, name):
        start = max(self.ready[stream], self.engine[self.kinds[name]])
        self.ready[stream] = self.engine[self.kinds[name]] = start + self.dur[name]
        self.used.add(name)

    def record(self, stream):
        return self.ready[stream]

    def wait(self, stream, t):
        self.ready[stream] = max(self.ready[stream], t)

    def makespan(self):
        return max(self.ready.values())


def _simulate(records, schedule, layers, n, layout):
    """Replay vLLM's ll / ht yield schedule for n ubatches with the recorded
    per-kernel durations; return the step time."""
    dur = {r.name: r.duration for r in records}
    kinds = {r.name: r.kind for r in records}
    chunks = defaultdict(int)  # shared-expert chunks per ubatch (no DBO: the batch is ubatch 0)
    for r in records:
        if r.op == "shared" and r.layer == 0:
            chunks[0 if r.ubatch is None else r.ubatch] += 1
    sim = _Sim(dur, kinds)
    parked, exited = {}, [False] * n

    def name(op, layer, u, extra=""):
        return f"{op} L{layer} u{u}" + (f" {extra}" if extra else "")

    def C(u):
        return "C" if layout == "shared" else f"C{u}"

    def M(u):
        return "M" if layout == "shared" else f"M{u}"

    def park(u, hook):
        nxt = (u + 1) % n
        if n == 1 or exited[nxt]:
            hook()
        else:
            assert nxt not in parked
            parked[nxt] = hook

    def site(u):
        hook = parked.pop(u, None)
        if hook is not None:
            hook()

    def attention(u, layer):
        for op in ATTN:
            sim.k(C(u), name(op, layer, u))

    def send(u, op, layer):
        link = "L"  # the transport's one link queue
        sim.wait(link, sim.record(C(u)))
        sim.k(link, name(op, layer, u))
        arrived, stream = sim.record(link), C(u)

        def hook():
            sim.wait(stream, arrived)
            sim.k(stream, name(op + "_recv", layer, u))

        return hook

    def ll(u):
        sim.k(C(u), name("load_input", 0, u))
        for layer in range(layers):
            attention(u, layer)
            site(u)
            park(u, send(u, "dispatch", layer))
            yield
            sim.k(C(u), name("experts", layer, u))
            site(u)
            hook = send(u, "combine", layer)
            for c in range(chunks[u]):
                sim.k(C(u), name("shared", layer, u, f"c{c}"))
            park(u, hook)
            yield
            sim.k(C(u), name("finalize", layer, u))

    def ht(u):
        comm = M(u) if n > 1 else C(u)  # without DBO every dbo_* call is a no-op: one stream
        sim.k(C(u), name("load_input", 0, u))
        for layer in range(layers):
            attention(u, layer)
            done = sim.record(C(u))
            yield
            sim.wait(comm, done)
            sim.k(comm, name("dispatch", layer, u))
            sim.wait(C(u), sim.record(comm))
            sim.k(C(u), name("experts", layer, u))
            done = sim.record(C(u))
            yield
            sim.wait(comm, done)
            sim.k(comm, name("combine", layer, u))
            for c in range(chunks[u]):
                sim.k(C(u), name("shared", layer, u, f"c{c}"))
            sim.k(comm, name("moe_copy", layer, u))
            done = sim.record(comm)
            yield
            sim.wait(C(u), done)
            sim.k(C(u), name("finalize", layer, u))

    progs = [(ll if schedule == "ll" else ht)(u) for u in range(n)]
    u = 0
    while not all(exited):
        try:
            next(progs[u])
        except StopIteration:
            site(u)
            exited[u] = True
        live = [j for j in range(1, n + 1) if not exited[(u + j) % n]]
        if live:
            u = (u + live[0]) % n
    assert sim.used == set(dur), f"kernels the simulation did not replay: {sorted(set(dur) - sim.used)[:5]}"
    return sim.makespan()


@pytest.mark.parametrize(
    "schedule,layout,n",
    [
        ("ll", "shared", 2),
        ("ht", "shared", 2),
        ("ll", "per-ubatch", 2),
        ("ht", "per-ubatch", 2),
        ("ll", "shared", 3),
        ("ht", "shared", 3),
    ],
)
def test_virtual_speedup_matches_independent_simulation(schedule, layout, n):
    cfg = small(backend="virtual", schedule=schedule, stream_layout=layout, ubatches=n, comm_ratio=1.0)
    details = {}
    rep = run_overlap(cfg, details=details)
    t_no = _simulate(details["records_no_dbo"], schedule, cfg.layers, 1, layout)
    t_dbo = _simulate(details["records_dbo"], schedule, cfg.layers, n, layout)
    assert rep["time_no_dbo_s"] == pytest.approx(t_no, rel=1e-9)
    assert rep["time_dbo_s"] == pytest.approx(t_dbo, rel=1e-9)
    assert rep["speedup"] == pytest.approx(t_no / t_dbo, rel=1e-9)
    if n == 2:
        assert rep["speedup"] > 1.1


@pytest.mark.slow
def test_virtual_default_shapes_hide_most_of_the_hideable_time():
    rep = run_overlap(OverlapConfig(backend="virtual", steps=1))
    assert rep["comm_ratio_measured"] == pytest.approx(1.0, rel=1e-9)
    assert rep["hidden_fraction"] >= 0.95
    assert rep["speedup"] > 1.8


# --- the command line -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--tokens", "1", "--ubatches", "2"], "fewer than --ubatches"),
        (["--backend", "tpu"], "invalid choice"),
        (["--profile", "a100"], "unknown device profile"),
        (["--link", "carrier-pigeon"], "unknown link profile"),
        (["--hidden", "0"], "--hidden must be a positive integer"),
        (["--layers", "-3"], "--layers must be a positive integer"),
        (["--topk", "5", "--experts", "4"], "must not exceed --experts"),
        (["--comm-ratio", "0"], "--comm-ratio must be a positive number"),
        (["--meta", "--backend", "threads"], "only the virtual backend"),
        (["--steps", "x"], "invalid int value"),
    ],
)
def test_bad_arguments_exit_nonzero_with_one_line(argv, needle, capsys):
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert needle in err and "Traceback" not in err


@pytest.mark.parametrize(
    "kw,fields,flags",
    [
        (
            dict(tokens=1, ubatches=2),
            "tokens (1) is fewer than ubatches (2)",
            "--tokens (1) is fewer than --ubatches (2)",
        ),
        (dict(timeline_width=0), "timeline_width must be a positive integer", "--width must be a positive integer"),
        (dict(comm_ratio=-1.0), "comm_ratio must be a positive number", "--comm-ratio must be a positive number"),
        (dict(meta=True, backend="threads"), "add backend virtual", "add --backend virtual"),
    ],
)
def test_config_errors_name_fields_and_the_command_line_names_flags(kw, fields, flags):
    from demos.overlap import flag_of
    from demos.toy.config import resolve

    with pytest.raises(ConfigError) as info:
        resolve(OverlapConfig(**kw))
    e = info.value
    assert fields in str(e) and "--" not in str(e)
    assert flags in e.render(flag_of)


def test_cuda_without_gpu_is_a_one_line_error(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert main(["--backend", "cuda"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "CUDA" in err


@pytest.mark.slow
def test_bad_arguments_via_subprocess_have_no_traceback():
    proc = subprocess.run(
        [sys.executable, "-m", "demos.overlap", "--topk", "9"],
        cwd=ROOT,
        env=python_env(),
        capture_output=True,
        text=True,
        timeout=slack(60),
    )
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_help_explains_every_flag(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for flag in (
        "--layers",
        "--tokens",
        "--hidden",
        "--experts",
        "--topk",
        "--ubatches",
        "--backend",
        "--schedule",
        "--comm-ratio",
        "--profile",
        "--link",
        "--meta",
        "--steps",
        "--seed",
        "--json",
        "--trace",
        "--plot",
    ):
        assert flag in out


def test_plot_without_matplotlib_says_so_and_the_run_succeeds(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    out_png = tmp_path / "t.png"
    argv = [
        "--backend",
        "virtual",
        "--layers",
        "2",
        "--tokens",
        "16",
        "--hidden",
        "32",
        "--experts",
        "4",
        "--steps",
        "1",
        "--plot",
        str(out_png),
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "matplotlib is not installed" in out and "speedup" in out
    assert not out_png.exists()


def test_layer_window_owner_comes_from_records_with_and_without_dbo():
    from demos.toy.run import layer_window

    details = {}
    run_overlap(OverlapConfig(backend="virtual", layers=3, tokens=32, hidden=32, experts=4, steps=1), details=details)
    no, yes = details["records_no_dbo"], details["records_dbo"]
    assert {r.ubatch for r in no} == {None} and {r.ubatch for r in yes} == {0, 1}
    for recs in (no, yes):
        w = layer_window(recs, 3)
        qkv = [r for r in recs if r.name.startswith("attn_qkv L1 ") and r.ubatch in (0, None)]
        nxt = [r for r in recs if r.name.startswith("attn_qkv L2 ") and r.ubatch in (0, None)]
        assert (w.layer, w.start, w.end) == (1, qkv[0].start, nxt[0].start)
    # a kernel named for ubatch 0 but recorded for ubatch 1 does not open ubatch 0's window
    renamed = [replace(r, ubatch=1) if r.name.startswith("attn_qkv L1 u0") else r for r in yes]
    assert layer_window(renamed, 3).start != layer_window(yes, 3).start


def test_library_run_returns_typed_results_and_writes_nothing(tmp_path, monkeypatch, capsys):
    from demos.engine_times import EngineTimes
    from demos.toy.report import format_report, to_dict
    from demos.toy.results import OverlapResult
    from demos.toy.run import run

    monkeypatch.chdir(tmp_path)
    cfg = small(backend="virtual", json_path="r.json", trace_path="t.json", plot_path="p.png")
    res = run(cfg)
    assert isinstance(res, OverlapResult) and isinstance(res.engine, EngineTimes)
    assert list(tmp_path.iterdir()) == [], "the library writes no files; the command line does"
    assert capsys.readouterr().out == ""
    assert len(res.times_no_dbo_s) == len(res.times_dbo_s) == cfg.steps
    assert res.speedup == pytest.approx(res.time_no_dbo_s / res.time_dbo_s)
    assert res.engine.compute_s > 0 and res.engine.comm_s > 0
    assert (
        res.outputs.passed is True and res.output_dbo is not None and res.output_dbo.shape == (cfg.tokens, cfg.hidden)
    )
    rep = to_dict(res)
    json.dumps(rep)
    assert rep["time_dbo_s"] == res.time_dbo_s and "timeline" in format_report(rep)


def test_timed_steps_take_turns_and_every_steps_records_are_kept():
    from demos.toy.run import run

    cfg = small(backend="virtual", steps=3)
    res = run(cfg)
    no, yes = res.step_records_no_dbo, res.step_records_dbo
    assert len(no) == len(yes) == cfg.steps and no[-1] == res.records_no_dbo and yes[-1] == res.records_dbo
    order = [s for pair in zip(no, yes) for s in pair]  # no DBO, DBO, no DBO, ... on one clock
    for a, b in zip(order, order[1:]):
        assert max(r.end for r in a) <= min(r.start for r in b)
    assert res.outputs.passed is True


@pytest.mark.parametrize("schedule", ["ht", "ll"])
@pytest.mark.parametrize("layout", ["per-ubatch", "shared"])
def test_records_carry_the_ubatch_the_kernel_acts_for(layout, schedule):
    # ht launches every kernel from its own ubatch's thread; in ll a parked recv hook runs on the
    # sibling's thread but acts for the ubatch that registered it (dbo.registry.acting_ubatch_id),
    # so in both the record's ubatch (which the timeline uses) is the ubatch the model named the
    # kernel for, receive kernels included
    details = {}
    run_overlap(small(backend="virtual", schedule=schedule, stream_layout=layout), details=details)
    recs = details["records_dbo"]
    assert recs and all(r.name.split()[2] == f"u{r.ubatch}" for r in recs)  # the owner its model named
    if schedule == "ll":
        assert any(r.op == "dispatch_recv" for r in recs)


def test_a_comm_ratio_below_the_links_latency_is_refused_in_words():
    # 2 layers x 4 transfers a ubatch at the modelled link's latency outweigh a tiny fraction of
    # the compute: no bandwidth can reach that ratio (virtual: deterministic)
    with pytest.raises(ConfigError, match="comm_ratio 1e-06 is too small: the link's latency"):
        run_overlap(small(backend="virtual", comm_ratio=1e-6))


# --- exactness: against the same split run one ubatch after another; the whole batch as numerics -----------


@pytest.mark.parametrize("schedule", ["ll", "ht"])
def test_exactness_is_judged_against_the_same_split_and_the_whole_batch_is_numerics(schedule):
    from demos.toy.report import format_report

    details: dict = {}
    rep = run_overlap(small(backend="virtual", schedule=schedule, tokens=37, ubatches=3), details=details)
    assert torch_equal(details["output_dbo"], details["output_split"])
    assert rep["exact"] == {"bitwise_equal": True, "max_abs_diff": 0.0}
    assert "one ubatch after another" in rep["exact_reference"]
    e = rep["whole_batch_expected"]
    assert e["dtype"] == "float32" and e["relative"] == 1e-5 and e["absolute"] >= 1e-5
    assert rep["max_abs_diff_whole_batch"] is not None and e["within"] is (
        rep["max_abs_diff_whole_batch"] <= e["absolute"]
    )
    assert rep["graph"] is False
    text = format_report(rep)
    outputs = [line for line in text.splitlines() if line.startswith("outputs")]
    assert len(outputs) == 1 and outputs[0].endswith("must be 0, bitwise): PASS")
    numerics = [line for line in text.splitlines() if line.startswith("numerics")]
    assert len(numerics) == 1 and "whole batch at once" in numerics[0] and "float32" in numerics[0]


def test_a_whole_batch_difference_above_its_expectation_is_never_a_failure():
    from demos.toy.report import format_report

    rep = run_overlap(small(backend="virtual"))
    rep["max_abs_diff_whole_batch"] = 1.0  # as a GPU may show: other row counts, other GEMM kernels
    rep["whole_batch_expected"]["within"] = False
    text = format_report(rep)
    numerics = next(line for line in text.splitlines() if line.startswith("numerics"))
    assert "(above)" in numerics and "FAIL" not in text and text.count("PASS") == 1


def torch_equal(a, b) -> bool:
    import torch

    return a is not None and b is not None and torch.equal(a, b)


@pytest.mark.parametrize("backend, want", [("virtual", 2), ("threads", 1)])
def test_the_expert_parallel_size_is_what_the_run_does(backend, want):
    """virtual models a deployment (8 experts per rank by default); one process on threads runs
    every expert itself, so its ep is 1 (it was experts / 8, and validate predicted a threads run of
    16 experts as if it read 8 experts' weights)."""
    from demos.toy.config import resolve

    r = resolve(OverlapConfig(backend=backend, experts=16, tokens=64, layers=1))
    assert r.ep == want and r.model.experts_per_rank == 16 // want
