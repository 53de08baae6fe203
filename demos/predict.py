"""``python -m demos.predict``: does DBO pay for this model on this cluster, from which batch size, and
what to pass to vLLM and SGLang (docs/predict.md).

The command line only: flags, one-line errors before any work, the progress bar, the files. The sweep
is ``demos.prediction.sweep``, the answer ``demos.prediction.answer``, the outputs
``demos.prediction.outputs``; ``--model toy --profile PATH.json`` sweeps the toy (``demos.prediction.toy``).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence

import demos._cli as cli_common
from demos.moe.config_error import ConfigError
from demos.prediction.answer import best_setting, crossover, reason_of, recommend
from demos.prediction.outputs import format_prediction, point_record, prediction_report, write_csv, write_plot
from demos.prediction.sweep import DEFAULT_TOKENS, WHAT_IF, Sweep, default_mode, run_sweep
from demos.zoo.flags import TOY, add_model_flags, flag_of, int_list, load_model, workload_of

__all__ = ["PROG", "build_parser", "main", "predict"]

PROG = "python -m demos.predict"


def _what_if(text: str) -> tuple[str, float]:
    key, sep, value = text.partition("=")
    try:
        f = float(value)
    except ValueError:
        f = None
    if not sep or f is None:
        raise argparse.ArgumentTypeError(f"expected KEY=FACTOR with KEY one of {', '.join(WHAT_IF)}, got {text!r}")
    return key.strip(), f


def build_parser() -> cli_common.OneLineParser:
    p = cli_common.OneLineParser(
        prog=PROG,
        description="Predict whether DBO pays for a model on a cluster, from which tokens per GPU, and what to pass "
        "to vLLM and SGLang (docs/predict.md).",
    )
    add_model_flags(p, model_default=None, sweep=True)
    a = p.add_argument
    a(
        "--tokens",
        type=int_list,
        default=None,
        metavar="N,...",
        help="tokens per GPU to sweep (default: "
        + "; ".join(f"{k} {','.join(map(str, v))}" for k, v in DEFAULT_TOKENS.items())
        + ")",
    )
    a("--ubatches", type=int_list, default=(2,), metavar="N,...", help="ubatches with DBO to sweep (default 2)")
    a(
        "--mode",
        default=None,
        choices=("graph", "eager", "both"),
        help="graph replays (vLLM's DBO decode) or eager steps (default: graph for decode, eager for prefill)",
    )
    a(
        "--what-if",
        type=_what_if,
        action="append",
        default=[],
        metavar="KEY=FACTOR",
        help="multiply one figure: " + "; ".join(f"{k}: {v}" for k, v in WHAT_IF.items()),
    )
    a("--profile", default=None, metavar="PATH.json", help="with --model toy: the profile demos.calibrate measured")
    a("--json", dest="json_path", default=None, metavar="PATH", help="write the prediction as JSON")
    a("--csv", dest="csv_path", default=None, metavar="PATH", help="write the points as CSV")
    a("--plot", dest="plot_path", default=None, metavar="PATH.png", help="step time and speedup against tokens")
    a("--trace", dest="trace_path", default=None, metavar="PATH", help="a Perfetto trace of one point's steps")
    a("--trace-tokens", type=int, default=None, metavar="N", help="the point --trace shows (default: the crossover)")
    return p


def _modes(ns: Any) -> tuple[str, ...]:
    if ns.mode == "both":
        return ("graph", "eager")
    return (ns.mode or default_mode(ns.phase),)


def _plan(ns: Any) -> Sweep:
    spec = load_model(ns.model)
    tokens = ns.tokens or DEFAULT_TOKENS[ns.phase]
    base = workload_of(ns, tokens=max(tokens), ubatches=ns.ubatches[0], spec=spec)
    sms = ns.comm_sms if ns.comm_sms else (None,)
    return Sweep(base, tuple(tokens), _modes(ns), tuple(ns.ubatches), tuple(sms), dict(ns.what_if))


def _sources(sweep: Sweep) -> list[str]:
    w = sweep.base
    return [
        f"model: {w.spec.source}",
        f"GPU {w.gpu.name}: {w.gpu.source}",
        "GEMM efficiency: DeepGEMM's H800 FP8 tables; attention: FlashMLA's H800 figures (docs/kernels.md)",
        "all-to-all: DeepEP's H800 tables, 4 fitted parameters (docs/clusters.md)",
        "host: per-launch, handoff and sync costs measured on our H200 host (docs/fidelity.md)",
    ]


def _model_id(source: str, given: str) -> str:
    """What ``vllm serve`` takes: the HuggingFace repo of a preset, else what ``--model`` named."""
    if source.startswith("huggingface.co/") and " " in source:
        return source[len("huggingface.co/") :].split(" ", 1)[0]
    return given


def predict(ns: Any, sweep: Sweep, progress: Any = None) -> tuple[dict[str, Any], list]:
    """Run the sweep and build the report dict; returns (report, results)."""
    results = run_sweep(sweep, progress)
    w = sweep.base
    cross, reasons, best = {}, {}, {}
    for mode in sweep.modes:
        ub, sms = best_setting(results, mode)
        best[mode] = {"ubatches": ub, "comm_sms": sms}
        pts = [r for r in results if (r.mode, r.ubatches, r.comm_sms) == (mode, ub, sms)]
        cross[mode] = crossover(pts)
        reasons[mode] = reason_of(pts, cross[mode])
    rec = recommend(
        _model_id(w.spec.source, ns.model),
        w.phase,
        cross,
        reasons,
        world=w.cluster.world,
        ep=w.cluster.ep,
        default_mode=default_mode(w.phase),
    )
    what = ", ".join(f"{k} x{v:g}" for k, v in sweep.what_if.items())
    setup = {
        "title": f"{w.spec.name} {w.phase} on {w.cluster.nodes} x {w.cluster.gpus_per_node} {w.gpu.name}, EP "
        f"{w.cluster.ep}, context {w.context}, imbalance {w.imbalance}" + (f", what-if {what}" if what else ""),
        "model": w.spec.name,
        "gpu": w.gpu.name,
        "nodes": w.cluster.nodes,
        "gpus_per_node": w.cluster.gpus_per_node,
        "ep": w.cluster.ep,
        "phase": w.phase,
        "context": w.context,
        "schedule": w.schedule,
        "imbalance": w.imbalance,
        "what_if": dict(sweep.what_if),
    }
    points = [point_record(r, w.cluster.gpus_per_node) for r in results]
    return prediction_report(
        setup=setup,
        points=points,
        crossovers=cross,
        reasons=reasons,
        recommendation=rec,
        best=best,
        sources=_sources(sweep),
    ), results


def _bar(done: int, total: int, what: str) -> str:
    n = 24
    k = n * done // total
    return f"[{'#' * k}{'.' * (n - k)}] {done}/{total} points ({what})"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        ns = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    paths = [(ns.json_path, "--json"), (ns.csv_path, "--csv"), (ns.plot_path, "--plot"), (ns.trace_path, "--trace")]
    try:
        if ns.model == TOY:
            return _run_toy(ns, paths)
        if ns.profile is not None:
            raise ConfigError("--profile is the toy's calibrated device: use it with --model toy")
        sweep = _plan(ns)
        cli_common.check_output_paths(paths)
    except ConfigError as e:
        sys.stderr.write(f"{PROG}: error: {e.render(flag_of)}\n")
        return 2
    except cli_common.OutputPathError as e:
        sys.stderr.write(f"{PROG}: error: {e}\n")
        return 2
    bar = cli_common.ProgressLine(every=5.0)
    rep, results = predict(ns, sweep, lambda d, t, w: bar(_bar(d, t, w)))
    bar.done()
    cli_common.say(format_prediction(rep))
    return _write_files(ns, rep, sweep, results)


_TOY_TOKENS = (8, 32, 128, 512, 2048)  # demos.validate's grid on the CPU


def _run_toy(ns: Any, paths: list) -> int:
    """``--model toy --profile PATH.json``: the toy on validate's grid (``demos.prediction.toy``)."""
    from dbo.costs import get_profile
    from demos.prediction.toy import toy_sweep

    if ns.profile is None:
        raise ConfigError("--model toy needs --profile PATH.json (a profile python -m demos.calibrate wrote)")
    for flag in ("gpus_per_node", "ep", "comm_sms"):
        if getattr(ns, flag) is not None:
            raise ConfigError(f"{flag_of(flag)} describes a real cluster; the toy runs on --profile")
    if ns.what_if or ns.trace_path or ns.nodes != 1 or ns.ubatches != (2,):
        raise ConfigError("--what-if, --trace, --nodes and --ubatches apply to real models, not to --model toy")
    try:
        profile = get_profile(ns.profile)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"--profile {ns.profile}: {e}") from None
    cli_common.check_output_paths(paths)
    schedule = ns.schedule or "ll"
    modes = _modes(ns)
    if schedule == "ht" and "graph" in modes:
        raise ConfigError("--mode graph: the toy's ht schedule cannot be captured (its host sync); use --mode eager")
    tokens = ns.tokens or _TOY_TOKENS
    bar = cli_common.ProgressLine(every=5.0)
    results = toy_sweep(profile, tokens, schedule, modes, lambda d, t, w: bar(_bar(d, t, w)))
    bar.done()
    cross = {m: crossover([r for r in results if r.mode == m]) for m in modes}
    reasons = {m: reason_of([r for r in results if r.mode == m], cross[m]) for m in modes}
    text = "the toy runs on this machine's calibrated profile: no serving-engine flags follow from it"
    rec = {
        "phase": ns.phase,
        "mode": modes[0],
        "enable": None,
        "threshold": None,
        "reason": reasons[modes[0]],
        "vllm": text,
        "sglang": text,
    }
    setup = {
        "title": f"toy MoE ({schedule}, validate's grid shapes, comm = 1 x compute) on profile {profile.name}",
        "model": TOY,
        "profile": profile.name,
        "schedule": schedule,
        "phase": ns.phase,
    }
    rep = prediction_report(
        setup=setup,
        points=[point_record(r, 1) for r in results],
        crossovers=cross,
        reasons=reasons,
        recommendation=rec,
        best={},
        sources=[f"device and host: the profile {ns.profile} (python -m demos.calibrate)"],
    )
    cli_common.say(format_prediction(rep))
    return _write_files(ns, rep, None, results)


def _write_files(ns: Any, rep: dict[str, Any], sweep: Sweep | None, results: list) -> int:
    status = 0

    def plot(path: str) -> None:
        note = write_plot(rep, path)
        if note:
            cli_common.say(f"note     {note}")
        else:
            rep["plot_path"] = path

    def trace(path: str) -> None:
        from demos.prediction.trace import write_trace

        rep["trace_path"] = write_trace(rep, sweep, results, path, ns.trace_tokens)

    def json_file(path: str) -> None:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(rep, f, indent=2)

    def csv_file(path: str) -> None:
        write_csv(rep, path)

    for flag, path, write in (
        ("--csv", ns.csv_path, csv_file),
        ("--plot", ns.plot_path, plot),
        ("--trace", getattr(ns, "trace_path", None) if sweep is not None else None, trace),
        ("--json", ns.json_path, json_file),
    ):
        if path and not cli_common.write_output(path, flag, write, PROG):
            status = 1
    return status


if __name__ == "__main__":
    raise SystemExit(cli_common.run_main(main, PROG))
