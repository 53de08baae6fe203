"""The cuda half of a capture: one ``torch.cuda.CUDAGraph`` around a multi-threaded DBO step.

How the step is brought into one graph (checked on an H200 with two ubatch threads):

* every ubatch thread selects the device by *index* and warms its cuBLAS handle before the start
  barrier (``thread_prelude``); a thread that selects it later, inside the capture, can fail;
* the calling thread enters ``torch.cuda.graph(graph, stream=capture_stream)``, makes every stream
  of the backend wait for the capture stream (fork), hands the turn to ubatch 0, waits for the
  ubatch threads inside the capture, then makes the capture stream wait for every stream (join).
  Kernels that other threads enqueue on forked streams belong to the capture;
* the backend's tracer is off during the capture (its timing events and their queries are not
  capturable); streams created during the capture are forked when they are created.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Iterator

import torch

logger = logging.getLogger(__name__)


class CudaRegion:
    """The graph, its capture stream, and the fork/join around the captured step."""

    def __init__(self, backend: Any):
        self.backend = backend
        self.device: torch.device = backend.device
        self.graph: Any = torch.cuda.CUDAGraph()
        self.stream = torch.cuda.Stream(device=self.device)
        self.capturing = False
        self._forked: dict[int, Any] = {}

    def thread_prelude(self) -> None:
        """Run in each ubatch thread before the start barrier."""
        torch.cuda.set_device(self.device.index)
        torch.cuda.current_blas_handle()

    def fork(self, stream: Any) -> None:
        """Make ``stream`` (a backend stream) part of the capture: it waits for the capture stream."""
        ts = stream.torch_stream
        if self.capturing and id(ts) not in self._forked:
            ts.wait_stream(self.stream)
            self._forked[id(ts)] = ts

    @contextlib.contextmanager
    def enter(self) -> Iterator[None]:
        b = self.backend
        saved_tracer, b.tracer = b.tracer, None
        failed: BaseException | None = None
        try:
            with torch.cuda.device(self.device), torch.cuda.graph(self.graph, stream=self.stream):
                self.capturing = True
                for s in b.streams:
                    self.fork(s)
                try:
                    yield
                except BaseException as exc:
                    failed = exc
                finally:
                    self.capturing = False
                    # The capture must end on the stream it began on; a step run on this thread
                    # (one ubatch) leaves torch's current stream at the device default.
                    torch.cuda.set_stream(self.stream)
                    try:
                        for s in b.streams:
                            self.fork_join(s)
                    except Exception:
                        if failed is None:
                            raise
                        logger.debug("join after a failed capture raised", exc_info=True)
        except BaseException:
            if failed is None:
                raise
            logger.debug("ending a failed capture raised", exc_info=True)  # the step's failure wins
        finally:
            b.tracer = saved_tracer
        if failed is not None:
            self.graph = None
            raise failed

    def fork_join(self, stream: Any) -> None:
        ts = stream.torch_stream
        if id(ts) in self._forked:
            self.stream.wait_stream(ts)

    def synchronize(self) -> None:
        """After a successful capture: run the graph once, so the outputs hold the step's values
        (as on the CPU backends, where the capture runs the step), and wait for it."""
        with torch.cuda.device(self.device):
            self.graph.replay()
            torch.cuda.current_stream(self.device).synchronize()

    def replay_sync(self) -> None:
        torch.cuda.current_stream(self.device).synchronize()
