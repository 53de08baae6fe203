"""Published, measured expert-parallel dispatch/combine figures: AMD's MoRI tuning tables and EFA/RoCE/IB tables.

Two CSV files beside this module, written by ``scripts/extract_ep_tables.py`` from pinned commits of the
sources (``README-ep.md`` has every rule, unit and dropped row):

* ``mori_ep.csv`` (``mori_rows``): every measured point of ROCm/mori's dispatch/combine tuning tables
  (``python/mori/ops/tuning_configs/*.json``): per GPU (MI300X, MI308X, MI350X, MI355X), kernel type,
  EP size and phase, the best launch configuration's latency and bandwidth at each token count.
* ``ep_published.csv`` (``published_rows``): the benchmark tables of MoRI's README, UCCL-EP's README
  (AWS p5en / p6-b200 over EFA, MI300X / MI355X over CX7, Pollara and Thor2) and awsome-distributed-ai's
  EP backend comparison (AWS p6-b300 / p5 over EFA: DeepEP over NVSHMEM, UCCL-EP, NCCL all-to-all).

Units here are SI: ``seconds`` (the sources' microseconds / 1e6) and ``bandwidth`` in bytes per second
(the sources' GB/s x 1e9; every source divides by 1e9, not 2**30). A cell the source leaves empty is None.
"""

from __future__ import annotations

import csv
import io
from decimal import Decimal
from functools import lru_cache
from importlib.resources import files
from typing import NamedTuple

SOURCES = {
    "ROCm/mori": (
        "ROCm/mori @ 624002c897a3 (2026-08-21), MIT, Copyright (c) Advanced Micro Devices, Inc.: "
        "python/mori/ops/tuning_configs/*.json (mori_ep.csv) and README.md's MORI-EP tables"
    ),
    "uccl-project/uccl": (
        "uccl-project/uccl @ da914a2054c2 (2026-08-19), Apache-2.0: ep/README.md's UCCL-EP result tables"
    ),
    "awslabs/awsome-distributed-ai": (
        "awslabs/awsome-distributed-ai @ 95b939cdc5b2 (2026-07-23), MIT-0, Copyright Amazon.com, Inc. or its "
        "affiliates: micro-benchmarks/expert-parallelism/ep-backend-comparison/RESULTS.md, RESULTS-p5.md"
    ),
}

_US = -6  # microseconds -> seconds, as a power of ten
_GB = 9  # GB/s -> bytes/s


class MoriRow(NamedTuple):
    """One measured point of a MoRI tuning table: the best launch configuration at ``tokens`` per rank."""

    gpu: str  # the file's gpu_model: mi300x, mi308x, mi350x, mi355x
    kernel_type: str  # IntraNode, IntraNodeLL, InterNodeV1, InterNodeV1LL
    ep: int
    phase: str  # dispatch, combine
    dtype: str  # bf16, fp8_e4m3, fp8_e4m3_fnuz, fp4
    quant: str | None  # combine only: none, fp8_direct_cast
    zero_copy: bool | None  # combine only
    tokens: int  # tokens per rank
    hidden: int
    top_k: int | None  # None where the rule has no topk key (MoRI's benchmarks default to 8)
    block_num: int
    rdma_block_num: int
    warp_per_block: int
    seconds: float  # intranode: latency_us; internode: avg_latency_us
    bandwidth: float  # bytes/s: intranode algbw; internode the tuner's selection figure (README-ep.md)
    rdma_bandwidth: float | None  # bytes/s, internode only (avg_rdma_bandwidth_gbps)
    xgmi_bandwidth: float | None  # bytes/s, internode only (avg_xgmi_bandwidth_gbps)
    ll_bandwidth: float | None  # bytes/s, internode only (avg_ll_bandwidth_gbps)
    copies: int  # how many rules of the file carried these very figures (README-ep.md)
    file: str


UNQUANTIZED = frozenset({None, "none"})
"""A MoRI combine row's ``quant`` when it sends its values as they are (no FP8 cast)."""


def unquantized(row: "MoriRow") -> bool:
    """Whether MoRI row ``row`` moves its values unquantized (``UNQUANTIZED``)."""
    return row.quant in UNQUANTIZED


