"""The machine-load meter of calibrate and validate: steal and other processes' CPU time from
/proc/stat, the verdict against DISTURBED, and where the CLIs report it."""

from __future__ import annotations

import json
import os

import pytest

import demos.calibrate as cal_cli
import demos.validate as val_cli
from demos.fidelity import checks
from demos.fidelity.comparison import Figures, Point, Row, Validation, format_table, to_dict
from demos.fidelity.machine import DISTURBED, CpuTimes, LoadMeter, MachineLoad, parse_proc_stat, read_cpu_times

# user nice system idle iowait irq softirq steal guest guest_nice (ticks of 1/100 s)
STAT = """cpu  1000 0 200 3000 100 0 50 150 400 0
cpu0 500 0 100 1500 50 0 25 75 200 0
cpu1 500 0 100 1500 50 0 25 75 200 0
intr 12345
ctxt 678
"""


def test_proc_stat_is_read_as_seconds_without_counting_guest_time_twice():
    total, idle, steal, cpus = parse_proc_stat(STAT, 100.0)
    assert total == pytest.approx((1000 + 200 + 3000 + 100 + 50 + 150) / 100)  # guest is inside user
    assert idle == pytest.approx(31.0) and steal == pytest.approx(1.5) and cpus == 2


def test_a_text_without_the_aggregate_line_is_refused():
    with pytest.raises(ValueError, match="aggregate 'cpu' line"):
        parse_proc_stat("cpu0 1 2 3 4\n", 100.0)


def _times(wall, total, idle, steal, ours, cpus=2):
    return CpuTimes(wall, total, idle, steal, ours, cpus)


def test_the_load_splits_the_cpus_time_into_steal_others_ours_and_idle():
    # 10 s on 2 CPUs = 20 CPU-seconds: 1 stolen, 2 idle, 17 busy of which 15 ours
    a, b = _times(0.0, 100.0, 50.0, 3.0, 5.0), _times(10.0, 120.0, 52.0, 4.0, 20.0)
    load = MachineLoad.between(a, b)
    assert load.seconds == 10.0 and load.cpus == 2
    assert load.steal == pytest.approx(0.05) and load.idle == pytest.approx(0.10)
    assert load.ours == pytest.approx(0.75) and load.others == pytest.approx(0.10)
    assert load.steal + load.idle + load.ours + load.others == pytest.approx(1.0)


@pytest.mark.parametrize(
    "steal, others, disturbed",
    [(0.0, 0.0, False), (DISTURBED["steal"], 0.0, False), (0.03, 0.0, True), (0.0, 0.15, True), (0.05, 0.2, True)],
)
def test_the_verdict_follows_the_limits(steal, others, disturbed):
    load = MachineLoad(60.0, 2, steal, others, 0.5, 1 - 0.5 - steal - others)
    assert bool(load.disturbances()) is disturbed
    text = load.describe()
    assert text.startswith("2 CPUs over 1 min 0 s: steal ")
    assert text.endswith(" - undisturbed") is not disturbed
    d = load.to_dict()
    assert d["disturbed"] is disturbed and d["limits"] == DISTURBED


def test_no_cpu_time_between_two_readings_gives_no_load():
    a = _times(0.0, 100.0, 50.0, 3.0, 5.0)
    assert MachineLoad.between(a, a) is None


def test_the_meter_measures_nothing_where_the_machine_cannot_be_read(tmp_path):
    assert read_cpu_times(str(tmp_path / "absent")) is None
    m = LoadMeter(read=lambda: None).start()
    assert m.stop() is None and "cannot be read here" in m.missing
    same = _times(0.0, 100.0, 50.0, 3.0, 5.0)
    m = LoadMeter(read=lambda: same).start()
    assert m.stop() is None and "too short" in m.missing


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="Linux /proc/stat")
def test_on_linux_a_busy_loop_shows_as_this_runs_own_time():
    m = LoadMeter().start()
    t = os.times()
    while os.times().user + os.times().system - t.user - t.system < 0.2:  # 0.2 s of our own CPU time
        pass
    load = m.stop()
    assert load is not None and load.cpus >= 1
    # our share of the CPUs' time, times that time (about cpus x seconds): the CPU seconds we used
    assert load.ours * load.cpus * load.seconds > 0.1
    assert 0.0 <= load.steal <= 1.0 and 0.0 <= load.others <= 1.0


