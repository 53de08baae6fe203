"""One rank's view of a distributed run: its shard, its backend and device, its process groups.

``run_from_env`` runs a function as the rank torchrun made this process; ``demos.ranks.launcher``
launches ranks on one host itself.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from dbo.split import split_tokens
from demos.ranks.faults import CollectiveError, Fault, fault_for

__all__ = [
    "DEFAULT_TIMEOUT",
    "RankInfo",
    "run_from_env",
    "in_torchrun",
    "shard_range",
    "choose_backend",
    "device_for",
    "init_process_group",
]

DEFAULT_TIMEOUT = 60.0
"""Seconds a collective (and the rendezvous) may wait for the other ranks."""


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

        while len(self._groups) < n:
            try:
                self._groups.append(
                    dist.new_group(backend=self.backend, timeout=datetime.timedelta(seconds=self.timeout))
                )
            except Exception as e:
                raise CollectiveError(
                    f"rank {self.rank}: creating the process group of ubatch {len(self._groups)} failed: {e}"
                ) from e
        return self._groups[:n]

    def shard(self, num_items: int) -> range:
        """This rank's rows of a batch of ``num_items`` (``shard_range``)."""
        return shard_range(num_items, self.world_size, self.rank)

    def barrier(self) -> None:
        """All ranks meet here (default group)."""
        import torch.distributed as dist

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


def init_process_group(backend: str, rank: int, world_size: int, timeout: float, **kw: Any) -> None:
    """Join the default process group (``torch.distributed.init_process_group`` with a ``timeout``
    in seconds and ``kw``: ``store`` or ``init_method``); a failure raises ``CollectiveError``."""
    import torch.distributed as dist

    try:
        dist.init_process_group(
            backend, rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=timeout), **kw
        )
    except Exception as e:
        raise CollectiveError(f"rank {rank}: joining the process group failed: {type(e).__name__}: {e}") from e


def device_for(backend: str, local_rank: int) -> torch.device:
    """The rank's device: GPU ``local_rank`` (made current) under nccl, else the CPU."""
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def run_from_env(
    fn: Callable[..., Any], args: Sequence[Any] = (), *, backend: str | None = None, timeout: float = DEFAULT_TIMEOUT
) -> Any:
    """Run ``fn(RankInfo, *args)`` as the rank torchrun made this process (env:// rendezvous);
    returns its result. ``backend`` None: nccl if this rank has a GPU, else gloo."""
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if backend is None:
        backend = choose_backend(torch.cuda.is_available() and local_rank < torch.cuda.device_count())
    fault = fault_for(rank)
    if fault is not None and fault.at == "init":
        fault.trigger("init")
    device = device_for(backend, local_rank)
    init_process_group(backend, rank, world, timeout, init_method="env://")
    try:
        info = RankInfo(rank, world, local_rank, backend, device, timeout, "env", fault)
        return fn(info, *args)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
