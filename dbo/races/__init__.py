"""The stream-race detector: vector clocks over streams and events (docs/races.md).

Parts: ``_api`` (enable/disable, findings, the clients' kernel, ubatch and launch hooks),
``_detector`` (the happens-before bookkeeping: the stream observer the backends call),
``_shadow`` (shadow memory over byte ranges, the dispatch mode inside kernels, and which ops
touch no bytes: ``METADATA_OPS``, ``touches_no_bytes``, shared with the workspace sanitizer),
``_report`` (findings: ``Race``, ``RaceError``).
"""

from dbo._sites import user_site as launch_site
from dbo.races._api import (
    add_kernel_hook,
    add_launch_hook,
    add_ubatch_hook,
    clear,
    disable,
    enable,
    enabled,
    findings,
    hook_counts,
    launch_count,
    remove_kernel_hook,
    remove_launch_hook,
    remove_ubatch_hook,
    use_races,
)
from dbo.races._detector import current_kernel
from dbo.races._report import KIND, MAX_FINDINGS, MODES, Race, RaceError
from dbo.races._shadow import METADATA_OPS, byte_range, touches_no_bytes

__all__ = [
    "KIND",
    "MODES",
    "MAX_FINDINGS",
    "Race",
    "RaceError",
    "enable",
    "disable",
    "enabled",
    "findings",
    "clear",
    "use_races",
    "current_kernel",
    "launch_count",
    "add_kernel_hook",
    "remove_kernel_hook",
    "add_ubatch_hook",
    "remove_ubatch_hook",
    "add_launch_hook",
    "remove_launch_hook",
    "hook_counts",
    "launch_site",
    "byte_range",
    "METADATA_OPS",
    "touches_no_bytes",
]
