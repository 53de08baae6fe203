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

Fault injection (tests): ``DBO_DIST_FAULT="rank=1,at=collective,n=5,kind=raise"`` (see ``Fault``).
"""

from __future__ import annotations

import datetime
import json
import os
import pickle
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from dbo.split import split_tokens

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
]

DEFAULT_TIMEOUT = 60.0
"""Seconds a collective (and the rendezvous) may wait for the other ranks."""

FAULT_ENV = "DBO_DIST_FAULT"
"""Environment variable holding a fault to inject (``Fault.parse``); inherited by spawned ranks."""

_TERM_GRACE = 2.0  # seconds between SIGTERM and SIGKILL when stopping ranks


class DistributedError(RuntimeError):
    """A distributed run failed. ``rank``: the rank of the first error (None: no rank to blame,
    e.g. the launcher's own timeout); ``remote_traceback``: that rank's traceback as text;
    ``exitcodes``: every rank's exit status after the run was stopped (negative: killed by that
    signal); ``pids``: the ranks' process ids (all reaped when this is raised)."""

    def __init__(
        self,
        message: str,
        *,
        rank: int | None = None,
        remote_traceback: str = "",
        exitcodes: Sequence[int | None] = (),
        pids: Sequence[int | None] = (),
        error_type: str | None = None,
    ):
        super().__init__(message)
        self.rank = rank
        self.remote_traceback = remote_traceback
        self.exitcodes = list(exitcodes)
        self.pids = list(pids)
        self.error_type = error_type


class InjectedFault(RuntimeError):
    """The exception a ``Fault`` of kind "raise" raises."""


def is_symptom(exc: BaseException) -> bool:
    """True if ``exc`` (or anything in its cause chain) is a failed collective: the sign that some
    *other* rank failed or hangs, rather than a first error."""
    from .dist_comm import CollectiveError

    try:
        import torch.distributed as dist

        dist_errors: tuple = (dist.DistError,)
    except (ImportError, AttributeError):  # pragma: no cover - torch without distributed
        dist_errors = ()
    seen = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, CollectiveError) or (dist_errors and isinstance(e, dist_errors)):
            return True
        e = e.__cause__ or e.__context__
    return False


# --- fault injection (a test seam) ---------------------------------------------------------------

_FAULT_POINTS = ("init", "step", "collective")
_FAULT_KINDS = ("raise", "exit", "kill", "hang")


@dataclass(frozen=True)
class Fault:
    """A fault to inject on one rank: at ``at`` ("init": before the rendezvous; "step": in a
    ubatch thread at the start of the n-th DBO step's forward; "collective": before the n-th
    collective the transport issues), of kind ``kind`` ("raise": raise InjectedFault; "exit":
    ``os._exit(3)`` without a word; "kill": SIGKILL itself; "hang": sleep until killed)."""

    rank: int
    at: str = "collective"
    kind: str = "raise"
    n: int = 1

    def __post_init__(self) -> None:
        if self.at not in _FAULT_POINTS:
            raise ValueError(f"fault point must be one of {_FAULT_POINTS}, got {self.at!r}")
        if self.kind not in _FAULT_KINDS:
            raise ValueError(f"fault kind must be one of {_FAULT_KINDS}, got {self.kind!r}")
        if self.rank < 0 or self.n < 1:
            raise ValueError(f"bad fault {self!r}")

    @classmethod
    def parse(cls, text: str) -> "Fault":
        """``"rank=1,at=collective,n=5,kind=raise"`` (rank required; the rest as the defaults)."""
        fields: dict[str, Any] = {}
        for part in text.split(","):
            if not part.strip():
                continue
            key, _, value = part.partition("=")
            key, value = key.strip(), value.strip()
            if key in ("rank", "n"):
                fields[key] = int(value)
            elif key in ("at", "kind"):
                fields[key] = value
            else:
                raise ValueError(f"{FAULT_ENV}: unknown field {key!r} in {text!r}")
        if "rank" not in fields:
            raise ValueError(f"{FAULT_ENV}: a fault needs rank=R, got {text!r}")
        return cls(**fields)

    def __str__(self) -> str:
        return f"rank={self.rank},at={self.at},n={self.n},kind={self.kind}"

    def trigger(self, where: str) -> None:
        """Do the fault now (``where`` says where, for the message)."""
        msg = f"injected fault on rank {self.rank}: {self.kind} at {where}"
        if self.kind == "raise":
            raise InjectedFault(msg)
        sys.stderr.write(msg + "\n")
        sys.stderr.flush()
        if self.kind == "exit":
            os._exit(3)
        if self.kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        while True:  # hang: until someone kills this process
            time.sleep(3600)


