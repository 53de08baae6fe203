"""Capture and replay pass ``launch``'s keywords on whole: the recording proxy hands the real stream
the ``KernelSpec`` ``Stream.launch`` built, the recorder keeps it, and the replay launches it again.

(The keyword set itself, written once: tests/streams/test_launch_keywords.py.)
"""

from __future__ import annotations

from typing import Any

import pytest

import dbo
from dbo import UBatchOrchestrator
from dbo.streams.base import KernelSpec

CPU_BACKENDS = ["threads", "virtual", "inline"]
EVERY = {"name": "k0", "kind": "comm", "cost": 1e-6, "op": "x_op", "layer": 7}  # no field at its default


def _noop(*args: Any) -> None:
    pass


def _spy(monkeypatch: pytest.MonkeyPatch, cls: type) -> list[tuple[str, KernelSpec]]:
    """(stream name, spec) of every ``cls._launch`` call from now on (it still runs)."""
    seen: list[tuple[str, KernelSpec]] = []
    real = cls._launch

    def spy(self: Any, fn: Any, args: tuple, spec: KernelSpec) -> None:
        seen.append((self.name, spec))
        real(self, fn, args, spec)

    monkeypatch.setattr(cls, "_launch", spy)
    return seen


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_capture_and_replay_pass_every_keyword(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with UBatchOrchestrator(num_ubatches=2, backend=backend) as orch:
        seen = _spy(monkeypatch, type(orch.backend.streams[0]))

        def step(x: Any) -> Any:
            dbo.launch(_noop, x, **EVERY)
            return x

        with orch.capture(step, [1, 2]) as cs:
            assert [spec for _, spec in seen] == [KernelSpec(**EVERY)] * 2
            seen.clear()
            cs.replay()
            assert [spec for _, spec in seen] == [KernelSpec(**EVERY)] * 2


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_a_captured_launch_without_kind_takes_its_streams_role(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """As in an eager step: a kernel launched on a comm stream without ``kind`` is a comm kernel, in
    the capture and in its replay. (The recording proxy used to restate launch's keywords with its
    own default, ``kind="compute"``, and a captured step's comm kernels ran as compute kernels.)"""
    with UBatchOrchestrator(num_ubatches=2, backend=backend) as orch:
        seen = _spy(monkeypatch, type(orch.backend.streams[0]))

        def step(x: Any) -> Any:
            dbo.dbo_switch_to_comm()
            dbo.current_stream().launch(_noop, x, name="send")
            dbo.dbo_switch_to_compute()
            dbo.current_stream().launch(_noop, x, name="mm")
            return x

        orch.run(step, [1, 2])
        eager = sorted(seen)
        assert {(spec.name, spec.kind) for _, spec in eager} == {("send", "comm"), ("mm", "compute")}
        seen.clear()
        with orch.capture(step, [1, 2]) as cs:
            assert sorted(seen) == eager
            seen.clear()
            cs.replay()
            assert sorted(seen) == eager
