"""The bench's serving section without running it: the stand-in for the full Azure trace (the shipped head
repeated to the full trace's request count, at its rate) and the trace option's check before any section."""

from __future__ import annotations

import pytest

from demos.bench.__main__ import main
from demos.bench._serving import TRACE_ENV, TRACE_RATE, TRACE_REQUESTS, _replicated_head
from demos.serving.arrivals import read_azure


def test_the_repeated_head_has_the_full_traces_requests_and_rate(tmp_path):
    path, scale = _replicated_head(str(tmp_path))
    trace = read_azure(path, scale=scale)
    assert len(trace) == TRACE_REQUESTS
    assert trace.rate == pytest.approx(TRACE_RATE, rel=0.01)
    head = read_azure(path, limit=300)
    assert [r.prompt_tokens for r in trace.requests[300:600]] == [r.prompt_tokens for r in head.requests]


@pytest.mark.parametrize("how", ["flag", "env"])
def test_a_trace_that_is_not_there_is_refused_before_any_section(tmp_path, monkeypatch, capsys, how):
    missing = str(tmp_path / "nope.csv")
    argv = ["--section", "serving", "--json", str(tmp_path / "b.json")]
    if how == "flag":
        argv += ["--azure-trace", missing]
    else:
        monkeypatch.setenv(TRACE_ENV, missing)
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such file" in err and not (tmp_path / "b.json").exists()
