"""The race detector and the workspace sanitizer skip the same ops: one list, ``dbo.races.METADATA_OPS``.

Each tool's own dispatch handler is driven with every overload of every op on the list, of the
three ops the two lists used to disagree on, of view ops and of ops that do touch bytes; an op
stands in for itself (its schema, tags and name are the real op's) but does not run. A tool
"judges" an op when it hands the op's tensor argument to its checks. Both must judge, or skip, the
very same ops.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from dbo import races
from dbo.races._shadow import KernelStamp, RaceMode
from workspace.sanitizer import _mode
from workspace.sanitizer._checks import STATE

# Were the race detector's alone (its list had them, the sanitizer's did not); none touches a byte.
USED_TO_DISAGREE = ("empty", "empty_strided", "record_stream")
VIEWS = ("view", "transpose", "t_", "as_strided_")  # views and in-place views: metadata, skipped by both
TOUCH_BYTES = ("add", "add_", "copy_", "mul", "index_select", "zero_", "fill_")  # judged by both


class _Op:
    """Stands in for an aten op: the real op's attributes, a call that does nothing."""

    def __init__(self, op: Any):
        self.op = op

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.op, attr)

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        return None


def _overloads(names: tuple[str, ...] | frozenset[str]) -> list[Any]:
    out = []
    for name in sorted(names):
        packet = getattr(torch.ops.aten, name)
        out += [getattr(packet, o) for o in packet.overloads()]
    return out


def _races_judges(op: Any) -> bool:
    seen: list[Any] = []

    class Shadow:
        def access(self, k: Any, name: str, t: torch.Tensor, write: bool) -> None:
            seen.append(t)

    stamp = KernelStamp(1, 1, {}, "k", "s", None, "here")
    RaceMode(stamp, Shadow()).__torch_dispatch__(_Op(op), (), (torch.ones(2),), {})  # type: ignore[arg-type]
    return bool(seen)


def _sanitizer_judges(op: Any, monkeypatch: pytest.MonkeyPatch) -> bool:
    seen: list[Any] = []
    with monkeypatch.context() as m:
        m.setattr(STATE, "enabled", True)
        m.setattr(STATE, "check", lambda func, args, kwargs: seen.append(func))
        _mode._Mode().__torch_dispatch__(_Op(op), (), (torch.ones(2),), {})
    return bool(seen)


def test_every_name_on_the_list_is_an_aten_op() -> None:
    """A misspelt name would silently skip nothing."""
    missing = sorted(n for n in races.METADATA_OPS if not hasattr(torch.ops.aten, n))
    assert not missing, missing
    assert set(USED_TO_DISAGREE) <= races.METADATA_OPS


ALL = sorted(races.METADATA_OPS | set(USED_TO_DISAGREE) | set(VIEWS) | set(TOUCH_BYTES))


@pytest.mark.parametrize("name", ALL)
def test_both_tools_judge_the_same_ops(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    ops = _overloads((name,))
    assert ops
    for op in ops:
        by_races, by_sanitizer = _races_judges(op), _sanitizer_judges(op, monkeypatch)
        assert by_races == by_sanitizer, f"{op}: dbo.races judges it: {by_races}, the sanitizer: {by_sanitizer}"
        assert by_races == (name in TOUCH_BYTES), f"{op}: judged: {by_races}"
        assert races.touches_no_bytes(op) == (name not in TOUCH_BYTES)
