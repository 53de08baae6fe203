"""Simulated serving runs against measured ones (``python -m demos.validate serving``).

The measured runs are ``aiconfigurator-core``'s ``silicon_sample.csv`` (``demos.zoo.measured``): each a
benchmark at a fixed concurrency of ``isl``-token prompts and ``osl``-token outputs, its measured TTFT and
TPOT, checked once however many rows copy it (``demos.zoo.measured_copies``). A row is simulated when the
predictor can express it:

* its model at its precision is a preset, at the weights and KV cache it ran (``demos.fidelity.served``, the
  mapping ``validate silicon`` reads too);
* its GPU has a profile, and its worker's parallelism is DP attention with expert-parallel MoE, attention
  TP with expert-parallel MoE, or attention TP with tensor-parallel MoE over the same GPUs
  (``Workload.moe_tp``; co-located rows only);
* co-located (``agg``) rows: one worker of ``tp x attention_dp`` GPUs. Disaggregated rows (a prefill and
  a decode pool of several workers) are skipped with that reason until the coupled pools are simulated.

Each row runs as its benchmark ran (``demos.serving.api.simulate``): a closed loop of the row's concurrency
(``clients``: the benchmark's recorded concurrency, which on attention-DP rows is the configured batch
times the DP ranks, not the batch), no overlap (the engines' default), the row's engine; ``2 x concurrency``
requests are measured after ``concurrency`` warm-up ones (aiperf's default is 20C after 2C; fewer here to keep a row
fast: a closed loop of fixed lengths repeats its cohorts, and ``--full`` runs aiperf's counts). TTFT and
TPOT are the measured requests' means, as aiperf reports them. Runs of one deployment share their step
pricer, so each grid point of the predictor runs once per deployment.

``serving_rows(progress, quick=, full=)`` -> ``(rows, skipped)``; ``quick`` takes a sample: one row per
deployment and (isl, osl) pair.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable
from typing import NamedTuple

from demos.errors import ConfigError
from demos.fidelity.served import row_kv, served_as
from demos.fidelity.silicon import SYSTEM_GPUS, worker_layout
from demos.fidelity.stats import error_stats
from demos.serving.host import gated_deltanet_hybrid
from demos.zoo.hardware import get_gpu, host_layout
from demos.zoo.measured_rows import speculative_reason
from demos.zoo.models import get_preset

__all__ = [
    "ServingCheck",
    "format_grouped",
    "format_serving",
    "format_side_by_side",
    "release_kind",
    "serving_rows",
    "serving_summaries",
    "side_by_side",
    "clients",
]


class ServingCheck(NamedTuple):
    """One measured row simulated: measured and predicted TTFT and TPOT (seconds), the row's setup."""

    id: str
    gpu: str
    engine: str
    mode: str
    model: str
    isl: int
    osl: int
    concurrency: int
    gpus: int
    ttft_predicted_s: float
    ttft_measured_s: float | None
    tpot_predicted_s: float
    tpot_measured_s: float | None
    release: str | None = None

    @property
    def release_kind(self) -> str:
        """``release_kind`` of the row's engine release."""
        return release_kind(self.release)

    @property
    def ttft_error(self) -> float | None:
        return None if not self.ttft_measured_s else self.ttft_predicted_s / self.ttft_measured_s - 1

    @property
    def tpot_error(self) -> float | None:
        return None if not self.tpot_measured_s else self.tpot_predicted_s / self.tpot_measured_s - 1

    def to_dict(self) -> dict:
        return {**self._asdict(), "ttft_error": self.ttft_error, "tpot_error": self.tpot_error}


def release_kind(release: str | None) -> str:
    """What kind of engine build a measured row ran (``SiliconRow.release``): ``"release"`` (a numbered one),
    ``"nightly"`` (a dated nightly image: the first builds of a new model's support) or ``"not recorded"``."""
    if release is None:
        return "not recorded"
    return "nightly" if release.startswith("nightly") else "release"


DISAGG_TOKENS = 2_000_000
"""Output tokens a disaggregated row may simulate without ``--full`` (three cohorts of its clients: the
warm-up one and two measured). A coupled run steps every rank of every worker in Python, about 10 us per
request per step; past this it takes minutes a row (a closed loop of 2,048 clients at 8,192 output
tokens simulates 50 million)."""


