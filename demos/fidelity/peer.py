"""aiconfigurator's own estimate of the measured deployments, beside the measured values (optional extra ``peer``).

The silicon check (``demos.fidelity.silicon``) holds our predictions against ``aiconfigurator-core``'s
``silicon_sample.csv``. This module asks NVIDIA's aiconfigurator, through its Python API
(``aiconfigurator.cli.api.cli_estimate``), for its own TTFT and TPOT estimate of the same rows, so both
predictors' errors can be read side by side, each measured, neither quoted (docs/peer.md). Install it with
``pip install -e '.[peer]'``; this is the only module that imports ``aiconfigurator``, and only when an
estimate is asked for.

A row maps to a call as aiconfigurator's own silicon-sample prediction does it
(``tools/accuracy_regression_testing/predict_silicon_sample.py`` in its repository), with one change:
``backend_version`` is always the package's default database (the newest version slot of the row's system
and engine, 1.3.0rc20, 0.5.14 and 0.24.0 in 0.12.0), never the row's measured engine version, since 0.12.0
rejects most of those and only its default slots are complete. The default is resolved once per (system,
engine) with the package's own ``get_latest_database_version``, exactly what ``backend_version=None`` does
inside ``cli_estimate`` on every call, where it re-reads the databases' YAML (about 3 s a call).

``SiliconRow`` (``demos.zoo.measured``) names the row; the fields it does not carry or flattens (pipeline
sizes, worker counts, quantization modes, and an absent size, which it reads as 0 but aiconfigurator
leaves out of the call) come from the same CSV line, found by the row's id (``silicon_records``).

A row aiconfigurator cannot estimate (a disaggregated row without each worker's batch and count, a
model whose config it does not ship and cannot download offline, a shape missing from its tables) gets a
``None`` estimate with a one-line reason, ``"no estimate: ..."``: it is counted, not an error.

Estimates are cached on disk (``PeerCache``: a JSON file keyed by the package version and the row id,
with the call's arguments, so a changed mapping recomputes), by default under ``~/.cache/dbo-sim/peer/``
(``DBO_PEER_CACHE`` or ``cache_path`` moves it), never in the repository: a full pass over the 5,221 rows
takes minutes.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import inspect
import io
import json
import logging
import math
import os
import re
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from demos.errors import ConfigError
from demos.fidelity.stats import error_stats

__all__ = [
    "INSTALL_HINT",
    "PACKAGE",
    "Peer",
    "PeerCache",
    "PeerCheck",
    "PeerError",
    "PeerEstimate",
    "default_cache_path",
    "estimate_args",
    "format_peer",
    "gpu_name",
    "load_peer",
    "no_estimate_reasons",
    "peer_estimate",
    "peer_rows",
    "peer_summary",
    "reason_kind",
    "silicon_records",
]

PACKAGE = "aiconfigurator"
INSTALL_HINT = "aiconfigurator's estimate needs the optional extra: python -m pip install -e '.[peer]'"

PARALLEL_FIELDS = ("tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size")
AGG_FIELDS = ("batch_size", *PARALLEL_FIELDS)
DISAGG_FIELDS = tuple(
    f"{stage}_{name}" for stage in ("prefill", "decode") for name in (*PARALLEL_FIELDS, "batch_size", "num_workers")
)
REQUIRED_DISAGG_FIELDS = ("prefill_batch_size", "prefill_num_workers", "decode_batch_size", "decode_num_workers")
"""The CSV's integer columns a call passes (when the row has them), as aiconfigurator's script names them;
a disaggregated call without one of ``REQUIRED_DISAGG_FIELDS`` is refused by ``cli_estimate``."""

_QUIET_LOGGERS = ("aiconfigurator", "aiconfigurator_core")
_SAVE_EVERY = 200


class PeerError(ConfigError):
    """The ``peer`` extra is not installed (one line naming it)."""


class PeerEstimate(NamedTuple):
    """aiconfigurator's estimate of one row: ``ttft_s`` and ``tpot_s`` in seconds, or both None with
    ``reason`` ("no estimate: ..."); ``backend_version`` the database version it used."""

    ttft_s: float | None
    tpot_s: float | None
    reason: str | None = None
    backend_version: str | None = None

    @property
    def estimated(self) -> bool:
        return self.ttft_s is not None and self.tpot_s is not None


class PeerCheck(NamedTuple):
    """One measured row with aiconfigurator's estimate; errors are estimate / measured - 1 (None without
    an estimate or a measured value). ``measured_version`` is the engine version the row was measured on."""

    id: str
    gpu: str
    engine: str
    mode: str
    model: str
    isl: int
    osl: int
    batch: int
    measured_ttft_s: float | None
    measured_tpot_s: float | None
    estimate: PeerEstimate
    measured_version: str | None = None

    @property
    def ttft_error(self) -> float | None:
        return _error(self.estimate.ttft_s, self.measured_ttft_s)

    @property
    def tpot_error(self) -> float | None:
        return _error(self.estimate.tpot_s, self.measured_tpot_s)

    def to_dict(self) -> dict:
        d = self._asdict()
        d.update(
            estimate_ttft_s=self.estimate.ttft_s,
            estimate_tpot_s=self.estimate.tpot_s,
            reason=self.estimate.reason,
            backend_version=self.estimate.backend_version,
            ttft_error=self.ttft_error,
            tpot_error=self.tpot_error,
        )
        del d["estimate"]
        return d


def _error(estimate: float | None, measured: float | None) -> float | None:
    if estimate is None or not measured:
        return None
    return estimate / measured - 1.0


def gpu_name(system: str) -> str:
    """Our GPU name of a row's system (``demos.zoo.measured.SYSTEMS`` backwards; else the name less "_sxm")."""
    from demos.zoo.measured import SYSTEMS

    return {v: k for k, v in SYSTEMS.items()}.get(system, system.removesuffix("_sxm"))