def _fault_for(rank: int) -> Fault | None:
    text = os.environ.get(FAULT_ENV, "").strip()
    if not text:
        return None
    f = Fault.parse(text)
    return f if f.rank == rank else None


# --- ranks -------------------------------------------------------------------------------------------


def shard_range(num_items: int, world_size: int, rank: int) -> range:
    """Rank ``rank``'s contiguous share of ``num_items`` rows (the last rank takes the remainder),
    so that concatenating the shards in rank order gives the whole batch."""
    return split_tokens(num_items, world_size)[rank]


def choose_backend(use_cuda: bool) -> str:
    """The torch.distributed backend: nccl when the ranks run on GPUs, else gloo."""
    return "nccl" if use_cuda else "gloo"


def in_torchrun() -> bool:
    """True when this process was started by torchrun (or another env:// launcher)."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


@dataclass
class RankInfo:
    """What a rank knows about the run: who it is, its backend and device, its process groups."""

    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: torch.device
    timeout: float
    launcher: str
    fault: Fault | None = None
    _groups: list = field(default_factory=list, repr=False)
    _collectives: int = 0
    _steps: int = 0

    def ubatch_groups(self, n: int) -> list:
        """``n`` process groups, group u for ubatch u. Every rank must call this with the same
        ``n`` at the same point: ``new_group`` is collective and pairs groups by creation order."""
        import torch.distributed as dist

        from .dist_comm import CollectiveError

        while len(self._groups) < n:
            try:
                self._groups.append(
                    dist.new_group(backend=self.backend, timeout=datetime.timedelta(seconds=self.timeout))
                )
            except Exception as e:
                raise CollectiveError(f"rank {self.rank}: creating the process group of ubatch {len(self._groups)} failed: {e}") from e
        return self._groups[:n]

    def shard(self, num_items: int) -> range:
        """This rank's rows of a batch of ``num_items`` (``shard_range``)."""
        return shard_range(num_items, self.world_size, self.rank)

    def barrier(self) -> None:
        """All ranks meet here (default group)."""
        import torch.distributed as dist

        from .dist_comm import CollectiveError

        try:
            if self.backend == "nccl":
                dist.barrier(device_ids=[self.device.index])
            else:
                dist.barrier()
        except Exception as e:
            raise CollectiveError(f"rank {self.rank}: barrier failed: {e}") from e

    def gather_object(self, obj: Any) -> list | None:
        """Every rank's ``obj`` (picklable; tensors on the CPU) on rank 0, in rank order; None elsewhere."""
        import torch.distributed as dist

        from .dist_comm import CollectiveError

        out = [None] * self.world_size if self.rank == 0 else None
        try:
            dist.gather_object(obj, out, dst=0)
        except Exception as e:
            raise CollectiveError(f"rank {self.rank}: gathering the results on rank 0 failed: {e}") from e
        return out

    # -- fault seams --------------------------------------------------------------------------------
    def on_collective(self, op: str, n: int) -> None:
        """Called by the transport before its n-th collective."""
        f = self.fault
        if f is not None and f.at == "collective" and n == f.n:
            f.trigger(f"collective #{n} ({op})")

    def on_step(self) -> None:
        """Called at the start of a DBO step's forward in a ubatch thread (once per step)."""
        self._steps += 1
        f = self.fault
        if f is not None and f.at == "step" and self._steps == f.n:
            f.trigger(f"DBO step #{self._steps}")


