"""``python -m demos.gpu_check OUT``: one bounded run of everything that needs a GPU, and a summary of
the targets (docs/gpu.md, "The GPU check: one call").

    bash scripts/gpu_check.sh OUT        (the same under an outer timeout; or: python -m demos.gpu_check OUT)

Runs, in this order, each under its own time limit and all under one budget (``GPU_CHECK_BUDGET_S``,
default 480 s; a step that would start with under ``MIN_STEP_S`` left is NOT RUN):

1. the cuda-marked tests (``pytest -m cuda -rA``)                      -> OUT/cuda-tests.txt
2. the demo, ll, comm ratio 1, eager                                 -> OUT/demo-eager.json
3. the same with ``--graph`` (CUDA-graph replay of the steps)        -> OUT/demo-graph.json
4. ``--graph`` at ``--tokens 4096 --hidden 2048``                    -> OUT/demo-big.json
5. the bench's host section (host µs per kernel, eager vs replayed)  -> OUT/bench-host.json
6. the whole test suite (``pytest -q``), with the time that is left  -> OUT/suite.txt

The demos' and the bench's text output goes to OUT/log.txt; the summary to OUT/summary.txt and
stdout. Eight files at most, all directly in OUT. Exit status 1 if a target FAILed, else 0.

Targets (each PASS, FAIL or NOT RUN, with the figures behind it):

* eager DBO ll step: 0 host syncs (the cuda test ``test_eager_dbo_ll_step_makes_no_host_sync``);
* ``--graph``, default config: DBO beats no DBO, and its speedup reaches >= 90% of that run's
  ideal, ideal = (compute without DBO + comm) / max(compute with DBO, comm), from the same run's
  kernel times (``compute_s``, ``comm_s``, ``compute_dbo_s`` of its JSON);
* ``--graph`` at 4096 tokens, hidden 2048: DBO >= 1.5x faster;
* eager DBO host µs per kernel <= 1.15x no DBO (the bench's ``eager, DBO`` ratio, every workload);
* the cuda tests and the whole suite pass.

A dry run on a CPU proves the plumbing: ``GPU_CHECK_BACKEND=threads`` runs the demos and the bench
on threads; ``GPU_CHECK_BIG`` replaces the large shape's flags, ``GPU_CHECK_QUICK=1`` shortens the
demo runs (``QUICK_DEMO``: 2 steps of 2 layers, named in the default config's title) and the bench's,
``GPU_CHECK_SKIP`` (comma-separated step names: cuda-tests, demo-eager, demo-graph, demo-big,
bench-host, suite) leaves steps out (NOT RUN).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import demos._cli as cli_common

PROG = "python -m demos.gpu_check"

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIN_STEP_S = 20.0
GRAPH_FRACTION = 0.9
BIG_SPEEDUP = 1.5
HOST_RATIO = 1.15
SYNC_TEST = "test_sync_free_cuda.py::test_eager_dbo_ll_step_makes_no_host_sync[default]"
OUTPUTS = (
    "cuda-tests.txt",
    "demo-eager.json",
    "demo-graph.json",
    "demo-big.json",
    "bench-host.json",
    "suite.txt",
    "log.txt",
    "summary.txt",
)
QUICK_DEMO = ["--steps", "2", "--layers", "2"]
"""What ``GPU_CHECK_QUICK=1`` adds to every demo run (a dry run's shortening, named in the default
config's title)."""
STEPS = ("cuda-tests", "demo-eager", "demo-graph", "demo-big", "bench-host", "suite")


@dataclass
class StepRun:
    name: str
    rc: int | None = None  # None: not run
    seconds: float = 0.0
    timed_out: bool = False
    why_not: str = ""
    tail: str = ""  # the last lines of its output

    @property
    def ran(self) -> bool:
        return self.rc is not None


@dataclass
class Verdict:
    target: str
    status: str  # PASS, FAIL, NOT RUN
    detail: str = ""

    def line(self) -> str:
        return f"{self.status:<7}  {self.target}" + (f": {self.detail}" if self.detail else "")


@dataclass
class Options:
    out: str
    backend: str = "cuda"
    big: list[str] = field(default_factory=lambda: ["--tokens", "4096", "--hidden", "2048"])
    quick: bool = False
    skip: set[str] = field(default_factory=set)
    budget_s: float = 480.0

    @classmethod
    def from_env(cls, out: str, env: dict[str, str]) -> "Options":
        skip = {s.strip() for s in env.get("GPU_CHECK_SKIP", "").split(",") if s.strip()}
        unknown = skip - set(STEPS)
        if unknown:
            raise ValueError(f"GPU_CHECK_SKIP names unknown steps {sorted(unknown)}; known: {', '.join(STEPS)}")
        opts = cls(
            out=out, backend=env.get("GPU_CHECK_BACKEND", "cuda"), quick=env.get("GPU_CHECK_QUICK") == "1", skip=skip
        )
        if env.get("GPU_CHECK_BIG"):
            opts.big = env["GPU_CHECK_BIG"].split()
        if env.get("GPU_CHECK_BUDGET_S"):
            try:
                opts.budget_s = float(env["GPU_CHECK_BUDGET_S"])
            except ValueError:
                raise ValueError(
                    f"GPU_CHECK_BUDGET_S must be a number of seconds, got {env['GPU_CHECK_BUDGET_S']!r}"
                ) from None
        return opts


# ---------------------------------------------------------------------- running the steps


@contextlib.contextmanager
def _signals_held() -> Iterator[list[int]]:
    """SIGINT and SIGTERM recorded, not handled, inside the block (the main thread's handlers are back
    after it; elsewhere nothing is held): the list of the signals that came."""
    held: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield held
        return
    old = {s: signal.signal(s, lambda signum, frame: held.append(signum)) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield held
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def _run(cmd: list[str], out_path: str, mode: str, limit_s: float) -> tuple[int, bool, str]:
    """Run ``cmd`` in its own process group, output to ``out_path``; kill the group past ``limit_s``, and on
    Ctrl-C or SIGTERM (the group does not get the terminal's signal: it is killed, then the interrupt goes
    on)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with open(out_path, mode) as f:
        f.write(f"\n$ {' '.join(cmd)}   (limit {limit_s:.0f} s)\n")
        f.flush()
        with _signals_held() as held:  # an interrupt inside Popen would leave the started step unkilled
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        timed_out = False
        try:
            if held:
                signal.raise_signal(held[0])  # now that the step can be killed: its handler raises here
            rc = proc.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait()
            f.write(f"\n[gpu_check] killed after {limit_s:.0f} s\n")
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    with open(out_path, errors="replace") as f:
        tail = "".join(f.readlines()[-5:])
    return rc, timed_out, tail


def plan(o: Options) -> list[tuple[str, list[str], str, float]]:
    """(name, command, output file, time limit) of every step, in order."""
    py = sys.executable
    demo = [py, "-m", "demos.overlap", "--backend", o.backend, "--schedule", "ll", "--comm-ratio", "1"]
    if o.quick:
        demo += QUICK_DEMO
    log = os.path.join(o.out, "log.txt")
    bench = [
        py,
        "-m",
        "demos.bench",
        "--section",
        "host",
        "--backend",
        o.backend,
        "--json",
        os.path.join(o.out, "bench-host.json"),
    ]
    if o.quick:
        bench.append("--quick")
    return [
        (
            "cuda-tests",
            [py, "-m", "pytest", "-q", "-rA", "-m", "cuda", "-p", "no:cacheprovider"],
            os.path.join(o.out, "cuda-tests.txt"),
            120,
        ),
        ("demo-eager", demo + ["--json", os.path.join(o.out, "demo-eager.json")], log, 90),
        ("demo-graph", demo + ["--graph", "--json", os.path.join(o.out, "demo-graph.json")], log, 90),
        ("demo-big", demo + o.big + ["--graph", "--json", os.path.join(o.out, "demo-big.json")], log, 120),
        ("bench-host", bench, log, 120),
        ("suite", [py, "-m", "pytest", "-q", "-p", "no:cacheprovider"], os.path.join(o.out, "suite.txt"), 330),
    ]


def run_steps(o: Options) -> dict[str, StepRun]:
    start = time.monotonic()
    runs: dict[str, StepRun] = {}
    for name, cmd, path, limit in plan(o):
        r = runs[name] = StepRun(name)
        left = o.budget_s - (time.monotonic() - start)
        if name in o.skip:
            r.why_not = "skipped (GPU_CHECK_SKIP)"
        elif left < MIN_STEP_S:
            r.why_not = f"out of time ({left:.0f} s of the {o.budget_s:.0f} s budget left)"
        if r.why_not:
            print(f"[gpu_check] {name}: NOT RUN, {r.why_not}", flush=True)
            continue
        limit = min(limit, left)
        print(f"[gpu_check] {name} (limit {limit:.0f} s) ...", flush=True)
        t0 = time.monotonic()
        r.rc, r.timed_out, r.tail = _run(cmd, path, "a", limit)
        r.seconds = time.monotonic() - t0
        print(
            f"[gpu_check] {name}: rc {r.rc} in {r.seconds:.0f} s" + (" (timed out)" if r.timed_out else ""), flush=True
        )
    return runs


# ---------------------------------------------------------------------- judging


def _load(path: str) -> dict | None:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _not_run(target: str, step: StepRun | None, what: str = "") -> Verdict:
    if step is None or not step.ran:
        return Verdict(target, "NOT RUN", step.why_not if step is not None else "not planned")
    last = (step.tail.strip().splitlines() or [""])[-1]
    why = "timed out" if step.timed_out else f"{step.name} exited {step.rc}"
    return Verdict(target, "NOT RUN", f"{why}{what}: {last}")


def judge_sync(cuda_tests_text: str | None, step: StepRun | None) -> Verdict:
    t = "eager DBO ll step makes 0 host syncs"
    if cuda_tests_text is None or step is None or not step.ran:
        return _not_run(t, step)
    for line in cuda_tests_text.splitlines():
        if SYNC_TEST in line:
            if line.startswith("PASSED"):
                return Verdict(t, "PASS", "under torch.cuda.set_sync_debug_mode('error')")
            if line.startswith(("FAILED", "ERROR")):
                return Verdict(t, "FAIL", line.strip()[:300])
            if line.startswith("SKIPPED"):
                return Verdict(t, "NOT RUN", line.strip()[:200])
    return _not_run(t, step, f", no result for {SYNC_TEST}")


def ideal_speedup(rep: dict) -> float | None:
    """(compute without DBO + comm) / max(compute with DBO, comm), from the run's kernel times."""
    try:
        c, m, cd = float(rep["compute_s"]), float(rep["comm_s"]), float(rep["compute_dbo_s"])
    except (KeyError, TypeError, ValueError):
        return None
    den = max(cd, m)
    return (c + m) / den if den > 0 else None


def _times(rep: dict) -> str:
    return f"no DBO {rep['time_no_dbo_s'] * 1e3:.2f} ms, DBO {rep['time_dbo_s'] * 1e3:.2f} ms"


def judge_graph(rep: dict | None, step: StepRun | None, quick: bool = False) -> Verdict:
    shape = f" (quick: {' '.join(QUICK_DEMO)})" if quick else ""
    t = f"--graph, default config{shape}: DBO beats no DBO and reaches >= {GRAPH_FRACTION:.0%} of the ideal speedup"
    if rep is None:
        return _not_run(t, step, ", no JSON")
    s, ideal = rep.get("speedup"), ideal_speedup(rep)
    if s is None or ideal is None:
        return Verdict(t, "FAIL", f"the JSON lacks the speedup or the kernel times (speedup {s}, ideal {ideal})")
    ok = s > 1.0 and s >= GRAPH_FRACTION * ideal
    detail = f"{_times(rep)}, speedup {s:.3f}x, ideal {ideal:.3f}x, {s / ideal:.0%} of it"
    return Verdict(t, "PASS" if ok else "FAIL", detail + _above_ideal(s, ideal) + _graph_note(rep))


def _above_ideal(s: float, ideal: float | None) -> str:
    """A speedup over the ideal means the kernel times behind the ideal do not describe these steps
    (with --graph they come from the run's eager traced steps)."""
    if ideal is None or s <= 1.05 * ideal:
        return ""
    return " (note: above the ideal: the kernel times behind it are not these steps')"


def judge_big(rep: dict | None, step: StepRun | None, big: list[str]) -> Verdict:
    t = f"--graph at {' '.join(big)}: DBO >= {BIG_SPEEDUP}x faster"
    if rep is None:
        return _not_run(t, step, ", no JSON")
    s = rep.get("speedup")
    if s is None:
        return Verdict(t, "FAIL", "the JSON has no speedup")
    ideal = ideal_speedup(rep)
    more = f", ideal {ideal:.3f}x" if ideal is not None else ""
    note = _above_ideal(s, ideal) + _graph_note(rep)
    return Verdict(t, "PASS" if s >= BIG_SPEEDUP else "FAIL", f"{_times(rep)}, speedup {s:.3f}x{more}{note}")


def _graph_note(rep: dict) -> str:
    graph = rep.get("graph", (rep.get("config") or {}).get("graph"))
    return "" if graph else " (note: the JSON does not say graph mode: these may be eager steps)"


def judge_host(bench: dict | None, step: StepRun | None) -> Verdict:
    t = f"eager DBO host us per kernel <= {HOST_RATIO}x no DBO"
    if bench is None:
        return _not_run(t, step, ", no JSON")
    recs = [
        r for r in bench.get("records", []) if r.get("section") == "host" and r.get("name", "").endswith(": eager, DBO")
    ]
    if not recs:
        return Verdict(t, "FAIL", "the bench JSON has no eager DBO record")
    parts, ok = [], True
    for r in recs:
        ratio = r.get("ratio")
        ok = ok and ratio is not None and ratio <= HOST_RATIO
        workload = r["name"].removesuffix(": eager, DBO")
        parts.append(
            f"{workload} {r['value']:.2f} us/kernel = {ratio:.3f}x" if ratio is not None else f"{workload} no ratio"
        )
    for r in bench.get("records", []):
        if r.get("name", "").endswith(": eager, DBO, stream context per launch") and r.get("value") is not None:
            parts.append(
                f"{r['name'].removesuffix(', stream context per launch')} with the old launch path "
                f"{r['value']:.2f} us/kernel"
            )
    replay = [r for r in bench.get("records", []) if r.get("name", "").endswith(": replayed, DBO")]
    for r in replay:
        v = r.get("value")
        parts.append(
            f"{r['name']} " + (f"{v:.2f} us/kernel" if v is not None else f"not capturable ({r.get('baseline')})")
        )
    return Verdict(t, "PASS" if ok else "FAIL", "; ".join(parts))


def judge_pytest(name: str, step: StepRun | None) -> Verdict:
    t = f"{name} pass"
    if step is None or not step.ran:
        return _not_run(t, step)
    last = (step.tail.strip().splitlines() or [""])[-1].strip()
    if step.timed_out:
        return Verdict(t, "FAIL", f"timed out after {step.seconds:.0f} s: {last}")
    if step.rc == 0:
        if not re.search(r"\b\d+ passed\b", last):  # everything skipped (no GPU) is no pass
            return Verdict(t, "NOT RUN", f"nothing passed: {last}")
        return Verdict(t, "PASS", last)
    if step.rc == 5:  # pytest: nothing collected (no cuda test selected)
        return Verdict(t, "NOT RUN", last)
    return Verdict(t, "FAIL", f"rc {step.rc}: {last}")


def judge(o: Options, runs: dict[str, StepRun]) -> list[Verdict]:
    def text(path: str) -> str | None:
        try:
            with open(path, errors="replace") as f:
                return f.read()
        except OSError:
            return None

    p = lambda name: os.path.join(o.out, name)  # noqa: E731
    return [
        judge_sync(text(p("cuda-tests.txt")), runs.get("cuda-tests")),
        judge_graph(_load(p("demo-graph.json")), runs.get("demo-graph"), o.quick),
        judge_big(_load(p("demo-big.json")), runs.get("demo-big"), o.big),
        judge_host(_load(p("bench-host.json")), runs.get("bench-host")),
        judge_pytest("the cuda-marked tests", runs.get("cuda-tests")),
        judge_pytest("the whole suite", runs.get("suite")),
    ]


def eager_line(rep: dict | None) -> str:
    if rep is None:
        return "eager demo (ll, comm ratio 1): no JSON"
    ideal = ideal_speedup(rep)
    more = f", ideal {ideal:.3f}x" if ideal is not None else ""
    return f"eager demo (ll, comm ratio 1): {_times(rep)}, speedup {rep.get('speedup', float('nan')):.3f}x{more}"


def summary(o: Options, runs: dict[str, StepRun], verdicts: list[Verdict]) -> str:
    lines = [f"gpu_check on backend {o.backend} (budget {o.budget_s:.0f} s)", ""]
    lines += [v.line() for v in verdicts]
    lines += ["", eager_line(_load(os.path.join(o.out, "demo-eager.json"))), "", "steps:"]
    for r in runs.values():
        state = (
            f"rc {r.rc}, {r.seconds:.0f} s" + (", timed out" if r.timed_out else "")
            if r.ran
            else f"NOT RUN ({r.why_not})"
        )
        lines.append(f"  {r.name:<11} {state}")
    return "\n".join(lines) + "\n"


def build_parser() -> cli_common.OneLineParser:
    p = cli_common.OneLineParser(
        prog=PROG,
        description="Run everything that needs a GPU, each step under its own time limit and all under one budget, "
        "and print each target's PASS, FAIL or NOT RUN (docs/gpu.md). The environment sets the rest: "
        "GPU_CHECK_BUDGET_S, GPU_CHECK_BACKEND (threads: a dry run on a CPU), GPU_CHECK_QUICK=1, GPU_CHECK_BIG, "
        f"GPU_CHECK_SKIP (steps: {', '.join(STEPS)}).",
    )
    p.add_argument("out", metavar="OUT", help=f"the folder of its files (at most {len(OUTPUTS)}; made if missing)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the steps, write the summary; exit status 1 if a target FAILed, 2 for bad arguments, else 0."""
    parser = build_parser()
    try:
        ns = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    try:
        o = Options.from_env(os.path.abspath(ns.out), dict(os.environ))
    except ValueError as e:
        sys.stderr.write(f"{PROG}: error: {e}\n")
        return cli_common.EXIT_USAGE
    try:
        if os.path.exists(o.out) and not os.path.isdir(o.out):
            raise NotADirectoryError(0, "not a folder")
        os.makedirs(o.out, exist_ok=True)
    except OSError as e:
        sys.stderr.write(f"{PROG}: error: OUT {ns.out}: {e.strerror or e}; give a folder (made if missing)\n")
        return cli_common.EXIT_USAGE
    for name in OUTPUTS:  # a folder used before: no stale result may pass for this run's
        path = os.path.join(o.out, name)
        if os.path.exists(path):
            os.remove(path)
    runs = run_steps(o)
    verdicts = judge(o, runs)
    text = summary(o, runs, verdicts)
    with open(os.path.join(o.out, "summary.txt"), "w") as f:
        f.write(text)
    print(text, end="")
    return 1 if any(v.status == "FAIL" for v in verdicts) else 0


if __name__ == "__main__":
    sys.exit(cli_common.run_main(main, PROG))