# --- the rows' CSV lines -------------------------------------------------------------------------------------


def silicon_records() -> dict[str, dict[str, str]]:
    """Every line of ``silicon_sample.csv`` as its strings (an absent value is ""), by row id. Needs the
    ``measured`` extra's tables, which the ``peer`` extra installs too."""
    from demos.zoo import measured

    return _read_records(measured.data_root() / "silicon_sample.csv")


@functools.lru_cache(maxsize=2)
def _read_records(path: Path) -> dict[str, dict[str, str]]:
    with path.open(newline="") as f:
        return {r["id"]: r for r in csv.DictReader(f)}


# --- the mapping ---------------------------------------------------------------------------------------------


def estimate_args(row, record: Mapping[str, str]) -> dict[str, Any]:
    """``cli_estimate``'s keyword arguments for measured ``row`` (a ``SiliconRow``) and its CSV line
    ``record``, as aiconfigurator's own silicon-sample script builds them (module docstring): the row's
    model, system, mode, engine, isl and osl; the line's quantization modes (None when absent) and, per
    mode, its integer fields that are present (aggregated: ``AGG_FIELDS``; disaggregated: each worker's
    ``DISAGG_FIELDS``); ``backend_version`` None (the package's default database)."""
    fields = AGG_FIELDS if row.mode == "agg" else DISAGG_FIELDS
    return dict(
        model_path=row.model,
        system_name=row.system,
        mode=row.mode,
        backend_name=row.engine,
        backend_version=None,
        isl=int(row.isl),
        osl=int(row.osl),
        gemm_quant_mode=record.get("gemm_quant_mode") or None,
        moe_quant_mode=record.get("moe_quant_mode") or None,
        **{name: int(float(record[name])) for name in fields if record.get(name)},
    )


def _missing_disagg(args: Mapping[str, Any]) -> list[str]:
    if args["mode"] != "disagg":
        return []
    return [name for name in REQUIRED_DISAGG_FIELDS if args.get(name) is None]


# --- the cache -----------------------------------------------------------------------------------------------


