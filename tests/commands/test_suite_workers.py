"""The suite's own scheduling (tests/conftest.py, docs/testing.md "Two worker processes for the whole
suite"): which runs spread over two workers, the unit of work, and the ``long`` tests first."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from tests import conftest


def config(**option) -> SimpleNamespace:
    base = dict(
        numprocesses=None, dist="no", tx=None, markexpr="", keyword="", capture="fd", usepdb=False, collectonly=False
    )
    base.update(option)
    return SimpleNamespace(
        pluginmanager=SimpleNamespace(hasplugin=lambda name: name == "xdist"),
        option=SimpleNamespace(**base),
        args_source=pytest.Config.ArgsSource.TESTPATHS,
    )


def test_only_a_plain_whole_suite_run_spreads_over_workers(monkeypatch):
    monkeypatch.setattr(conftest.os, "sched_getaffinity", lambda pid: {0, 1})
    assert conftest.whole_suite_on_workers(config())
    assert conftest.whole_suite_on_workers(config(markexpr="not slow and not stress"))  # a tier: the fast one
    for narrower in (
        dict(numprocesses=0),  # -n 0
        dict(dist="load"),
        dict(tx=["popen"]),
        dict(keyword="storm"),
        dict(capture="no"),  # -s
        dict(usepdb=True),
        dict(collectonly=True),
    ):
        assert not conftest.whole_suite_on_workers(config(**narrower)), narrower
    named = config()
    named.args_source = pytest.Config.ArgsSource.ARGS  # a path or a test named
    assert not conftest.whole_suite_on_workers(named)
    worker = config()
    worker.workerinput = {}
    assert not conftest.whole_suite_on_workers(worker)
    no_xdist = config()
    no_xdist.pluginmanager = SimpleNamespace(hasplugin=lambda name: False)
    assert not conftest.whole_suite_on_workers(no_xdist)
    monkeypatch.setattr(conftest.os, "sched_getaffinity", lambda pid: {0})
    assert not conftest.whole_suite_on_workers(config())


def test_a_whole_suite_run_asks_for_two_workers_by_file_in_collection_order(monkeypatch):
    monkeypatch.setattr(conftest.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    c = config()
    conftest.pytest_cmdline_main(c)
    assert (c.option.numprocesses, c.option.dist, c.option.loadscopereorder) == (2, "loadfile", False)


def test_a_file_is_a_unit_and_the_shared_files_are_one():
    pytest.importorskip("xdist")
    c = SimpleNamespace(option=SimpleNamespace(dist="loadfile"), getvalue=lambda name: ["popen", "popen"])
    sched = conftest.pytest_xdist_make_scheduler(c, log=None)
    shared = sorted(conftest.SHARED_SCOPES)
    assert {sched._split_scope(f"{f}::test_x") for f in shared} == {"validate_json"}
    assert sched._split_scope("tests/toy/test_run.py::test_a[1]") == "tests/toy/test_run.py"
    assert conftest.pytest_xdist_make_scheduler(SimpleNamespace(option=SimpleNamespace(dist="load")), log=None) is None


@dataclasses.dataclass
class _Item:
    nodeid: str
    marks: dict = dataclasses.field(default_factory=dict)  # name -> the marker's args
    fixturenames: tuple[str, ...] = ()

    def get_closest_marker(self, name):
        return SimpleNamespace(args=self.marks[name]) if name in self.marks else None


def test_the_long_tests_come_first_longest_first_and_the_rest_keep_their_order():
    items = [_Item("tests/a.py::t1"), _Item("tests/b.py::t2", {"long": ()}), _Item("tests/c.py::t3")]
    items += [_Item("tests/d.py::t4", {"slow": (), "long": (125,)}), _Item("tests/e.py::t5", {"long": (50,)})]
    c = SimpleNamespace(getoption=lambda name: 1, pluginmanager=SimpleNamespace(hasplugin=lambda n: False))
    conftest.pytest_collection_modifyitems(c, items)
    order = ["tests/d.py::t4", "tests/e.py::t5", "tests/b.py::t2", "tests/a.py::t1", "tests/c.py::t3"]
    assert [i.nodeid for i in items] == order


def test_a_file_that_reads_validate_json_unlisted_stops_the_run():
    c = SimpleNamespace(getoption=lambda name: 1, pluginmanager=SimpleNamespace(hasplugin=lambda n: False))
    items = [_Item("tests/new/test_reads.py::t", fixturenames=("validate_json",))]
    with pytest.raises(pytest.UsageError, match="add tests/new/test_reads.py to SHARED_SCOPES"):
        conftest.pytest_collection_modifyitems(c, items)