def _init_process_group(backend: str, rank: int, world_size: int, timeout: float, **kw: Any) -> None:
    import torch.distributed as dist

    from .dist_comm import CollectiveError

    try:
        dist.init_process_group(
            backend, rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=timeout), **kw
        )
    except Exception as e:
        raise CollectiveError(f"rank {rank}: joining the process group failed: {type(e).__name__}: {e}") from e


def _device_for(backend: str, local_rank: int) -> torch.device:
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def run_from_env(fn: Callable[..., Any], args: Sequence[Any] = (), *, backend: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT) -> Any:
    """Run ``fn(RankInfo, *args)`` as the rank torchrun made this process (env:// rendezvous);
    returns its result. ``backend`` None: nccl if this rank has a GPU, else gloo."""
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if backend is None:
        backend = choose_backend(torch.cuda.is_available() and local_rank < torch.cuda.device_count())
    fault = _fault_for(rank)
    if fault is not None and fault.at == "init":
        fault.trigger("init")
    device = _device_for(backend, local_rank)
    _init_process_group(backend, rank, world, timeout, init_method="env://")
    try:
        info = RankInfo(rank, world, local_rank, backend, device, timeout, "env", fault)
        return fn(info, *args)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


# --- one host: spawn the ranks and watch them --------------------------------------------------------


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


_WRAPPERS = ("UBatchFailed", "StreamError", "UBatchAborted")  # dbo's exceptions that carry another as their cause


def _root(exc: BaseException) -> BaseException:
    """The exception to name: the first one in the cause chain that is not just a wrapper."""
    seen = set()
    e = exc
    while type(e).__name__ in _WRAPPERS and e.__cause__ is not None and id(e) not in seen:
        seen.add(id(e))
        e = e.__cause__
    return e


def _error_record(rank: int, exc: BaseException) -> dict:
    root = _root(exc)
    text = str(root).strip()
    return {
        "rank": rank,
        "type": type(root).__name__,
        "message": text.splitlines()[0] if text else "",
        "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        "time": time.time(),
        "symptom": is_symptom(exc),
    }