def default_cache_path() -> Path:
    """``$DBO_PEER_CACHE``, else ``~/.cache/dbo-sim/peer/estimates.json``."""
    env = os.environ.get("DBO_PEER_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "dbo-sim" / "peer" / "estimates.json"


class PeerCache:
    """Estimates on disk: ``{package version: {row id: {"args", "ttft_s", "tpot_s", "reason",
    "backend_version"}}}``. An entry counts only for the same arguments (``get``); ``save`` writes the
    file whole (a temporary file, then renamed)."""

    def __init__(self, path: Path | str | None = None):
        self.path = Path(path) if path is not None else default_cache_path()
        self._data: dict[str, dict[str, dict]] = {}
        self._dirty = False
        if self.path.is_file():
            try:
                data = json.loads(self.path.read_text())
            except (OSError, ValueError):
                data = {}
            self._data = data if isinstance(data, dict) else {}

    def get(self, version: str, row_id: str, args: Mapping[str, Any]) -> PeerEstimate | None:
        e = self._data.get(version, {}).get(row_id)
        if e is None or e.get("args") != _jsonable(args):
            return None
        return PeerEstimate(e.get("ttft_s"), e.get("tpot_s"), e.get("reason"), e.get("backend_version"))

    def put(self, version: str, row_id: str, args: Mapping[str, Any], est: PeerEstimate) -> None:
        self._data.setdefault(version, {})[row_id] = {"args": _jsonable(args), **est._asdict()}
        self._dirty = True

    def save(self) -> None:
        if not self._dirty:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self._data, sort_keys=True))
        os.replace(tmp, self.path)
        self._dirty = False


def _jsonable(args: Mapping[str, Any]) -> dict:
    return json.loads(json.dumps(dict(args), sort_keys=True))


# --- the package ---------------------------------------------------------------------------------------------


@dataclass
class Peer:
    """What a pass calls: ``estimate`` (``cli_estimate`` or a stand-in with its keywords), the package
    ``version`` (the cache's key), ``resolve_version(system, engine)`` (the default database version put
    in place of ``backend_version=None``; None leaves None to the callable) and the ``cache`` (None: no
    cache)."""

    estimate: Callable[..., Any]
    version: str
    resolve_version: Callable[[str, str], str | None] | None = None
    cache: PeerCache | None = None
    _versions: dict = field(default_factory=dict, repr=False)
    _memo: dict = field(default_factory=dict, repr=False)

    def default_version(self, system: str, engine: str) -> str | None:
        if self.resolve_version is None:
            return None
        key = (system, engine)
        if key not in self._versions:
            self._versions[key] = self.resolve_version(system, engine)
        return self._versions[key]


def _import_package():
    try:
        from aiconfigurator.cli.api import cli_estimate
        from aiconfigurator_core.sdk.perf_database import get_latest_database_version
    except ImportError:
        raise PeerError(INSTALL_HINT) from None
    return cli_estimate, get_latest_database_version


def load_peer(cache_path: Path | str | None = None, *, cache: bool = True) -> Peer:
    """The installed aiconfigurator as a ``Peer`` (``PeerError`` naming the extra without it), its
    estimates cached at ``cache_path`` (``default_cache_path()`` when None; no cache with ``cache=False``)."""
    from importlib.metadata import version

    cli_estimate, latest = _import_package()
    return Peer(
        estimate=cli_estimate,
        version=f"{PACKAGE} {version(PACKAGE)}",
        resolve_version=lambda system, engine: latest(system=system, backend=engine),
        cache=PeerCache(cache_path) if cache else None,
    )


_SITE = re.compile(r"/\S*?/site-packages/")


def _one_line(e: BaseException) -> str:
    text = _SITE.sub("", " ".join(str(e).split()))  # the package's paths from its own folder on
    if len(text) > 240:
        text = text[:237] + "..."
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


