"""``python -m demos.gpu_check`` (and scripts/gpu_check.sh, its wrapper): the verdicts it draws from its
outputs, its bounded steps, its refusals, Ctrl-C during a step, and one dry run of the whole check on the
threads backend (the GPU run itself has not happened yet)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

import demos.gpu_check as gc
from tests.support.paths import ROOT, python_env
from tests.support.timing import slack

pytestmark = pytest.mark.slow  # subprocesses or whole runs (the fast tier leaves it out: testing.md)


def ran(name="x", rc=0, tail="", timed_out=False):
    return gc.StepRun(name, rc=rc, seconds=1.0, timed_out=timed_out, tail=tail)


def rep(speedup, c=1.0, m=1.0, cd=1.2, graph=True):
    return dict(
        speedup=speedup,
        compute_s=c,
        comm_s=m,
        compute_dbo_s=cd,
        time_no_dbo_s=0.01,
        time_dbo_s=0.01 / speedup,
        graph=graph,
    )


def test_ideal_speedup_is_from_the_runs_kernel_times():
    assert gc.ideal_speedup(rep(1.0, c=3.0, m=2.0, cd=4.0)) == pytest.approx(5.0 / 4.0)
    assert gc.ideal_speedup(rep(1.0, c=3.0, m=5.0, cd=4.0)) == pytest.approx(8.0 / 5.0)
    assert gc.ideal_speedup({"speedup": 1.0}) is None


def test_graph_target():
    ideal = 2.0 / 1.2
    v = gc.judge_graph(rep(0.92 * ideal), ran())
    assert v.status == "PASS" and "above the ideal" not in v.detail
    assert "above the ideal" in gc.judge_graph(rep(1.2 * ideal), ran()).detail
    v = gc.judge_graph(rep(0.85 * ideal), ran())
    assert v.status == "FAIL" and "85% of it" in v.detail
    assert gc.judge_graph(rep(0.98, cd=2.0, m=0.0), ran()).status == "FAIL"  # ideal 0.5, but slower than no DBO
    assert "does not say graph mode" in gc.judge_graph(rep(1.6, graph=False), ran()).detail
    v = gc.judge_graph(None, ran("demo-graph", rc=2, tail="error: unrecognized arguments: --graph\n"))
    assert v.status == "NOT RUN" and "unrecognized arguments" in v.detail
    assert gc.judge_graph({"speedup": 1.5}, ran()).status == "FAIL"  # no kernel times: cannot be judged a pass


def test_big_target():
    assert gc.judge_big(rep(1.6), ran(), ["--tokens", "4096"]).status == "PASS"
    assert gc.judge_big(rep(1.4), ran(), ["--tokens", "4096"]).status == "FAIL"
    v = gc.judge_big(None, gc.StepRun("demo-big", why_not="out of time"), [])
    assert v.status == "NOT RUN" and v.detail == "out of time"


def _bench(r1, r2, replay=None):
    recs = [
        {"section": "host", "name": "synthetic [cuda]: eager, DBO", "value": 10.0, "ratio": r1},
        {"section": "host", "name": "demo ll [cuda]: eager, DBO", "value": 20.0, "ratio": r2},
        {
            "section": "host",
            "name": "demo ll [cuda]: replayed, DBO",
            "value": replay,
            "baseline": "host sync during capture",
        },
        {
            "section": "host",
            "name": "demo ll [cuda]: eager, DBO, stream context per launch",
            "value": 31.5,
            "ratio": 1.6,
        },
    ]
    return {"records": recs}


def test_host_target_needs_every_workload():
    v = gc.judge_host(_bench(1.05, 1.1, 2.0), ran())
    assert v.status == "PASS" and "demo ll [cuda]: eager, DBO with the old launch path 31.50 us/kernel" in v.detail
    v = gc.judge_host(_bench(1.05, 1.2), ran())
    assert v.status == "FAIL" and "1.200x" in v.detail and "not capturable" in v.detail
    assert gc.judge_host({"records": []}, ran()).status == "FAIL"
    assert gc.judge_host(None, gc.StepRun("bench-host", why_not="skipped")).status == "NOT RUN"


def test_sync_target_reads_the_cuda_tests_report():
    line = f"tests/{gc.SYNC_TEST}"
    assert gc.judge_sync(f"PASSED {line}\n", ran()).status == "PASS"
    v = gc.judge_sync(f"FAILED {line} - dbo.errors.UBatchFailed: ... synchronizing\n", ran())
    assert v.status == "FAIL" and "synchronizing" in v.detail
    assert gc.judge_sync(f"SKIPPED [1] {line}: needs a CUDA device\n", ran()).status == "NOT RUN"
    assert gc.judge_sync("PASSED tests/other.py::x\n", ran(tail="1 passed")).status == "NOT RUN"
    assert gc.judge_sync(None, gc.StepRun("cuda-tests", why_not="skipped")).status == "NOT RUN"


def test_pytest_verdicts():
    assert gc.judge_pytest("s", ran(tail="1099 passed, 12 skipped in 90s\n")).status == "PASS"
    assert gc.judge_pytest("s", ran(tail="25 skipped, 1394 deselected in 4s\n")).status == "NOT RUN"
    assert gc.judge_pytest("s", ran(rc=1, tail="3 failed, 1096 passed\n")).status == "FAIL"
    assert gc.judge_pytest("s", ran(rc=-9, timed_out=True, tail="...")).status == "FAIL"


def test_options_refuse_unknown_step_names():
    with pytest.raises(ValueError, match="unknown steps"):
        gc.Options.from_env("/tmp/x", {"GPU_CHECK_SKIP": "suite,bogus"})
    with pytest.raises(ValueError, match="GPU_CHECK_BUDGET_S must be a number of seconds, got 'soon'"):
        gc.Options.from_env("/tmp/x", {"GPU_CHECK_BUDGET_S": "soon"})
    o = gc.Options.from_env("/tmp/x", {"GPU_CHECK_SKIP": "suite", "GPU_CHECK_BIG": "--tokens 64"})
    assert o.skip == {"suite"} and o.big == ["--tokens", "64"] and o.backend == "cuda"


@pytest.mark.parametrize(
    "args, env, needle",
    [
        ([], {}, "the following arguments are required: OUT"),
        (["a", "b"], {}, "unrecognized arguments: b"),
        (["{d}/out"], {"GPU_CHECK_SKIP": "bogus"}, "GPU_CHECK_SKIP names unknown steps ['bogus']"),
        (["{d}/file"], {}, "OUT {d}/file: not a folder; give a folder"),
    ],
)
def test_a_bad_command_line_is_one_line_and_exit_2_before_any_step(args, env, needle, tmp_path, monkeypatch, capsys):
    """The bug this catches: ``--help`` or a second argument taken for the folder and the whole check run."""
    (tmp_path / "file").write_text("")
    monkeypatch.setattr(gc, "run_steps", lambda o: pytest.fail("ran a step despite a bad command line"))
    for k in ("GPU_CHECK_SKIP", "GPU_CHECK_BUDGET_S"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert gc.main([a.format(d=tmp_path) for a in args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("python -m demos.gpu_check: error: ")
    assert needle.format(d=tmp_path) in err


def _alive_with(text: str) -> list[int]:
    """The pids of the processes whose command line holds ``text``."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    out.append(int(pid))
        except OSError:
            pass
    return out


