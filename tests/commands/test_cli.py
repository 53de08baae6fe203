"""The commands keep their word: output paths checked before the run, the report printed before
files are written, Ctrl-C / SIGTERM / a closed stdout end them with one line and a known status,
sanity bounds on the options, and the key report lines read right."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from typing import Any, Iterator

import pytest

from demos import _cli as cli_common
from demos.overlap import flag_of, main
from demos.toy.config import MIN_TIMELINE_WIDTH, ConfigError, OverlapConfig, max_spawned_ranks, resolve
from demos.toy.report import OP_NAMES, format_report
from demos.toy.report_lines import growth_text, link_line
from tests.support.paths import ROOT, python_env
from tests.support.timing import slack

TINY = ["--backend", "virtual", "--layers", "2", "--tokens", "16", "--hidden", "32", "--experts", "4", "--steps", "1"]
# a run long enough to be stopped in the middle (threads backend: real time)
LONG = [
    "--backend",
    "threads",
    "--layers",
    "4",
    "--tokens",
    "256",
    "--hidden",
    "128",
    "--experts",
    "4",
    "--steps",
    "400",
]


# --- output paths: checked before the run --------------------------------------------------------------


def _bad_paths(tmp_path):
    missing = str(tmp_path / "no-such-folder" / "out.json")
    folder = str(tmp_path)
    return [(missing, "does not exist"), (folder, "is a folder"), ("/proc/version", "cannot be written")]


@pytest.mark.parametrize("flag", ["--json", "--trace", "--plot"])
def test_a_bad_output_path_is_one_line_and_exit_2_before_the_run(flag, tmp_path, capsys, monkeypatch):
    import demos.overlap as overlap

    def no_run(*a, **k):  # the run must not start
        raise AssertionError("the run started before the path was checked")

    monkeypatch.setattr(overlap, "run", no_run)
    for path, why in _bad_paths(tmp_path):
        assert main(TINY + [flag, path]) == 2
        out, err = capsys.readouterr()
        assert out == "" and len(err.strip().splitlines()) == 1, err
        assert err.startswith("python -m demos.overlap: error: ") and flag in err and why in err and path in err


@pytest.mark.slow  # a whole run (the fast tier leaves it out: docs/testing.md)
def test_a_plot_path_matplotlib_cannot_write_is_refused_before_the_run(tmp_path, capsys, monkeypatch):
    pytest.importorskip("matplotlib")
    import demos.overlap as overlap

    monkeypatch.setattr(overlap, "run", lambda *a, **k: pytest.fail("the run started"))
    for name, why in (("t.foo", "cannot write .foo files"), ("t", "give the file an extension")):
        assert main(TINY + ["--plot", str(tmp_path / name)]) == 2
        out, err = capsys.readouterr()
        assert out == "" and why in err and len(err.strip().splitlines()) == 1
    assert os.listdir(tmp_path) == []


@pytest.mark.skipif(
    hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes anywhere: mode bits prove nothing"
)
def test_a_folder_without_write_permission_is_refused(tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        assert main(TINY + ["--json", str(ro / "r.json")]) == 2
        assert "cannot be written" in capsys.readouterr().err
    finally:
        ro.chmod(0o700)


def test_two_flags_naming_one_file_are_refused(tmp_path, capsys):
    p = str(tmp_path / "same")
    assert main(TINY + ["--json", p, "--trace", p]) == 2
    assert "the same file as --json" in capsys.readouterr().err
    assert not os.path.exists(p)  # the check leaves no file behind


def test_the_path_check_changes_nothing(tmp_path):
    old = tmp_path / "old.json"
    old.write_text("keep")
    cli_common.check_output_path(str(old), "--json")
    cli_common.check_output_path(str(tmp_path / "new.json"), "--json")
    assert old.read_text() == "keep" and not (tmp_path / "new.json").exists()


def test_a_write_that_fails_at_the_end_keeps_the_printed_report(tmp_path, capsys, monkeypatch):
    from dbo.trace import Tracer

    def full_disk(self, path=None, **kw):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Tracer, "to_chrome", full_disk)
    js, tr = tmp_path / "r.json", tmp_path / "t.json"
    assert main(TINY + ["--json", str(js), "--trace", str(tr)]) == 1
    out, err = capsys.readouterr()
    assert "speedup" in out and "timeline" in out  # the report came first
    assert err.strip().splitlines() == [
        f"python -m demos.overlap: error: --trace {tr}: could not write: No space left on device",
        f"python -m demos.overlap: wrote {js} (--json)",  # each file written is confirmed
    ]
    assert "Traceback" not in err
    rep = json.loads(js.read_text())  # the other file was still written, without the failed one
    assert "trace_path" not in rep and f"json       {js}" in out and "trace      " not in out


def test_files_are_written_after_the_report_and_named_in_it(tmp_path, capsys):
    js, tr = tmp_path / "r.json", tmp_path / "t.json"
    assert main(TINY + ["--json", str(js), "--trace", str(tr)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-2].startswith(f"trace      {tr} ") and out[-1] == f"json       {js}"
    assert json.loads(js.read_text())["trace_path"] == str(tr)


def test_bench_checks_its_paths_before_running(tmp_path):
    from demos.bench import __main__ as bench

    with pytest.raises(SystemExit) as e:
        bench.main(["--quick", "--json", str(tmp_path / "nope" / "b.json")])
    assert e.value.code == 2


@pytest.mark.slow
def test_subprocess_bad_path_has_no_traceback(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "demos.overlap", *TINY, "--plot", str(tmp_path)],
        cwd=ROOT,
        env=python_env(),
        capture_output=True,
        text=True,
        timeout=slack(60),
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


# --- signals and a closed stdout -------------------------------------------------------------------------


@contextlib.contextmanager
def _on_a_terminal(args: list[str], session: bool = False, **env: str) -> Iterator[tuple[subprocess.Popen, int]]:
    """Run a command with stderr on a pseudo-terminal (so it says when it runs); yield the process
    and the terminal's reading end; on the way out kill it if it still runs, and close the
    terminal and its stdout. ``session``: in a process group of its own (so that a signal can go
    to the whole group, as a terminal's Ctrl-C does)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", *args],
        cwd=ROOT,
        env=python_env(**env),
        stdout=subprocess.PIPE,
        stderr=slave,
        stdin=subprocess.DEVNULL,
        start_new_session=session,
    )
    os.close(slave)
    try:
        yield proc, master
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(slack(10))
        os.close(master)
        proc.stdout.close()