@contextlib.contextmanager
def _quiet():
    """The package's warnings, log lines and prints kept off the console during a call."""
    loggers = [logging.getLogger(name) for name in _QUIET_LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR + 1)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _call(peer: Peer, args: dict[str, Any]) -> PeerEstimate:
    missing = _missing_disagg(args)
    if missing:
        return PeerEstimate(None, None, f"no estimate: disaggregated row without {', '.join(missing)}")
    args = dict(args)
    if args["backend_version"] is None:
        try:
            args["backend_version"] = peer.default_version(args["system_name"], args["backend_name"])
        except Exception as e:  # the package's own lookup failing is its answer for this row
            return PeerEstimate(None, None, f"no estimate: {_one_line(e)}")
    try:
        inspect.signature(peer.estimate).bind(**args)
    except (TypeError, ValueError) as e:  # a mapping the API does not take is our bug, not the row's
        raise TypeError(f"cli_estimate does not take these arguments: {e}") from e
    try:
        with _quiet():
            result = peer.estimate(**args)
    except Exception as e:  # whatever the package raises for a row is its "no estimate"
        return PeerEstimate(None, None, f"no estimate: {_one_line(e)}", args["backend_version"])
    ttft_ms, tpot_ms = getattr(result, "ttft", None), getattr(result, "tpot", None)
    used = getattr(result, "backend_version", None) or args["backend_version"]
    if not all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in (ttft_ms, tpot_ms)):
        return PeerEstimate(None, None, f"no estimate: it returned ttft={ttft_ms!r} ms, tpot={tpot_ms!r} ms", used)
    return PeerEstimate(float(ttft_ms) * 1e-3, float(tpot_ms) * 1e-3, None, used)


def peer_estimate(row, peer: Peer | None = None, *, record: Mapping[str, str] | None = None) -> PeerEstimate:
    """aiconfigurator's TTFT and TPOT estimate of measured ``row`` (a ``SiliconRow``), in seconds, or a
    None estimate with its reason. ``peer``: the package (``load_peer()`` when None); ``record``: the row's
    CSV line (``silicon_records()[row.id]`` when None). Cached in ``peer.cache`` (not saved here:
    ``peer_rows`` saves, or call ``peer.cache.save()``)."""
    peer = peer if peer is not None else load_peer()
    record = record if record is not None else silicon_records()[row.id]
    args = estimate_args(row, record)
    if peer.cache is not None:
        hit = peer.cache.get(peer.version, row.id, args)
        if hit is not None:
            return hit
    key = json.dumps(_jsonable(args), sort_keys=True)  # rows with the same call are asked once a pass
    est = peer._memo.get(key)
    if est is None:
        est = peer._memo[key] = _call(peer, args)
    if peer.cache is not None:
        peer.cache.put(peer.version, row.id, args, est)
    return est


# --- the pass and its statistics -----------------------------------------------------------------------------


def peer_rows(
    rows: Iterable,
    progress: Callable[[int, int, str], None] | None = None,
    *,
    peer: Peer | None = None,
    records: Mapping[str, Mapping[str, str]] | None = None,
) -> list[PeerCheck]:
    """Every measured row (``demos.zoo.measured.silicon_rows()``'s ``SiliconRow``) with its measured TTFT
    and TPOT and aiconfigurator's estimate (``peer_estimate``); ``progress(done, total, row id)`` after
    each. The cache is saved every few hundred rows and at the end, also when the pass is interrupted."""
    rows = list(rows)
    peer = peer if peer is not None else load_peer()
    records = records if records is not None else silicon_records()
    out = []
    try:
        for i, r in enumerate(rows):
            record = records[r.id]
            est = peer_estimate(r, peer, record=record)
            out.append(
                PeerCheck(
                    r.id,
                    gpu_name(r.system),
                    r.engine,
                    r.mode,
                    r.model,
                    r.isl,
                    r.osl,
                    r.batch,
                    r.ttft_s,
                    r.tpot_s,
                    est,
                    record.get("backend_version") or None,
                )
            )
            if peer.cache is not None and (i + 1) % _SAVE_EVERY == 0:
                peer.cache.save()
            if progress is not None:
                progress(i + 1, len(rows), r.id)
    finally:
        if peer.cache is not None:
            peer.cache.save()
    return out


class _Phase(NamedTuple):
    id: str
    error: float


