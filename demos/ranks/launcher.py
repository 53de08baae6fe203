"""Run a function on N ranks over torch.distributed, and fail as one when any rank fails.

* ``launch(fn, args, world_size=N)`` (one host): starts N processes with torch.multiprocessing
  (``spawn``), rendezvous on loopback through a ``TCPStore`` this process holds on a port the OS
  picks (free by construction, no race), ``gloo`` on the CPU or ``nccl`` when every rank has a GPU.
  Each rank calls ``fn(RankInfo, *args)``; ``launch`` returns what rank 0 returned.
* ``run_from_env(fn, args)`` (under torchrun, any number of hosts): this process is one rank,
  rendezvous ``env://`` (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK); returns what
  ``fn`` returned on this rank. torchrun does the process management.
* ``RankInfo.ubatch_groups(n)``: one process group per ubatch, created in the same order on
  every rank (docs/distributed.md says why one group per ubatch).

Failure (``launch``): the first rank that raises or dies fails the run. This process watches every
rank; at the first failure it stops the others (SIGTERM, then SIGKILL), reaps them, and raises
``DistributedError`` with the first error: the rank, the exception and its traceback as text. An
error that only says a collective failed (a peer went away, a timeout) is a *symptom*: if a rank
reports one, the monitor waits up to ``settle`` seconds for the cause (another rank's exception
or death) before deciding. A rank stuck without dying is caught by the collective timeout
(``timeout``, given to ``init_process_group``) on its peers. Every rank watches this process and
exits if it disappears, so no rank outlives its launcher.

What a failing rank reports and how the first error is chosen live in ``demos.ranks.errors``;
``DistributedError`` and ``describe_exit`` are re-exported here, with ``demos.ranks.rank``'s and
``demos.ranks.faults``' public names, so this module is the one a caller imports.

Fault injection (tests): ``DBO_DIST_FAULT="rank=1,at=collective,n=5,kind=raise"`` (see ``Fault``).
"""

from __future__ import annotations

import datetime
import json
import os
import pickle
import shutil
import socket
import sys
import tempfile
import threading
import time
import traceback
from typing import Any, Callable, Sequence

import torch

from demos.ranks.errors import DistributedError, describe_exit, error_record, first_error, read_errors
from demos.ranks.faults import FAULT_ENV, Fault, InjectedFault, fault_for, is_symptom
from demos.ranks.rank import (
    DEFAULT_TIMEOUT,
    RankInfo,
    choose_backend,
    device_for,
    in_torchrun,
    init_process_group,
    run_from_env,
    shard_range,
)

__all__ = [
    "DEFAULT_TIMEOUT",
    "FAULT_ENV",
    "DistributedError",
    "InjectedFault",
    "Fault",
    "RankInfo",
    "launch",
    "run_from_env",
    "in_torchrun",
    "shard_range",
    "choose_backend",
    "is_symptom",
    "describe_exit",
    "sweep_stale_rundirs",
    "RUNDIR_PREFIX",
]

_TERM_GRACE = 2.0  # seconds between SIGTERM and SIGKILL when stopping ranks


# --- the rank's side: the body of a spawned rank --------------------------------------------------


def _watch_parent() -> None:
    """Exit this rank at once if the launching process goes away (no orphans)."""
    import multiprocessing
    import multiprocessing.connection

    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="dbo-parent-watch", daemon=True).start()


