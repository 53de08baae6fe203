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

Here: the command line and running the steps. Its parts: ``demos._gpu_check_plan`` (the options, the steps
and what a step's run left) and ``demos._gpu_check_verdicts`` (the targets' verdicts and the summary).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Iterator, Sequence

import demos._cli as cli_common
from demos._gpu_check_plan import QUICK_DEMO, STEPS, Options, StepRun, plan
from demos._gpu_check_verdicts import (
    BIG_SPEEDUP,
    GRAPH_FRACTION,
    HOST_RATIO,
    SYNC_TEST,
    Verdict,
    eager_line,
    ideal_speedup,
    judge,
    judge_big,
    judge_graph,
    judge_host,
    judge_pytest,
    judge_sync,
    summary,
)

__all__ = [
    "BIG_SPEEDUP",
    "GRAPH_FRACTION",
    "HOST_RATIO",
    "MIN_STEP_S",
    "OUTPUTS",
    "PROG",
    "QUICK_DEMO",
    "ROOT",
    "STEPS",
    "SYNC_TEST",
    "Options",
    "StepRun",
    "Verdict",
    "build_parser",
    "eager_line",
    "ideal_speedup",
    "judge",
    "judge_big",
    "judge_graph",
    "judge_host",
    "judge_pytest",
    "judge_sync",
    "main",
    "plan",
    "run_steps",
    "summary",
]

PROG = "python -m demos.gpu_check"

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIN_STEP_S = 20.0
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
