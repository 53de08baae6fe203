"""Calibration: the fits recover a synthetic machine's parameters, the CLI refuses bad input early."""

from __future__ import annotations

import json
import math
import sys
from dataclasses import replace

import numpy as np
import pytest

from dbo.costs import (
    DeviceProfile,
    FitError,
    HostCosts,
    OpCost,
    fit_device,
    fit_dtype_rates,
    fit_op_costs,
    fit_threaded_ops,
    get_profile,
    predict,
)
from demos import calibrate as cli
from demos.fidelity import calibration as cal
from demos.fidelity.host import measure_host
from tests.support.profiles import gemm_sample as _gemm
from tests.support.timing import slack

# --- fit_op_costs ------------------------------------------------------------------------------------


def test_op_fit_recovers_a_fixed_cost_and_a_scale_despite_noise_and_outliers():
    rng = np.random.default_rng(1)
    samples = []
    for m in np.geomspace(1e-6, 1e-2, 9):
        for _ in range(5):
            samples.append(("router", float(m), float((30e-6 + 2.5 * m) * math.exp(rng.normal(0, 0.05)))))
        samples.append(("router", float(m), float((30e-6 + 2.5 * m) * 40)))  # a kernel that waited for the GIL
    got = fit_op_costs(samples)["router"]
    assert got.device == pytest.approx(30e-6, rel=0.15)
    assert got.scale == pytest.approx(2.5, rel=0.1)


def test_op_fit_extrapolates_beyond_the_measured_shapes():
    samples = [("shared", m, 20e-6 + 1.7 * m) for m in (1e-5, 3e-5, 1e-4)]
    oc = fit_op_costs(samples)["shared"]
    big = 0.5  # 5000x the largest model time measured
    assert oc.device + oc.scale * big == pytest.approx(20e-6 + 1.7 * big, rel=1e-6)


def test_threaded_fit_separates_the_fixed_part_slowdown_from_the_ops():
    rows = []
    for m in (1e-5, 1e-4, 1e-3):
        rows.append(("a", m, 20e-6 + 2 * m, False))
        rows.append(("a", m / 2, 3 * 20e-6 + 2 * m / 2, True))  # DBO: half the shape, fixed part x3
        rows.append(("b", m, 50e-6 + m, False))
        rows.append(("b", m / 2, 3 * 50e-6 + m / 2, True))
    ops, g = fit_threaded_ops(rows)
    assert g == pytest.approx(3.0, rel=0.02)
    assert ops["a"].device == pytest.approx(20e-6, rel=0.03) and ops["a"].scale == pytest.approx(2.0, rel=0.02)
    assert ops["b"].device == pytest.approx(50e-6, rel=0.03) and ops["b"].scale == pytest.approx(1.0, rel=0.02)
    none, g1 = fit_threaded_ops([r[:3] for r in rows if not r[3]])
    assert g1 == 1.0 and none["a"].device == pytest.approx(20e-6, rel=0.03)


def test_op_fit_adds_a_memory_term_only_where_it_explains_the_samples():
    # a CPU GEMM of few rows: its weights stream once per row, so a part proportional to the
    # memory time (weights) rides on top of the model time (which the math term dominates)
    rng = np.random.default_rng(3)
    rows, truth = [], lambda m, b: 10e-6 + 1.2 * m + 6.0 * b
    for h in (1.0, 2.5):  # two "hidden sizes": weights (memory time) differ at one token count
        for tok in (1, 6, 40, 200):
            m, b = 20e-6 * tok * h, 8e-6 * h * h
            for _ in range(3):
                rows.append(("experts", m, truth(m, b) * math.exp(rng.normal(0, 0.02)), False, b))
    oc = fit_op_costs(rows)["experts"]
    assert oc.memory_scale == pytest.approx(6.0, rel=0.15)
    assert oc.scale == pytest.approx(1.2, rel=0.1)
    m, b = 20e-6 * 6 * 1.8, 8e-6 * 1.8**2  # a hidden size between the two, never measured
    assert oc.device + oc.scale * m + oc.memory_scale * b == pytest.approx(truth(m, b), rel=0.05)
    # a memory-bound op: its model time *is* its memory time; no memory term takes its place
    bound = [("copy", 1e-6 * k, 2e-6 + 3 * 1e-6 * k, False, 1e-6 * k) for k in (1, 4, 16, 64)]
    oc = fit_op_costs(bound)["copy"]
    assert oc.memory_scale == 0.0 and oc.scale == pytest.approx(3.0, rel=1e-6)
    assert oc.device == pytest.approx(2e-6, rel=1e-6)


