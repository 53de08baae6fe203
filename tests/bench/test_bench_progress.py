"""The bench's progress line reaches stderr in one write with its newline: a signal's one line
(``demos._guard``) written between a progress text and its newline would be glued to it, and the signal storm
would see no line of its own (it did once, with ``print``, which writes the two apart)."""

from __future__ import annotations

import sys

from demos.bench._core import progress


class _Writes:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def write(self, text: str) -> int:
        self.calls.append(text)
        return len(text)

    def flush(self) -> None:
        pass


def test_a_progress_line_is_one_write_that_ends_its_line(monkeypatch):
    stream = _Writes()
    monkeypatch.setattr(sys, "stderr", stream)
    progress("workspace: 3 of 7")
    assert stream.calls == ["[bench] workspace: 3 of 7\n"]
