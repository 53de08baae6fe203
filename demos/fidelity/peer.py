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

The records of a pass, their summary and their table are ``demos.fidelity.peer_results``' (re-exported here).
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
from typing import Any

from demos.errors import ConfigError
from demos.fidelity.peer_results import (
    PeerCheck,
    PeerEstimate,
    format_peer,
    no_estimate_reasons,
    peer_summary,
    reason_kind,
)

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


def gpu_name(system: str) -> str:
    """Our GPU name of a row's system (``demos.fidelity.silicon.SYSTEM_GPUS``; else the name less "_sxm")."""
    from demos.fidelity.silicon import SYSTEM_GPUS

    return SYSTEM_GPUS.get(system, system.removesuffix("_sxm"))


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


# --- the pass ------------------------------------------------------------------------------------------------


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
