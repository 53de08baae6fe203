"""``python -m demos.bench``: micro-benchmarks with baselines and targets (docs/performance.md).

Parts: ``_suite`` (the sections and the command line), ``_core`` (what every section uses),
``_handoff``, ``_host`` (the handoff and host sections), ``_report`` (verdicts, tables, the
markdown page) and ``_merge`` (a ``--section`` run merged into an existing page).
"""

from demos.bench._suite import main
from demos.bench._core import Config, Timing, progress, timing_record, value_record
from demos.bench._host import host_records, resolve_backend, COMPUTE_PER_LAYER, COMM_PER_LAYER, DEMO_SHAPES
from demos.bench._merge import split_sections, merge_sections

__all__ = ['main', 'Config', 'Timing', 'progress', 'timing_record', 'value_record', 'host_records', 'resolve_backend', 'COMPUTE_PER_LAYER', 'COMM_PER_LAYER', 'DEMO_SHAPES', 'split_sections', 'merge_sections']