def test_ctrl_c_while_a_step_starts_still_stops_the_step(tmp_path, monkeypatch):
    """Ctrl-C that lands inside ``Popen``, after the step's process exists and before ``_run`` holds it: the
    interrupt waits until the step can be killed. The bug this catches: the step left running (the
    Ctrl-C test below met it once in about fifty runs)."""
    started = []
    real = subprocess.Popen

    def popen_then_ctrl_c(*args, **kwargs):
        started.append(real(*args, **kwargs))
        os.kill(os.getpid(), signal.SIGINT)  # as if the terminal's Ctrl-C came now
        return started[-1]

    monkeypatch.setattr(gc.subprocess, "Popen", popen_then_ctrl_c)
    try:
        with pytest.raises(KeyboardInterrupt):
            gc._run([sys.executable, "-c", "import time; time.sleep(60)"], str(tmp_path / "log.txt"), "w", 60)
        assert started and started[0].poll() == -signal.SIGKILL
    finally:
        for p in started:
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.mark.timeout(slack(120))
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc for the step's process")
def test_ctrl_c_during_a_step_stops_the_step_and_is_one_line_and_130(tmp_path):
    """A step runs in its own process group, which the terminal's Ctrl-C does not reach: the check kills it
    and leaves with the command's one line and 130. The bug this catches: the demo left running after the
    check exited (or a traceback)."""
    out = tmp_path / "out"
    env = dict(
        python_env(), GPU_CHECK_BACKEND="threads", GPU_CHECK_SKIP="cuda-tests,demo-graph,demo-big,bench-host,suite"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "demos.gpu_check", str(out)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    step = str(out / "demo-eager.json")
    deadline = time.monotonic() + slack(60)
    while not _alive_with(step) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert _alive_with(step), "the demo-eager step never started"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=slack(30))
    left = _alive_with(step)
    for pid in left:  # a failing check leaves nothing running behind it
        os.kill(pid, signal.SIGKILL)
    assert err.splitlines() == ["python -m demos.gpu_check: interrupted"], err
    assert proc.returncode == 130
    assert left == []


