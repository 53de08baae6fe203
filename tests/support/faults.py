"""The exception the fault-injection tests raise, so that a failure can be told from theirs."""

from __future__ import annotations


class Injected(Exception):
    """The fault a test injects (at a handoff point, a hook, a step of a program)."""