def peer_summary(checks: Iterable[PeerCheck]) -> list[dict]:
    """Per (gpu, engine, mode, phase "ttft" then "tpot"): ``rows`` (measured in that phase), ``estimated``
    (with an estimate), and of the estimated ones the signed median error, the median |error| and the
    signed error of the largest (``demos.fidelity.stats.error_stats``; None when none was estimated)."""
    groups: dict[tuple[str, str, str, str], tuple[list, list]] = {}
    for c in checks:
        for phase, measured_s, err in (
            ("ttft", c.measured_ttft_s, c.ttft_error),
            ("tpot", c.measured_tpot_s, c.tpot_error),
        ):
            if measured_s is None:
                continue
            rows, errs = groups.setdefault((c.gpu, c.engine, c.mode, phase), ([], []))
            rows.append(c)
            if err is not None:
                errs.append(_Phase(c.id, err))
    out = []
    for (gpu, engine, mode, phase), (rows, errs) in sorted(
        groups.items(), key=lambda kv: (*kv[0][:3], kv[0][3] != "ttft")
    ):
        stats = {"median_error": None, "median_abs_error": None, "max_error": None, "worst": None}
        if errs:
            s, worst = error_stats(errs)
            stats = {k: s[k] for k in ("median_error", "median_abs_error", "max_error")} | {"worst": worst.id}
        out.append(
            {"gpu": gpu, "engine": engine, "mode": mode, "phase": phase, "rows": len(rows), "estimated": len(errs)}
            | stats
        )
    return out


def no_estimate_reasons(checks: Iterable[PeerCheck]) -> dict[str, int]:
    """``{reason: rows}`` of the rows without an estimate, most first."""
    counts: dict[str, int] = {}
    for c in checks:
        if not c.estimate.estimated:
            counts[c.estimate.reason] = counts.get(c.estimate.reason, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


_DETAIL = (
    (re.compile(r"\{[^{}]*\}"), "{...}"),  # a table key's fields
    (re.compile(r" at \S*aiconfigurator_core/systems/\S*"), ""),  # the table's folder
    (re.compile(r"<urlopen error [^>]*>"), "offline"),
)


def reason_kind(reason: str, width: int = 110) -> str:
    """``reason`` without its "no estimate: " and with its row-specific details folded (a table key's
    fields, the table's folder, the download error), cut to ``width``: rows missing the same kind of
    data count as one line."""
    reason = reason.removeprefix("no estimate: ")
    for pattern, repl in _DETAIL:
        reason = pattern.sub(repl, reason)
    return reason if len(reason) <= width else reason[: width - 3] + "..."


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1%}"


def format_peer(summaries: list[dict], reasons: Mapping[str, int] | None = None, top: int = 10) -> str:
    """The summary as a table (one line per gpu, engine, mode and phase) and the ``top`` most common
    reasons rows got no estimate (``no_estimate_reasons``, folded by ``reason_kind``)."""
    lines = [
        "aiconfigurator's own estimate against the measured deployments (error: estimate / measured - 1)",
        f"{'gpu':6} {'engine':7} {'mode':6} {'phase':5} {'rows':>5} {'est':>5} "
        f"{'median':>8} {'|median|':>9} {'max':>9}",
    ]
    for s in summaries:
        size = "-" if s["median_abs_error"] is None else f"{s['median_abs_error']:.1%}"
        lines.append(
            f"{s['gpu']:6} {s['engine']:7} {s['mode']:6} {s['phase']:5} {s['rows']:5d} {s['estimated']:5d} "
            f"{_pct(s['median_error']):>8} {size:>9} {_pct(s['max_error']):>9}"
        )
    if reasons:
        kinds: dict[str, int] = {}
        for reason, n in reasons.items():
            kinds[reason_kind(reason)] = kinds.get(reason_kind(reason), 0) + n
        ranked = sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))
        lines.append(f"no estimate for {sum(reasons.values())} rows; the most common reasons (no estimate: ...):")
        for reason, n in ranked[:top]:
            lines.append(f"  {n:5d}  {reason}")
        if len(ranked) > top:
            lines.append(f"  {sum(n for _, n in ranked[top:]):5d}  {len(ranked) - top} other reasons")
    return "\n".join(lines)
