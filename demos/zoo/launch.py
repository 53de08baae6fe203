"""Launching the plan's ops: what the generic transformer's attention, dense MLP and MoE block share.

``Launcher(meta)`` launches one op of a layer's plan by name (``launcher(costs, "attn_proj", fn, *args,
layer=, ub=)``): its cost from the plan (``demos.zoo.plan``; an op the plan does not hold is an error),
its stream kind and kernel count from the op table (``demos.zoo.ops``), on the current stream or on a
given one; at full size on meta tensors (``meta``) the kernel is the meta stand-in and its arguments
are dropped (only the declared cost matters), in real math it is ``fn(*args)``. ``workspace(*specs)``
asks the process-global workspace manager for the calling ubatch's views (one request, as vLLM's layers
make it). ``LINK_STREAM`` is the stream a low-latency all-to-all is in flight on; ``record_event()`` an
event on the current stream (DeepEP's "previous event" of a normal kernel); ``side_stream()`` the second compute
stream a MoE block runs its shared experts on where the engine does (``SIDE_STREAM``, role "side").

This module sits below the model (``demos.zoo.model``) and the MoE block (``demos.zoo.moe``), so that
neither reaches into the other for its launch helpers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

import dbo
from demos.zoo.kernels import meta_kernel
from demos.zoo.ops import op
from workspace import current_workspace_manager

__all__ = ["LINK_STREAM", "SIDE_STREAM", "Launcher", "kernel_name", "record_event", "side_stream"]

LINK_STREAM = "link"
"""The stream the low-latency all-to-all is in flight on (one for every ubatch, in send order)."""


SIDE_STREAM = "side"
"""The second compute stream the shared experts run on beside the router and routed experts
(``demos.zoo.side_streams``; one for every ubatch)."""


def side_stream() -> Any:
    """The current backend's side stream (``SIDE_STREAM``, role "side": the virtual backend runs its kernels
    beside the compute engine's), created on first use."""
    return dbo.current_stream().backend.stream(SIDE_STREAM, role="side")


def kernel_name(name: str, layer: int, ub: int) -> str:
    """A kernel's display name: ``"<op> L<layer> u<ubatch>"`` (for people; nothing reads it back)."""
    return f"{name} L{layer} u{ub}"


def record_event() -> Any:
    """An event recorded now on the current stream (DeepEP's "previous event" of a normal kernel)."""
    ev = dbo.current_stream().backend.new_event()
    ev.record(dbo.current_stream())
    return ev


class Launcher:
    """Launches ops by name with the plan's costs (module docstring)."""

    def __init__(self, meta: bool):
        self.meta = meta

    def __call__(
        self, costs: Mapping[str, Any], name: str, fn: Any, *args: Any, layer: int, ub: int, stream: Any = None
    ) -> None:
        """Launch op ``name`` (its cost ``costs[name]``) as ``fn(*args)``, on ``stream`` (default: the
        current one)."""
        info = op(name)
        cost = costs[name]
        kernel, kargs = (meta_kernel, ()) if self.meta else (fn, args)
        launch = dbo.launch if stream is None else stream.launch
        launch(kernel, *kargs, name=kernel_name(name, layer, ub), kind=info.stream, cost=cost, op=name, layer=layer)

    def workspace(self, *specs: tuple[tuple[int, ...], torch.dtype]) -> list[torch.Tensor]:
        """The calling ubatch's workspace views of ``specs`` (one request)."""
        return current_workspace_manager().get_simultaneous(*specs)