def _layout(gpu: str, tp: int, attention_dp: int, moe_ep: int, moe_tp: int) -> dict | str:
    """One worker's cluster flags (``ep``, ``attention_tp``, ``nodes``, ``gpus_per_node``), or why not."""
    layout = worker_layout(tp, attention_dp, moe_ep, moe_tp)
    if isinstance(layout, str):
        return layout
    ep, tp, *moe = layout
    hosts, per = host_layout(get_gpu(gpu), ep)
    return dict(ep=ep, attention_tp=tp, nodes=hosts, gpus_per_node=per, moe_tp=moe[0] if moe else 1)


def _plan(r) -> dict | str:
    served = served_as(r)
    if isinstance(served, str):
        return served
    gpu = SYSTEM_GPUS.get(r.system)
    if gpu is None:
        return f"no GPU profile for {r.system}"
    if why := speculative_reason(r):
        return why
    if r.engine not in ("vllm", "sglang", "trtllm"):
        return f"no scheduler for {r.engine}"
    if r.batch < 1:
        return "no batch recorded" if r.mode != "agg" else "no concurrency recorded"
    if r.engine == "sglang" and r.release is None and r.radix_cache and gated_deltanet_hybrid(get_preset(served[0])):
        return "SGLang release not recorded: its overlap schedule for Gated DeltaNet models depends on it"
    decode = _layout(gpu, r.tp, r.attention_dp, r.moe_ep, r.moe_tp)
    if isinstance(decode, str):
        return decode
    kv = row_kv(r, served, gpu)  # the launch script's, else the engine's default
    plan = dict(model=served[0], weights=served[1], gpu=gpu, kv_cache_dtype=kv, **decode)
    if r.redundant_slots:  # the decode recipe's expert slots placed without EPLB (disaggregated rows only)
        plan["redundant_slots"] = r.redundant_slots
    if r.mode == "agg":
        return plan
    if r.workers is None or r.prefill is None:
        return "disaggregated without its workers' counts recorded"
    prefill = _layout(gpu, *r.prefill[:4])
    if isinstance(prefill, str):
        return f"prefill side: {prefill}"
    return {**plan, "workers": r.workers, "prefill": prefill, "prefill_batch": r.prefill[4] or None}


def serving_rows(
    progress: Callable[[int, int, str], None] | None = None,
    *,
    quick: bool = False,
    full: bool = False,
    imbalance: str = "auto",
) -> tuple[list[ServingCheck], dict[str, int]]:
    """Every expressible measured row simulated (module docstring), its steps' expert load from ``imbalance``
    (a routing model, ``demos.zoo.workload.IMBALANCE_MODELS``), and ``{reason: rows}`` skipped."""
    from demos.zoo.measured_copies import checked_runs

    skipped: Counter = Counter()
    todo = []
    seen = set()
    for r, plan in checked_runs(_plan, skipped):
        key = (repr(sorted(plan.items(), key=str)), r.engine, r.isl, r.osl)
        if not full and "workers" in plan and 3 * clients(r) * r.osl > DISAGG_TOKENS:
            skipped[f"disaggregated, over {DISAGG_TOKENS:,} simulated tokens (--full runs it)"] += 1
            continue
        if quick and key in seen:
            skipped["--quick: a sampled row of the same deployment and lengths ran"] += 1
            continue
        seen.add(key)
        todo.append((r, plan))
    out = []
    pricers: dict = {}
    for i, (r, plan) in enumerate(todo):
        c = clients(r)
        warm = 2 * c if full else c
        run = _disaggregated if "workers" in plan else _colocated
        try:
            ttft, tpot, gpus = run(r, plan, c, warm, full, pricers, imbalance)
        except ConfigError as e:
            skipped[f"cannot be simulated: {str(e).split(':', 1)[-1].strip()[:90]}"] += 1
            continue
        model, gpu = plan["model"], plan["gpu"]
        out.append(
            ServingCheck(
                r.id, gpu, r.engine, r.mode, model, r.isl, r.osl, c, gpus, ttft, r.ttft_s, tpot, r.tpot_s, r.release
            )
        )
        if progress is not None:
            progress(i + 1, len(todo), r.id)
    return out, dict(skipped.most_common())


def _host_flags(r) -> dict:
    """The SGLang server flags a row's host behaviour depends on (``demos.serving.host``): its release and
    whether it ran without its radix cache; other engines run as their pinned releases."""
    sglang = r.engine == "sglang"
    return dict(release=r.release if sglang else None, disable_radix_cache=sglang and not r.radix_cache)


