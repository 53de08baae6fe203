"""DeepGEMM's published fused MoE ("MegaMoE") tables against the model (``demos.zoo.fused_moe``), held out.

Two tables, copied with their source (nothing here is fitted to them; ``validate deepep`` prints them):

* ``PUBLISHED_SM100``: DeepGEMM PR #316 (merged 2026-04, commit 891d57b), the FP8 x FP4 kernel on an SM100
  GPU the PR does not name (taken to be a B200: an assumption) at EP 8, DeepSeek-V4-Flash (256 experts of
  2048, top-6, hidden 4096) and -Pro (384 of 3072, hidden 7168), tokens per rank 1 to 32,768, averaged over
  the 8 ranks: the kernel's microseconds and its speedup over the unfused path (DeepEP's dispatch, two FP8 x
  FP4 grouped GEMMs with the activation between, DeepEP's combine);
* ``PUBLISHED_SM90``: DeepGEMM PR #383 (merged 2026-07), the FP8 kernel on H200 against DeepEP's normal
  (high-throughput) kernels with the grouped GEMMs, same two models with FP8 experts, tokens per rank 8 to
  8,192; its EP size is not in the text read (taken to be one node of 8: an assumption).

And the measured extra's own tables of the kernel (``megamoe_module_rows``, op ``megamoe module`` of
``validate kernels``, held out): SGLang's ``dsv4_megamoe_module_perf`` (the kernel with its pre-dispatch
quantization, not the gate) on B200 (Kimi-K3's shapes, EP 8; SGLang 0.5.16), GB200 and GB300
(DeepSeek-V4-Pro's shapes, EP 4 to 32 within the rack; SGLang 0.5.10), its ``balanced`` routing rows (the
model's routing with no imbalance; the power-law rows are left out: the model does not draw skewed routing).

Each row of the published tables: the model's fused kernel (``fused_moe_seconds``, its GEMMs on the
family's curves) against the published kernel time, and the model's unfused MoE (the layer's dispatch,
experts and combine ops, the schedule the PR compared with: low-latency on SM100 at up to 512 tokens,
normal beyond and on SM90) against the published unfused time.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from statistics import median

from demos.vocabulary import Phase, Schedule
from demos.zoo.hardware import get_gpu
from demos.zoo.kernel_times import KernelTimes
from demos.zoo.models import get_preset
from demos.zoo.plan import StepPlan, launch_seconds
from demos.zoo.profile import gpu_profile
from demos.zoo.workload import Workload, cluster_for

__all__ = [
    "MODULE_SHAPES",
    "PUBLISHED_SM90",
    "PUBLISHED_SM100",
    "SOURCE_SM90",
    "SOURCE_SM100",
    "compare",
    "format_table",
    "megamoe_module_rows",
]

SOURCE_SM100 = "DeepGEMM PR #316 (SM100 FP8 x FP4, EP 8)"
SOURCE_SM90 = "DeepGEMM PR #383 (H200 FP8, vs DeepEP normal)"

PUBLISHED_SM100 = (
    ("deepseek-v4-flash", 1, 56.5, 1.96),
    ("deepseek-v4-flash", 512, 146.5, 1.73),
    ("deepseek-v4-flash", 8192, 1283.1, 1.56),
    ("deepseek-v4-flash", 32768, 4855.5, 1.62),
    ("deepseek-v4-pro", 1, 108.1, 1.61),
    ("deepseek-v4-pro", 512, 369.6, 1.54),
    ("deepseek-v4-pro", 8192, 2818.5, 1.50),
    ("deepseek-v4-pro", 32768, 10655.2, 1.54),
)
"""(model, tokens per rank, fused kernel us, speedup over the unfused path): DeepGEMM PR #316's table."""