def _read_until(fd: int, needle: str, timeout: float) -> str:
    timeout = slack(timeout)
    buf, deadline = "", time.monotonic() + timeout
    while needle not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no {needle!r} within {timeout} s; got {buf!r}")
        r, _, _ = select.select([fd], [], [], left)
        if r:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the other end closed
                chunk = b""
            if not chunk:
                raise AssertionError(f"the terminal closed before {needle!r}; got {buf!r}")
            buf += chunk.decode(errors="replace")
    return buf


def _drain(fd: int) -> str:
    out = ""
    while True:
        r, _, _ = select.select([fd], [], [], 0.2)
        if not r:
            return out
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            return out
        if not chunk:
            return out
        out += chunk.decode(errors="replace")


@pytest.mark.slow
@pytest.mark.timeout(slack(120))
@pytest.mark.parametrize("sig, code, word", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")])
def test_a_signal_stops_the_overlap_run_within_a_second(sig, code, word):
    with _on_a_terminal(["demos.overlap", *LONG]) as (proc, term):
        _read_until(term, "Ctrl-C stops it", 60)
        time.sleep(0.5)  # into the steps
        t0 = time.monotonic()
        proc.send_signal(sig)
        proc.wait(timeout=slack(10))
        took = time.monotonic() - t0
        err = _drain(term)
        out = proc.stdout.read()
    assert proc.returncode == code, err
    assert took < slack(1.5), took  # a second, and some slack for a loaded machine's process exit
    assert out == b""
    lines = [x for x in err.replace("\r", "").splitlines() if x.strip()]
    assert lines[-1] == f"python -m demos.overlap: {word}" and "Traceback" not in err, err


def _wait_for_ranks(proc: subprocess.Popen, term: int, tmp: Any, timeout: float = 90) -> None:
    """Wait until a distributed run under ``tmp`` has started its ranks (its run folder holds
    ``started-1``); fail if the launcher exits first or ``slack(timeout)`` passes."""
    deadline = time.monotonic() + slack(timeout)
    while not any(os.path.exists(os.path.join(tmp, d, "started-1")) for d in os.listdir(tmp)):
        assert proc.poll() is None and time.monotonic() < deadline, _drain(term)
        time.sleep(0.1)


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


@pytest.mark.slow
@pytest.mark.timeout(slack(180))
@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="reads child processes from /proc")
@pytest.mark.parametrize(
    "sig, code, group", [(signal.SIGTERM, 143, False), (signal.SIGINT, 130, False), (signal.SIGINT, 130, True)]
)
def test_a_signal_stops_a_distributed_run_and_leaves_nothing(sig, code, group, tmp_path):
    """The launcher alone (kill PID), or the launcher and its ranks (a terminal's Ctrl-C goes to
    the whole process group)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(slack(10))
    (tmp / f"dbo-dist-{dead.pid}-stale").mkdir()  # a SIGKILLed launcher's folder: this launch sweeps it
    with _on_a_terminal(
        [
            "demos.overlap",
            "--world-size",
            "2",
            "--layers",
            "4",
            "--tokens",
            "128",
            "--hidden",
            "64",
            "--experts",
            "4",
            "--steps",
            "400",
            "--dist-timeout",
            f"{slack(30):g}",
        ],
        session=group,
        TMPDIR=str(tmp),
    ) as (proc, term):
        _wait_for_ranks(proc, term, tmp)
        ranks = _children(proc.pid)
        assert ranks, "the ranks are child processes"
        time.sleep(1.0)
        t0 = time.monotonic()
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        proc.wait(timeout=slack(15))
        took = time.monotonic() - t0
        err = _drain(term)
    assert proc.returncode == code, err
    assert took < slack(3.0), took  # the ranks get SIGTERM, then SIGKILL after a 2 s grace
    assert [d for d in os.listdir(tmp) if d.startswith("dbo-dist-")] == []
    _gone(ranks, 10.0)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _gone(pids: list[int], within: float) -> None:
    """Every process in ``pids`` ends within ``slack(within)`` seconds (the ranks are reaped by the
    launcher; multiprocessing's resource tracker, also a child, leaves when its pipe closes)."""
    deadline = time.monotonic() + slack(within)
    while any(_alive(p) for p in pids):
        assert time.monotonic() < deadline, [p for p in pids if _alive(p)]
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.timeout(slack(180))
@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="reads child processes from /proc")
def test_sigkill_leaves_a_folder_that_names_its_dead_launcher(tmp_path):
    from demos.ranks.launcher import sweep_stale_rundirs

    with _on_a_terminal(
        [
            "demos.overlap",
            "--world-size",
            "2",
            "--layers",
            "4",
            "--tokens",
            "128",
            "--hidden",
            "64",
            "--experts",
            "4",
            "--steps",
            "400",
        ],
        TMPDIR=str(tmp_path),
    ) as (proc, term):
        _wait_for_ranks(proc, term, tmp_path)
        ranks = _children(proc.pid)
        proc.kill()
        proc.wait(slack(10))
    left = [d for d in os.listdir(tmp_path) if d.startswith("dbo-dist-")]
    assert left and all(d.startswith(f"dbo-dist-{proc.pid}-") for d in left)
    _gone(ranks, 20.0)  # the ranks see their launcher gone and exit
    assert sorted(sweep_stale_rundirs(str(tmp_path))) == sorted(str(tmp_path / d) for d in left)
    assert not any(d.startswith("dbo-dist-") for d in os.listdir(tmp_path))