def test_op_fit_of_one_shape_keeps_scale_one():
    oc = fit_op_costs([("x", 1e-5, 3e-5), ("x", 1e-5, 3.2e-5), ("x", 1e-5, 2.8e-5)])["x"]
    assert oc.scale == 1.0 and oc.device == pytest.approx(2e-5, rel=1e-6)


@pytest.mark.parametrize(
    "bad",
    [
        [("op", -1.0, 1.0)],
        [("op", 1.0, math.nan)],
        [("", 1.0, 1.0)],
        [("op", 1.0)],
        [],
        [("op", 1.0, 1.0, True, -5.0)],
        [("op", 1.0, 1.0, True, 0.0, 1)],
    ],
)
def test_op_fit_refuses_bad_samples(bad):
    with pytest.raises(FitError):
        fit_op_costs(bad)


# --- the device fit of a synthetic machine -------------------------------------------------------------

TRUE = DeviceProfile(
    "true",
    peak_flops=400e9,
    mem_bandwidth=60e9,
    launch_overhead=0.0,
    dtype_flops={"float32": 100e9, "bfloat16": 400e9},
    min_kernel=1e-6,
    gemm_knee=(16.0, 64.0, 32.0),
    bytes_knee=2e4,
)


def test_other_dtype_rates_refit_on_the_first_dtypes_knees():
    rng = np.random.default_rng(0)
    desc = [
        _gemm(m, n, k, dt)
        for dt in ("float32", "bfloat16")
        for m in (4, 32, 256)
        for n, k in ((128, 128), (384, 384), (768, 256))
    ]
    desc += [("elementwise", None, "float32", b) for b in (1e3, 1e4, 1e5, 1e6, 1e7)]
    samples = [(op, sh, dt, b, predict(TRUE, op, sh, dt, b) * math.exp(rng.normal(0, 0.02))) for op, sh, dt, b in desc]
    first = fit_device([s for s in samples if s[0] != "gemm" or s[2] == "float32"])
    assert first.flops_rate("float32") == pytest.approx(100e9, rel=0.1)
    both = fit_dtype_rates([s for s in samples if s[0] == "gemm" and s[2] == "bfloat16"], first)
    assert both.flops_rate("bfloat16") == pytest.approx(400e9, rel=0.15)
    assert both.flops_rate("float32") == first.flops_rate("float32")
    assert both.peak_flops == both.flops_rate("bfloat16")


# --- the model's ops and host issue time of a synthetic (virtual) machine --------------------------------

TINY = cal.Plan(
    dtypes=("float32",),
    gemm_m=(4, 64),
    gemm_nk=((64, 64), (128, 64)),
    copy_elems=(1 << 8, 1 << 12, 1 << 16),
    op_runs=tuple(
        dict(tokens=t, hidden=64, schedule=s, layers=1, dtype="float32") for t in (8, 32, 128) for s in ("ht", "ll")
    ),
    issue_runs=(dict(tokens=8, hidden=64, schedule="ht", layers=1, dtype="float32"),),
    host_reps=20,
    op_steps=1,
)

MACHINE_OPS = {
    "router": OpCost(device=40e-6, scale=3.0),
    "experts": OpCost(device=100e-6, scale=1.5),
    "experts_ll": OpCost(device=30e-6, scale=4.0),
    "attn_qkv": OpCost(device=10e-6, scale=2.0),
}
MACHINE = replace(
    get_profile("cpu"), name="machine", host=HostCosts(launch=25e-6, kernel=2e-6, ops=MACHINE_OPS, kernel_sync=False)
)
BASE = replace(get_profile("cpu"), name="base", host=HostCosts(kernel=2e-6, kernel_sync=False))


