"""Expert parallelism over torch.distributed (gloo, CPU): real ranks, real all-to-all, outputs equal
to a single-process run, one process group per ubatch, and failures that end every rank in
bounded time with the first error reported and no process left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import torch

from demos.overlap import ConfigError, OverlapConfig, main, reference_outputs, run_overlap
from demos.ranks.launcher import (
    FAULT_ENV,
    DistributedError,
    Fault,
    describe_exit,
    is_symptom,
    launch,
    shard_range,
)
from tests.support.paths import ROOT, python_env
from tests.support.timing import slack

pytestmark = [pytest.mark.slow, pytest.mark.long(65)]  # subprocesses or whole runs (the fast tier leaves it out:
# testing.md); about 66 CPU-seconds in all, a file to start first

dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():  # pragma: no cover
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

# small enough that a run is mostly process start-up (a few seconds on 2 cores)
SMALL = dict(layers=2, tokens=48, hidden=32, experts=4, topk=2, steps=1, world_size=2, dist_timeout=slack(20.0))
BOUND_S = slack(60.0)  # a failed run must end within this (it takes ~5 s here; ~10 s with a hung rank)


def small(**kw) -> OverlapConfig:
    return OverlapConfig(**{**SMALL, **kw})


def _env(**extra: str) -> dict:
    return python_env(drop=(FAULT_ENV,), **extra)


def _gone(pid: int) -> bool:
    """True if no process ``pid`` exists (reaped: not even a zombie)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # pragma: no cover - someone else's process took the pid
        return True
    return False