def test_a_killed_launchers_folder_is_swept_by_the_next_launch(tmp_path):
    from demos.ranks.launcher import RUNDIR_PREFIX, sweep_stale_rundirs

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(slack(10))  # a pid that is gone (not reused within this test: pids cycle through tens of thousands)
    stale = tmp_path / f"{RUNDIR_PREFIX}{dead.pid}-abc"
    mine = tmp_path / f"{RUNDIR_PREFIX}{os.getpid()}-def"
    unknown = tmp_path / f"{RUNDIR_PREFIX}xyz"
    for d in (stale, mine, unknown):
        d.mkdir()
        (d / "started-0").write_text("")
    assert sweep_stale_rundirs(str(tmp_path)) == [str(stale)]
    assert not stale.exists() and mine.exists() and unknown.exists()


@pytest.mark.slow
@pytest.mark.timeout(slack(120))
@pytest.mark.parametrize("module, args", [("demos.overlap", TINY), ("demos.scenarios", ["stale-view"])])
def test_a_closed_stdout_ends_quietly_with_141(module, args, tmp_path):
    js = tmp_path / "r.json"
    extra = ["--json", str(js)] if module == "demos.overlap" else []
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *args, *extra],
        cwd=ROOT,
        env=python_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.close()  # `| head` that has read enough: the reading end is gone
    err = proc.stderr.read().decode()
    proc.wait(slack(60))
    proc.stderr.close()
    wrote = [f"python -m {module}: wrote {js} (--json)"] if extra else []  # the file is confirmed, nothing else
    assert proc.returncode == 141 and err.splitlines() == wrote, err
    if extra:
        assert json.loads(js.read_text())["speedup"] > 0  # the files are still written


