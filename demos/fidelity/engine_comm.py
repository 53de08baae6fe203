"""The attention-TP all-reduce against the engines' measured custom all-reduce kernels: ``validate kernels``' ops
``all-reduce sglang``, ``all-reduce vllm``, ``all-reduce trtllm`` and ``all-reduce sglang 0.5.10`` (SGLang 0.5.14's,
vLLM 0.24.0's and TRT-LLM 1.3.0rc20's kernels, and SGLang's up to 0.5.10; each build's line,
``FamilyFit.engine_all_reduce``, is fitted to its own rows, B300 and GB300 held out of the family fits): each
graph-captured row up to ``CUSTOM_AR_MAX_BYTES`` (``demos.zoo.measured_comm``) predicted as a step of that build
times an all-reduce (``KernelTimes.all_reduce``: the build's line, or NCCL's ring model where that is faster).
"""

from __future__ import annotations

from collections.abc import Iterable

from demos.zoo.hardware import get_gpu
from demos.zoo.rooflines import FamilyFit

__all__ = ["ALLREDUCE_OPS", "allreduce_rows"]

ALLREDUCE_OPS = {
    "sglang": "all-reduce sglang",
    "vllm": "all-reduce vllm",
    "trtllm": "all-reduce trtllm",
    "sglang 0.5.10": "all-reduce sglang 0.5.10",
}
"""Engine (or older build, ``demos.zoo.measured_comm.ALLREDUCE_BUILDS``) -> the op its custom all-reduce rows are
checked as."""


def allreduce_rows(gpu: str, fit: FamilyFit, ops: Iterable[str]) -> Iterable[tuple[str, str, float, float]]:
    """``(op, shape, predicted seconds, measured seconds)`` of ``gpu``'s custom all-reduce rows of ``ops``, on
    ``fit``; an engine without a table for ``gpu`` gives none."""
    from demos.zoo.kernel_times import KernelTimes
    from demos.zoo.measured import MeasuredTablesError
    from demos.zoo.measured_comm import custom_allreduce_rows
    from demos.zoo.profile import gpu_profile

    g = get_gpu(gpu)
    profile = gpu_profile(g, fit=fit)
    for engine, op in ALLREDUCE_OPS.items():
        if op not in ops:
            continue
        times = KernelTimes(g, profile, fit, allreduce=engine)
        try:
            rows = custom_allreduce_rows(gpu, engine)
        except MeasuredTablesError:
            continue
        for r in rows:  # one node's GPUs (the adapter reads no more)
            yield op, f"bytes={r.nbytes} gpus={r.gpus}", times.all_reduce(r.nbytes, r.gpus), r.seconds