class PublishedEPRow(NamedTuple):
    """One figure of a published EP benchmark table (a dispatch, a combine or an all-to-all)."""

    source: str  # a key of SOURCES
    commit: str
    file: str
    run: str  # which table / campaign of the file
    instance: str | None  # AWS instance type where stated
    gpu: str
    network: str  # efa, ib, roce, xgmi, nvlink (the row's fabric; intranode rows are xgmi / nvlink)
    nics_per_gpu: int | None
    nic_gbps: int | None  # one NIC's line rate in Gb/s, where stated
    library: str  # mori, uccl-ep, nvshmem-deepep, nccl
    mode: str  # normal, low-latency, alltoall-matched, alltoall-peak
    ep: int  # ranks
    tokens: int | None  # tokens per rank
    hidden: int | None
    top_k: int | None
    experts: int | None
    kernel: str  # dispatch, combine, alltoall
    dispatch_dtype: str | None  # the run's dispatch dtype (fp8 / bf16) where stated
    seconds: float | None
    bandwidth: float | None  # bytes/s
    bandwidth_kind: str | None  # bottleneck, algbw, per-rank, busbw, scale-out (README-ep.md)
    link: str | None  # the link the bandwidth is counted on: rdma, xgmi, nvlink; None if not split
    stale: bool  # marked stale by the source
    note: str


def _int(text: str) -> int | None:
    return int(text) if text else None


def _scaled(text: str, exponent: int) -> float | None:
    """The decimal ``text`` x 10**exponent, rounded once (11.6 us is 1.16e-05 s, not 1.1599999999999999e-05)."""
    return float(Decimal(text).scaleb(exponent)) if text else None


def _read(name: str) -> list[dict[str, str]]:
    text = files(__package__).joinpath(name).read_text(encoding="utf-8")
    return list(csv.DictReader(io.StringIO(text)))


@lru_cache(maxsize=None)
def _mori() -> tuple[MoriRow, ...]:
    return tuple(
        MoriRow(
            gpu=r["gpu"],
            kernel_type=r["kernel_type"],
            ep=int(r["ep"]),
            phase=r["phase"],
            dtype=r["dtype"],
            quant=r["quant"] or None,
            zero_copy=None if r["zero_copy"] == "" else r["zero_copy"] == "1",
            tokens=int(r["tokens"]),
            hidden=int(r["hidden"]),
            top_k=_int(r["top_k"]),
            block_num=int(r["block_num"]),
            rdma_block_num=int(r["rdma_block_num"]),
            warp_per_block=int(r["warp_per_block"]),
            seconds=_scaled(r["latency_us"], _US),
            bandwidth=_scaled(r["bandwidth_gbps"], _GB),
            rdma_bandwidth=_scaled(r["rdma_gbps"], _GB),
            xgmi_bandwidth=_scaled(r["xgmi_gbps"], _GB),
            ll_bandwidth=_scaled(r["ll_gbps"], _GB),
            copies=int(r["copies"]),
            file=r["file"],
        )
        for r in _read("mori_ep.csv")
    )


@lru_cache(maxsize=None)
def _published() -> tuple[PublishedEPRow, ...]:
    return tuple(
        PublishedEPRow(
            source=r["source"],
            commit=r["commit"],
            file=r["file"],
            run=r["run"],
            instance=r["instance"] or None,
            gpu=r["gpu"],
            network=r["network"],
            nics_per_gpu=_int(r["nics_per_gpu"]),
            nic_gbps=_int(r["nic_gbps"]),
            library=r["library"],
            mode=r["mode"],
            ep=int(r["ep"]),
            tokens=_int(r["tokens"]),
            hidden=_int(r["hidden"]),
            top_k=_int(r["top_k"]),
            experts=_int(r["experts"]),
            kernel=r["kernel"],
            dispatch_dtype=r["dispatch_dtype"] or None,
            seconds=_scaled(r["latency_us"], _US),
            bandwidth=_scaled(r["bandwidth_gbs"], _GB),
            bandwidth_kind=r["bandwidth_kind"] or None,
            link=r["link"] or None,
            stale=r["stale"] == "1",
            note=r["note"],
        )
        for r in _read("ep_published.csv")
    )


def _select(table, filters: dict) -> list:
    """The rows matching every filter given; a value absent from the whole table is a ValueError."""
    rows = list(table)
    for field, wanted in filters.items():
        if wanted is None:
            continue
        known = sorted({getattr(r, field) for r in table})
        if wanted not in known:
            raise ValueError(f"unknown {field} {wanted!r}; known: {', '.join(map(str, known))}")
        rows = [r for r in rows if getattr(r, field) == wanted]
    return rows


def mori_rows(
    gpu: str | None = None, kernel_type: str | None = None, ep: int | None = None, phase: str | None = None
) -> list[MoriRow]:
    """MoRI tuning-table rows, optionally of one gpu / kernel type / EP size / phase (each must exist)."""
    return _select(_mori(), {"gpu": gpu, "kernel_type": kernel_type, "ep": ep, "phase": phase})


def published_rows(
    network: str | None = None, library: str | None = None, gpu: str | None = None
) -> list[PublishedEPRow]:
    """Published-table rows, optionally of one network / library / gpu (each must exist)."""
    return _select(_published(), {"network": network, "library": library, "gpu": gpu})