# --- sanity bounds -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw, field, needle",
    [
        (dict(ep=1000), "ep", "must not exceed"),
        (dict(timeline_width=1), "timeline_width", f"at least {MIN_TIMELINE_WIDTH} columns"),
        (dict(timeline_width=MIN_TIMELINE_WIDTH - 1), "timeline_width", "at least"),
        (
            dict(world_size=max_spawned_ranks() + 1, experts=max_spawned_ranks() + 1, backend="threads"),
            "world_size",
            "more ranks than this machine",
        ),
    ],
)
def test_bounds_are_config_errors_naming_the_field(kw, field, needle):
    with pytest.raises(ConfigError) as e:
        resolve(OverlapConfig(**kw))
    assert field in e.value.fields and needle in str(e.value)


def test_bounds_allow_the_edge():
    resolve(OverlapConfig(ep=8, experts=8, timeline_width=MIN_TIMELINE_WIDTH, backend="virtual"))


def test_a_bound_on_the_command_line_names_the_flag(capsys):
    assert main(["--ep", "1000"]) == 2
    err = capsys.readouterr().err
    assert (
        err.strip() == "python -m demos.overlap: error: --ep (1000) must not exceed --experts (8): "
        "each rank of the group holds at least one expert"
    )
    assert flag_of("timeline_width") == "--width"
    assert main(["--width", "1"]) == 2 and "--width must be at least" in capsys.readouterr().err


# --- wording of the key lines -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "grows, warm, text",
    [
        (0, 0, "never grew"),
        (1, 1, "grew once, all in warmup"),
        (2, 2, "grew 2 times, all in warmup"),
        (3, 2, "grew 3 times, 1 of them after warmup"),
    ],
)
def test_growth_wording(grows, warm, text):
    assert growth_text(grows, warm) == text


def test_link_line_names_a_rescaled_link_and_a_given_one():
    link = {"base_link": "nvlink", "bandwidth_Bps": 0.0733e9, "latency_s": 3e-6, "wire_dtype": "bfloat16"}
    assert link_line(link, 1.0) == (
        "link       nvlink, bandwidth rescaled to 0.0733 GB/s so that comm = 1 x compute; latency 3 us; "
        "dispatch in bfloat16"
    )
    given = link_line({**link, "base_link": "ib400", "bandwidth_Bps": 45e9, "latency_s": 5e-6}, None)
    assert given == "link       ib400, 45 GB/s and latency 5 us as given (no --comm-ratio); dispatch in bfloat16"
    assert "((" not in given and "))" not in given


def _report(tmp_path, *extra: str) -> tuple[str, dict]:
    js = tmp_path / "r.json"
    assert main(TINY + ["--json", str(js), *extra]) == 0
    return format_report(json.loads(js.read_text())), json.loads(js.read_text())


