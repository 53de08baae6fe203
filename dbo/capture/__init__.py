"""Capture a ubatched step once and replay it without threads (docs/capture.md).

Parts: ``_step`` (``capture_step`` and ``CapturedStep``), ``_guard`` (the host-sync guard and the
recording stream and event proxies), ``_cuda`` (the CUDA-graph region on the cuda backend).
"""

from dbo.capture._step import CapturedStep, capture_step

__all__ = ["CapturedStep", "capture_step"]
