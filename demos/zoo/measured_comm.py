"""The engines' measured custom all-reduce kernels (the ``measured`` extra), read as ``AllReduceRow``s.

Each engine's harness times its own all-reduce of one BF16 tensor over 2 to 8 GPUs of one NVLink domain,
captured in a CUDA graph (``custom_allreduce_perf``): SGLang 0.5.14's custom all-reduce, which the family's
``custom_all_reduce`` line is fitted to (``demos.fits.rooflines.fit_family``), and vLLM 0.24.0's and TRT-LLM
1.3.0rc20's, held out (``validate kernels``' ops ``all-reduce sglang|vllm|trtllm``; docs/kernels.md, "The
engines' all-reduce"). Read: the graph-captured rows (SGLang's and vLLM's tables also time eager launches;
TRT-LLM's times its graph only) of tensors up to ``CUSTOM_AR_MAX_BYTES``, where the engines run these kernels
and not NCCL, over at most one node's GPUs (GB300's tables also time SGLang's over 8 and 16 GPUs across a
rack's 4-GPU trays, 4-6 times one tray's: not read, by the fit and the check alike). A row's
``message_size`` is the tensor's element count, not its bytes: the harness all-reduces a tensor of
``message_size`` BF16 elements (aiconfigurator's ``collector/collect_all_reduce.py``), and aiconfigurator reads
the table at tokens x hidden elements; a row's bytes are ``BF16_BYTES x message_size``.
"""

from __future__ import annotations

from typing import NamedTuple

from demos.zoo.hardware import get_gpu
from demos.zoo.hardware.collectives import CUSTOM_AR_MAX_BYTES
from demos.zoo.measured import package_version, read_table

__all__ = [
    "ALLREDUCE_BUILDS",
    "ALLREDUCE_TABLES",
    "BF16_BYTES",
    "CUSTOM_AR_MAX_BYTES",
    "AllReduceRow",
    "custom_allreduce_rows",
]

BF16_BYTES = 2
"""Bytes of one element of the tables' tensors (``allreduce_dtype`` bfloat16, the rows read)."""

ALLREDUCE_TABLES = {
    "sglang": ("comm", "sglang", "0.5.14", "custom_allreduce_perf"),
    "vllm": ("comm", "vllm", "0.24.0", "custom_allreduce_perf"),
    "trtllm": ("comm", "trtllm", "1.3.0rc20", "custom_allreduce_perf"),
}
"""Engine -> (family, framework, version, file stem), as ``demos.zoo.measured.TABLES``."""

ALLREDUCE_BUILDS = {"sglang 0.5.10": ("comm", "sglang", "0.5.10", "custom_allreduce_perf")}
"""An older engine build whose kernel differs -> its table: SGLang's custom all-reduce up to 0.5.10 (its 0.5.9
table times it within 0.5 us; ``demos.zoo.engine_allreduce``). Fitted per build, not into the line of every
engine's kernels."""


class AllReduceRow(NamedTuple):
    """One measured all-reduce: ``engine``'s kernel over ``gpus`` GPUs of a tensor of ``nbytes``, ``seconds``."""

    engine: str
    gpus: int
    nbytes: int
    seconds: float


def _frame(gpu: str, engine: str):
    return read_table(gpu, engine, tuple({**ALLREDUCE_TABLES, **ALLREDUCE_BUILDS}.items()))


def custom_allreduce_rows(gpu: str, engine: str = "sglang") -> list[AllReduceRow]:
    """``engine``'s (or an ``ALLREDUCE_BUILDS`` build's) graph-captured all-reduce rows of ``gpu`` up to
    ``CUSTOM_AR_MAX_BYTES`` over at most one node's GPUs (module docstring)."""
    package_version()
    d = _frame(gpu, engine)
    graph = d.kernel_source.str.endswith("_graph") | (d.kernel_source == "TRTLLM")
    node = d.num_gpus <= get_gpu(gpu).gpus_per_node
    d = d.assign(nbytes=d.message_size * BF16_BYTES)  # the table counts elements (module docstring)
    d = d[graph & node & (d.allreduce_dtype == "bfloat16") & (d.nbytes <= CUSTOM_AR_MAX_BYTES)]
    cols = zip(d.num_gpus.tolist(), d.nbytes.tolist(), d.latency.tolist())
    return [AllReduceRow(engine, int(n), int(b), t * 1e-3) for n, b, t in cols]