def _assert_no_orphans(pids) -> None:
    pids = [p for p in pids if p is not None]
    assert pids, "the error should name the ranks' pids"
    deadline = time.monotonic() + slack(5.0)
    while not all(_gone(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(_gone(p) for p in pids), f"rank processes left behind: {[p for p in pids if not _gone(p)]}"


# --- two ranks: tokens really travel, and the outputs equal a single-process run ----------------------


@pytest.mark.parametrize(("schedule", "layout"), [("ll", "per-ubatch"), ("ht", "per-ubatch"), ("ht", "shared")])
def test_two_ranks_equal_the_single_process_reference(schedule, layout):
    """Per-ubatch streams (the default) serialize every collective of a rank through the link queue;
    shared streams keep ht's collectives on the one shared comm stream."""
    details: dict = {}
    rep = run_overlap(small(schedule=schedule, stream_layout=layout), details=details)
    assert rep["world_size"] == 2 and rep["dist_backend"] == "gloo" and rep["backend"] == "threads"
    assert rep["config"]["stream_layout"] == layout and rep["link"]["serialize"] is (layout == "per-ubatch")
    # the outputs of both steps, all ranks' rows in rank order, equal one process running the whole batch
    # on the ranks' device (the ranks ran on gloo/CPU: on a GPU host, a reference left on "auto"
    # would run on cuda, whose kernels round differently from the CPU's)
    ref = reference_outputs(small(schedule=schedule, stream_layout=layout, backend=rep["backend"]))
    assert ref.shape == (SMALL["tokens"], SMALL["hidden"])
    assert torch.equal(details["output_no_dbo"], ref)
    assert torch.equal(details["output_dbo"], ref)
    assert torch.equal(details["output_reference"], ref)
    assert rep["reference"]["match"] is True and rep["reference"]["max_abs_diff_dbo"] == 0.0
    assert rep["exact"] == {"bitwise_equal": True, "max_abs_diff": 0.0}
    # two real processes, each with its shard of the batch, and tokens crossed between them
    ranks = rep["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert ranks[0]["pid"] != ranks[1]["pid"] != os.getpid()
    assert [tuple(r["rows"]) for r in ranks] == [(0, 24), (24, 48)]
    assert all(r["bytes_to_peers_per_step"] > 0 for r in ranks)
    assert rep["link"]["transport"] == "torch.distributed" and rep["link"]["local_experts"] == 2
    assert rep["allocations_after_lock"] == 0
    assert rep["time_no_dbo_s"] > 0 and rep["time_dbo_s"] > 0
    json.dumps(rep)


def test_command_line_world_size_2_writes_json(tmp_path):
    """The per-ubatch stream layout puts every collective of a rank on one queue (serialize)."""
    out = tmp_path / "report.json"
    cmd = [
        sys.executable,
        "-m",
        "demos.overlap",
        "--world-size",
        "2",
        "--layers",
        "2",
        "--tokens",
        "40",
        "--hidden",
        "32",
        "--experts",
        "4",
        "--steps",
        "1",
        "--schedule",
        "ht",
        "--stream-layout",
        "per-ubatch",
        "--json",
        str(out),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=slack(120))
    assert proc.returncode == 0, proc.stderr
    assert "2 ranks (gloo" in proc.stdout and "reference" in proc.stdout and "PASS" in proc.stdout
    rep = json.loads(out.read_text())
    assert rep["world_size"] == 2 and rep["config"]["world_size"] == 2
    assert rep["link"]["serialize"] is True
    assert rep["reference"]["max_abs_diff_no_dbo"] == 0.0 and rep["reference"]["max_abs_diff_dbo"] == 0.0


def test_single_process_reports_world_size_1():
    rep = run_overlap(OverlapConfig(backend="virtual", layers=2, tokens=16, hidden=32, experts=4, steps=1))
    assert rep["world_size"] == 1 and rep["config"]["world_size"] == 1 and "reference" not in rep


# --- why one process group per ubatch ---------------------------------------------------------------------


def _issue_in_opposite_orders(info):
    """Rank 0 issues ubatch 0's all-to-all first, rank 1 ubatch 1's (as two ubatch threads may on
    two ranks); each ubatch sends the value 10 * rank + ubatch to both ranks. Once on one group
    per ubatch, once on one group shared by both ubatches. Returns, on rank 0, what each ubatch of
    each rank received, in both cases."""
    groups = info.ubatch_groups(2)
    one = dist.new_group(backend="gloo")
    got = {}
    for case, pick in (("per_ubatch", lambda u: groups[u]), ("shared", lambda u: one)):
        outs = {u: torch.empty(2) for u in (0, 1)}
        works = []
        for u in (0, 1) if info.rank == 0 else (1, 0):
            x = torch.full((2,), float(10 * info.rank + u))
            works.append(dist.all_to_all_single(outs[u], x, group=pick(u), async_op=True))
        for w in works:
            w.wait()
        got[case] = {u: outs[u].tolist() for u in (0, 1)}
    return info.gather_object(got)


def test_a_group_shared_by_two_ubatches_pairs_the_wrong_collectives():
    ranks = launch(_issue_in_opposite_orders, world_size=2, timeout=slack(20))
    # one group per ubatch: each ubatch receives the same ubatch's rows from both ranks
    assert [r["per_ubatch"] for r in ranks] == [{0: [0.0, 10.0], 1: [1.0, 11.0]}] * 2
    # one shared group: collectives pair by issue order, so rank 0's ubatch 0 meets rank 1's ubatch 1
    assert [r["shared"] for r in ranks] == [{0: [0.0, 11.0], 1: [1.0, 10.0]}, {0: [1.0, 10.0], 1: [0.0, 11.0]}]


# --- failures: bounded, first error, no orphans -----------------------------------------------------------


def test_a_rank_that_raises_fails_the_command_with_its_error():
    cmd = [
        sys.executable,
        "-m",
        "demos.overlap",
        "--world-size",
        "2",
        "--layers",
        "3",
        "--tokens",
        "40",
        "--hidden",
        "32",
        "--experts",
        "4",
        "--steps",
        "1",
    ]
    t0 = time.monotonic()
    proc = subprocess.run(
        cmd,
        cwd=ROOT,
        env=_env(**{FAULT_ENV: "rank=1,at=collective,n=7,kind=raise"}),
        capture_output=True,
        text=True,
        timeout=BOUND_S + slack(30),
    )
    elapsed = time.monotonic() - t0
    assert proc.returncode == 1, proc.stderr
    first = proc.stderr.splitlines()[0]
    assert "rank 1 of 2 failed: InjectedFault" in first and "collective #7" in first
    assert "ranks: 0 killed by SIGTERM; 1 exited with status 1" in proc.stderr or "ranks: 0 exited" in proc.stderr
    assert "traceback of rank 1" in proc.stderr and "InjectedFault" in proc.stderr
    assert proc.stdout == ""
    assert elapsed < BOUND_S


@pytest.mark.parametrize(
    "fault,rank,needle",
    [
        ("rank=1,at=collective,n=3,kind=kill", 1, "rank 1 of 2 died (killed by SIGKILL)"),
        ("rank=0,at=step,n=1,kind=raise", 0, "rank 0 of 2 failed: InjectedFault"),
    ],
)
def test_a_rank_that_dies_or_raises_stops_every_rank(monkeypatch, fault, rank, needle):
    monkeypatch.setenv(FAULT_ENV, fault)
    t0 = time.monotonic()
    with pytest.raises(DistributedError) as info:
        run_overlap(small(schedule="ll"))
    elapsed = time.monotonic() - t0
    e = info.value
    assert needle in str(e) and e.rank == rank
    assert len(e.exitcodes) == 2 and all(c not in (None, 0) for c in e.exitcodes), e.exitcodes
    _assert_no_orphans(e.pids)
    assert elapsed < BOUND_S


def test_a_hung_rank_is_caught_by_the_collective_timeout(monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "rank=1,at=collective,n=3,kind=hang")
    t0 = time.monotonic()
    with pytest.raises(DistributedError) as info:
        run_overlap(small(schedule="ht", dist_timeout=3.0))
    elapsed = time.monotonic() - t0
    e = info.value
    # rank 0's collective timed out (a symptom); rank 1, stuck, was stopped
    assert e.rank == 0 and e.error_type == "CollectiveError", str(e)
    assert "symptom" in str(e) and "rank 1" in str(e)
    assert e.exitcodes[1] == -15 or e.exitcodes[1] == -9
    _assert_no_orphans(e.pids)
    assert elapsed < BOUND_S


# --- configuration and pieces (no processes) ----------------------------------------------------------------


@pytest.mark.parametrize(
    "kw,needle",
    [
        (dict(backend="virtual"), "virtual clock cannot time"),
        (dict(experts=6, world_size=4), "multiple of world_size"),
        (dict(comm_ratio=1.0), "drop them"),
        (dict(link="nvlink"), "drop them"),
        (dict(tokens=3), "fewer than world_size x ubatches"),
        (dict(world_size=0), "world_size must be a positive integer"),
        (dict(ep=4), "ep is the number of ranks"),
        (dict(dist_timeout=0), "dist_timeout must be a positive number"),
    ],
)
def test_bad_distributed_options_are_config_errors(kw, needle):
    with pytest.raises(ConfigError, match=needle.replace("+", r"\+")) as info:
        run_overlap(small(**kw))
    assert "\n" not in str(info.value)
    assert "--" not in str(info.value), "the library names config fields; only the command line names flags"


def test_cuda_with_more_ranks_than_gpus_is_a_one_line_error(capsys):
    if torch.cuda.device_count() >= 2:
        pytest.skip("this host has a GPU per rank")
    assert main(["--world-size", "2", "--backend", "cuda"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "one GPU per rank" in err


def test_shards_partition_the_batch_in_rank_order():
    for n, w in ((48, 2), (67, 4), (5, 5)):
        shards = [shard_range(n, w, r) for r in range(w)]
        assert [i for s in shards for i in s] == list(range(n))
        assert all(len(s) >= 1 for s in shards)


def test_fault_spec_parses_and_rejects_nonsense():
    f = Fault.parse("rank=1, at=step, n=2, kind=exit")
    assert (f.rank, f.at, f.n, f.kind) == (1, "step", 2, "exit") and Fault.parse(str(f)) == f
    assert Fault.parse("rank=0") == Fault(0, "collective", "raise", 1)
    for bad in ("at=step", "rank=1,kind=explode", "rank=1,at=lunch", "rank=1,colour=red"):
        with pytest.raises(ValueError):
            Fault.parse(bad)


def test_symptoms_and_exit_codes_in_words():
    from demos.ranks.faults import CollectiveError

    try:
        try:
            raise CollectiveError("peer went away")
        except CollectiveError as inner:
            raise RuntimeError("ubatch failed") from inner
    except RuntimeError as outer:
        assert is_symptom(outer)
    assert not is_symptom(ValueError("a bug"))
    assert describe_exit(-9) == "killed by SIGKILL" and describe_exit(3) == "exited with status 3"
