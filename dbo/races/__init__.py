"""The stream-race detector: vector clocks over streams and events (docs/races.md).

Parts: ``_detector`` (enable/disable, the happens-before bookkeeping, kernel and ubatch hooks),
``_shadow`` (shadow memory over byte ranges, the dispatch mode inside kernels), ``_report``
(findings: ``Race``, ``RaceError``).
"""

from dbo.races._detector import KIND, MODES, MAX_FINDINGS, Race, RaceError, enable, disable, enabled, findings, clear, use_races, current_kernel, launch_count, add_kernel_hook, remove_kernel_hook, add_ubatch_hook, remove_ubatch_hook
from dbo.races._report import launch_site
from dbo.races._shadow import KernelStamp, RaceMode, Shadow, byte_range, op_spec, written_args

__all__ = ['KIND', 'MODES', 'MAX_FINDINGS', 'Race', 'RaceError', 'enable', 'disable', 'enabled', 'findings', 'clear', 'use_races', 'current_kernel', 'launch_count', 'add_kernel_hook', 'remove_kernel_hook', 'add_ubatch_hook', 'remove_ubatch_hook', 'launch_site', 'KernelStamp', 'RaceMode', 'Shadow', 'byte_range', 'op_spec', 'written_args']
