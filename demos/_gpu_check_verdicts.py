"""The verdicts of ``python -m demos.gpu_check`` (docs/gpu.md, "The GPU check: one call"): each target's
PASS, FAIL or NOT RUN drawn from the files its steps wrote and from how each step ran, and the summary.
Only the standard library is imported here, as in the command.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from demos._gpu_check_plan import QUICK_DEMO, Options, StepRun

GRAPH_FRACTION = 0.9
BIG_SPEEDUP = 1.5
HOST_RATIO = 1.15
SYNC_TEST = "test_sync_free_cuda.py::test_eager_dbo_ll_step_makes_no_host_sync[default]"


@dataclass
class Verdict:
    target: str
    status: str  # PASS, FAIL, NOT RUN
    detail: str = ""

    def line(self) -> str:
        return f"{self.status:<7}  {self.target}" + (f": {self.detail}" if self.detail else "")


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