def _write_atomic(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _loopback_interface() -> str | None:
    """The name of the loopback network interface ("lo" on Linux, "lo0" on macOS), if found."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except (AttributeError, OSError):
        return None
    for name in names:
        if name in ("lo", "lo0"):
            return name
    return next((n for n in names if n.startswith("lo")), None)


def _child_main(
    rank: int,
    world_size: int,
    port: int,
    backend: str,
    timeout: float,
    fn: Callable[..., Any],
    args: tuple,
    rundir: str,
) -> None:
    """Body of a spawned rank. Always ends with ``os._exit``: 0 after a clean run, 1 after an
    error (written to ``rundir`` first). Never waits for stuck threads or atexit handlers."""
    _watch_parent()
    code = 1
    try:
        _write_atomic(os.path.join(rundir, f"started-{rank}"), b"")
        fault = fault_for(rank)
        if fault is not None and fault.at == "init":
            fault.trigger("init")
        import torch.distributed as dist

        lo = _loopback_interface()
        if lo is not None:  # ranks of one host talk over loopback only
            os.environ["GLOO_SOCKET_IFNAME"] = lo
            os.environ["NCCL_SOCKET_IFNAME"] = lo
        device = device_for(backend, rank)
        store = dist.TCPStore("127.0.0.1", port, world_size, False, timeout=datetime.timedelta(seconds=timeout))
        init_process_group(backend, rank, world_size, timeout, store=store)
        info = RankInfo(rank, world_size, rank, backend, device, timeout, "spawn", fault)
        result = fn(info, *args)
        if rank == 0:
            _write_atomic(os.path.join(rundir, "result.pkl"), pickle.dumps(result))
        dist.destroy_process_group()
        code = 0
    except BaseException as exc:  # noqa: BLE001 - everything must reach the launcher
        try:
            _write_atomic(os.path.join(rundir, f"error-{rank}.json"), json.dumps(error_record(rank, exc)).encode())
        except BaseException:
            traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


# --- the launcher's side: spawn the ranks, watch them, stop them ----------------------------------


def _loopback_store(world_size: int, timeout: float) -> Any:
    """The rendezvous store's server, in this process, listening on 127.0.0.1 only, on a port the
    OS chose: nothing can take the port between choosing and binding, and it outlives any rank."""
    import torch.distributed as dist

    td = datetime.timedelta(seconds=timeout)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        port = sock.getsockname()[1]
        fd = sock.fileno()
        store = dist.TCPStore(
            "127.0.0.1", port, world_size, True, timeout=td, wait_for_workers=False, master_listen_fd=fd
        )
    except (RuntimeError, TypeError, ValueError, OSError):  # no master_listen_fd here: let the store bind port 0
        sock.close()
        return dist.TCPStore("127.0.0.1", 0, world_size, True, timeout=td, wait_for_workers=False)
    sock.detach()  # the store owns the listening socket now
    return store


def launch(
    fn: Callable[..., Any],
    args: Sequence[Any] = (),
    *,
    world_size: int,
    backend: str = "gloo",
    timeout: float = DEFAULT_TIMEOUT,
    run_timeout: float | None = None,
    settle: float = 1.0,
) -> Any:
    """Run ``fn(RankInfo, *args)`` on ``world_size`` spawned ranks of this host; return rank 0's
    result. ``fn`` must be a module-level function and ``args`` picklable (spawn). ``timeout``:
    bound on each collective and on the rendezvous; ``run_timeout``: bound on the whole run
    (None: none). Raises ``DistributedError`` (first error; every rank stopped and reaped)."""
    import torch.multiprocessing as tmp

    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive integer, got {world_size!r}")
    if backend == "nccl" and torch.cuda.device_count() < world_size:
        raise ValueError(
            f"nccl with {world_size} ranks on one host needs {world_size} GPUs, found {torch.cuda.device_count()}"
        )
    sweep_stale_rundirs()
    rundir = tempfile.mkdtemp(prefix=f"{RUNDIR_PREFIX}{os.getpid()}-")
    store = _loopback_store(world_size, timeout)
    ctx = tmp.get_context("spawn")
    procs: list = []
    started = time.monotonic()
    try:
        for rank in range(world_size):
            p = ctx.Process(
                target=_child_main,
                args=(rank, world_size, store.port, backend, timeout, fn, tuple(args), rundir),
                name=f"dbo-rank-{rank}",
                daemon=True,
            )
            p.start()
            procs.append(p)
        failure = _watch(procs, rundir, world_size, started, run_timeout, settle)
        if failure is None:
            path = os.path.join(rundir, "result.pkl")
            if not os.path.exists(path):
                failure = dict(rank=0, message=f"rank 0 of {world_size} exited without a result")
            else:
                with open(path, "rb") as f:
                    return pickle.loads(f.read())
    finally:
        _stop(procs)  # no-op after a clean run; on a failure (or Ctrl-C) stops the survivors
        del store
        shutil.rmtree(rundir, ignore_errors=True)
    raise DistributedError(
        failure["message"],
        rank=failure.get("rank"),
        remote_traceback=failure.get("traceback", ""),
        exitcodes=[p.exitcode for p in procs],
        pids=[p.pid for p in procs],
        error_type=failure.get("type"),
    )


def _watch(
    procs: list, rundir: str, world: int, started: float, run_timeout: float | None, settle: float
) -> dict | None:
    """Wait until every rank exited cleanly (None) or the run failed (the first error, as a dict)."""
    import multiprocessing.connection

    deaths: dict[int, tuple[float, int]] = {}  # rank -> (when noticed, exit code), for deaths without a record
    first_seen: float | None = None
    while True:
        errors = read_errors(rundir)
        now = time.monotonic()
        for rank, p in enumerate(procs):
            if p.exitcode not in (None, 0) and rank not in errors and rank not in deaths:
                errors_again = read_errors(rundir)  # the record is written before the exit: re-read once
                if rank in errors_again:
                    errors = errors_again
                else:
                    deaths[rank] = (time.time(), p.exitcode)
        alive = [p for p in procs if p.exitcode is None]
        if errors or deaths:
            if first_seen is None:
                first_seen = now
            causes = [(r["time"], r["rank"], r) for r in errors.values() if not r["symptom"]]
            causes += [(t, rank, None) for rank, (t, _) in deaths.items()]
            if causes or not alive or now - first_seen >= settle:
                running = [rank for rank, p in enumerate(procs) if p.exitcode is None]
                started_ranks = {rank: os.path.exists(os.path.join(rundir, f"started-{rank}")) for rank in deaths}
                return first_error(causes, errors, deaths, world, running, started_ranks)
        elif not alive:
            return None
        if run_timeout is not None and now - started > run_timeout:
            running = [str(r) for r, p in enumerate(procs) if p.exitcode is None]
            return dict(
                rank=None,
                message=f"the run did not finish within {run_timeout:g} s (ranks still running: {', '.join(running)})",
            )
        multiprocessing.connection.wait([p.sentinel for p in alive], timeout=0.05)


def _stop(procs: list) -> None:
    """Terminate every rank still running, then kill the stubborn ones; reap all."""
    alive = [p for p in procs if p.exitcode is None]
    for p in alive:
        try:
            p.terminate()
        except OSError:
            pass
    deadline = time.monotonic() + _TERM_GRACE
    for p in alive:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.exitcode is None:
            try:
                p.kill()
            except OSError:
                pass
            p.join(5.0)


# --- launch folders -------------------------------------------------------------------------------


RUNDIR_PREFIX = "dbo-dist-"
"""A launch's folder in the temp dir: ``dbo-dist-<launcher pid>-<random>``. Removed when the launch
ends (also on Ctrl-C and, through the commands' SIGTERM handler, on SIGTERM); a launcher killed
outright (SIGKILL) leaves it, and the next launch removes it (``sweep_stale_rundirs``)."""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # someone else's process: alive
    return True


def sweep_stale_rundirs(tmpdir: str | None = None) -> list[str]:
    """Remove the launch folders (``dbo-dist-<pid>-*``) whose launcher process is gone; return
    their paths. A folder whose name carries no pid, or whose pid is alive, is left alone."""
    tmpdir = tmpdir or tempfile.gettempdir()
    removed = []
    try:
        names = os.listdir(tmpdir)
    except OSError:
        return removed
    for name in names:
        if not name.startswith(RUNDIR_PREFIX):
            continue
        pid_text = name[len(RUNDIR_PREFIX) :].split("-", 1)[0]
        if not pid_text.isdigit() or _pid_alive(int(pid_text)):
            continue
        path = os.path.join(tmpdir, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed
