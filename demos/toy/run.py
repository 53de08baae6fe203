"""Run the toy MoE without and with DBO and return what was measured (``run``), as dataclasses.

``run(OverlapConfig(...))`` checks the config (``ConfigError``), builds the model over the modelled
link (or, with ``world_size`` > 1, over torch.distributed on that many ranks), warms up, locks the
workspace, calibrates the link, times ``steps`` steps without DBO (one ubatch) and ``steps`` with
DBO, compares the outputs and returns an ``OverlapResult``. It prints nothing and writes no file.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import asdict, replace
from typing import Any, Callable, Sequence

import torch

import dbo
import workspace
from dbo.trace import KernelRecord, Window
from demos.toy.comm import ModelledLinkTransport
from demos.toy.config import TOLERANCE, ConfigError, OverlapConfig, Resolved, field_ref, model_config, resolve
from demos.toy.dist_comm import DistributedTransport
from demos.toy.model import ToyMoE
from demos.toy.results import (
    EngineTimes,
    OutputCheck,
    OverlapResult,
    RankResult,
    ReferenceCheck,
    WorkspaceFigures,
)
from demos.toy.runner import GraphTimes, Measurement, Runner, engine_times, measure

__all__ = ["run", "reference_outputs", "layer_window", "compare_outputs", "bitwise_diff"]


def _config(config: OverlapConfig | None, overrides: dict[str, Any]) -> OverlapConfig:
    cfg = config if config is not None else OverlapConfig()
    return OverlapConfig(**{**asdict(cfg), **overrides}) if overrides else cfg


def run(
    config: OverlapConfig | None = None, *, on_layer: Callable[[int, int], Any] | None = None, **overrides: Any
) -> OverlapResult | None:
    """Run the demo and return its measurements; ``overrides`` replace fields of ``config``;
    ``on_layer(layer, layers)`` is called before each layer of every ubatch of a single-process run
    (the command's heartbeat on long simulations).

    Raises ConfigError for a bad option. With ``world_size`` > 1 the ranks run in other processes
    and a failed rank raises ``demos.ranks.launcher.DistributedError``; with ``launcher="env"``
    (under torchrun) this process is one rank: rank 0 returns the result, the others None.
    """
    cfg = _config(config, overrides)
    res = resolve(cfg)
    wall0 = time.perf_counter()
    if res.distributed:
        result = _run_distributed(cfg, res)
        if result is None:  # not rank 0 (torchrun)
            return None
        result.config = cfg  # the ranks ran a copy without the launcher's output paths
    else:
        old_threads = torch.get_num_threads()
        if res.torch_threads is not None:
            torch.set_num_threads(res.torch_threads)
        runner = None
        try:
            runner = Runner(cfg, res, on_layer=on_layer)
            meas, found = _measure_maybe_sanitized(runner, cfg, res)
            result = _result(runner, cfg, res, meas, engine_times(meas))
            result.sanitizer_findings = found
        finally:
            if runner is not None:
                runner.close()
            workspace.reset_workspace_manager()
            torch.set_num_threads(old_threads)
    result.wall_s = time.perf_counter() - wall0
    return result


def _measure_maybe_sanitized(runner: Runner, cfg: OverlapConfig, res: Resolved) -> tuple[Measurement, list | None]:
    """``measure``; with ``cfg.sanitize`` under the workspace sanitizer and dbo.races (collecting)."""
    if not cfg.sanitize:
        return measure(runner, cfg, res), None
    from workspace import sanitizer

    sanitizer.enable("collect", races=True)
    try:
        meas = measure(runner, cfg, res)
        runner.backend.synchronize()
        return meas, sanitizer.findings()
    finally:
        sanitizer.disable()


def _kernels(records: Sequence[KernelRecord], op: str, layer: int, ubatch: int | None) -> list[KernelRecord]:
    """The kernels that declared ``op`` and ``layer``, owned by ``ubatch`` (all three from the records)."""
    return [r for r in records if r.op == op and r.layer == layer and r.ubatch == ubatch]


def layer_window(records: Sequence[KernelRecord], num_layers: int) -> Window:
    """The window of one steady-state layer of a step: from ubatch 0's first attention kernel of
    layer ``(num_layers - 1) // 2`` to the same kernel of the next layer (to the step's end for a
    one-layer model, or when ubatch 0's kernels are not found).

    A step without DBO runs its one batch on no registered ubatch, so its records all carry
    ``ubatch=None``; then the batch's own kernels (``None``) stand in for ubatch 0's."""
    layer = (num_layers - 1) // 2
    step_start = min(r.start for r in records)
    step_end = max(r.end for r in records)
    owner = 0 if any(r.ubatch is not None for r in records) else None
    first = _kernels(records, "attn_qkv", layer, owner)
    nxt = _kernels(records, "attn_qkv", layer + 1, owner)
    start = first[0].start if first else step_start
    end = nxt[0].start if nxt else step_end
    if end <= start:
        end = step_end
    return Window(start, end, step_start, layer)


def compare_outputs(
    out: torch.Tensor | None, ref: torch.Tensor | None, rtol: float
) -> tuple[float | None, float | None, bool | None]:
    """(max |out - ref|, max |ref|, passed) with tolerance ``rtol x max(1, max|ref|)``."""
    if out is None or ref is None:
        return None, None, None
    if out.shape != ref.shape:
        return math.inf, None, False
    diff = (out.to(torch.float64) - ref.to(torch.float64)).abs()
    max_abs_diff = float(diff.max().item()) if diff.numel() else 0.0
    ref_max = float(ref.abs().max().item()) if ref.numel() else 0.0
    nonfinite = not (torch.isfinite(out).all().item() and torch.isfinite(ref).all().item())
    return max_abs_diff, ref_max, (not nonfinite) and max_abs_diff <= rtol * max(ref_max, 1.0)


def bitwise_diff(out: torch.Tensor | None, ref: torch.Tensor | None) -> tuple[float | None, bool | None]:
    """(max |out - ref|, bitwise equal); (None, None) without tensors (meta)."""
    if out is None or ref is None:
        return None, None
    if out.shape != ref.shape or out.dtype != ref.dtype:
        return math.inf, False
    diff = (out.to(torch.float64) - ref.to(torch.float64)).abs()
    return (float(diff.max().item()) if diff.numel() else 0.0), bool(torch.equal(out, ref))


def _output_check(meas: Measurement, rtol: float, dtype: str) -> OutputCheck:
    """DBO against the same split run one ubatch after another (bitwise), eager and graph; and
    against the whole batch at once (numerics)."""
    whole, ref_max, _ = compare_outputs(meas.out, meas.ref, rtol)
    d_eager, ok = bitwise_diff(meas.out, meas.split_ref)
    d_graph = None
    if meas.graph is not None and ok is not None:
        d_graph, ok_graph = bitwise_diff(meas.graph.out, meas.split_ref)
        ok = ok and ok_graph
    diffs = [d for d in (d_eager, d_graph) if d is not None]
    worst = max(diffs) if diffs else None
    return OutputCheck(worst, ref_max, ok, rtol, dtype, max_abs_diff_whole_batch=whole, graph_max_abs_diff=d_graph)


def _result(r: Runner, cfg: OverlapConfig, res: Resolved, meas: Measurement, engine: EngineTimes) -> OverlapResult:
    """The result from one process's measurements (``engine``: the figures to report)."""
    rtol = TOLERANCE.get(res.dtype_name, 1e-2)
    outputs = _output_check(meas, rtol, res.dtype_name)
    stats, recs_no, recs_dbo = meas.stats, meas.recs_no[-1], meas.recs_dbo[-1]
    spans, handoffs = [], []  # the host side of exactly the two steps whose kernels the result holds
    for dbo_on in (False, True):
        step_spans, step_handoffs = r.last_host.get(dbo_on, ([], []))
        spans += step_spans
        handoffs += step_handoffs
    g = meas.graph
    return OverlapResult(
        config=cfg,
        resolved=res,
        times_no_dbo_s=list(meas.t_no) if g is None else list(g.t_no),
        times_dbo_s=list(meas.t_dbo) if g is None else list(g.t_dbo),
        graph=g is not None,
        eager_times_no_dbo_s=list(meas.t_no),
        eager_times_dbo_s=list(meas.t_dbo),
        graph_kernels=None if g is None else (g.kernels_no, g.kernels_dbo),
        output_dbo_graph=None if g is None else g.out,
        output_split=meas.split_ref,
        engine=engine,
        calibration=meas.calibration,
        link=r.transport.describe(),
        workspace=WorkspaceFigures(
            slot_sizes=list(meas.slot_sizes),
            grows=stats["grows"],
            grows_in_warmup=meas.warm["grows"],
            allocations=stats["allocations"],
            allocations_after_lock=meas.allocations_after_lock,
            manager_allocations_after_lock=stats["allocations_after_lock"],
            locked=stats["locked"],
        ),
        outputs=outputs,
        output_no_dbo=meas.ref,
        output_dbo=meas.out,
        records_no_dbo=list(recs_no),
        records_dbo=list(recs_dbo),
        step_records_no_dbo=[list(x) for x in meas.recs_no],
        step_records_dbo=[list(x) for x in meas.recs_dbo],
        start_phases_dbo_s=list(meas.start_dbo),
        window=layer_window(recs_dbo, cfg.layers),
        torch_threads=meas.torch_threads,
        engine_cpus=meas.engine_cpus,
        host_spans=spans,
        host_handoffs=handoffs,
    )


# --- several ranks (docs/distributed.md) ------------------------------------------------------------


def reference_outputs(config: OverlapConfig | None = None, **overrides: Any) -> torch.Tensor:
    """The final hidden states of the *whole* batch computed by one process without DBO over the
    modelled link: what a run on several ranks must reproduce (same model, same seed). A CPU
    tensor of shape (tokens, hidden). Uses the process-global workspace manager (and resets it)."""
    cfg = _config(config, overrides)
    dtype = torch.float32 if cfg.dtype == "auto" else getattr(torch, cfg.dtype)
    device = (
        "cuda"
        if cfg.backend == "cuda" or (cfg.backend == "auto" and cfg.world_size > 1 and torch.cuda.is_available())
        else "cpu"
    )
    mc = model_config(cfg, ep=1, dtype=dtype, device=device).resolved()
    threads = cfg.torch_threads if cfg.torch_threads is not None else (1 if device == "cpu" else None)
    old_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    workspace.init_workspace_manager(device, num_ubatches=1)
    try:
        model = ToyMoE(mc, ModelledLinkTransport(), num_ubatches=1, schedule=cfg.schedule)
        with dbo.UBatchOrchestrator(1, backend="inline") as orch:
            orch.run(model.forward, [range(0, mc.tokens)])
        return model.hidden.detach().to("cpu", copy=True)
    finally:
        workspace.reset_workspace_manager()
        torch.set_num_threads(old_threads)


def _run_distributed(cfg: OverlapConfig, res: Resolved) -> OverlapResult | None:
    from demos.ranks import launcher as distributed

    rank_cfg = replace(cfg, json_path=None, trace_path=None, plot_path=None)  # no rank writes files
    if cfg.launcher == "env":
        return distributed.run_from_env(_overlap_rank, (rank_cfg,), backend=res.dist_backend, timeout=cfg.dist_timeout)
    return distributed.launch(
        _overlap_rank, (rank_cfg,), world_size=res.world_size, backend=res.dist_backend, timeout=cfg.dist_timeout
    )


def _overlap_rank(info: Any, cfg: OverlapConfig) -> OverlapResult | None:
    """One rank of a distributed run (``info``: demos.ranks.launcher.RankInfo). Every rank runs its
    shard; rank 0 gathers the measurements and outputs, checks them against a single-process run
    and returns the result; the other ranks return None."""
    from demos.ranks.launcher import shard_range

    res = resolve(cfg)
    if res.world_size != info.world_size:
        raise ConfigError(f"{field_ref('world_size')} {res.world_size} but this run has {info.world_size} ranks")
    W = info.world_size
    old_threads = torch.get_num_threads()
    if res.torch_threads is not None:
        torch.set_num_threads(res.torch_threads)
    if res.backend == "cuda":
        res = replace(res, model=replace(res.model, device=str(info.device)))
    runner = None
    try:
        groups = info.ubatch_groups(cfg.ubatches)
        rows = info.shard(cfg.tokens)
        transport = DistributedTransport(
            groups,
            rank=info.rank,
            world_size=W,
            experts=cfg.experts,
            max_tokens=max(len(shard_range(cfg.tokens, W, q)) for q in range(W)),
            serialize=res.backend == "threads" and cfg.stream_layout == "per-ubatch",
            fault=info.on_collective,
        )
        runner = Runner(cfg, res, transport=transport, rows=rows, before_step=info.barrier, on_dbo_step=info.on_step)
        meas = measure(runner, cfg, res)
        mine = dict(
            rank=RankResult(
                rank=info.rank,
                rows=(rows.start, rows.stop),
                pid=os.getpid(),
                times_no_dbo_s=meas.t_no,
                times_dbo_s=meas.t_dbo,
                engine=engine_times(meas),
                allocations_after_lock=meas.allocations_after_lock,
                bytes_to_peers_per_step=meas.bytes_to_peers_per_step,
            ),
            ref=meas.ref,
            out=meas.out,
            split_ref=meas.split_ref,
            graph=meas.graph,
        )
        everyone = info.gather_object(mine)
        if info.rank != 0:
            return None
        return _distributed_result(runner, cfg, res, meas, everyone)
    finally:
        if runner is not None:
            runner.close()
        workspace.reset_workspace_manager()
        torch.set_num_threads(old_threads)


def _gather_graph(per_rank: list[GraphTimes | None]) -> GraphTimes | None:
    """The ranks' replays: a replay takes as long as its slowest rank; the outputs in rank order."""
    if per_rank[0] is None:
        return None
    steps = len(per_rank[0].t_no)
    return GraphTimes(
        t_no=[max(g.t_no[i] for g in per_rank) for i in range(steps)],
        t_dbo=[max(g.t_dbo[i] for g in per_rank) for i in range(steps)],
        out=torch.cat([g.out for g in per_rank]),
        kernels_no=per_rank[0].kernels_no,
        kernels_dbo=per_rank[0].kernels_dbo,
    )


def _distributed_result(
    r: Runner, cfg: OverlapConfig, res: Resolved, meas: Measurement, everyone: list[dict]
) -> OverlapResult:
    """Rank 0: the result over all ranks. A step takes as long as its slowest rank; C, M and O
    are the means over ranks of each rank's medians; outputs are the ranks' rows in rank order."""
    ranks: list[RankResult] = [x["rank"] for x in everyone]
    steps = len(meas.t_no)
    agg = replace(
        meas,
        t_no=[max(x.times_no_dbo_s[i] for x in ranks) for i in range(steps)],
        t_dbo=[max(x.times_dbo_s[i] for x in ranks) for i in range(steps)],
        ref=torch.cat([x["ref"] for x in everyone]),
        out=torch.cat([x["out"] for x in everyone]),
        split_ref=torch.cat([x["split_ref"] for x in everyone]),
        graph=_gather_graph([x["graph"] for x in everyone]),
    )
    engine = EngineTimes(
        **{
            k: statistics.fmean(getattr(x.engine, k) for x in ranks)
            for k in ("compute_s", "comm_s", "overlapped_s", "dbo_compute_s", "dbo_comm_s", "dbo_overlapped_s")
        }
    )
    result = _result(r, cfg, res, agg, engine)
    result.workspace.allocations_after_lock = max(x.allocations_after_lock for x in ranks)
    result.ranks = ranks
    # the single-process reference: same model, same seed, the whole batch, no DBO, modelled link
    # (this rank's own workspace manager is done: the reference installs its own)
    workspace.reset_workspace_manager()
    reference = reference_outputs(replace(cfg, backend=res.backend))
    rtol = result.outputs.rtol
    d_no, _, ok_no = compare_outputs(agg.ref, reference, rtol)
    d_dbo, _, ok_dbo = compare_outputs(agg.out, reference, rtol)
    result.reference = ReferenceCheck(d_no, d_dbo, bool(ok_no and ok_dbo))
    result.outputs.passed = bool(result.outputs.passed and ok_no and ok_dbo)
    result.output_reference = reference
    return result