def test_a_step_past_its_limit_is_killed_with_its_children(tmp_path):
    out = tmp_path / "log.txt"
    child = (
        "import subprocess, sys, time; "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        "time.sleep(60)"
    )
    t0 = time.monotonic()
    rc, timed_out, tail = gc._run([sys.executable, "-c", child], str(out), "w", 1.0)
    assert timed_out and rc != 0 and time.monotonic() - t0 < slack(10)
    assert "killed after 1 s" in tail


@pytest.mark.long(60)
@pytest.mark.timeout(slack(240))
def test_dry_run_on_threads_writes_at_most_8_files_and_a_summary(tmp_path):
    out = tmp_path / "out"
    (tmp_path / "out").mkdir()
    (out / "demo-graph.json").write_text(json.dumps(rep(9.0)))  # stale: must not pass for this run
    env = dict(
        os.environ,
        PYTHON=sys.executable,
        PYTHONPATH=ROOT,
        GPU_CHECK_BACKEND="threads",
        GPU_CHECK_QUICK="1",
        GPU_CHECK_BIG="--tokens 128 --hidden 64",
        GPU_CHECK_SKIP="cuda-tests,suite",
    )
    proc = subprocess.run(
        ["bash", os.path.join(ROOT, "scripts", "gpu_check.sh"), str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=slack(230),
    )
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8 and all(p.is_file() for p in out.iterdir()), files
    assert {"summary.txt", "log.txt", "demo-eager.json", "bench-host.json"} <= set(files)
    summary = (out / "summary.txt").read_text()
    assert proc.stdout.endswith(summary)
    lines = summary.splitlines()
    for target in (
        "0 host syncs",
        "--graph, default config (quick: --steps 2 --layers 2)",
        "--graph at --tokens 128 --hidden 64",
        "host us per kernel",
        "the cuda-marked tests pass",
        "the whole suite pass",
    ):
        assert sum(target in line for line in lines) == 1, (target, summary)
    status = {line.split("  ")[0].strip() for line in lines if line.startswith(("PASS", "FAIL", "NOT RUN"))}
    assert status <= {"PASS", "FAIL", "NOT RUN"}
    assert "NOT RUN  the whole suite pass: skipped (GPU_CHECK_SKIP)" in summary
    assert "eager demo (ll, comm ratio 1): no DBO" in summary
    bench = json.loads((out / "bench-host.json").read_text())
    assert any(r["name"] == "synthetic [threads]: eager, DBO" for r in bench["records"])
    graph_line = next(line for line in lines if "--graph, default config" in line)
    assert "speedup 9.000x" not in graph_line  # the stale JSON was removed
    assert proc.returncode == (1 if any(line.startswith("FAIL") for line in lines) else 0)


def test_the_session_script_parses_and_refuses_a_bad_command_line_before_any_step(tmp_path):
    """``scripts/gpu_session.sh`` (docs/gpu.md, "A lent GPU: one call"): valid bash; no OUT, or a third
    argument, is its usage line and exit 2, nothing run (no OUT folder made)."""
    script = os.path.join(ROOT, "scripts", "gpu_session.sh")
    assert subprocess.run(["bash", "-n", script], capture_output=True, text=True).returncode == 0
    for args in ([], [str(tmp_path / "out"), "cuda", "extra"]):
        p = subprocess.run(["bash", script, *args], capture_output=True, text=True, timeout=30)
        assert p.returncode == 2 and p.stderr.startswith("usage: bash scripts/gpu_session.sh OUT_DIR")
    assert not (tmp_path / "out").exists()