_H200_M = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
_H200_FLASH = (
    (225.0, 348.0),
    (245.9, 395.4),
    (253.1, 394.4),
    (265.8, 402.6),
    (265.1, 414.0),
    (293.4, 439.3),
    (413.4, 496.8),
    (637.3, 705.0),
    (959.1, 1208.0),
    (1739.0, 2238.1),
    (3269.0, 4317.6),
)
_H200_PRO = (
    (636.6, 801.8),
    (778.0, 946.4),
    (822.9, 1244.4),
    (858.1, 1022.8),
    (871.6, 1042.5),
    (881.8, 1085.2),
    (1004.5, 1178.7),
    (1392.7, 1617.5),
    (2405.7, 2678.6),
    (4217.0, 4832.9),
    (7939.0, 9207.9),
)
PUBLISHED_SM90 = tuple(
    (model, m, mega, deepep / mega)
    for model, table in (("deepseek-v4-flash", _H200_FLASH), ("deepseek-v4-pro", _H200_PRO))
    for m, (mega, deepep) in zip(_H200_M, table)
)
"""(model, tokens per rank, fused kernel us, speedup over DeepEP normal + grouped GEMMs): PR #383's table."""

_UNFUSED = frozenset(
    {
        "dispatch",
        "dispatch_send",
        "dispatch_ll",
        "dispatch_recv",
        "experts",
        "experts_ll",
        "combine",
        "combine_send",
        "combine_ll",
        "combine_recv",
        "moe_copy",
    }
)
"""The ops of a MoE layer the unfused path the PRs timed runs (not the router, the shared experts, the finalize)."""


def _workload(model: str, gpu: str, tokens: int, schedule: Schedule) -> Workload:
    spec = get_preset(model)
    if gpu == "h200":  # the SM90 kernel takes block-FP8 experts (SGLang's FP8 copies of V4)
        spec = replace(spec, precision=replace(spec.precision, experts="fp8_e4m3", dispatch="fp8_e4m3"))
    phase = Phase.DECODE if tokens <= 512 else Phase.PREFILL
    return Workload(
        spec,
        cluster_for(gpu, 1, 8, 8),
        phase=phase,
        tokens=tokens,
        context=max(tokens, 1),
        schedule=schedule,
        ubatches=1,
    )


def _last_layer(w: Workload, fit=None) -> tuple[float, float]:
    """(the model's fused kernel, its unfused dispatch + experts + combine) in seconds for the last (an MoE)
    layer of ``w``, timed on ``fit`` (default the GPU family's curves)."""
    profile = gpu_profile(w.gpu)
    lp = StepPlan(w, profile, KernelTimes(w.gpu, profile, fit)).ubatch(w.tokens).layers[w.spec.num_layers - 1]
    fused = launch_seconds("fused_moe", lp.fused["fused_moe"], profile)
    unfused = sum(launch_seconds(name, cost, profile) for name, cost in lp.plain.items() if name in _UNFUSED)
    return fused, unfused


def compare() -> list[dict]:
    """One record per published row: ``model``, ``gpu``, ``tokens`` per rank, ``predicted`` and ``published``
    fused kernel us and their ``error``, the unfused path's (``unfused_predicted``, ``unfused_published``,
    ``unfused_error``), the ``schedule`` the unfused path was modelled with and the ``source``."""
    rows = []
    for gpu, source, table in (("b200", SOURCE_SM100, PUBLISHED_SM100), ("h200", SOURCE_SM90, PUBLISHED_SM90)):
        for model, tokens, published, speedup in table:
            schedule = Schedule.LL if gpu == "b200" and tokens <= 512 else Schedule.HT
            w = _workload(model, gpu, tokens, schedule)
            fused, unfused = (s * 1e6 for s in _last_layer(w))
            rows.append(
                {
                    "model": model,
                    "gpu": gpu,
                    "tokens": tokens,
                    "predicted": fused,
                    "published": published,
                    "error": fused / published - 1,
                    "unfused_predicted": unfused,
                    "unfused_published": published * speedup,
                    "unfused_error": unfused / (published * speedup) - 1,
                    "schedule": schedule,
                    "source": source,
                }
            )
    return rows


