"""The race mutation harness (used by tests/capture_races/test_race_mutants.py; ``python -m tests.support.race_mutants``
prints the table that docs/testing.md quotes).

A clean run of the demo model counts every call site of ``Stream.wait_event``,
``Stream.wait_stream`` and ``Event.record``; a mutant drops every call made at one site (as if the
line were deleted) and runs the same step under ``dbo.races``. A mutant is caught when the
detector reports at least one race. A site is ``(innermost caller outside dbo/streams,
the model line that led there)``: the record inside ``dbo_yield_and_switch_from_compute_to_comm``
called from the model's dispatch is a different mutant from the one called from its combine.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import sys
import threading
from typing import Any

import torch

import dbo
import workspace
from dbo import races
from dbo.streams import base as streams_base
from dbo.streams.inline import InlineEvent, InlineStream
from dbo.streams.threads import ThreadEvent, ThreadStream
from dbo.streams.virtual import VirtualEvent, VirtualStream
from tests.support.paths import ROOT

# A site's innermost caller is the first frame outside these (the stream layer, the capture guard, this file).
SKIPPED = (
    os.path.join(ROOT, "dbo", "streams") + os.sep,
    os.path.join(ROOT, "dbo", "capture", "_guard.py"),
    os.path.abspath(__file__),
)
MODEL = os.path.join(ROOT, "demos", "toy", "model.py")  # the model line that led to a site
_STDLIB = (os.path.abspath(threading.__file__), os.path.abspath(__import__("contextlib").__file__))


def _rel(path: str, line: int) -> str:
    return f"{os.path.relpath(path, ROOT)}:{line}"


def _site() -> tuple[str, str | None]:
    frame = sys._getframe(2)
    inner = model = None
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if inner is None and not path.startswith(SKIPPED) and path not in _STDLIB:
            inner = _rel(path, frame.f_lineno)
        if path == MODEL:
            model = _rel(path, frame.f_lineno)
            break
        frame = frame.f_back
    return inner or "<unknown>", model


class Mutator:
    """Counts the sync call sites; drops every call at the ``drop`` sites (``(op, site)`` keys: none
    for the clean run, one for a mutant, two for a pair)."""

    def __init__(self, *drop: tuple):
        self.drop = frozenset(drop)
        self.seen: collections.Counter = collections.Counter()
        self.dropped = 0
        self.cut_short = False  # the mutated step failed (threads: the race bit) before it ended
        self._tls = threading.local()
        self._saved: list[tuple[type, str, Any]] = []

    def _wrap(self, op: str, orig: Any) -> Any:
        mut = self

        def intercepted(obj: Any, *args: Any, **kwargs: Any) -> Any:
            if getattr(mut._tls, "depth", 0):  # inside an intercepted op (wait_stream's record + wait)
                return orig(obj, *args, **kwargs)
            key = (op, _site())
            mut.seen[key] += 1
            if key in mut.drop:
                mut.dropped += 1
                return None
            mut._tls.depth = 1
            try:
                return orig(obj, *args, **kwargs)
            finally:
                mut._tls.depth = 0

        return intercepted

    def __enter__(self) -> "Mutator":
        targets = [(c, "wait_event") for c in (VirtualStream, ThreadStream, InlineStream)]
        targets += [(c, "record") for c in (VirtualEvent, ThreadEvent, InlineEvent)]
        targets += [(streams_base.Stream, "wait_stream")]
        for cls, name in targets:
            orig = cls.__dict__[name]
            self._saved.append((cls, name, orig))
            setattr(cls, name, self._wrap(name, orig))
        return self

    def __exit__(self, *exc: Any) -> None:
        for cls, name, orig in reversed(self._saved):
            setattr(cls, name, orig)
        self._saved.clear()


class Orders:
    """Collects every kernel's ordering as the detector stamped it: (stream, seq, {stream: seq})."""

    def __init__(self) -> None:
        self.kernels: list[tuple] = []

    def __enter__(self) -> "Orders":
        names: dict[int, str] = {}

        def launched(stamp: Any) -> None:  # a races launch hook: the stamp's clock as of its launch
            names[stamp.sid] = stamp.stream
            order = tuple(sorted((names.get(k, k), v) for k, v in stamp.clock.items()))
            self.kernels.append((stamp.stream, stamp.seq, order))

        self._hook = launched
        races.add_launch_hook(launched)
        return self

    def __exit__(self, *exc: Any) -> None:
        races.remove_launch_hook(self._hook)


