"""Calibration of ``OpCost.gil_calls``: how many torch calls each of the model's kernel functions
makes (each returns into Python and needs the GIL back: ``dbo.streams.virtual._gil``).

``count_gil_calls(runs)`` runs each config's model once without and once with DBO on a virtual
backend with real tensors (shapes matter only where a kernel loops over data, as the
high-throughput experts loop over the experts that received rows), counting, per launch, the
torch functions and tensor methods its kernel function calls (a ``TorchFunctionMode``; attribute
reads such as ``.shape`` are not calls). The result, per declared op (the launch's ``op``, as
``HostCosts.ops`` is keyed), is the median count.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Any, Callable, Iterable

from torch.overrides import TorchFunctionMode

import dbo
import workspace
from dbo.streams.base import KernelSpec
from dbo.streams.virtual import VirtualBackend, VirtualStream
from demos.toy.comm import ModelledLinkTransport
from demos.toy.config import OverlapConfig, resolve
from demos.toy.model import ToyMoE

__all__ = ["count_gil_calls", "TorchCalls", "one_step_each"]


class TorchCalls(TorchFunctionMode):
    """Counts the torch calls made inside it (``n``), property reads excluded."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if getattr(func, "__name__", "") != "__get__":
            self.n += 1
        return func(*args, **(kwargs or {}))


class _CountingStream(VirtualStream):
    def _launch(self, fn: Callable | None, args: tuple, spec: KernelSpec) -> None:
        if fn is None or spec.op is None:
            return super()._launch(fn, args, spec)
        counts = self.backend.counts  # type: ignore[attr-defined]
        op = spec.op

        def counted(*a: Any) -> None:
            with TorchCalls() as c:
                fn(*a)
            counts.setdefault(op, []).append(c.n)

        return super()._launch(counted, args, spec)


class _CountingBackend(VirtualBackend):
    def __init__(self, **options: Any):
        super().__init__(**options)
        self.counts: dict[str, list[int]] = {}

    def _make_stream(self, name: str) -> VirtualStream:
        return _CountingStream(self, name)


def one_step_each(
    cfg: OverlapConfig, make_backend: Callable[[str], Any], *, meta: bool, between: Callable[[Any], None] | None = None
) -> tuple[Any, str]:
    """Build ``cfg``'s model on the virtual backend ``make_backend(link name)`` returns (a
    subclass that records something) and run one no-DBO step, ``between(backend)``, then one DBO
    step; ``meta``: shapes only. Returns (the closed backend, the link's name)."""
    dtype = cfg.dtype if cfg.dtype != "auto" else "float32"
    res = resolve(
        replace(
            cfg,
            backend="virtual",
            meta=meta,
            dtype=dtype,
            json_path=None,
            trace_path=None,
            plot_path=None,
            world_size=1,
            profile=None,
            graph=False,
            ep=cfg.ep if cfg.ep is not None else 1,  # the measured run: one process runs every expert
        )
    )
    b = make_backend(res.link)
    workspace.init_workspace_manager(res.model.device, num_ubatches=cfg.ubatches)
    try:
        model = ToyMoE(res.model, ModelledLinkTransport(res.link), num_ubatches=cfg.ubatches, schedule=cfg.schedule)
        split = [range(r.start, r.stop) for r in dbo.split_tokens(cfg.tokens, cfg.ubatches)]
        with (
            dbo.UBatchOrchestrator(cfg.ubatches, backend=b, stream_layout=cfg.stream_layout) as on,
            dbo.UBatchOrchestrator(1, backend=b, stream_layout=cfg.stream_layout) as o1,
        ):
            o1.run(model.forward, [range(0, cfg.tokens)])
            if between is not None:
                between(b)
            on.run(model.forward, split)
    finally:
        workspace.reset_workspace_manager()
        b.close()
    return b, res.link


def count_gil_calls(runs: Iterable[OverlapConfig]) -> dict[str, int]:
    """Median torch calls per launch of each declared op over a no-DBO and a DBO step of each
    config, with real tensors on the CPU."""
    counts: dict[str, list[int]] = {}
    for cfg in runs:
        b, _ = one_step_each(cfg, lambda link: _CountingBackend(profile="cpu", link=link), meta=False)
        for k, v in b.counts.items():
            counts.setdefault(k, []).extend(v)
    return {k: round(statistics.median(v)) for k, v in sorted(counts.items())}
