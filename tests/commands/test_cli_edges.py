"""The commands at their edges: no flag silently ignored or replaced, Ctrl-C during the imports,
and a bad input of any kind answered with one line of our own words and exit 2 (never a
traceback). Each command runs as ``python -m`` starts it: the lines that only print or refuse run
batched, all in one interpreter (``tests.support.cli_batch``); signals, Ctrl-C during the imports
and memory get a process each."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from typing import Any

import pytest

from demos._cli.commands import MODULES
from demos._guard import READY_ENV
from demos.overlap import run_overlap
from demos.toy.config import OverlapConfig
from demos.toy.report import format_report
from tests.support.cli_batch import run_lines
from tests.support.paths import ROOT, python_env
from tests.support.timing import slack

OVERLAP = "demos.overlap"
SMALL = ["--layers", "1", "--tokens", "16", "--hidden", "32", "--experts", "2", "--steps", "1"]
PROFILE_FIELDS = {"name": "mine", "peak_flops": 1e12, "mem_bandwidth": 1e11, "launch_overhead": 1e-6}


def _run(module: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=python_env(),
        capture_output=True,
        text=True,
        timeout=slack(timeout),
    )


def _one_line(module: str, p, code: int = 2) -> str:
    """Of a finished invocation ``p``: assert one line on stderr, the exit status, no traceback; the line."""
    assert "Traceback" not in p.stderr, p.stderr
    lines = p.stderr.splitlines()
    assert len(lines) == 1, p.stderr
    assert p.returncode == code, (p.returncode, p.stderr)
    assert lines[0].startswith(f"python -m {module}: "), lines[0]
    return lines[0]


INVOCATIONS: dict[str, tuple[str, list[str]]] = {
    "profile-off-virtual-auto": (OVERLAP, ["--profile", "h200", *SMALL]),
    "profile-off-virtual-threads": (OVERLAP, ["--backend", "threads", "--profile", "h200", *SMALL]),
    "ep-off-virtual": (OVERLAP, ["--backend", "threads", "--ep", "2", *SMALL]),
    "json-in-proc": (OVERLAP, ["--backend", "virtual", "--json", "/proc/r.json", *SMALL]),
    "hidden-100": (OVERLAP, ["--backend", "virtual", "--hidden", "100"]),
    "cannot-fit": (OVERLAP, ["--tokens", "100000000"]),
    "overlap-help": (OVERLAP, ["--help"]),
    "scenarios-list": ("demos.scenarios", ["--list"]),
    "validate-help": ("demos.validate", ["--help"]),
    "validate-grid-help": ("demos.validate", ["grid", "--help"]),
    "validate-h200-cpu": ("demos.validate", ["h200", "--profile", "cpu"]),
    "validate-old-h200-cpu": ("demos.validate", ["--h200", "--profile", "cpu"]),
    "validate-deepep-profile": ("demos.validate", ["deepep", "--profile", "h200"]),
    "validate-old-deepep-profile": ("demos.validate", ["--deepep", "--profile", "h200"]),
    "validate-deepep-h200": ("demos.validate", ["--deepep", "--h200"]),
    "bench-bad-flag": ("demos.bench", ["--sectoin", "x"]),
    **{
        f"{m}-help": (f"demos.{m}", ["--help"])
        for m in ("calibrate", "predict", "scenarios", "bench", "fits", "serving")
    },
}
"""The command lines the tests below check, by name; ``invocations`` runs them all in one
interpreter (``tests.support.cli_batch``; tests of the process itself, signals and memory, start their
own)."""


@pytest.fixture(scope="module")
def invocations(tmp_path_factory):
    """Every ``INVOCATIONS`` command line, every ``BAD_INPUTS`` case (keys ``("bad-input", i)``, ``{d}``
    a folder of the module's own, under key ``"d"``) and every ``BAD_PROFILES`` case (keys
    ``("bad-profile", i)``, the profile's path under ``("profile", i)``) run, all in one
    interpreter: {key: ``Invocation``}."""
    d = tmp_path_factory.mktemp("cli-edges")
    lines = dict(INVOCATIONS)
    for i, (module, args, _) in enumerate(BAD_INPUTS):
        lines[("bad-input", i)] = (module, [a.format(d=d) for a in args])
    paths = {}
    for i, (fields, _) in enumerate(BAD_PROFILES):
        paths[("profile", i)] = path = d / f"profile-{i}.json"
        path.write_text(json.dumps(fields))
        lines[("bad-profile", i)] = (OVERLAP, ["--backend", "virtual", "--profile", str(path), *SMALL])
    out = {"d": str(d), **paths}
    out.update(zip(lines, run_lines(list(lines.values()), timeout=240)))
    return out


def _refusal(invocations, name: str) -> str:
    """The one line the ``INVOCATIONS`` command line ``name`` was refused with (``_one_line``)."""
    return _one_line(INVOCATIONS[name][0], invocations[name])


# --- no silent substitutions ------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["auto", "threads"])
def test_a_profile_off_virtual_is_refused_in_one_line(invocations, backend):
    line = _refusal(invocations, f"profile-off-virtual-{backend}")
    assert "--profile" in line and "virtual" in line and "no profile is read" in line
    if backend == "auto":  # the line says what auto chose
        assert "--backend auto chose" in line


@pytest.mark.slow
def test_ep_off_virtual_in_one_process_is_refused(invocations):
    line = _refusal(invocations, "ep-off-virtual")
    assert "--ep" in line and "--backend virtual" in line


def test_the_config_line_names_a_profile_only_where_one_was_used():
    small = dict(layers=1, tokens=16, hidden=32, experts=2, steps=1)
    threads = run_overlap(OverlapConfig(backend="threads", **small))
    assert threads["config"]["profile"] is None
    assert "profile" not in format_report(threads).splitlines()[2]  # the config line's second half
    virtual = run_overlap(OverlapConfig(backend="virtual", profile="h200", **small))
    assert virtual["config"]["profile"] == "h200"
    assert "profile h200" in format_report(virtual).splitlines()[2]


def test_a_link_on_threads_is_honoured_with_a_note_saying_how():
    rep = run_overlap(
        OverlapConfig(backend="threads", link="ib400", layers=1, tokens=16, hidden=32, experts=2, steps=1)
    )
    notes = [n for n in rep["notes"] if n.startswith("link ib400 on threads")]
    assert notes and "modelled time" in notes[0] and "compute is real" in notes[0]
    assert rep["link"]["base_link"] == "ib400"
    assert f"note       {notes[0]}" in format_report(rep)
    virtual = run_overlap(OverlapConfig(backend="virtual", link="ib400", layers=1, tokens=16, hidden=32, experts=2))
    assert not [n for n in virtual["notes"] if n.startswith("link ")]  # virtual models it all: nothing to say


# --- Ctrl-C during the imports ----------------------------------------------------------------------------


def start_guarded(module: str, *args: str, **popen: Any) -> subprocess.Popen:
    """``python -m module args``, returned once its signal guard is installed (``demos._guard``'s test
    seam: the pipe named by DEMOS_GUARD_READY_FD gets one byte then). What comes before cannot be
    guarded (the interpreter's own start); waiting for the byte, not a fixed sleep, is what makes a
    signal sent next land in the guarded imports on a loaded machine too."""
    r, w = os.pipe()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            cwd=ROOT,
            env=python_env(**{READY_ENV: str(w)}),
            pass_fds=(w,),
            **popen,
        )
    finally:
        os.close(w)
    try:
        ready, _, _ = select.select([r], [], [], slack(60))
        got = os.read(r, 1) if ready else b""
    finally:
        os.close(r)
    if got != b"1":
        proc.kill()
        proc.communicate(timeout=slack(30))
        raise AssertionError(f"python -m {module}: the signal guard did not say it was installed")
    return proc


@pytest.mark.parametrize(
    "module, sig, after",
    # every command of the one registry (demos._cli.commands) that imports torch: SIGINT as soon as the
    # guard is in place; the overlap command also later in the torch imports, and with SIGTERM.
    # demos.gpu_check imports only the standard library (its --help may be done before any signal: there
    # is no import to interrupt), and tests/commands/test_gpu_check.py interrupts its run instead
    [(m, signal.SIGINT, 0.0) for m in MODULES if m != "demos.gpu_check"]
    + [(OVERLAP, signal.SIGINT, 0.3), (OVERLAP, signal.SIGTERM, 0.0), (OVERLAP, signal.SIGTERM, 0.3)],
)
def test_ctrl_c_during_the_imports_is_one_line_and_130(module, sig, after):
    proc = start_guarded(module, "--help", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(after)  # 0: right after the guard; 0.3 s: inside the ~1-3 s of torch imports
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=slack(30))
    word, code = ("interrupted", 130) if sig == signal.SIGINT else ("terminated", 143)
    assert "Traceback" not in err, err
    assert err.splitlines() == [f"python -m {module}: {word}"], err
    assert proc.returncode == code and out == ""


def test_the_guard_seam_writes_nothing_into_an_fd_that_is_not_a_pipe(tmp_path):
    """DEMOS_GUARD_READY_FD naming a file (or nothing open) is left alone: the byte goes only to a pipe."""
    path = tmp_path / "f"
    with open(path, "wb") as f:
        p = subprocess.run(
            [sys.executable, "-m", "demos.gpu_check", "--help"],
            cwd=ROOT,
            env=python_env(**{READY_ENV: str(f.fileno())}),
            pass_fds=(f.fileno(),),
            capture_output=True,
            timeout=slack(60),
        )
    assert p.returncode == 0, p.stderr
    assert path.read_bytes() == b""


# --- our own words, one line, exit 2 ----------------------------------------------------------------------


BAD_PROFILES = (
    ({"name": "mine"}, ["missing field(s) peak_flops (a number)", "launch_overhead (a number)"]),
    ({**PROFILE_FIELDS, "peak_flops": "fast"}, ["field peak_flops must be a number, got a string 'fast'"]),
    ({**PROFILE_FIELDS, "host": {"launch": [1]}}, ["field host.launch must be a number, got a list"]),
    ({**PROFILE_FIELDS, "host": 3}, ["field host must be a JSON object"]),
    ({**PROFILE_FIELDS, "gemm_knee": 1}, ["field gemm_knee must be a list of numbers"]),
)
"""(profile JSON fields, what the refusal must say) for ``--profile PATH.json`` with a bad field."""


@pytest.mark.slow
@pytest.mark.parametrize("case", range(len(BAD_PROFILES)))
def test_a_profile_json_with_a_bad_field_names_the_field_and_its_type(invocations, case):
    path = invocations[("profile", case)]
    line = _one_line(OVERLAP, invocations[("bad-profile", case)])
    assert f"--profile {path}: device profile: " in line
    for needle in BAD_PROFILES[case][1]:
        assert needle in line
    assert "positional" not in line and "__init__" not in line


@pytest.mark.slow
def test_a_folder_that_takes_no_files_is_said_in_our_words(invocations):
    line = _refusal(invocations, "json-in-proc")
    assert line.endswith("--json /proc/r.json: the folder /proc cannot be written (it takes no new files)")
    assert "No such file" not in line


@pytest.mark.slow
def test_a_hidden_size_the_heads_cannot_divide_is_refused(invocations):
    line = _refusal(invocations, "hidden-100")
    assert "--hidden 100 does not split into attention heads of 64" in line


@pytest.mark.slow
def test_scenarios_list_is_aligned(invocations):
    p = invocations["scenarios-list"]
    assert p.returncode == 0 and p.stderr == ""
    rows = [re.match(r"(\S+)( +)(\S.*)", line) for line in p.stdout.splitlines()]
    assert rows and all(rows)
    starts = {len(m.group(1)) + len(m.group(2)) for m in rows}
    assert len(starts) == 1, p.stdout  # every summary starts in the same column
    assert min(len(m.group(2)) for m in rows) >= 2  # and the longest name keeps a gap


def _help_of(p, flag: str) -> str:
    """The 400 characters of help text ``p`` (a finished ``--help``) from ``flag``'s entry on."""
    assert p.returncode == 0
    text = " ".join(p.stdout.split())
    start = text.index(f" {flag} ", text.index("options:"))
    return text[start : start + 400]


@pytest.mark.slow
@pytest.mark.parametrize("command", ["overlap", "validate-grid"])
def test_profile_help_says_a_name_or_a_json_file_from_calibrate(invocations, command):
    text = _help_of(invocations[f"{command}-help"], "--profile")
    assert "NAME|PATH.json" in text and "built-in name" in text and "JSON file from python -m demos.calibrate" in text


@pytest.mark.slow
def test_validate_repeats_help_says_what_it_does(invocations):
    text = _help_of(invocations["validate-grid-help"], "--repeats")
    assert "run each grid point this many times" in text and "3 with --quick, 1 without" in text


@pytest.mark.slow
def test_validate_help_lists_the_checks_and_the_default(invocations):
    p = invocations["validate-help"]
    assert p.returncode == 0 and p.stderr == ""
    text = " ".join(p.stdout.split())
    assert "grid is the default check" in text and "CHECK --help lists a check's flags" in text
    assert all(f" {c} " in text for c in ("grid", "h200", "deepep", "kernels", "silicon", "published"))


@pytest.mark.slow
@pytest.mark.parametrize(
    "command", ["overlap", "validate", "calibrate", "predict", "scenarios", "bench", "fits", "serving"]
)
def test_every_command_prints_its_help(invocations, command):
    """``--help`` of every command prints its usage and exits 0 (``demos.fits``' once raised: a ``%`` in
    its help text, which argparse formats)."""
    p = invocations[f"{command}-help"]
    assert (p.returncode, p.stderr) == (0, "") and p.stdout.startswith("usage: "), p.stderr[-300:]


# --- more bad inputs -----------------------------------------------------------------------------------


PREDICT = "demos.predict"
# kimi-k2 does not fit on the default one host of 8 H100: refused before any work, so a case that a bug
# accepts is refused at once in other words, not swept
KIMI = ["--model", "kimi-k2"]
EMPTY = "an empty item in the list {!r} (two commas in a row, or one at an end)"
NOPE = ["--profile", "nope"]  # refused by validate's grid after its flags, where a bug would accept the list
NEITHER = "no file or folder of that name exists, and no preset has that name (presets: deepseek-r1,"
THREE = "closed:CONCURRENCY:ISL:OSL takes three values, got {!r}"
HALF = (
    "error: --gpus-per-node 36 is 9 hosts of 4 (one gb200 host holds 4 GPUs): use --nodes 9 (4 GPUs per node) for "
    "36 GPUs"
)

BAD_INPUTS = (
    (OVERLAP, ["--layers", "-1"], "--layers must be a positive integer, got -1"),
    (OVERLAP, ["--comm-ratio", "abc"], "argument --comm-ratio: not a number: 'abc'"),
    (OVERLAP, ["--backend", "virtual", "--comm-ratio", "nan"], "--comm-ratio must be a positive number"),
    (OVERLAP, ["--backend", "tpu"], "argument --backend: invalid choice: 'tpu'"),
    (OVERLAP, ["--backend", "virtual", "--link", "fast"], "--link fast: unknown link profile 'fast'"),
    (OVERLAP, ["--dist-timeout", "5"], "--dist-timeout bounds the collectives between ranks"),
    (OVERLAP, ["--backend", "threads", "--meta"], "--meta skips the math"),
    (OVERLAP, ["--backend", "virtual", "--graph", "--schedule", "ht"], "--graph cannot capture --schedule ht"),
    (OVERLAP, ["--topk", "9"], "--topk (9) must not exceed --experts (8)"),
    (OVERLAP, ["--backend", "virtual", "--json", "{d}/a.json", "--trace", "{d}/a.json"], "the same file as --json"),
    (OVERLAP, ["--backend", "virtual", "--json", "{d}/no/r.json"], "the folder {d}/no does not exist"),
    ("demos.scenarios", ["no-such-scenario"], "unknown scenario 'no-such-scenario'"),
    ("demos.scenarios", ["--list", "late-event"], "--list takes no scenario names"),
    ("demos.scenarios", ["--bogus"], "unrecognized arguments: --bogus"),
    ("demos.validate", ["--repeats", "0"], "argument --repeats: expected a positive integer, got '0'"),
    ("demos.validate", ["--ratios", "1,x"], "expected a comma-separated list of numbers"),
    ("demos.validate", ["grid", "--steps", "0"], "argument --steps: expected a positive integer, got '0'"),
    ("demos.validate", ["bogus"], "argument CHECK: invalid choice: 'bogus'"),
    ("demos.validate", ["kernels", "--quick"], "kernels takes no --quick (python -m demos.validate kernels --help"),
    ("demos.validate", ["silicon", "--kernels", "bogus"], "argument --kernels: invalid choice: 'bogus'"),
    ("demos.validate", ["--silicon", "--silicon-kernels", "bogus"], "argument --silicon-kernels: invalid choice"),
    ("demos.validate", ["grid", "--ablation"], "grid takes no --ablation (--ablation goes with the published check"),
    ("demos.validate", ["--ablation"], "grid takes no --ablation (--ablation goes with the published check"),
    ("demos.validate", ["published", "--profile", "h200"], "published uses the zoo's GPU profiles"),
    ("demos.validate", ["h200", "--no-progress"], "h200 takes no --no-progress (h200 shows no progress line)"),
    ("demos.validate", ["h200", "--profile", "nope"], "--profile: unknown device profile 'nope'"),
    ("demos.validate", ["deepep", "kernels"], "deepep takes no kernels (one check per run, named first"),
    ("demos.validate", ["--kernels", "--json", "{d}/no/k.json"], "the folder {d}/no does not exist"),  # no note
    ("demos.validate", ["published", "--json", "{d}"], "is a folder"),
    ("demos.calibrate", ["-o", "/proc/p.json"], "-o /proc/p.json: the folder /proc cannot be written"),
    ("demos.calibrate", ["-o", "{d}/p.txt"], "must end in .json"),
    # issue 47: an empty list item is a typo, never dropped; every comma-separated flag says so
    (PREDICT, [*KIMI, "--tokens", "8,16,,32"], f"argument --tokens: {EMPTY.format('8,16,,32')}"),
    (PREDICT, [*KIMI, "--tokens", "8,16,"], f"argument --tokens: {EMPTY.format('8,16,')}"),
    (PREDICT, [*KIMI, "--ubatches", "2,,3"], f"argument --ubatches: {EMPTY.format('2,,3')}"),
    (PREDICT, [*KIMI, "--phase", "prefill", "--comm-sms", "20,,24"], f"argument --comm-sms: {EMPTY.format('20,,24')}"),
    (PREDICT, [*KIMI, "--overlap", "none,,dbo"], f"argument --overlap: {EMPTY.format('none,,dbo')}"),
    ("demos.validate", [*NOPE, "--sizes", "8,,16"], f"argument --sizes: {EMPTY.format('8,,16')}"),
    ("demos.validate", ["grid", *NOPE, "--ratios", "1,"], f"argument --ratios: {EMPTY.format('1,')}"),
    ("demos.validate", [*NOPE, "--schedules", "ll,,ht"], f"argument --schedules: {EMPTY.format('ll,,ht')}"),
    # token counts: k = 1024 and M = 1024 x 1024 where they make a whole count, nothing else
    (PREDICT, [*KIMI, "--tokens", "0.3k"], "argument --tokens: not a whole number of tokens: '0.3k' is 307.2"),
    (PREDICT, [*KIMI, "--context", "4m"], "argument --context: not a token count: '4m' (an integer, or one with k"),
    (OVERLAP, [*KIMI, "--tokens", "2kk"], "argument --tokens: not a token count: '2kk'"),
    # --model: a path that exists is read as a file (README.md is one), a folder for its config.json,
    # and a name that is neither an existing path nor a preset says both
    (PREDICT, ["--model", "README.md"], "error: --model: README.md: not valid JSON: Expecting value at line 1"),
    (PREDICT, ["--model", "{d}"], "error: --model {d}: a folder without a config.json"),
    (PREDICT, ["--model", "nope"], f"error: --model nope: {NEITHER}"),
    (PREDICT, ["--model", "{d}/nope.json"], f"error: --model {{d}}/nope.json: {NEITHER}"),
    (OVERLAP, ["--model", "nope"], f"error: --model nope: {NEITHER}"),
    # a node is one host: a rack or two HGX boxes typed as one are refused with the hosts' spelling
    (PREDICT, [*KIMI, "--gpu", "gb200", "--nodes", "1", "--gpus-per-node", "36", "--ep", "36", "--tokens", "8"], HALF),
    (OVERLAP, ["--model", "kimi-k2", "--gpu", "GB200", "--gpus-per-node", "36"], HALF),
    # issue 44, item 3: a workload SPEC is read before any work, and the run's flags only with one
    (PREDICT, [*KIMI, "--workload", "closed:64:1k"], f"error: --workload: {THREE.format('closed:64:1k')}"),
    (PREDICT, [*KIMI, "--workload", "open:8:1k:1k"], "error: --workload: expected closed:CONCURRENCY:ISL:OSL, poisson"),
    (PREDICT, [*KIMI, "--workload", "poisson:0:1k:1k"], "RATE must be a positive number of requests per second"),
    (PREDICT, [*KIMI, "--workload", "closed:8:1k:4m"], "ISL and OSL: not a token count: '4m'"),
    (PREDICT, [*KIMI, "--engine", "sglang"], "error: --engine shapes a workload run: give --workload too"),
    (PREDICT, [*KIMI, "--requests", "8"], "error: --requests shapes a workload run: give --workload too"),
    (PREDICT, [*KIMI, "--workload", "closed:8:1k:1k", "--phase", "prefill"], "it takes --phase decode, not prefill"),
    (
        PREDICT,
        ["--model", "deepseek-v2-lite", "--tokens", "8", "--workload", "trace:{d}/none.csv"],
        "error: --workload trace:{d}/none.csv: {d}/none.csv: no such file",
    ),
    (
        PREDICT,
        [*KIMI, "--gpu", "H100", "--gpus-per-node", "16"],
        "error: --gpus-per-node 16 is 2 hosts of 8 (one h100 host holds 8 GPUs): use --nodes 2 (8 GPUs per node) "
        "for 16 GPUs",
    ),
)
"""(command, its arguments, what the refusal must say); ``{d}`` is a folder of the module's own."""


@pytest.mark.slow
@pytest.mark.parametrize("case", range(len(BAD_INPUTS)), ids=[f"{m}-{' '.join(a)}" for m, a, _ in BAD_INPUTS])
def test_a_bad_input_is_one_line_and_exit_2(invocations, case):
    module, _, needle = BAD_INPUTS[case]
    line = _one_line(module, invocations[("bad-input", case)])
    assert needle.format(d=invocations["d"]) in line


@pytest.mark.slow
def test_a_batched_invocation_is_what_its_own_process_gives():
    """The batch (one interpreter, each command run as ``__main__`` in turn) against a process per case, on
    one refusal and one success of two commands: the same status, stdout and stderr. The bugs this
    catches: a batch that loses the status (every case 0) or what the command wrote, and a command that
    carries state into the next one run in the same interpreter (its name in the other's messages)."""
    lines = [(PREDICT, ["--gpu", "h900"]), (OVERLAP, ["--layers", "-1"]), (PREDICT, ["--help"])]
    for batched, (module, args) in list(zip(run_lines(lines), lines))[1:]:  # each after the other command
        own = _run(module, *args)
        assert (batched.returncode, batched.stdout, batched.stderr) == (own.returncode, own.stdout, own.stderr)


# --- validate's checks (subcommands, the old flags as aliases) and the bench's flags (issue 24) -----------


@pytest.mark.slow
def test_validate_h200_honours_profile(invocations):
    p = invocations["validate-h200-cpu"]
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert p.stdout.startswith("--profile cpu profile vs the H200 measurements")


@pytest.mark.slow
def test_validate_old_spelling_is_the_same_run_and_one_note(invocations):
    """``--h200`` as ``python -m`` runs it: the same stdout as ``h200``, and one line on stderr naming the new
    spelling (written after the run, so that a refusal stays one line)."""
    new, old = invocations["validate-h200-cpu"], invocations["validate-old-h200-cpu"]
    assert old.returncode == 0 and old.stdout == new.stdout
    assert old.stderr.splitlines() == ["python -m demos.validate: note: --h200 is now 'python -m demos.validate h200'"]


@pytest.mark.slow
@pytest.mark.parametrize("spelling", ["", "old-"])
def test_validate_deepep_refuses_a_profile_it_would_not_use(invocations, spelling):
    line = _refusal(invocations, f"validate-{spelling}deepep-profile")
    assert line.endswith(
        "deepep takes no --profile h200 (deepep checks the all-to-all model against DeepEP's "
        "tables; it uses no device profile)"
    )


@pytest.mark.slow
def test_validate_old_check_flags_together_are_refused(invocations):
    line = _refusal(invocations, "validate-deepep-h200")
    assert line.endswith("--deepep and --h200 are separate checks: pass one of them")


@pytest.mark.slow
def test_bench_bad_flag_is_one_line(invocations):
    assert "--sectoin" in _refusal(invocations, "bench-bad-flag")


# --- resource limits known before the work (issue 24, item 2) ---------------------------------------------


_PEAK = (
    "import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
    "print('peak_kib', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); "
    "sys.exit(r.returncode)"
)
"""A fresh parent that runs one command and prints its peak resident memory: ``RUSAGE_CHILDREN`` of the test
process itself is the largest of every child it has waited for (another test's subprocess may have peaked
higher in the same worker, which failed this test once under the full suite)."""


@pytest.mark.slow
def test_a_two_million_token_virtual_step_runs_in_bounded_memory():
    p = subprocess.run(
        [sys.executable, "-c", _PEAK, sys.executable, "-m", OVERLAP, "--backend", "virtual", "--tokens", "2000000",
         "--layers", "1", "--steps", "1", "--warmup", "1"],
        cwd=ROOT, env=python_env(), capture_output=True, text=True, timeout=slack(120),
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "meta: math skipped" in p.stdout
    peak_kib = int(p.stderr.rsplit("peak_kib", 1)[1].split()[0])
    assert 0 < peak_kib < 2 * 2**20  # under 2 GiB (a real step would need tens of GB)


@pytest.mark.slow
def test_a_run_that_cannot_fit_is_refused_with_the_estimate(invocations):
    line = _refusal(invocations, "cannot-fit")
    assert "GiB" in line and "available" in line and "--tokens" in line


def test_an_allocation_failure_is_one_line(monkeypatch, capsys):
    import demos.overlap as overlap

    def boom(cfg, **kw):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:121] data. DefaultCPUAllocator: can't allocate memory")

    monkeypatch.setattr(overlap, "run", boom)
    assert overlap.main(SMALL) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "ran out of memory" in err[0] and "can't allocate memory" in err[0]


def test_the_model_beats_once_per_layer_of_every_ubatch():
    from demos.toy.run import run

    beats = []
    res = run(
        OverlapConfig(backend="virtual", layers=3, tokens=32, hidden=32, experts=2, steps=1, warmup=1),
        on_layer=lambda i, n: beats.append((i, n)),
    )
    assert res is not None and beats and all(n == 3 for _, n in beats)
    assert len(beats) % 3 == 0 and [i for i, _ in beats[:3]] == [0, 1, 2]


def test_progress_on_a_pipe_is_a_line_every_few_seconds(monkeypatch):
    import io

    from demos._cli import ProgressLine

    clock = [100.0]
    monkeypatch.setattr("demos._cli._progress.time.perf_counter", lambda: clock[0])
    out = io.StringIO()
    line = ProgressLine(out, every=5.0)
    for _ in range(3):
        line("working")  # within 5 s of the start: nothing
    clock[0] += 6
    line("still working")
    clock[0] += 1
    line("and more")  # 1 s after the last line: nothing
    assert out.getvalue().splitlines() == ["[   6.0 s] still working"]
    quiet = io.StringIO()
    ProgressLine(quiet)("no every: a pipe gets nothing")
    assert quiet.getvalue() == ""