def _colocated(
    r, plan: dict, c: int, warm: int, full: bool, pricers: dict, imbalance: str = "auto"
) -> tuple[float, float, int]:
    """A co-located row run as its benchmark ran (``demos.serving.api.simulate``): mean TTFT, mean TPOT,
    GPUs (the worker's, its EP group)."""
    from demos.serving.api import simulate

    run = simulate(
        plan["model"],
        engine=r.engine,
        concurrency=c,
        isl=r.isl,
        osl=r.osl,
        requests=20 * c if full else 2 * c,
        warmup=warm,
        overlap="none",
        search=False,
        gpu=plan["gpu"],
        nodes=plan["nodes"],
        gpus_per_node=plan["gpus_per_node"],
        ep=plan["ep"],
        attention_tp=plan["attention_tp"],
        weights=plan["weights"],
        kv_cache_dtype=plan["kv_cache_dtype"],
        pricers=pricers,
        moe_tp=plan["moe_tp"],
        imbalance=imbalance,
        **_host_flags(r),
    )
    ttft, tpot = _means(run._raw["none"][0], warm)
    return ttft, tpot, plan["ep"]


def _disaggregated(
    r, plan: dict, c: int, warm: int, full: bool, pricers: dict, imbalance: str = "auto"
) -> tuple[float, float, int]:
    """A disaggregated row run whole (``demos.serving.coupled``): mean TTFT, mean TPOT, GPUs."""
    from demos.serving.coupled import Side, simulate_disaggregated

    if plan["moe_tp"] > 1 or plan["prefill"]["moe_tp"] > 1:
        raise ConfigError("disaggregated pools with MoE tensor parallelism are not modelled")
    side = {k: plan[k] for k in ("ep", "attention_tp", "nodes", "gpus_per_node")}
    pre = {k: v for k, v in plan["prefill"].items() if k != "moe_tp"}
    slots = plan.get("redundant_slots", 0)
    decode = Side(plan["gpu"], workers=plan["workers"][1], max_seqs=r.batch, redundant_slots=slots, **side)
    prefill = Side(plan["gpu"], workers=plan["workers"][0], max_seqs=plan["prefill_batch"], **pre)
    _, lives, _ = simulate_disaggregated(
        plan["model"],
        prefill=prefill,
        decode=decode,
        engine=r.engine,
        concurrency=c,
        isl=r.isl,
        osl=r.osl,
        requests=20 * c if full else 2 * c,
        warmup=warm,
        weights=plan["weights"],
        kv_cache_dtype=plan["kv_cache_dtype"],
        pricers=pricers,
        imbalance=imbalance,
        **_host_flags(r),
    )
    ttft, tpot = _means(lives["none"], warm)
    gpus = plan["workers"][0] * pre["ep"] + plan["workers"][1] * plan["ep"]
    return ttft, tpot, gpus


def clients(r) -> int:
    """The closed loop's clients of a measured row's one worker: the benchmark's concurrency where recorded
    (the batch per attention-DP rank times the ranks on most rows: one worker takes them all), else the
    worker's batch times its attention-DP ranks (times the decode workers on a disaggregated row)."""
    workers = r.workers[1] if r.workers else 1
    return r.concurrency or r.batch * max(1, r.attention_dp) * workers


def _means(lives, warmup: int) -> tuple[float, float]:
    """The measured requests' mean TTFT and mean TPOT (aiperf's figures), the first ``warmup`` left out."""
    xs = sorted(lives, key=lambda x: (x.arrival_s, x.request.id))[warmup:]
    xs = [x for x in xs if x.finished_s is not None]
    ttft = statistics.fmean(x.first_token_s - x.arrival_s for x in xs)
    tpots = [(x.token_s[-1] - x.token_s[0]) / (len(x.token_s) - 1) for x in xs if len(x.token_s) > 1]
    return ttft, statistics.fmean(tpots) if tpots else 0.0


def serving_summaries(rows: list[ServingCheck], by: tuple[str, ...] = ("gpu", "engine", "mode")) -> list[dict]:
    """Per group of ``by`` (ServingCheck fields; default GPU, engine and mode): rows, and the TTFT and TPOT
    error statistics (``error_stats``)."""
    out = []
    for key in sorted({tuple(getattr(r, f) for f in by) for r in rows}):
        mine = [r for r in rows if tuple(getattr(r, f) for f in by) == key]
        d = {**dict(zip(by, key)), "rows": len(mine)}
        for what in ("ttft", "tpot"):
            errs = [_E(e) for e in (getattr(r, f"{what}_error") for r in mine) if e is not None]
            d[what] = error_stats(errs)[0] if errs else None
        out.append(d)
    return out