def _validation(machine):
    pt = Point("ht", 128, 1.0)
    v = Validation("threads", "p", [Row(pt, Figures(2.0, 1.5, 0.8), Figures(2.1, 1.5, 0.8))])
    v.machine = machine
    return v


def test_the_table_and_the_json_carry_the_load_and_a_disturbed_run_is_flagged():
    busy = MachineLoad(200.0, 2, 0.054, 0.01, 0.55, 0.386)
    table = format_table(_validation(busy))
    assert (
        "machine: 2 CPUs over 3 min 20 s: steal 5.4% (9% of the time they ran or were ready to), "
        "other processes 1.0%, this run 55%, idle 39%"
    ) in table
    assert "disturbed: the hypervisor took 5.4%" in table
    assert "note: the targets assume an idle machine" in table
    d = json.loads(json.dumps(to_dict(_validation(busy))))
    assert d["machine"]["steal"] == pytest.approx(0.054) and d["machine"]["disturbed"] is True
    quiet = MachineLoad(200.0, 2, 0.001, 0.01, 0.55, 0.439)
    table = format_table(_validation(quiet))
    assert "- undisturbed" in table and "targets assume an idle machine" not in table
    assert to_dict(_validation(None))["machine"] is None


def test_validate_reports_the_load_of_its_run(monkeypatch, capsys):
    seen = {}

    def fake_validate(backend, profile, points, **kw):
        seen["ran"] = True
        return Validation(backend, "p", [])

    monkeypatch.setattr(checks, "validate", fake_validate)
    same = _times(0.0, 100.0, 50.0, 3.0, 5.0)  # no CPU time passes between the two readings
    monkeypatch.setattr(checks, "LoadMeter", lambda: LoadMeter(read=lambda: same))
    assert val_cli.main(["--profile", "cpu", "--quick", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert seen["ran"]
    assert "the machine's load was not measured: the run was too short" in out
    readings = iter([_times(0.0, 100.0, 50.0, 3.0, 5.0), _times(10.0, 120.0, 52.0, 3.1, 22.5)])
    monkeypatch.setattr(checks, "LoadMeter", lambda: LoadMeter(read=lambda: next(readings)))
    assert val_cli.main(["--profile", "cpu", "--quick", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert (
        "machine: 2 CPUs over 10.0 s: steal 0.5% (1% of the time they ran or were ready to), other processes 2.0%"
        in out
    )
    assert "- undisturbed" in out and "not measured" not in out


@pytest.mark.slow  # a whole run (the fast tier leaves it out: docs/testing.md)
def test_calibrate_reports_the_load_of_its_run(monkeypatch, capsys, tmp_path):
    import demos.fidelity.calibration as cal
    from tests.fidelity.test_calibrate import TINY  # the tiny sweep its CLI test uses

    monkeypatch.setattr(
        cal_cli, "calibrate", lambda backend, **kw: cal.calibrate(backend, sweep=TINY, progress=kw.get("progress"))
    )
    # a steal of 10% over the calibration: the line says so and advises calibrating again
    readings = iter([_times(0.0, 100.0, 50.0, 3.0, 5.0), _times(10.0, 120.0, 52.0, 5.0, 20.0)])
    monkeypatch.setattr(cal_cli, "LoadMeter", lambda: LoadMeter(read=lambda: next(readings)))
    assert cal_cli.main(["-o", str(tmp_path / "p.json"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "machine    2 CPUs over 10.0 s: steal 10.0% (11% of the time" in out and "disturbed" in out
    assert "calibrate again when it is idle" in out


class _FakeMachine:
    """A reader whose runs are disturbed as scripted: ``steals[k]`` is the steal (CPU-seconds of
    20) over the k-th measured run; each run reads the machine twice."""

    def __init__(self, steals):
        self.steals = list(steals)
        self.reads = 0
        self.total = self.steal = 0.0

    def __call__(self):
        k, end = divmod(self.reads, 2)
        self.reads += 1
        if end:
            self.total += 20.0
            self.steal += self.steals[k] if k < len(self.steals) else 0.0
        # half the time idle, the rest ours but for the steal: no other processes
        return _times(float(self.reads), self.total, self.total / 2, self.steal, self.total / 2 - self.steal)


def test_validate_runs_a_disturbed_run_once_more_and_says_so():
    from demos.fidelity import validation as val
    from tests.fidelity.test_validate import MACHINE

    pts = val.grid(True, sizes=(8, 64), ratios=(1.0,), schedules=("ht",), modes=("eager",), layers=1, hidden=64)
    # run 1 clean; run 2 disturbed (10% steal), its rerun clean; run 3 absent (only two points)
    fake = _FakeMachine([0.0, 2.0, 0.0])
    v = val.validate("virtual", MACHINE, pts, steps=1, truth=MACHINE, machine=fake)
    assert fake.reads == 6  # three measured runs for two points
    assert v.notes == [
        "1 run was run again: the machine was disturbed during it "
        "(CPU steal or other processes; 0 still the second time)"
    ]
    # twice disturbed: the second run is kept anyway, and counted
    fake = _FakeMachine([2.0, 2.0, 0.0])
    v = val.validate("virtual", MACHINE, pts, steps=1, truth=MACHINE, machine=fake)
    assert len(v.rows) == 2 and fake.reads == 6
    assert "1 run was run again" in v.notes[0] and "1 still the second time" in v.notes[0]
    # no reader: nothing is rerun
    v = val.validate("virtual", MACHINE, pts, steps=1, truth=MACHINE)
    assert not v.notes


def test_the_cli_reruns_disturbed_runs_unless_told_not_to(monkeypatch):
    seen = []

    def fake_validate(backend, profile, points, **kw):
        seen.append(kw["machine"])
        return Validation(backend, "p", [])

    monkeypatch.setattr(checks, "validate", fake_validate)
    assert val_cli.main(["--profile", "cpu", "--quick", "--no-progress"]) == 0
    assert val_cli.main(["--profile", "cpu", "--quick", "--no-progress", "--no-rerun"]) == 0
    assert seen[0] is read_cpu_times and seen[1] is None


def test_run_undisturbed_runs_again_once_and_keeps_the_second_result():
    from demos.fidelity.machine import Reruns, run_undisturbed

    calls = []

    def fn():
        calls.append(len(calls))
        return len(calls)

    r = Reruns()
    assert run_undisturbed(fn, None, r) == 1 and r.note() is None  # no reader: one call, no check
    assert run_undisturbed(fn, _FakeMachine([0.0]), r) == 2 and (r.again, r.still) == (0, 0)
    assert run_undisturbed(fn, _FakeMachine([2.0, 0.0]), r) == 4 and (r.again, r.still) == (1, 0)
    assert run_undisturbed(fn, _FakeMachine([2.0, 2.0]), r) == 6 and (r.again, r.still) == (2, 1)
    assert r.note() == (
        "2 runs were run again: the machine was disturbed during them (CPU steal or other processes; "
        "1 still the second time)"
    )


@pytest.mark.slow  # a whole run (the fast tier leaves it out: docs/testing.md)
def test_calibration_runs_a_disturbed_model_run_again_and_says_so(monkeypatch, capsys, tmp_path):
    import demos.fidelity.calibration as cal
    from tests.fidelity.test_calibrate import TINY

    fake = _FakeMachine([2.0])  # the first model run disturbed, every later one quiet
    monkeypatch.setattr(
        cal_cli,
        "calibrate",
        lambda backend, **kw: cal.calibrate(backend, sweep=TINY, progress=kw.get("progress"), machine=fake),
    )
    assert cal_cli.main(["-o", str(tmp_path / "p.json"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert fake.reads == 2 * (len(TINY.op_runs) + 1)  # every model run metered, the first one twice
    assert "note       1 run was run again: the machine was disturbed during it" in out
