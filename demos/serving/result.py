"""A serving run's result (``ServingRun``, which ``demos.serving.api.simulate`` returns): the setup, one
``OverlapRun`` per strategy, the best thresholds, and its renderings (``text``, ``to_dict``, ``request_rows``
and ``write_csv`` with ``CSV_COLUMNS``, ``write_plot``)."""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from typing import Any

from demos.serving.run import OverlapRun
from demos.vocabulary import Overlap

__all__ = ["CSV_COLUMNS", "FLOOR", "ServingRun"]

FLOOR = 0.95
"""The share of the best throughput a threshold must keep to be chosen by p99 inter-token latency (a
stated choice)."""
CSV_COLUMNS = (
    "overlap",
    "request_id",
    "arrival_s",
    "prompt_tokens",
    "output_tokens",
    "generated_tokens",
    "ttft_ms",
    "tpot_ms",
    "e2e_ms",
    "finished",
    "warmup",
)
"""``ServingRun.write_csv``'s columns, one row per request per overlap run (docs/serving.md)."""


@dataclass(frozen=True)
class ServingRun:
    """A simulated serving run (module docstring): ``title``; the setup (``model``, ``engine``, ``pool``,
    ``workload``: the arrivals described, the cluster and the per-rank KV capacity); ``runs``: one
    ``OverlapRun`` per strategy; ``best``: the thresholds this workload favours and the engine lines that
    set them (empty where the engine has no threshold); ``pricer``: the grid points run and the
    interpolation's error; ``sources``. ``request_rows()`` / ``write_csv(path)``: every request of each
    strategy's run (``CSV_COLUMNS``)."""

    title: str
    model: str
    engine: str
    pool: str
    workload: str
    setup: dict[str, Any]
    runs: tuple[OverlapRun, ...]
    best: dict[str, Any] = field(default_factory=dict)
    pricer: dict[str, Any] = field(default_factory=dict)
    sources: tuple[str, ...] = ()
    _raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _warmup: int = field(default=0, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in ("title", "model", "engine", "pool", "workload")}
        out.update(self.setup)
        out["runs"] = [r.as_dict() for r in self.runs]
        out.update(best=dict(self.best), pricer=dict(self.pricer), sources=list(self.sources))
        return out

    def request_rows(self) -> list[tuple]:
        """One row per request per overlap run, in ``CSV_COLUMNS``' order (each run's requests by id): when it
        arrived (s from the run's start), its prompt and output tokens, the output tokens made, TTFT, TPOT and
        end-to-end latency in ms as the run's figures count them (None where there is none: no first token,
        fewer than two tokens, not finished), whether it finished, and whether it was a warm-up request (a
        closed loop's first ones, left out of the figures). Read from what the run kept of its requests:
        nothing is added to the loop."""
        rows = []
        for name, (lives, _) in self._raw.items():
            warm = {id(x) for x in sorted(lives, key=lambda x: (x.arrival_s, x.request.id))[: self._warmup]}
            for x in sorted(lives, key=lambda x: x.request.id):
                r, first, done = x.request, x.first_token_s, x.finished_s
                ts = x.token_s
                rows.append(
                    (
                        name,
                        r.id,
                        x.arrival_s,
                        r.prompt_tokens,
                        r.output_tokens,
                        x.generated,
                        None if first is None else 1e3 * (first - x.arrival_s),
                        1e3 * (ts[-1] - ts[0]) / (len(ts) - 1) if len(ts) > 1 else None,
                        None if done is None else 1e3 * (done - x.arrival_s),
                        done is not None,
                        id(x) in warm,
                    )
                )
        return rows

    def write_csv(self, path: str) -> None:
        """``request_rows()`` as CSV at ``path``, headed by ``CSV_COLUMNS`` (an empty cell for None)."""
        with open(path, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(CSV_COLUMNS)
            w.writerows(["" if v is None else v for v in row] for row in self.request_rows())

    def write_plot(self, path: str) -> None:
        """Two panels: each strategy's inter-token latency CDF, and the busiest rank's tokens per step over
        time with the split steps marked (the first strategy that splits). Needs matplotlib."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
        for name, (lives, rec) in self._raw.items():
            gaps = sorted(1e3 * (b - a) for x in lives for a, b in zip(x.token_s, x.token_s[1:]))
            if gaps:
                left.plot(gaps, [(i + 1) / len(gaps) for i in range(len(gaps))], label=name)
        left.set_xscale("log")
        left.set(xlabel="inter-token latency (ms)", ylabel="share of gaps", title="ITL CDF")
        left.legend()
        name = next((n for n, (_, rec) in self._raw.items() if any(d.split for d in rec.decisions)), None)
        name = name or next(iter(self._raw), None)
        if name is not None:
            _, rec = self._raw[name]
            split = [d.split for d in rec.decisions]
            right.scatter(rec.ends, rec.tokens, s=2, c=["tab:red" if x else "tab:blue" for x in split])
            right.set(xlabel="time (s)", ylabel="tokens on the busiest rank", title=f"steps ({name}; red: split)")
        fig.suptitle(self.title, fontsize=8)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)

    def text(self) -> str:
        lines = [self.title, f"workload {self.workload}", ""]
        head = f"{'overlap':<8} {'req/s':>8} {'tok/s':>9} {'tok/s/GPU':>9} {'TTFT p50/p99 ms':>17} "
        head += f"{'TPOT p50/p99 ms':>16} {'ITL p99':>8} {'E2E p50 s':>9} {'split':>6}"
        lines.append(head)
        for r in self.runs:
            lines.append(
                f"{r.overlap:<8} {r.requests_per_s:>8.2f} {r.output_tokens_per_s:>9,.0f} "
                f"{r.output_tokens_per_s_gpu:>9,.0f} {_pair(r.ttft_ms):>17} {_pair(r.tpot_ms):>16} "
                f"{_ms(r.itl_ms.p99):>8} {_s(r.e2e_ms.p50):>9} {r.split_share:>6.0%}"
            )
        for r in self.runs:
            if r.not_split and r.overlap != Overlap.NONE:
                why = ", ".join(f"{k} {v}" for k, v in r.not_split.items())
                lines.append(f"not split ({r.overlap}): {why} steps")
        mix = self.runs[0].steps if self.runs else {}
        lines.append("steps    " + ", ".join(f"{k} {v}" for k, v in mix.items()))
        if self.best:
            b = self.best
            lines.append(
                f"best     --dbo-decode-token-threshold {b['by_throughput']['decode_threshold']} by throughput "
                f"({b['by_throughput']['output_tokens_per_s']:,.0f} tok/s); "
                f"{b['by_p99_itl']['decode_threshold']} by p99 ITL within {FLOOR:.0%} of it "
                f"({_ms(b['by_p99_itl']['itl_p99_ms'])} ms)"
            )
            lines += ["vLLM", *(f"  {x}" for x in b["vllm"].splitlines())]
        p = self.pricer
        if p and p["interpolation"]["samples"]:
            lines.append(
                f"pricer   {p['grid_points']} predicted points; interpolation |error| median "
                f"{p['interpolation']['median']:.1%}, max {p['interpolation']['max']:.1%} over "
                f"{p['interpolation']['samples']} checks"
            )
        lines.append("rests on: " + "; ".join(self.sources))
        return "\n".join(lines) + "\n"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x / 1e3:.2f}"


def _pair(p) -> str:
    return f"{_ms(p.p50)}/{_ms(p.p99)}"