def test_report_lines_read_right(tmp_path, capsys):
    text, rep = _report(tmp_path)
    capsys.readouterr()
    assert " True" not in text and " False" not in text and "times (" not in text
    bound = next(x for x in text.splitlines() if x.startswith("bound"))
    units = [w for w in bound.split("= ")[-1].replace("-", " ").split() if w in ("s", "ms", "us", "ns")]
    assert len(set(units)) == 1, bound  # "min - overlapped = hideable" in one unit
    # the legend lists exactly the letters in the kernel rows
    tl = rep["timeline"]
    i = next(k for k, x in enumerate(tl) if x.startswith("  by kernel ("))
    legend, rows = [], []
    for x in tl[i:]:
        if x.startswith("  by kernel (") or x.startswith("             "):
            legend.append(x)
        elif x.startswith("  in this window"):
            break
        else:
            rows.append(x)
    shown = {ch for row in rows for ch in row[12:]} - {"."}
    listed = {k for k, v in OP_NAMES.items() if f"{k} {v}" in " ".join(legend)}
    assert shown and listed == shown, (shown, listed, legend)


def test_legend_lists_only_shown_letters_and_short_kernels_get_a_column():
    from dbo.trace import KernelRecord, Window, render_ascii

    recs = [
        KernelRecord("compute", "attn", "compute", 0, 0.0, 0.5),
        KernelRecord("comm", "copy", "comm", 1, 0.70, 0.701),  # far shorter than a column
        KernelRecord("comm", "tiny", "comm", 1, 0.2, 0.2001),  # shares its column with nothing, too
    ]
    names = {"A": "attention", "c": "copy", "t": "tiny", "X": "never shown"}
    letters = {"attn": "A", "copy": "c", "tiny": "t"}
    lines = render_ascii(
        recs, Window(0.0, 1.0, 0.0), width=40, op_of=lambda r: r.name, op_letters=letters, op_names=names
    )
    comm = [x[12:] for x in lines if x.startswith("  comm ")]
    assert comm[0].count("1") == 2 and comm[1].count("c") == 1 and comm[1].count("t") == 1
    legend = " ".join(x for x in lines if x.startswith("  by kernel") or x.startswith("             "))
    assert "A attention" in legend and "c copy" in legend and "never shown" not in legend


def test_world_size_timeline_says_where_the_collectives_run():
    rep = {
        "config": {
            "schedule": "ht",
            "yields_per_layer": 3,
            "backend": "threads",
            "dist_backend": "gloo",
            "layers": 2,
            "tokens": 8,
            "hidden": 4,
            "experts": 2,
            "topk": 1,
            "ubatches": 2,
            "expert_ffn": 4,
            "shared_ffn": 8,
            "context": 2,
            "heads": 1,
            "dtype": "float32",
            "meta": False,
            "profile": "cpu",
            "ep": 2,
            "torch_threads": 1,
            "comm_ratio": None,
            "steps": 1,
        },
        "world_size": 2,
        "link": {"bandwidth_Bps": None, "dist_backend": "gloo", "wire_dtype": "bfloat16"},
        "comm_ratio_measured": 0.5,
        "compute_s": 0.01,
        "comm_s": 0.005,
        "time_no_dbo_s": 0.02,
        "time_dbo_s": 0.015,
        "speedup": 1.3,
        "bound_s": 0.015,
        "overlapped_no_dbo_s": 0.0,
        "hideable_s": 0.005,
        "hidden_fraction": 1.0,
        "tolerance": {"relative": 1e-5, "absolute": 1e-5, "dtype": "float32"},
        "exact": {"bitwise_equal": True, "max_abs_diff": 0.0},
        "workspace": {"slot_sizes": [256, 256], "grows": 1, "grows_in_warmup": 1, "allocations_after_lock": 0},
        "timeline_layer": 0,
        "timeline": ["  comm1     ..c..", "  link      11DD."],
        "notes": [],
    }
    text = format_report(rep)
    assert "link = this process's one queue of transfers" in text and "the all-to-alls run there" in text
    assert "grew once, all in warmup" in text


# --- the Chrome trace --------------------------------------------------------------------------------------


