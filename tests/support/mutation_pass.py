"""A small hand-written mutation pass over dbo/orchestrator.py and dbo/_context.py.

Each mutant replaces one exact snippet (it must occur exactly once) in a copy of the source tree,
then runs the protocol test files on the copy (``-x``: the first failure catches it). The result
table is printed as Markdown; docs/testing.md ("Mutation pass: orchestrator and context") keeps
the last run's table.

    python tests/support/mutation_pass.py            # every mutant (several minutes)
    python tests/support/mutation_pass.py C3 O5      # just these
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = [
    "tests/runtime/test_context.py",
    "tests/runtime/test_orchestrator.py",
    "tests/stress/test_stress_liveness.py",
    "tests/runtime/test_interleavings.py",
    "tests/stress/test_noise.py",
    "tests/runtime/test_state_machine.py",
    "tests/toy/test_demo_overlap.py",
    "tests/failures/test_scenarios.py",
]
ORCH, CTX = "dbo/orchestrator.py", "dbo/_context.py"

# (id, file, what it breaks, old snippet, new snippet)
MUTANTS = [
    (
        "O1",
        ORCH,
        "run never releases its running lock",
        "        finally:\n            self._running.release()",
        "        finally:\n            pass",
    ),
    ("O2", ORCH, "ubatch 0 never gets the first turn", "                step.give_turn(0)\n", "                pass\n"),
    (
        "O3",
        ORCH,
        "an orchestrator failure after the barrier does not abort the step",
        "        except BaseException as exc:  # the orchestrator itself failed (or was interrupted)\n"
        "            step.abort(None, exc)",
        "        except BaseException as exc:  # the orchestrator itself failed (or was interrupted)\n            pass",
    ),
    (
        "O4",
        CTX,
        "a ubatch thread never marks itself done",
        "    finally:\n        step.mark_done()",
        "    finally:\n        pass",
    ),
    (
        "O5",
        CTX,
        "a ubatch thread does not unregister",
        "            if registry.dbo_enabled():\n                registry.unregister()",
        "            pass",
    ),
    (
        "O6",
        CTX,
        "user-raised UBatchAborted is not treated as a failure",
        "        if not step.aborted:  # raised by user code",
        "        if step.aborted:  # raised by user code",
    ),
    (
        "O7",
        ORCH,
        "streams are not recovered after a failed step",
        "        if step.failure is not None:\n            self._recover_streams()",
        "        if step.failure is not None:\n            pass",
    ),
    (
        "O8",
        ORCH,
        "the step timeout never fires",
        "if aborted_at is None and self.step_timeout is not None and now",
        "if False and now",
    ),
    (
        "O9",
        ORCH,
        "nested steps are not refused",
        "        if registry.dbo_enabled():\n            raise DBOError(",
        "        if False:\n            raise DBOError(",
    ),
    (
        "O10",
        ORCH,
        "results are returned before the streams are synchronized",
        "        try:\n"
        "            self.synchronize()\n"
        "        except BaseException as exc:\n"
        "            self._recover_streams()\n"
        '            raise UBatchFailed(f"a stream',
        "        try:\n"
        "            pass\n"
        "        except BaseException as exc:\n"
        "            self._recover_streams()\n"
        '            raise UBatchFailed(f"a stream',
    ),
    (
        "O11",
        ORCH,
        "the failed step's reference cycle is not broken",
        "            step.failure = None\n            step.contexts = []\n            step.threads = []\n",
        "",
    ),
    (
        "O12",
        ORCH,
        "the single-ubatch path does not restore the caller's stream on failure",
        "        except BaseException as exc:\n            set_stream(previous)\n            self._recover_streams()",
        "        except BaseException as exc:\n            self._recover_streams()",
    ),
    (
        "O13",
        ORCH,
        "the join grace is ignored (StepHung at once after an abort)",
        "now - aborted_at > self.join_grace",
        "now - aborted_at > 0",
    ),
    (
        "O14",
        ORCH,
        "the after_barrier fault hook is not called",
        '                    fault_hook("after_barrier", None)',
        "                    pass",
    ),
    (
        "C1",
        CTX,
        "abort does not wake the turn waiters",
        "        self.barrier.abort()\n"
        "        for lock in self._turn:\n"
        "            try:\n"
        "                lock.release()\n"
        "            except RuntimeError:\n"
        "                pass",
        "        self.barrier.abort()",
    ),
    (
        "C2",
        CTX,
        "abort does not break the start barrier",
        "        self.barrier.abort()\n        for lock",
        "        for lock",
    ),
    (
        "C3",
        CTX,
        "a later failure overwrites the first",
        "            if self.failure is None:\n                self.failure = (ubatch_id, exc)",
        "            self.failure = (ubatch_id, exc)",
    ),
    (
        "C4",
        CTX,
        "the step is declared done one ubatch early",
        "if self._done_count == self.num_ubatches:",
        "if self._done_count == self.num_ubatches - 1:",
    ),
    (
        "C5",
        CTX,
        "a wake without the turn is not reported as a broken invariant",
        "        if acquired:\n            raise DBOError(",
        "        if False:\n            raise DBOError(",
    ),
    (
        "C6",
        CTX,
        "wait_turn does not check who holds the turn",
        "        acquired = self._turn[ubatch_id].acquire(True, self.timeout)\n"
        "        if not acquired or self.aborted or self.holder != ubatch_id:\n"
        "            self._bad_wake(ubatch_id, acquired)\n"
        "        if self.tracer is not None:\n"
        "            self._run_since[ubatch_id] = self.clock()\n"
        "\n"
        "    def _bad_wake",
        "        acquired = self._turn[ubatch_id].acquire(True, self.timeout)\n"
        "        if not acquired or self.aborted:\n"
        "            self._bad_wake(ubatch_id, acquired)\n"
        "        if self.tracer is not None:\n"
        "            self._run_since[ubatch_id] = self.clock()\n"
        "\n"
        "    def _bad_wake",
    ),
    (
        "C7",
        CTX,
        "the turn arriving at the timeout is not taken",
        "        if self.holder == ubatch_id and self._turn[ubatch_id].acquire(True, 1.0):",
        "        if False:",
    ),
    (
        "C8",
        CTX,
        "an exited ubatch stays in the ring",
        "        self.exited[ubatch_id] = True\n"
        "        self._next = [self.next_live(i) for i in range(self.num_ubatches)]",
        "        self.exited[ubatch_id] = True",
    ),
    (
        "C9",
        CTX,
        "a recv hook parked on an exiting ubatch is dropped",
        "        self.maybe_run_recv_hook()\n        self.step.mark_exited",
        "        self.step.mark_exited",
    ),
    (
        "C10",
        CTX,
        "a recv hook for an exited ubatch is parked (never runs)",
        "        if step.exited[nxt] or target is self:",
        "        if target is self:",
    ),
    (
        "C11",
        CTX,
        "a second recv hook silently replaces a pending one",
        "        if target.recv_hook is not None:\n            raise RecvHookConflict(",
        "        if False:\n            raise RecvHookConflict(",
    ),
    (
        "C12",
        CTX,
        "a recv hook is not cleared after it runs",
        "            self.recv_hook = None\n            self.recv_hook_from = None",
        "            self.recv_hook_from = None",
    ),
    (
        "C13",
        CTX,
        "the done-event is recorded after the yield (covers the sibling's work)",
        "        done.record(src)\n        self.step.yield_turn(self.id)\n        set_stream(dst)",
        "        self.step.yield_turn(self.id)\n        done.record(src)\n        set_stream(dst)",
    ),
    (
        "C14",
        CTX,
        "switch_sync does not make the destination wait",
        "        set_stream(dst)\n        dst.wait_event(done)\n\n    def yield_and_switch",
        "        set_stream(dst)\n\n    def yield_and_switch",
    ),
    (
        "C15",
        CTX,
        "a ubatch starts on the wrong stream",
        "        self.step.wait_turn(self.id)\n        set_stream(self.compute_stream)",
        "        self.step.wait_turn(self.id)",
    ),
    (
        "C16",
        CTX,
        "a parked recv hook does not act for its registrar",
        "            with registry.acting_for(registrar):\n                hook()",
        "            hook()",
    ),
    (
        "C17",
        CTX,
        "a recv hook run at once does not act for its registrar",
        "            with registry.acting_for(self.id):\n                hook()\n            return",
        "            hook()\n            return",
    ),
    (
        "C18",
        CTX,
        "give_turn does not record the new holder",
        "        self.holder = ubatch_id\n        try:\n            self._turn[ubatch_id].release()",
        "        try:\n            self._turn[ubatch_id].release()",
    ),
]


def run_mutant(mid: str, path: str, old: str, new: str) -> tuple[str, str, float]:
    tmp = Path(tempfile.mkdtemp(prefix=f"mut-{mid}-"))
    try:
        for d in ("dbo", "workspace", "demos", "tests"):
            shutil.copytree(ROOT / d, tmp / d, ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(ROOT / "pyproject.toml", tmp / "pyproject.toml")
        src = (tmp / path).read_text()
        if src.count(old) != 1:
            return "not applied", f"snippet found {src.count(old)} times", 0.0
        (tmp / path).write_text(src.replace(old, new))
        started = time.monotonic()
        cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "--timeout", "60", *TESTS]
        try:
            # SIGINT back to its default: a tree started in the background inherits it ignored, and
            # then the Ctrl-C test (_thread.interrupt_main) fails whatever the mutant.
            proc = subprocess.run(
                cmd,
                cwd=tmp,
                capture_output=True,
                text=True,
                timeout=900,
                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
            )
        except subprocess.TimeoutExpired:
            return "caught", "whole run timed out", time.monotonic() - started
        took = time.monotonic() - started
        if proc.returncode == 0:
            return "SURVIVED", "", took
        failed = [ln.split(" ")[1] for ln in proc.stdout.splitlines() if ln.startswith(("FAILED", "ERROR"))]
        if not failed:
            return "caught", f"rc={proc.returncode}", took
        # Confirm: the failing test must fail again on its own (a timing-sensitive test that failed
        # only under load in a long sequence does not count as a catch).
        again = subprocess.run(
            [*cmd[: -len(TESTS)], failed[0]],
            cwd=tmp,
            capture_output=True,
            text=True,
            timeout=900,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        if again.returncode == 0:
            return "UNCONFIRMED", f"{failed[0]} failed in the sequence but passes alone", took
        return "caught", failed[0], took
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str]) -> int:
    chosen = [m for m in MUTANTS if not argv or m[0] in argv]
    print("| id | file | mutant | result | first failing test |")
    print("|---|---|---|---|---|")
    survived = 0
    for mid, path, what, old, new in chosen:
        result, detail, took = run_mutant(mid, path, old, new)
        survived += result != "caught"
        print(f"| {mid} | {Path(path).name} | {what} | {result} ({took:.0f} s) | {detail} |", flush=True)
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
