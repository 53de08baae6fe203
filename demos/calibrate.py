"""``python -m demos.calibrate``: measure this machine and write a device profile for the virtual backend.

    python -m demos.calibrate --backend threads --quick -o my.json
    python -m demos.overlap --backend virtual --profile my.json

The work lives in ``demos.fidelity.calibration`` (docs/fidelity.md, "Calibrating").
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

import torch

import demos._cli as cli_common
from dbo.trace import fmt_seconds
from demos._cli import ProgressLine
from demos.fidelity.calibration import BACKENDS, CalibrationError, CalibrationReport, calibrate
from demos.fidelity.machine import LoadMeter, limits_text, read_cpu_times

__all__ = ["main", "build_parser", "format_summary"]


def build_parser() -> argparse.ArgumentParser:
    p = cli_common.OneLineParser(
        prog="python -m demos.calibrate",
        description="Measure the host and device of this machine (host constants, GEMM and copy sweeps, the toy "
        "MoE's own ops over a sweep of shapes), fit the virtual backend's model to them and write a profile "
        "(JSON) for --profile.",
    )
    p.add_argument("--backend", choices=BACKENDS, default="threads", help="what to measure (default threads)")
    p.add_argument("--quick", action="store_true", help="a smaller sweep (under 3 minutes on a 2-core machine)")
    p.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="PROFILE.json",
        help="where to write the profile (a .json file: give it to --profile of demos.overlap --backend virtual "
        "or of demos.validate)",
    )
    p.add_argument("--name", default=None, help="the profile's name (default calibrated-<backend>)")
    p.add_argument(
        "--no-rerun",
        action="store_true",
        help="keep every model run as measured: by default a run during which the machine was disturbed "
        f"({limits_text()}) is run once more".replace("%", "%%"),
    )
    p.add_argument("--no-progress", action="store_true", help="no progress line (shown only on a terminal)")
    return p


def format_summary(report: CalibrationReport, profile: object) -> str:
    h = report.host
    us = lambda s: f"{s * 1e6:.2f} us"  # noqa: E731
    lines = [
        f"calibrated {report.backend} in {report.seconds:.0f} s: {report.device_samples} GEMM/copy samples, "
        f"{report.op_samples} model kernels",
        f"host       launch {us(h['launch'])} + kernel {us(h['kernel'])}, stream switch {us(h['stream_switch'])}, "
        f"event {us(h['event'])}, sync {us(h['sync'])}, handoff {us(h['handoff'])}, thread start/join "
        f"{us(h['thread_start'])}/{us(h['thread_join'])}, threaded x{h['threaded']:.2f}, "
        f"replay {us(h.get('replay_op', 0.0))} an op",
    ]
    p = profile
    rates = ", ".join(f"{k} {v / 1e9:.3g} GFLOP/s" for k, v in sorted(p.dtype_flops.items()))  # type: ignore[attr-defined]
    lines.append(
        f"device     {rates}; memory {p.mem_bandwidth / 1e9:.3g} GB/s; "  # type: ignore[attr-defined]
        f"min kernel {fmt_seconds(p.min_kernel)}; "  # type: ignore[attr-defined]
        f"GEMM knees {', '.join(f'{x:.0f}' for x in p.gemm_knee)}; "  # type: ignore[attr-defined]
        f"rms log error of the fit {report.device_rms_log_error:.2f}"
    )
    lines.append(
        f"wake-up    across engines {us(p.event_latency)} idle, "  # type: ignore[attr-defined]
        f"+ {us(p.event_latency_threaded)} while ubatch threads run; "  # type: ignore[attr-defined]
        f"an engine takes {us(p.engine_gap)} between kernels, "  # type: ignore[attr-defined]
        f"+ {us(p.engine_gap_threaded)} while ubatch threads run; "  # type: ignore[attr-defined]
        f"an idle device waits for running host code up to {fmt_seconds(p.host.idle_hold)}; "  # type: ignore[attr-defined]
        f"ops' fixed part x{p.fixed_threaded:.2f} while ubatch threads run"  # type: ignore[attr-defined]
    )
    ops = p.host.ops  # type: ignore[attr-defined]
    lines.append(
        "ops        "
        + "; ".join(
            f"{k} {fmt_seconds(ops[k].device)} + {ops[k].scale:.2g}x"
            + (f" + {ops[k].memory_scale:.2g}x memory" if ops[k].memory_scale else "")
            + (f", {ops[k].gil_calls} GIL call{'' if ops[k].gil_calls == 1 else 's'}" if ops[k].gil_calls else "")
            + f" (median |err| {e * 100:.0f}%)"
            for k, e in report.op_errors.items()
        )
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (0 ok, 2 bad arguments, 1 failure)."""
    parser = build_parser()
    try:
        ns = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    err = None
    if not ns.output.endswith(".json"):
        err = f"-o {ns.output}: must end in .json (so that --profile reads it as a file)"
    else:
        try:
            cli_common.check_output_path(ns.output, "-o")
        except cli_common.OutputPathError as e:
            err = str(e)
    if err is None and ns.backend == "cuda" and not torch.cuda.is_available():
        err = "--backend cuda needs a CUDA GPU, and torch.cuda.is_available() is False here"
    if err is None and ns.name is not None and not ns.name.strip():
        err = "--name must not be empty"
    if err is not None:
        sys.stderr.write(f"{parser.prog}: error: {err}\n")
        return 2
    progress = ProgressLine(enabled=not ns.no_progress)
    meter = LoadMeter().start()
    try:
        profile, report = calibrate(
            ns.backend,
            quick=ns.quick,
            name=ns.name,
            progress=progress,
            machine=None if ns.no_rerun else read_cpu_times,
        )
    except CalibrationError as e:
        progress.done()
        sys.stderr.write(f"{parser.prog}: error: {e}\n")
        return 2
    progress.done()
    load = meter.stop()
    cli_common.say(format_summary(report, profile))
    if load is not None:
        cli_common.say(f"machine    {load.describe()}")
    if rerun_note := report.reruns.note():
        cli_common.say(f"note       {rerun_note}")
    if load is not None and load.disturbances():
        cli_common.say(
            "note       a busy machine calibrates slower figures than an idle one: calibrate again when it is idle"
        )
    if not cli_common.write_output(ns.output, "-o", profile.to_json, parser.prog):
        return cli_common.EXIT_FAILED
    cli_common.say(f"wrote      {ns.output} (use it with --profile {ns.output})")
    return 0


if __name__ == "__main__":
    raise SystemExit(cli_common.run_main(main, "python -m demos.calibrate"))
