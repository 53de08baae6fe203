"""``python -m demos.bench``: micro-benchmarks with baselines and targets (docs/performance.md).

Parts: ``_output`` (the files a run writes; the command line is ``__main__``), ``_suite`` (the sections),
``_core`` (what every section uses: config, timing loop, records), ``_handoff``, ``_host`` (the
handoff and host sections' measurements), ``_signals`` (the signals section's trials: SIGINT and SIGTERM
at random moments into real command runs, and their verdicts; ``_signal_trials``: the command lines and
what a trial records; ``_signal_runner``: the process that forks and signals them), ``_report``
(verdicts, tables, the markdown page) and ``_merge`` (a ``--section`` run merged into an existing page).
"""

from demos.bench._core import Config, Timing, progress, samples_timing, time_together, timing_record, value_record
from demos.bench._host import COMM_PER_LAYER, COMPUTE_PER_LAYER, DEMO_SHAPES, host_records, resolve_backend
from demos.bench._merge import merge_sections, split_sections
from demos.bench._report import check_target, format_cell, format_checked, table, table_rows
from demos.bench._suite import SECTIONS, reference_views

__all__ = [
    "SECTIONS",
    "reference_views",
    "Config",
    "Timing",
    "progress",
    "samples_timing",
    "time_together",
    "timing_record",
    "value_record",
    "host_records",
    "resolve_backend",
    "COMPUTE_PER_LAYER",
    "COMM_PER_LAYER",
    "DEMO_SHAPES",
    "split_sections",
    "merge_sections",
    "check_target",
    "format_cell",
    "format_checked",
    "table",
    "table_rows",
]
