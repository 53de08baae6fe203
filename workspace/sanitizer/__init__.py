"""The workspace isolation checker: a TorchDispatchMode in every ubatch thread and kernel.

Parts: ``_mode`` (enable/disable, the dispatch mode, the kernel hook) and ``_checks`` (its
findings: cross-slot, stale and orphaned views).
"""

from workspace.sanitizer._checks import FINDING_KINDS, MAX_FINDINGS, MODES, STATE, Finding, SanitizerError
from workspace.sanitizer._mode import (
    clear,
    disable,
    enable,
    enabled,
    findings,
    mode,
    use_sanitizer,
    wrap,
)

__all__ = [
    "FINDING_KINDS",
    "MAX_FINDINGS",
    "MODES",
    "Finding",
    "SanitizerError",
    "clear",
    "disable",
    "enable",
    "enabled",
    "findings",
    "mode",
    "use_sanitizer",
    "wrap",
    "STATE",
]