def format_grouped(summaries: list[dict], title: str = "per model:", keys: tuple[str, ...] = ("model",)) -> str:
    """The summaries of one grouping (``serving_summaries(rows, keys)``; default per model) as a table."""
    width = max([16] + [len(" ".join(str(s[k]) for k in keys)) for s in summaries])
    pad = " " * len(title)
    head = " ".join(keys).replace("_", " ")
    lines = [f"{title} {head:<{width}} {'rows':>5}  {'TTFT median':>11} {'TPOT median':>11} {'|median|':>8}"]
    for s in summaries:
        t, p = s["ttft"] or {}, s["tpot"] or {}
        name = " ".join(str(s[k]) for k in keys)
        lines.append(
            f"{pad} {name:<{width}} {s['rows']:>5}  {_pct(t.get('median_error')):>11} "
            f"{_pct(p.get('median_error')):>11} {_pct(p.get('median_abs_error')).lstrip('+'):>8}"
        )
    return "\n".join(lines) + "\n"


class _E(NamedTuple):
    error: float


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1%}"


def format_serving(summaries: list[dict], skipped: dict[str, int]) -> str:
    lines = [
        "Simulated serving runs against measured ones (closed loop at the row's concurrency, no overlap)",
        f"{'gpu':<6} {'engine':<7} {'mode':<6} {'rows':>5}  {'TTFT median':>11} {'|median|':>8}  "
        f"{'TPOT median':>11} {'|median|':>8} {'max':>8}",
    ]
    for s in summaries:
        t, p = s["ttft"] or {}, s["tpot"] or {}
        lines.append(
            f"{s['gpu']:<6} {s['engine']:<7} {s['mode']:<6} {s['rows']:>5}  {_pct(t.get('median_error')):>11} "
            f"{_pct(t.get('median_abs_error')).lstrip('+'):>8}  {_pct(p.get('median_error')):>11} "
            f"{_pct(p.get('median_abs_error')).lstrip('+'):>8} {_pct(p.get('max_error')):>8}"
        )
    lines.append("errors: predicted / measured - 1 (means over the measured requests, as aiperf reports them)")
    if skipped:
        lines.append("skipped rows:")
        lines += [f"  {n:>5}  {why}" for why, n in skipped.items()]
    return "\n".join(lines) + "\n"


def side_by_side(rows: list[ServingCheck], progress: Callable[[int, int, str], None] | None = None) -> list[dict]:
    """aiconfigurator's estimate of the rows simulated (``demos.fidelity.peer``, cached), beside ours: per
    GPU, engine and mode, the rows both estimated, and for TTFT and TPOT both median |errors| on them."""
    from demos.fidelity.peer import load_peer, peer_rows
    from demos.zoo import measured

    ours = {r.id: r for r in rows}
    measured_rows = [m for m in measured.silicon_rows() if m.id in ours]
    theirs = {c.id: c for c in peer_rows(measured_rows, progress, peer=load_peer())}
    out = []
    for key in sorted({(r.gpu, r.engine, r.mode) for r in rows}):
        both = [(r, theirs[r.id]) for r in rows if (r.gpu, r.engine, r.mode) == key and r.id in theirs]
        d = {"gpu": key[0], "engine": key[1], "mode": key[2], "rows": len(both)}
        for what in ("ttft", "tpot"):
            pairs = [
                (getattr(r, f"{what}_error"), getattr(c, f"{what}_error"))
                for r, c in both
                if getattr(r, f"{what}_error") is not None and getattr(c, f"{what}_error") is not None
            ]
            d[what] = {
                "rows": len(pairs),
                "ours": statistics.median(abs(a) for a, _ in pairs) if pairs else None,
                "aiconfigurator": statistics.median(abs(b) for _, b in pairs) if pairs else None,
            }
        out.append(d)
    return out


def format_side_by_side(groups: list[dict]) -> str:
    lines = [
        "Beside aiconfigurator's own estimate of the same rows (median |error| on the rows both estimated)",
        f"{'gpu':<6} {'engine':<7} {'mode':<6} {'TTFT rows':>9} {'ours':>7} {'aic':>7}  {'TPOT rows':>9} "
        f"{'ours':>7} {'aic':>7}",
    ]
    for g in groups:
        t, p = g["ttft"], g["tpot"]
        lines.append(
            f"{g['gpu']:<6} {g['engine']:<7} {g['mode']:<6} {t['rows']:>9} {_abs(t['ours']):>7} "
            f"{_abs(t['aiconfigurator']):>7}  {p['rows']:>9} {_abs(p['ours']):>7} {_abs(p['aiconfigurator']):>7}"
        )
    return "\n".join(lines) + "\n"


def _abs(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"
