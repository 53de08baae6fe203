"""The bench's host section (plumbing, not speed: figures are checked by the benchmark itself) and
the merge of a partial report into an existing one."""

from __future__ import annotations

import math

import pytest

from demos.bench import (
    COMM_PER_LAYER,
    COMPUTE_PER_LAYER,
    SECTIONS,
    Config,
    host_records,
    merge_sections,
    resolve_backend,
    split_sections,
)
from demos.bench.__main__ import main
from demos.bench._host import LAYERS  # the synthetic step's layer count: no public name
from tests.support.timing import slack

OLD = """# Performance

header of the full run

## workspace

old workspace table

## handoff

old handoff table
"""


def test_split_sections_keeps_the_preamble_and_each_section():
    pre, sections = split_sections(OLD)
    assert pre.startswith("# Performance") and "header of the full run" in pre
    assert list(sections) == ["workspace", "handoff"]
    assert sections["handoff"] == "## handoff\n\nold handoff table\n"


def test_merge_replaces_only_the_new_sections_and_stamps_them():
    new = "# Performance\n\nother header\n\n## handoff\n\nnew handoff table\n\n## host\n\nhost table\n"
    out = merge_sections(OLD, new, ["workspace", "handoff", "overlap", "host"], "Measured today.")
    pre, sections = split_sections(out)
    assert "header of the full run" in pre and "other header" not in out
    assert list(sections) == ["workspace", "handoff", "host"]
    assert sections["workspace"] == "## workspace\n\nold workspace table\n"
    assert sections["handoff"] == "## handoff\n\nMeasured today.\n\nnew handoff table\n"
    assert "old handoff table" not in out
    assert sections["host"].startswith("## host\n\nMeasured today.\n")
    # merging again is stable: one stamp per section, nothing duplicated
    again = merge_sections(out, new, ["workspace", "handoff", "overlap", "host"], "Measured today.")
    assert again == out


def test_resolve_backend():
    assert resolve_backend("threads") == "threads"
    assert resolve_backend("auto") in ("cuda", "threads")


@pytest.mark.slow
@pytest.mark.timeout(slack(300))
def test_host_section_on_virtual_reports_eager_and_replayed_per_kernel():
    recs = {r["name"]: r for r in host_records(Config(quick=True, device="cpu", backend="virtual"))}
    per_ubatch = LAYERS * (COMPUTE_PER_LAYER + COMM_PER_LAYER)
    tag = "synthetic [virtual]"
    assert recs[f"{tag}: kernels per step, no DBO"]["value"] == per_ubatch
    assert recs[f"{tag}: kernels per step, DBO"]["value"] == 2 * per_ubatch
    for which in ("eager, no DBO", "eager, DBO", "replayed, no DBO", "replayed, DBO"):
        r = recs[f"{tag}: {which}"]
        assert r["unit"] == "us/kernel" and math.isfinite(r["value"]) and r["value"] > 0, r
    assert recs[f"{tag}: eager, DBO"]["baseline"] == f"{tag}: eager, no DBO"
    assert recs[f"{tag}: eager, DBO"]["target"] is None  # the target applies on cuda only
    demo = "demo ll [virtual]"
    assert recs[f"{demo}: kernels per step, DBO"]["value"] > recs[f"{demo}: kernels per step, no DBO"]["value"] > 0
    for which in ("replayed, no DBO", "replayed, DBO"):
        r = recs[f"{demo}: {which}"]
        # until the ll model is sync-free its capture is refused; then it is timed like the rest
        if r["unit"] == "not capturable":
            assert r["value"] is None and "host sync during capture" in r["baseline"]
        else:
            assert r["unit"] == "us/kernel" and r["value"] > 0


@pytest.mark.slow
@pytest.mark.timeout(slack(300))
def test_partial_markdown_run_merges_into_the_existing_page(tmp_path):
    page = tmp_path / "perf.md"
    page.write_text(OLD)
    assert main(["--section", "host", "--quick", "--backend", "virtual", "--markdown", str(page)]) == 0
    pre, sections = split_sections(page.read_text())
    assert "header of the full run" in pre
    assert list(sections) == ["workspace", "handoff", "host"]
    assert sections["workspace"] == "## workspace\n\nold workspace table\n"
    assert "with `python -m demos.bench --section host --quick --backend virtual" in sections["host"]
    assert "synthetic [virtual]: eager, DBO" in sections["host"]
    names = [fn.__name__ for fn in SECTIONS]  # the sections after host (signals, serving) are not in the page
    assert names.index("section_handoff") < names.index("section_host")