def _child_main(rank: int, world_size: int, port: int, backend: str, timeout: float, fn: Callable[..., Any],
                args: tuple, rundir: str) -> None:
    """Body of a spawned rank. Always ends with ``os._exit``: 0 after a clean run, 1 after an
    error (written to ``rundir`` first). Never waits for stuck threads or atexit handlers."""
    _watch_parent()
    code = 1
    try:
        _write_atomic(os.path.join(rundir, f"started-{rank}"), b"")
        fault = _fault_for(rank)
        if fault is not None and fault.at == "init":
            fault.trigger("init")
        import torch.distributed as dist

        lo = _loopback_interface()
        if lo is not None:  # ranks of one host talk over loopback only
            os.environ["GLOO_SOCKET_IFNAME"] = lo
            os.environ["NCCL_SOCKET_IFNAME"] = lo
        device = _device_for(backend, rank)
        store = dist.TCPStore("127.0.0.1", port, world_size, False, timeout=datetime.timedelta(seconds=timeout))
        _init_process_group(backend, rank, world_size, timeout, store=store)
        info = RankInfo(rank, world_size, rank, backend, device, timeout, "spawn", fault)
        result = fn(info, *args)
        if rank == 0:
            _write_atomic(os.path.join(rundir, "result.pkl"), pickle.dumps(result))
        dist.destroy_process_group()
        code = 0
    except BaseException as exc:  # noqa: BLE001 - everything must reach the launcher
        try:
            _write_atomic(os.path.join(rundir, f"error-{rank}.json"), json.dumps(_error_record(rank, exc)).encode())
        except BaseException:
            traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def describe_exit(code: int | None) -> str:
    """A process's exit status in words: "exited with status 1", "killed by SIGTERM"."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


def _read_errors(rundir: str) -> dict[int, dict]:
    out = {}
    for name in os.listdir(rundir):
        if name.startswith("error-") and name.endswith(".json"):
            try:
                with open(os.path.join(rundir, name), "rb") as f:
                    rec = json.loads(f.read())
                out[int(rec["rank"])] = rec
            except (OSError, ValueError, KeyError):
                continue
    return out


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
        store = dist.TCPStore("127.0.0.1", port, world_size, True, timeout=td, wait_for_workers=False, master_listen_fd=fd)
    except (RuntimeError, TypeError, ValueError, OSError):  # no master_listen_fd here: let the store bind port 0
        sock.close()
        return dist.TCPStore("127.0.0.1", 0, world_size, True, timeout=td, wait_for_workers=False)
    sock.detach()  # the store owns the listening socket now
    return store


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
    import torch.distributed as dist
    import torch.multiprocessing as tmp

    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive integer, got {world_size!r}")
    if backend == "nccl" and torch.cuda.device_count() < world_size:
        raise ValueError(f"nccl with {world_size} ranks on one host needs {world_size} GPUs, found {torch.cuda.device_count()}")
    rundir = tempfile.mkdtemp(prefix="dbo-dist-")
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


def _watch(procs: list, rundir: str, world: int, started: float, run_timeout: float | None, settle: float) -> dict | None:
    """Wait until every rank exited cleanly (None) or the run failed (the first error, as a dict)."""
    import multiprocessing.connection

    deaths: dict[int, tuple[float, int]] = {}  # rank -> (when noticed, exit code), for deaths without a record
    first_seen: float | None = None
    while True:
        errors = _read_errors(rundir)
        now = time.monotonic()
        for rank, p in enumerate(procs):
            if p.exitcode not in (None, 0) and rank not in errors and rank not in deaths:
                errors_again = _read_errors(rundir)  # the record is written before the exit: re-read once
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
                started = {rank: os.path.exists(os.path.join(rundir, f"started-{rank}")) for rank in deaths}
                return _first_error(causes, errors, deaths, world, running, started)
        elif not alive:
            return None
        if run_timeout is not None and now - started > run_timeout:
            running = [str(r) for r, p in enumerate(procs) if p.exitcode is None]
            return dict(
                rank=None,
                message=f"the run did not finish within {run_timeout:g} s (ranks still running: {', '.join(running)})",
            )
        multiprocessing.connection.wait([p.sentinel for p in alive], timeout=0.05)


def _first_error(causes: list, errors: dict[int, dict], deaths: dict[int, tuple[float, int]], world: int,
                 running: list[int], started: dict[int, bool]) -> dict:
    if causes:
        _, rank, rec = min(causes, key=lambda c: c[0])
    else:  # only symptoms: report the earliest (e.g. a collective timeout caused by a hung peer)
        rec = min(errors.values(), key=lambda r: r["time"])
        rank = rec["rank"]
    if rec is None:
        code = deaths[rank][1]
        if not started.get(rank, True):
            return dict(
                rank=rank,
                message=f"rank {rank} of {world} failed to start ({describe_exit(code)}; its stderr says why; a script "
                "that launches ranks must guard its entry point with: if __name__ == '__main__':)",
            )
        return dict(rank=rank, message=f"rank {rank} of {world} died ({describe_exit(code)}) without reporting an error")
    what = f"{rec['type']}: {rec['message']}" if rec["message"] else rec["type"]
    hint = ""
    if rec["symptom"]:
        stuck = f"; still running, perhaps stuck: rank {', '.join(map(str, running))}" if running else ""
        hint = f" (a symptom: no rank reported a cause{stuck})"
    return dict(rank=rank, message=f"rank {rank} of {world} failed: {what}{hint}", traceback=rec["traceback"], type=rec["type"])