@pytest.mark.slow
def test_op_corrections_of_a_virtual_machine_are_recovered():
    machine = replace(MACHINE, fixed_threaded=2.5)  # the ops' fixed part 2.5x slower in DBO steps
    records, steps = cal.measure_ops("virtual", TINY, truth=machine)
    ops = {r.op for r in records}
    assert {"attn_qkv", "router", "experts", "shared", "dispatch", "combine", "finalize"} <= ops
    assert any(r.threaded for r in records) and not all(r.threaded for r in records)
    fitted, factor = fit_threaded_ops(cal.op_samples(records, BASE))
    assert factor == pytest.approx(2.5, rel=0.03)
    want_ops = dict(MACHINE_OPS)  # the two schedules' experts are two ops, apart
    for op, want in want_ops.items():
        assert fitted[op].device == pytest.approx(want.device, rel=0.02, abs=1e-7), op
        assert fitted[op].scale == pytest.approx(want.scale, rel=0.02), op
    for op in ("shared", "dispatch", "combine"):  # no correction on the machine
        assert fitted[op].scale == pytest.approx(1.0, rel=0.02), op
        assert fitted[op].device == pytest.approx(0.0, abs=1e-7), op


def test_host_launch_cost_of_a_virtual_machine_is_recovered():
    base = replace(BASE, host=replace(BASE.host, ops=MACHINE_OPS))
    got = cal.fit_launch("virtual", TINY, base, truth=MACHINE)
    assert got == pytest.approx(25e-6, rel=0.02)


def test_thread_start_of_a_virtual_machine_is_recovered_from_its_dbo_steps():
    from demos.fidelity.steps import fit_thread_start

    machine = replace(MACHINE, host=replace(MACHINE.host, thread_start=150e-6))
    _, steps = cal.measure_ops("virtual", TINY, truth=machine)
    assert steps and all(s.start_s == pytest.approx(2 * 150e-6, rel=0.05) for s in steps)
    base = replace(BASE, host=replace(BASE.host, thread_start=40e-6))
    assert fit_thread_start(steps, base) == pytest.approx(150e-6, rel=0.05)
    # a machine that starts threads faster than the empty-step measurement: keep the measurement
    assert fit_thread_start(steps, replace(BASE, host=replace(BASE.host, thread_start=200e-6))) == 200e-6


def test_wake_latency_of_a_virtual_machine_is_recovered_from_its_no_dbo_steps():
    from demos.fidelity.steps import fit_wake_latency

    machine = replace(MACHINE, event_latency=40e-6)
    _, steps = cal.measure_ops("virtual", TINY, truth=machine)
    assert all(s.gaps for s in steps)
    base = replace(BASE, host=replace(BASE.host, ops=MACHINE_OPS, launch=25e-6), event_latency=8e-6)
    assert fit_wake_latency(steps, base) == pytest.approx(40e-6, rel=0.02)
    assert fit_wake_latency([replace(s, gaps={}) for s in steps], base) == 8e-6  # nothing measured: kept


def test_engine_gaps_of_a_virtual_machine_are_recovered_from_its_steps():
    from demos.fidelity.steps import fit_engine_gap

    machine = replace(MACHINE, engine_gap=6e-6, engine_gap_threaded=10e-6)
    _, steps = cal.measure_ops("virtual", TINY, truth=machine)
    assert all(s.turns_no_dbo and s.turns_dbo for s in steps)
    base = replace(BASE, host=replace(BASE.host, ops=MACHINE_OPS, launch=25e-6), engine_gap=1e-6)
    gap, threaded = fit_engine_gap(steps, base)
    assert gap == pytest.approx(6e-6, rel=0.02)
    assert threaded == pytest.approx(10e-6, rel=0.02)
    # nothing measured: the profile's values are kept
    none = [replace(s, turns_no_dbo={}, turns_dbo={}) for s in steps]
    assert fit_engine_gap(none, replace(base, engine_gap_threaded=3e-6)) == (1e-6, 3e-6)


def test_declared_costs_name_every_kernel_of_both_steps():
    from demos.toy.config import OverlapConfig

    no, dbo_ = cal.declared_costs(OverlapConfig(tokens=16, hidden=64, layers=2, schedule="ht"))
    assert "router L1 u0" in no and "router L1 u1" in dbo_ and "router L1 u1" not in no
    kind, cost, dtype, op = no["dispatch L0 u0"]
    assert kind == "comm" and type(cost).__name__ == "Transfer" and cost.bytes > 0
    assert no["experts L0 u0"][3] == "experts"  # the op the kernel declares


# --- profiles written before kernels declared their op ----------------------------------------------------

