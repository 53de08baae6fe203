"""The simulation section's records of the model zoo (``demos.zoo``) and of ``demos.predict``'s sweep."""

from __future__ import annotations

import gc
import statistics
import time

from demos.bench._core import Config, progress, samples_timing, timing_record, value_record
from demos.bench._report import Record


def zoo_step_records(cfg: Config, section: str, phase: str, tokens: int, target: float) -> list[Record]:
    """The DBO and no-DBO wall (target on the DBO one) and simulated step times of the zoo's DeepSeek-V3."""
    from demos.zoo.models import get_preset
    from demos.zoo.run import ZooRun
    from demos.zoo.workload import Workload, cluster_for

    w = Workload(get_preset("deepseek-v3"), cluster_for("h800", 9, 8, 72), phase=phase, tokens=tokens, context=2048)
    walls: dict[bool, list[float]] = {True: [], False: []}
    virtual: dict[bool, list[float]] = {True: [], False: []}
    with ZooRun(w, mode="eager") as r:
        r.warmup()  # both steps once; the workspace grows to its largest request and is locked
        for i in range(3 if cfg.quick else 7):
            progress(f"simulation: zoo DeepSeek-V3 {phase} step {i + 1}")
            for dbo_on in (True, False):
                gc.collect()
                t0 = time.perf_counter()
                s = r.step(dbo_on)
                walls[dbo_on].append(time.perf_counter() - t0)
                virtual[dbo_on].append(s.seconds)
    out: list[Record] = []
    what = f"DeepSeek-V3 {phase} step (zoo, {tokens} tokens, EP 72), virtual"
    for dbo_on, label in ((True, "DBO"), (False, "no DBO")):
        t = samples_timing(walls[dbo_on])
        rec = {**timing_record(section, f"{what}, {label}, wall", t), "unit": "s/step"}
        rec.update(value=t.median, min=t.min, max=t.max)
        if dbo_on:
            rec.update(target=f"< {target:g}", ok=t.median < target)
        ms = statistics.median(virtual[dbo_on]) * 1e3
        out += [rec, value_record(section, f"simulated step time, zoo {phase}, {label} (virtual clock)", ms, "ms")]
    return out


def predict_sweep_records(cfg: Config, section: str) -> list[Record]:
    """The wall time of ``demos.predict``'s default decode sweep of DeepSeek-V3 on 72 H100 in both modes
    (8 token counts x graph and eager, each point with and without DBO and with SBO; target < 20 s) and of one point
    (128 tokens, graph; target < 1 s), imports excluded, once each."""
    from demos.prediction.sweep import DEFAULT_TOKENS, Sweep, run_sweep
    from demos.zoo.models import get_preset
    from demos.zoo.workload import Workload, cluster_for

    base = Workload(get_preset("deepseek-v3"), cluster_for("h100", 9, 8, 72), tokens=1024, context=2000)
    out: list[Record] = []
    for label, tokens, modes, target in (
        ("default decode sweep (8 token counts, graph and eager)", DEFAULT_TOKENS["decode"], ("graph", "eager"), 20.0),
        ("one point (128 tokens, graph)", (128,), ("graph",), 1.0),
    ):
        progress(f"simulation: demos.predict {label}")
        gc.collect()
        t0 = time.perf_counter()
        run_sweep(Sweep(base, tuple(tokens), modes))
        wall = time.perf_counter() - t0
        rec = value_record(section, f"demos.predict DeepSeek-V3 on 72 H100, {label}, wall", wall, "s")
        rec.update(target=f"< {target:g}", ok=wall < target)
        out.append(rec)
    return out