def demo_step(
    backend: str,
    schedule: str,
    layout: str,
    n: int,
    graph: bool = False,
    mutator: Mutator | None = None,
    orders: Orders | None = None,
) -> list:
    """Build the demo model small, run one warm-up step without DBO, then two DBO steps (or capture
    one and replay it twice) under ``dbo.races``; return the race findings."""
    from demos.toy.config import OverlapConfig, resolve
    from demos.toy.runner import Runner

    cfg = OverlapConfig(
        backend="virtual",
        schedule=schedule,
        stream_layout=layout,
        ubatches=n,
        layers=2,
        tokens=48,
        hidden=32,
        experts=4,
        meta=False,
        steps=1,
        warmup=1,
    )
    res = dataclasses.replace(resolve(cfg), backend=backend)
    runner = Runner(cfg, res)
    try:
        runner.step(False, traced=False)
        races.enable()
        try:
            with mutator if mutator is not None else _null(), orders if orders is not None else _null():
                try:
                    if graph:
                        step = runner.orch_n.capture(runner.model.forward, runner.split)
                        step.replay()
                        step.replay()
                        step.close()
                    else:
                        runner.step(True, traced=False)
                        runner.step(True, traced=False)
                except (dbo.UBatchFailed, dbo.StreamError):
                    # threads: the mutant's race really bit (a kernel read garbage indices and
                    # raised); what the detector saw before that still counts
                    if mutator is None:
                        raise
                    mutator.cut_short = True
            return races.findings()
        finally:
            races.disable()
    finally:
        runner.close()
        workspace.reset_workspace_manager()


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def mutants(schedule: str, layout: str, n: int = 2) -> list[tuple]:
    """The (op, site) keys a clean run calls, counted on the virtual backend."""
    m = Mutator()
    found = demo_step("virtual", schedule, layout, n, mutator=m)
    assert not found, f"clean run has races: {found[:2]}"
    return sorted(m.seen, key=str)


def run_mutants(
    backend: str, schedule: str, layout: str, n: int = 2, graph: bool = False
) -> list[tuple[Any, int, int, bool]]:
    """For each mutant: (key, calls dropped, races found, equivalent). A mutant is equivalent when
    every kernel launched with the very same ordering as in the clean run (the dropped op was
    redundant: another record/wait already gave the same order); it cannot be a race. Each pair of
    equivalent mutants is then also run as one mutant (key: a tuple of two keys)."""
    clean = Orders()
    assert not demo_step(backend, schedule, layout, n, graph=graph, orders=clean)

    def one(*keys: Any) -> tuple[int, int, bool]:
        # On threads a race can bite (a kernel reads garbage and raises) before the racing launch
        # the detector would have flagged: such a run says nothing about the detector (2 of 60
        # runs of one ht mutant pair ended so). Run it again, at most 3 times in all.
        for _ in range(3):
            m, o = Mutator(*keys), Orders()
            found = demo_step(backend, schedule, layout, n, graph=graph, mutator=m, orders=o)
            if found or not m.cut_short:
                break
        return m.dropped, len(found), o.kernels == clean.kernels

    out = []
    for key in mutants(schedule, layout, n):
        out.append((key, *one(key)))
    equivalent = [r[0] for r in out if r[3]]
    for i, a in enumerate(equivalent):
        for b in equivalent[i + 1 :]:
            out.append(((a, b), *one(a, b)))
    return out


def verdict(found: int, equivalent: bool) -> str:
    if found:
        return "caught"
    return "equivalent" if equivalent else "MISSED"


def describe(key: Any) -> str:
    if isinstance(key[0], tuple):
        return " + ".join(describe(k) for k in key)
    op, (inner, model) = key
    return f"{op} {inner} (model {model or '-'})"


def main() -> None:
    torch.manual_seed(0)
    for backend in ("virtual", "inline", "threads"):
        for schedule in ("ht", "ll"):
            for layout in ("per-ubatch", "shared"):
                rows = run_mutants(backend, schedule, layout)
                live = [r for r in rows if not r[3]]
                caught = sum(1 for r in live if r[2])
                print(
                    f"{backend} {schedule} {layout}: {caught}/{len(live)} non-equivalent mutants caught "
                    f"({len(rows) - len(live)} equivalent)"
                )
                for key, d, f, eq in rows:
                    print(f"   {verdict(f, eq):<10} {describe(key):<90} dropped {d:3d}  races {f}")


if __name__ == "__main__":
    main()