# Part of a profile as ``python -m demos.calibrate`` wrote it before launches declared their op: where
# the toy model launched one op with two kernel functions, an entry per "<op>/<kernel function>" too.
OLD_FORMAT_OPS = {
    "attn_qkv": {
        "device": 0.0,
        "gil_calls": 7,
        "host": 0.0,
        "kernels": 1,
        "memory_scale": 8.03178049596311,
        "scale": 1.0836628542077889,
    },
    "combine": {
        "device": 0.00010260472785810037,
        "gil_calls": 2,
        "host": 0.0,
        "kernels": 1,
        "memory_scale": 0.0,
        "scale": 1.0310332186169704,
    },
    "combine/_combine_gather_kernel": {
        "device": 8.931878787096469e-05,
        "gil_calls": 1,
        "host": 0.0,
        "kernels": 1,
        "memory_scale": 0.0,
        "scale": 1.0145337923941256,
    },
    "combine/_combine_sum_kernel": {
        "device": 0.00012324502425974552,
        "gil_calls": 3,
        "host": 0.0,
        "kernels": 1,
        "memory_scale": 0.0,
        "scale": 1.0423779841522378,
    },
    "combine_recv": {
        "device": 2.4858259555847377e-05,
        "gil_calls": 4,
        "host": 0.0,
        "kernels": 1,
        "memory_scale": 0.0,
        "scale": 7.1460103436800155,
    },
    "dispatch": {
        "device": 0.00015231489327379385,
        "gil_calls": 6,
        "host": 0.0,
        "kernels": 1,
        "memory_scale": 0.0,
        "scale": 1.0216738822805935,
    },
    "dispatch/_dispatch_kernel": {
        "device": 0.00014071547914122336,
        "gil_calls": 1,
        "host": 0.0,
        "kernels": 1,
        "memory_scale": 0.0,
        "scale": 0.9931808912377751,
    },
    "dispatch/_ll_dispatch_kernel": {
        "device": 0.00017269477478703266,
        "gil_calls": 11,
        "host": 0.0,
        "kernels": 1,
        "memory_scale": 0.0,
        "scale": 1.0486093730939035,
    },
    "experts": {
        "device": 0.00016974953384636305,
        "gil_calls": 44,
        "host": 0.0,
        "kernels": 1,
        "memory_scale": 0.0,
        "scale": 1.9873629709342175,
    },
    "experts/_k_experts": {
        "device": 4.190277977104534e-05,
        "gil_calls": 79,
        "host": 0.0,
        "kernels": 1,
        "memory_scale": 4.674481989431976,
        "scale": 0.8559987745490081,
    },
    "experts/_k_experts_ll": {
        "device": 0.0,
        "gil_calls": 9,
        "host": 0.0,
        "kernels": 1,
        "memory_scale": 0.0,
        "scale": 4.657371439794191,
    },
}


def _old_format_profile(tmp_path, ops: dict) -> str:
    path = tmp_path / "old.json"
    path.write_text(
        json.dumps(
            {
                "name": "calibrated-threads",
                "peak_flops": 208993170894.45328,
                "mem_bandwidth": 57242725753.545685,
                "launch_overhead": 0.0,
                "min_kernel": 1.0418660916518e-06,
                "fixed_threaded": 1.1533030725403464,
                "host": {
                    "launch": 1.8295639449425085e-05,
                    "kernel": 1.7588499999495373e-06,
                    "idle_hold": 0.005238662000010663,
                    "kernel_sync": False,
                    "ops": ops,
                },
            }
        )
    )
    return str(path)


def test_a_profile_of_the_old_format_says_in_one_line_to_calibrate_again(tmp_path):
    """Profiles written before launches declared their op (kernel-function keys such as
    "experts/_k_experts") are refused since 0.1 (docs/changelog.md): the message names the first such key."""
    from demos.toy.config import ConfigError, OverlapConfig, resolve

    path = _old_format_profile(tmp_path, OLD_FORMAT_OPS)
    with pytest.raises(ValueError, match=r"'combine/_combine_gather_kernel'.*re-run `python -m demos\.calibrate`") as e:
        get_profile(path)
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="python -m demos.calibrate") as e:
        resolve(OverlapConfig(backend="virtual", profile=path))
    assert "\n" not in str(e.value)


# --- the host micro-benchmarks and a whole (tiny) calibration on threads -----------------------------------


