"""``launch``'s keywords are written once: the fields of ``dbo.streams.base.KernelSpec``.

``Stream.launch`` is the one signature that lists them, and it must list exactly those fields; no
stream class of the runtime overrides it (each implements ``_launch(fn, args, spec)`` and gets
them as one resolved ``KernelSpec``); ``dbo.launch`` passes them on as they came. A backend or a
wrapper that takes another set, or drops or renames one on the way, fails here. (Capture and
replay, which pass them on too: tests/capture_races/test_capture_keywords.py.)
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

import dbo
import dbo.capture._guard  # noqa: F401  (the recording proxies are stream classes too)
import dbo.streams.cuda  # noqa: F401  (so is the cuda stream; importing it needs no GPU)
from dbo.streams import Stream, get_backend, launch, use_stream
from dbo.streams.base import KernelSpec

CPU_BACKENDS = ("inline", "threads", "virtual")
# One value per field, none of them the default, so a field dropped on the way shows.
EVERY = {"name": "k0", "kind": "comm", "cost": 1e-6, "op": "x_op", "layer": 7}


def _noop(*args: Any) -> None:
    pass


def _keywords(fn: Any) -> dict[str, Any]:
    """The keyword-only parameters of ``fn``'s signature, with their defaults."""
    params = inspect.signature(fn).parameters.values()
    return {p.name: p.default for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}


def _stream_classes() -> list[type]:
    """Every subclass of Stream that the runtime defines (modules under dbo)."""
    found: set[type] = set()
    todo = [Stream]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub.__module__.startswith("dbo.") and sub not in found:
                found.add(sub)
                todo.append(sub)
    return sorted(found, key=lambda c: f"{c.__module__}.{c.__qualname__}")


def _spy(monkeypatch: pytest.MonkeyPatch, cls: type) -> list[KernelSpec]:
    """The specs ``cls._launch`` is called with, from now on (it still runs)."""
    seen: list[KernelSpec] = []
    real = cls._launch

    def spy(self: Any, fn: Any, args: tuple, spec: KernelSpec) -> None:
        seen.append(spec)
        real(self, fn, args, spec)

    monkeypatch.setattr(cls, "_launch", spy)
    return seen


def test_the_one_signature_lists_exactly_the_spec_fields() -> None:
    assert _keywords(Stream.launch) == KernelSpec._field_defaults
    assert list(_keywords(Stream.launch)) == list(KernelSpec._fields)
    assert set(EVERY) == set(KernelSpec._fields), "EVERY must give every field a value"


def test_every_stream_class_is_found() -> None:
    names = {c.__name__ for c in _stream_classes()}
    assert {"InlineStream", "ThreadStream", "VirtualStream", "CudaStream", "RecordingStream"} <= names


@pytest.mark.parametrize("cls", _stream_classes(), ids=lambda c: c.__name__)
def test_no_stream_class_restates_launch(cls: type) -> None:
    assert "launch" not in vars(cls), (
        f"{cls.__qualname__} overrides launch: implement _launch(fn, args, spec) instead, so that its "
        f"keywords stay KernelSpec's"
    )
    assert "_launch" in vars(cls), f"{cls.__qualname__} does not implement _launch"
    assert _keywords(cls.launch) == _keywords(Stream.launch)


@pytest.mark.parametrize("fn", [dbo.launch, launch], ids=["dbo.launch", "dbo.streams.launch"])
def test_launch_on_the_current_stream_shows_and_takes_the_same_keywords(fn: Any) -> None:
    assert _keywords(fn) == _keywords(Stream.launch)
    with pytest.raises(TypeError, match="bogus"):
        fn(_noop, bogus=1)


@pytest.mark.parametrize("via", ["Stream.launch", "dbo.launch"])
@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_every_keyword_reaches_the_backend(backend: str, via: str, monkeypatch: pytest.MonkeyPatch) -> None:
    b = get_backend(backend)
    try:
        s = b.new_stream("s")
        seen = _spy(monkeypatch, type(s))
        if via == "Stream.launch":
            s.launch(_noop, 1, **EVERY)
        else:
            with use_stream(s):
                dbo.launch(_noop, 1, **EVERY)
        s.synchronize()
        assert seen == [KernelSpec(**EVERY)]
    finally:
        b.close()


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_the_spec_is_resolved_once_for_every_backend(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``kind=None`` is the stream's role and ``name=None`` the function's name (else the kind)."""
    b = get_backend(backend)
    try:
        s = b.new_stream("c", role="comm")
        seen = _spy(monkeypatch, type(s))
        s.launch(_noop)
        s.launch(None, op="modelled")
        s.launch(_noop, kind="compute", name="shown")
        s.synchronize()
        assert seen == [
            KernelSpec(name="_noop", kind="comm"),
            KernelSpec(name="comm", kind="comm", op="modelled"),
            KernelSpec(name="shown", kind="compute"),
        ]
        with pytest.raises(TypeError, match="bogus"):
            s.launch(_noop, bogus=1)
        assert len(seen) == 3  # refused before the backend saw it
    finally:
        b.close()