def _trace(steps: int, tmp_path) -> dict:
    path = tmp_path / f"t{steps}.json"
    assert main(TINY + ["--profile", "h200", "--steps", str(steps), "--trace", str(path)]) == 0
    return json.loads(path.read_text())


def test_trace_holds_exactly_the_two_steps_it_draws_with_their_host_side(tmp_path, capsys):
    """On virtual with a host model (h200), the trace has host tracks; whatever the number of timed
    steps, it holds the host spans and handoffs of the last no-DBO and the last DBO step only."""
    one, three = _trace(1, tmp_path), _trace(3, tmp_path)
    capsys.readouterr()

    def count(tr, ph, pid):
        return sum(1 for e in tr["traceEvents"] if e.get("ph") == ph and e.get("pid") == pid)

    from dbo.trace import HOST_PID, STREAMS_PID

    assert count(one, "X", HOST_PID) > 0 and count(one, "s", HOST_PID) > 0  # host spans and handoff arrows
    for ph, pid in (("X", HOST_PID), ("s", HOST_PID), ("f", HOST_PID), ("X", STREAMS_PID)):
        assert count(three, ph, pid) == count(one, ph, pid), (ph, pid)
    # every host span lies inside the stretch of the kernels it goes with (two steps, one gap between)
    host = [e for e in three["traceEvents"] if e.get("ph") == "X" and e.get("pid") == HOST_PID]
    kern = sorted(
        (e["ts"], e["ts"] + e["dur"])
        for e in three["traceEvents"]
        if e.get("ph") == "X" and e.get("pid") == STREAMS_PID
    )
    assert min(e["ts"] for e in host) >= kern[0][0] - 1e3 and max(e["ts"] + e["dur"] for e in host) <= kern[-1][1] + 1e3


@pytest.mark.slow
@pytest.mark.timeout(slack(120))
@pytest.mark.parametrize(
    "module, args, stream, first",
    [
        # after the first scenario: its first workspace call imports torch._dynamo in a ubatch thread
        # (about 2 s, not interruptible), which Ctrl-C must wait for
        ("demos.scenarios", [], "stdout", " s)\n"),
        ("demos.bench", ["--quick"], "stderr", "[bench]"),
    ],
)
def test_ctrl_c_stops_scenarios_and_bench(module, args, stream, first):
    # measured 0.6-1.2 s on a loaded 2-core machine (a scenario's aborted step unwinds its threads),
    # 0.7-1.0 s alone at any moment of the scenarios; one CI run on a VM losing CPU time to its
    # hypervisor took 6 s. So a slow stop is measured once more: a stop that is slow twice fails
    for _ in range(2):
        took, err = _interrupt_after(module, args, stream, first)
        if took < slack(3.0):
            break
    assert took < slack(3.0), took
    assert err.decode().strip().splitlines()[-1] == f"python -m {module}: interrupted" and b"Traceback" not in err


def _interrupt_after(module: str, args: list, stream: str, first: str) -> tuple[float, bytes]:
    """Start ``python -m module args``, wait for ``first`` on ``stream``, send SIGINT: (seconds to
    its exit, its stderr); it must exit with 130."""
    proc = subprocess.Popen(
        [sys.executable, "-u", "-m", module, *args],
        cwd=ROOT,
        env=python_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    try:
        pipe = proc.stdout if stream == "stdout" else proc.stderr
        _read_until(pipe.fileno(), first, 60)  # it runs
        time.sleep(0.3)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=slack(10))
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=slack(10))
    assert proc.returncode == 130, err
    return took, err


def test_a_group_of_durations_shares_one_unit():
    from dbo.trace import fmt_seconds_group

    assert fmt_seconds_group([0.238, 0.0, 0.238]) == ["238 ms", "0 ms", "238 ms"]
    assert fmt_seconds_group([1.31e-3, 0.992e-3]) == ["1.31 ms", "0.99 ms"]
    assert fmt_seconds_group([2e-3, 1e-9, None]) == ["2 ms", "<0.01 ms", "n/a"]
    assert fmt_seconds_group([0.0, 0.0]) == ["0 s", "0 s"]