def format_table(rows: Sequence[dict]) -> str:
    """The records as a text table, with the signed and absolute median errors per source."""
    lines = [
        "DeepGEMM's fused MoE kernel (MegaMoE): model vs published, one MoE layer, held out (nothing fitted to it)",
        f"{'source':<47}{'model':<19}{'tokens':>7}{'fused us':>10}{'published':>10}{'error':>8}"
        f"{'unfused us':>12}{'published':>10}{'error':>8}  unfused as",
    ]
    for r in rows:
        lines.append(
            f"{r['source']:<47}{r['model']:<19}{r['tokens']:>7}{r['predicted']:>10.1f}{r['published']:>10.1f}"
            f"{r['error'] * 100:>+7.1f}%{r['unfused_predicted']:>12.1f}{r['unfused_published']:>10.1f}"
            f"{r['unfused_error'] * 100:>+7.1f}%  {r['schedule']}"
        )
    for src in dict.fromkeys(r["source"] for r in rows):
        mine = [r for r in rows if r["source"] == src]
        f = [r["error"] for r in mine]
        u = [r["unfused_error"] for r in mine]
        lines.append(
            f"{src}: fused median {median(f) * 100:+.1f}% (|error| {median([abs(x) for x in f]) * 100:.1f}%), "
            f"unfused median {median(u) * 100:+.1f}% (|error| {median([abs(x) for x in u]) * 100:.1f}%) "
            f"over {len(mine)} rows"
        )
    lines.append(
        "assumed: #316's SM100 GPU is a B200; #383's EP is 8 on one node; the unfused path's schedule as listed"
    )
    return "\n".join(lines)


MODULE_SHAPES = {
    (3584, 3072, 16, 896): "kimi-k3",
    (7168, 3072, 6, 384): "deepseek-v4-pro",
    (4096, 2048, 6, 256): "deepseek-v4-flash",
}
"""(routed width, expert width, top-k, experts) of a measured module row -> the preset of those shapes."""


def _module_frame(gpu: str):
    """The newest SGLang ``dsv4_megamoe_module_perf`` table of ``gpu``, or None where the extra has none."""
    from demos.zoo import measured

    if gpu not in measured.SYSTEMS:
        return None
    root = measured.data_root() / "data" / measured.SYSTEMS[gpu] / "moe" / "sglang"
    paths = sorted(
        root.glob("*/dsv4_megamoe_module_perf.parquet"), key=lambda p: tuple(map(int, p.parent.name.split(".")))
    )
    if not paths:
        return None
    _, pd = measured._modules()
    return pd.read_parquet(paths[-1])


def megamoe_module_rows(gpu: str, fit=None) -> Iterable:
    """``validate kernels``' op ``megamoe module`` on ``gpu`` (module docstring): each balanced row's measured
    module against the model's ``fused_moe`` launch for one MoE layer of the preset of its shapes, at its
    tokens per rank and EP (the EP group in one NVLink domain of the GPU), routing without imbalance; ``fit``:
    the family curves to time it on (default the GPU's family's). Yields ``(shape, predicted_s, measured_s)``.
    """
    d = _module_frame(gpu)
    if d is None:
        return
    d = d[d.distribution == "balanced"]
    names = ("hidden_size", "inter_size", "topk", "num_experts", "moe_ep_size", "num_tokens", "phase", "latency")
    for hidden, inter, k, experts, ep, tokens, phase, ms in zip(*(d[c].tolist() for c in names)):
        preset = MODULE_SHAPES.get((hidden, inter, k, experts))
        if preset is None:
            continue
        per = get_gpu(gpu).gpus_per_node
        cluster = cluster_for(gpu, max(1, ep // per), min(per, ep), ep)
        ph = Phase.DECODE if phase == "generation" else Phase.PREFILL
        w = Workload(get_preset(preset), cluster, ph, tokens, tokens, ubatches=1, imbalance=1.0)
        yield f"{preset} {phase} ep={ep} tokens={tokens}", _last_layer(w, fit)[0], ms * 1e-3