def test_host_constants_on_threads_are_positive_and_small():
    h = measure_host("threads", reps=20)
    assert set(h) == {
        "kernel",
        "stream_switch",
        "event",
        "sync",
        "handoff",
        "thread_start",
        "thread_join",
        "threaded",
        "event_latency",
        "idle_hold",
        "replay_op",
    }
    for k, v in h.items():
        assert math.isfinite(v) and v >= 0, k
        if k != "threaded":
            assert v < slack(0.05), k  # seconds: nothing here takes 50 ms
    assert h["threaded"] >= 1 and h["kernel"] > 0 and h["handoff"] > 0
    # the executors are Python threads: host code that never blocks keeps an idle one waiting for
    # the GIL until the switch interval runs out
    assert h["idle_hold"] >= 0.5 * sys.getswitchinterval()
    assert h["replay_op"] > 0  # a replay on threads re-issues each recorded op from Python


@pytest.mark.slow
def test_tiny_calibration_on_threads_writes_a_profile_virtual_can_use(tmp_path):
    prof, rep = cal.calibrate("threads", sweep=TINY)
    assert rep.device_samples == 7 and rep.op_samples > 50
    assert prof.host.kernel_sync is False and prof.host.launch >= 0
    assert prof.host.idle_hold > 0  # measured: the executors wait for the GIL
    assert {"router", "experts", "dispatch"} <= set(prof.host.ops)
    for k in ("launch", "thread_start", "threaded"):  # the summary prints what the profile holds
        assert rep.host[k] == getattr(prof.host, k), k
    path = tmp_path / "p.json"
    prof.to_json(path)
    again = get_profile(str(path))
    assert again == prof
    from demos.toy.config import OverlapConfig
    from demos.toy.run import run

    res = run(
        OverlapConfig(
            backend="virtual", profile=str(path), tokens=16, hidden=64, layers=1, steps=1, meta=True, dtype="float32"
        )
    )
    assert res.time_no_dbo_s > 0 and res.time_dbo_s > 0


# --- the command line ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["-o", "/nonexistent-dir/p.json"], "does not exist"),
        (["-o", "p.txt"], "must end in .json"),
        (["--backend", "nope", "-o", "p.json"], "invalid choice"),
        ([], "required"),
        (["-o", "p.json", "--name", " "], "--name"),
    ],
)
def test_cli_bad_arguments_are_one_line_and_exit_2(argv, needle, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cal, "calibrate", lambda *a, **k: pytest.fail("measured despite a bad argument"))
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1
    assert not list(tmp_path.iterdir())


def test_cli_directory_as_output_is_refused(tmp_path, capsys):
    d = tmp_path / "x.json"
    d.mkdir()
    assert cli.main(["-o", str(d)]) == 2
    assert "is a folder" in capsys.readouterr().err


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a GPU is present")
def test_cli_cuda_without_a_gpu_is_refused_before_work(capsys, tmp_path):
    assert cli.main(["--backend", "cuda", "-o", str(tmp_path / "p.json")]) == 2
    assert "CUDA GPU" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_cli_writes_the_profile_and_a_summary(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(
        cli, "calibrate", lambda backend, **kw: cal.calibrate(backend, sweep=TINY, progress=kw.get("progress"))
    )
    out = tmp_path / "p.json"
    assert cli.main(["-o", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "wrote" in text and "router" in text
    d = json.loads(out.read_text())
    assert d["name"] == "calibrated-threads" and "router" in d["host"]["ops"]


@pytest.mark.slow
def test_wake_up_latency_of_a_virtual_machine_is_recovered_from_its_steps():
    machine = replace(MACHINE, event_latency=20e-6, event_latency_threaded=150e-6)
    _, steps = cal.measure_ops("virtual", TINY, truth=machine)
    assert len(steps) == len(TINY.op_runs) and all(s.dbo_s > 0 for s in steps)
    got = cal.fit_event_latency(steps, replace(MACHINE, event_latency=20e-6))
    assert got == pytest.approx(150e-6, rel=0.05)


def test_fit_scalar_finds_an_interior_minimum_and_respects_bounds():
    from dbo.costs import fit_scalar

    assert fit_scalar(lambda x: (x - 3.3e-4) ** 2, 0.0, 2e-3) == pytest.approx(3.3e-4, rel=0.02)
    assert fit_scalar(lambda x: x, 1e-5, 2e-3) == 1e-5
    with pytest.raises(FitError):
        fit_scalar(lambda x: x, 1.0, 0.5)
