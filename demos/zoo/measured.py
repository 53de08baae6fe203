"""The one adapter over measured kernel tables: ``aiconfigurator-core``'s parquet files (optional extra).

``aiconfigurator-core`` (PyPI, Apache-2.0) ships kernel times measured on real GPUs (GEMM, MLA, DeepEP
MoE and all-to-all) per system, framework and framework version, and a sample of measured end-to-end
deployments (``silicon_sample.csv``). Install it with ``pip install -e '.[measured]'``; nothing else in
the project imports it. This module reads the files directly (pandas over pyarrow), not through the
package's Python engine: the files are the measurements themselves, their columns have been stable while
the engine's API changed between releases, and the predictor needs rows, not the package's own model of
a deployment (docs/design.md, "Measured kernel tables"). An upstream layout change touches only this file.

Every reader returns plain tuples (``demos.zoo.measured_rows``: ``GemmRow``, ``MlaRow``, ``MlaModuleRow``,
``DsaModuleRow``, ``GdnRow``, ``MoeRow``, ``AllToAllRow``, ``SiliconRow``) in SI units (seconds), so no caller
sees pandas. Which table version is read is pinned in ``TABLES``; a GPU without tables (h800, h20) ->
``MeasuredTablesError``.
"""

from __future__ import annotations

import functools
from pathlib import Path

from demos.errors import ConfigError
from demos.vocabulary import Phase
from demos.zoo.hardware import get_gpu
from demos.zoo.measured_rows import (
    AllToAllRow,
    DsaModuleRow,
    GdnRow,
    GemmRow,
    MhcRow,
    MlaModuleRow,
    MlaRow,
    MoeRow,
    SiliconRow,
    V4ModuleRow,
    row_release,
    source_concurrency,
)

__all__ = [
    "INSTALL_HINT",
    "SYSTEMS",
    "TABLES",
    "AllToAllRow",
    "DsaModuleRow",
    "GdnRow",
    "GemmRow",
    "MeasuredTablesError",
    "MhcRow",
    "MlaModuleRow",
    "MlaRow",
    "MoeRow",
    "SiliconRow",
    "V4ModuleRow",
    "alltoall_rows",
    "dsa_module_rows",
    "available",
    "data_root",
    "gdn_rows",
    "kda_rows",
    "mhc_rows",
    "read_table",
    "msa_module_rows",
    "gemm_rows",
    "mla_module_rows",
    "mla_rows",
    "model_config_ids",
    "model_config_path",
    "moe_rows",
    "package_version",
    "silicon_rows",
    "table_path",
    "v4_module_rows",
]

INSTALL_HINT = "the measured kernel tables need the optional extra: python -m pip install -e '.[measured]'"

SYSTEMS = {
    "h100": "h100_sxm",
    "h200": "h200_sxm",
    "b200": "b200_sxm",
    "gb200": "gb200",
    "b300": "b300_sxm",
    "gb300": "gb300",
}
"""Our GPU name -> the package's system directory (GPUs with measured tables)."""

TABLES = {
    "gemm": ("gemm", "sglang", "0.5.14", "gemm_perf"),
    "mla_decode": ("mla", "sglang", "0.5.14", "generation_mla_perf"),
    "mla_decode_trtllm": ("mla", "trtllm", "1.3.0rc20", "generation_mla_perf"),
    "mla_prefill": ("mla", "sglang", "0.5.14", "context_mla_perf"),
    "moe_decode": ("moe", "sglang", "0.5.10", "wideep_generation_moe_perf"),
    "deepep_ll": ("comm", "sglang", "0.5.12", "wideep_deepep_ll_perf"),
    "mla_module": ("mla", "trtllm", "1.3.0rc20", "mla_generation_module_perf"),
    "dsa_module": ("sparse_attention", "sglang", "0.5.14", "dsa_generation_module_perf"),
    "gdn": ("linear_attention", "sglang", "0.5.14", "gdn_perf"),
    "kda": ("kda", "sglang", "0.5.16", "kda_perf"),
    "mhc": ("mhc", "sglang", "0.5.14", "mhc_module_perf"),
    "csa_decode": ("sparse_attention", "sglang", "0.5.14", "dsv4_csa_generation_module_perf"),
    "hca_decode": ("sparse_attention", "sglang", "0.5.14", "dsv4_hca_generation_module_perf"),
    "msa_decode": ("msa", "sglang", "0.5.16", "msa_generation_module_perf"),
}
"""Table -> (family, framework, version, file stem): the version of each table read (aiconfigurator-core 0.12.0:
the newest SGLang collection of each on every GPU in ``SYSTEMS``, and SGLang's for DeepSeek sparse attention,
Gated DeltaNet, DeepSeek-V4's kernels, MiniMax-M3's and KDA's (0.5.16); TRT-LLM's for the whole MLA decode module,
which only it measures on every GPU, and its own MLA decode core, read for its FP8-cache kernel)."""


class MeasuredTablesError(ConfigError):
    """The tables are not installed, or have no table for the GPU asked for (one line)."""


_GDN_KERNELS = {
    "causal_conv1d_fn": "conv",
    "causal_conv1d_update": "conv",
    "chunk_gated_delta_rule": "delta_rule",
    "fused_recurrent_gated_delta_rule_packed_decode": "delta_rule",
}

_KDA_KERNELS = {
    "causal_conv1d_fn_qkv3": "conv",
    "causal_conv1d_update": "conv",
    "chunk_kda": "delta_rule",
    "fused_recurrent_kda_packed_decode": "delta_rule",
    "kda_fused_decode": None,  # a fused decode variant, 11 rows a GPU at 12 heads only: known, left out
}
"""A linear-attention table's kernel_source -> ``GdnRow.kernel`` (None: a kernel known and not read)."""

_LINEAR_PHASES = {"generation": Phase.DECODE, "context": Phase.PREFILL}


def available() -> bool:
    """Whether the extra is installed (the package and pandas import)."""
    try:
        _modules()
    except MeasuredTablesError:
        return False
    return True


def _modules():
    try:
        import aiconfigurator_core
        import pandas
    except ImportError:
        raise MeasuredTablesError(INSTALL_HINT) from None
    return aiconfigurator_core, pandas


def package_version() -> str:
    """The installed aiconfigurator-core version (MeasuredTablesError without it)."""
    from importlib.metadata import version

    _modules()
    return version("aiconfigurator-core")


def data_root() -> Path:
    """The package's ``systems`` directory."""
    pkg, _ = _modules()
    return Path(pkg.__file__).parent / "systems"


def _model_configs() -> Path:
    """The extra's folder of HuggingFace config.json copies, each named ``org--name_config.json``."""
    return data_root().parent / "model_configs"


def model_config_path(repo_id: str) -> Path | None:
    """The extra's copy of HuggingFace repository ``repo_id``'s config.json (``_model_configs``), or None
    where it holds none (MeasuredTablesError without the extra)."""
    path = _model_configs() / f"{repo_id.replace('/', '--')}_config.json"
    return path if "--" not in repo_id and path.is_file() else None


def model_config_ids() -> list[str]:
    """The HuggingFace repositories whose config.json the extra holds a copy of, sorted (not the
    ``*_hf_quant_config.json`` files beside NVIDIA's copies: those are no repositories)."""
    names = (p.name[: -len("_config.json")] for p in _model_configs().glob("*--*_config.json"))
    return sorted(n.replace("--", "/", 1) for n in names if not n.endswith("_hf_quant"))


def table_path(gpu: str, table: str, tables: dict | None = None) -> Path:
    """The parquet file of ``table`` (a key of ``tables``, default ``TABLES``) for ``gpu`` (a ``SYSTEMS`` key)."""
    if gpu not in SYSTEMS:
        raise MeasuredTablesError(f"no measured tables for GPU {gpu!r}; tables exist for {', '.join(SYSTEMS)}")
    family, framework, version, stem = (tables or TABLES)[table]
    path = data_root() / "data" / SYSTEMS[gpu] / family / framework / version / f"{stem}.parquet"
    if not path.is_file():
        raise MeasuredTablesError(f"the installed aiconfigurator-core has no {stem} {framework} {version} for {gpu}")
    return path


def _frame(gpu: str, table: str):
    """``table`` of ``gpu`` as a DataFrame, read once; whether the extra is there is asked every time."""
    _modules()
    return read_table(gpu, table)


@functools.lru_cache(maxsize=64)
def read_table(gpu: str, table: str, tables: tuple = ()):
    """``table`` of ``gpu`` as a DataFrame, read once; ``tables``: a registry's items where not ``TABLES``."""
    _, pd = _modules()
    return pd.read_parquet(table_path(gpu, table, dict(tables) or None))


def gemm_rows(gpu: str, dtype: str | None = None) -> list[GemmRow]:
    """Every measured GEMM of ``gpu`` (of ``dtype`` only, when given), latency in seconds."""
    d = _frame(gpu, "gemm")
    if dtype is not None:
        d = d[d.gemm_dtype == dtype]
    cols = zip(d.m.tolist(), d.n.tolist(), d.k.tolist(), d.gemm_dtype.tolist(), d.latency.tolist())
    return [GemmRow(m, n, k, dt, ms * 1e-3) for m, n, k, dt, ms in cols]


def mla_rows(gpu: str, phase: str, kv_dtype: str | None = None, engine: str = "sglang") -> list[MlaRow]:
    """MLA attention-core rows of ``phase`` ("decode": generation, kv_len = the cached tokens; "prefill": context,
    kv_len = the prompt length), of SGLang's tables or (decode, ``engine`` "trtllm") TRT-LLM's."""
    tables = {(Phase.DECODE, "sglang"): "mla_decode", (Phase.PREFILL, "sglang"): "mla_prefill"}
    if (table := {**tables, (Phase.DECODE, "trtllm"): "mla_decode_trtllm"}.get((phase, engine))) is None:
        raise ValueError(f"no MLA table of phase {phase!r} and engine {engine!r}")
    d = _frame(gpu, table)
    if kv_dtype is not None:
        d = d[d.kv_cache_dtype == kv_dtype]
    length = d.step if phase == Phase.DECODE else d.isl
    cols = zip(d.batch_size.tolist(), d.num_heads.tolist(), length.tolist(), d.kv_cache_dtype.tolist())
    return [MlaRow(b, h, s, kv, ms * 1e-3) for (b, h, s, kv), ms in zip(cols, d.latency.tolist())]


def mla_module_rows(gpu: str) -> list[MlaModuleRow]:
    """Whole MLA decode module rows (TRT-LLM's collection), latency in seconds."""
    d = _frame(gpu, "mla_module")
    names = ("batch_size", "num_heads", "step", "kv_cache_dtype", "gemm_type")
    cols = zip(*(d[c].tolist() for c in names), d.latency.tolist())
    return [MlaModuleRow(*row[:-1], row[-1] * 1e-3) for row in cols]


def dsa_module_rows(gpu: str) -> list[DsaModuleRow]:
    """Whole sparse-MLA decode module rows (SGLang's collection), latency in seconds."""
    d = _frame(gpu, "dsa_module")
    names = ("model", "batch_size", "num_heads", "step", "kv_cache_dtype", "gemm_type", "kernel_source")
    cols = zip(*(d[c].tolist() for c in names), d.latency.tolist())
    return [DsaModuleRow(*row[:-1], row[-1] * 1e-3) for row in cols]


def gdn_rows(gpu: str) -> list[GdnRow]:
    """Gated DeltaNet kernel rows of ``gpu`` (SGLang's collection), latency in seconds; a kernel the table
    names that ``GdnRow`` does not know is an error (the upstream layout changed)."""
    return _linear_rows(gpu, "gdn", _GDN_KERNELS)


def kda_rows(gpu: str) -> list[GdnRow]:
    """Kimi Delta Attention kernel rows of ``gpu`` as ``GdnRow``s (SGLang 0.5.16's, Kimi-K3's shapes: 12 to 96
    heads of 128, as many key heads as value heads), latency in seconds; the speculative ``verify`` rows and
    ``kda_fused_decode``'s are left out, another kernel is an error (the upstream layout changed)."""
    return _linear_rows(gpu, "kda", _KDA_KERNELS, skip_phases=("verify",))


def _linear_rows(gpu: str, table: str, kernels: dict, skip_phases: tuple = ()) -> list[GdnRow]:
    """The rows of linear-attention ``table`` as ``GdnRow``s, of its phases (``_LINEAR_PHASES``; those in
    ``skip_phases`` dropped whatever their kernels) and kernels (``kernels``; those it maps to None dropped);
    another phase, or another kernel, is an error."""
    d = _frame(gpu, table)
    stem = TABLES[table][3]
    unknown = set(d.phase.unique()) - set(_LINEAR_PHASES) - set(skip_phases)
    if unknown:
        raise MeasuredTablesError(f"{stem} on {gpu}: unknown phase {sorted(unknown)}")
    d = d[d.phase.isin(list(_LINEAR_PHASES))]
    unknown = set(d.kernel_source.unique()) - set(kernels)
    if unknown:
        raise MeasuredTablesError(f"{stem} on {gpu}: unknown kernel_source {sorted(unknown)}")
    d = d[d.kernel_source.isin([k for k, v in kernels.items() if v])]
    names = ("batch_size", "seq_len", "num_k_heads", "head_k_dim", "num_v_heads", "head_v_dim", "d_conv")
    cols = zip(d.model_name.tolist(), d.phase.tolist(), d.kernel_source.tolist(), *(d[c].tolist() for c in names))
    return [
        GdnRow(m, _LINEAR_PHASES[ph], kernels[k], *rest, ms * 1e-3)
        for (m, ph, k, *rest), ms in zip(cols, d.latency.tolist())
    ]


def mhc_rows(gpu: str) -> list[MhcRow]:
    """DeepSeek-V4's hyper-connection kernel rows of ``gpu`` (SGLang's collection), latency in seconds; a
    site the table names other than "pre" or "post" is an error (the upstream layout changed)."""
    d = _frame(gpu, "mhc")
    unknown = set(d.op_name.unique()) - {"pre", "post"}
    if unknown:
        raise MeasuredTablesError(f"mhc_module_perf on {gpu}: unknown op_name {sorted(unknown)}")
    names = ("op_name", "num_tokens", "hidden_size", "hc_mult")
    cols = zip(*(d[c].tolist() for c in names), d.latency.tolist())
    return [MhcRow(*row[:-1], row[-1] * 1e-3) for row in cols]


def v4_module_rows(gpu: str) -> list[V4ModuleRow]:
    """DeepSeek-V4's CSA and HCA decode module rows of ``gpu`` (SGLang's collection), latency in seconds."""
    out = []
    for table in ("csa_decode", "hca_decode"):
        d = _frame(gpu, table)
        names = ("model", "compress_ratio", "batch_size", "num_heads", "tp_size", "step", "gemm_type", "kv_cache_dtype")
        cols = zip(*(d[c].tolist() for c in names), d.latency.tolist())
        out += [V4ModuleRow(m, r, Phase.DECODE, *rest, ms * 1e-3) for m, r, *rest, ms in cols]
    return out


def msa_module_rows(gpu: str) -> list[DsaModuleRow]:
    """MiniMax-M3's whole block-sparse decode module rows (SGLang's collection; ``DsaModuleRow``'s fields:
    model, batch, heads on the GPU, cached tokens, KV and GEMM dtypes, the decode kernel), in seconds."""
    d = _frame(gpu, "msa_decode")
    names = ("model", "batch_size", "num_heads", "step", "kv_cache_dtype", "gemm_type", "kernel_source")
    cols = zip(*(d[c].tolist() for c in names), d.latency.tolist())
    return [DsaModuleRow(*row[:-1], row[-1] * 1e-3) for row in cols]


def moe_rows(gpu: str) -> list[MoeRow]:
    """DeepEP MoE expert-compute rows (decode, the low-latency masked layout)."""
    d = _frame(gpu, "moe_decode")
    names = ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_ep_size", "distribution")
    cols = zip(*(d[c].tolist() for c in names), d.latency.tolist())
    return [MoeRow(*row[:-1], row[-1] * 1e-3) for row in cols]


def alltoall_rows(gpu: str) -> list[AllToAllRow]:
    """DeepEP low-latency dispatch/combine rows (one node of the system's GPUs)."""
    d = _frame(gpu, "deepep_ll")
    per_node = get_gpu(gpu).gpus_per_node
    names = ("node_num", "num_token", "hidden_size", "num_topk", "num_experts", "dispatch_avg_t_us", "combine_avg_t_us")
    out = []
    for nodes, t, h, k, e, disp, comb in zip(*(d[c].tolist() for c in names)):
        out.append(AllToAllRow(nodes * per_node, t, h, k, e, disp * 1e-6, comb * 1e-6))
    return out


def _int(v) -> int:
    return 0 if v != v else int(v)  # NaN -> 0


def _opt(v) -> float | None:
    return None if v != v else float(v) * 1e-3


def _workers(r: dict) -> tuple[int, int] | None:
    """A disaggregated row's (prefill, decode) worker counts; None where either is not recorded."""
    p, d = r.get("prefill_num_workers"), r.get("decode_num_workers")
    if not all(isinstance(x, (int, float)) and x == x and x >= 1 for x in (p, d)):
        return None
    return int(p), int(d)


def silicon_rows() -> tuple[SiliconRow, ...]:
    """Every measured deployment of ``silicon_sample.csv``, read once. For a disaggregated row the decode
    worker's parallelism and batch are in the main fields and the prefill worker's (tp, attention_dp,
    moe_ep, moe_tp, batch) in ``prefill``."""
    _modules()
    return _read_silicon()


@functools.lru_cache(maxsize=1)
def _read_silicon() -> tuple[SiliconRow, ...]:
    from demos.zoo.vendor_data.inferencex import kv_cache_fp8, radix_cache_off, redundant_slots, speculative_rows

    _, pd = _modules()
    d = pd.read_csv(data_root() / "silicon_sample.csv")
    speculative = speculative_rows()
    out = []
    for r in d.to_dict("records"):
        disagg = r["mode"] == "disagg"
        p = "decode_" if disagg else ""
        prefill = None
        if disagg:
            prefill = tuple(
                _int(r[f"prefill_{c}"]) for c in ("tp_size", "attention_dp_size", "moe_ep_size", "moe_tp_size")
            ) + (_int(r["prefill_batch_size"]),)
        out.append(
            SiliconRow(
                id=str(r["id"]),
                engine=str(r["backend"]),
                model=str(r["model_path"]),
                system=str(r["system"]),
                precision=str(r["precision"]),
                mode=str(r["mode"]),
                isl=_int(r["isl"]),
                osl=_int(r["osl"]),
                batch=_int(r[f"{p}batch_size"]),
                tp=_int(r[f"{p}tp_size"]),
                attention_dp=_int(r[f"{p}attention_dp_size"]),
                moe_ep=_int(r[f"{p}moe_ep_size"]),
                moe_tp=_int(r[f"{p}moe_tp_size"]),
                prefill=prefill,
                ttft_s=_opt(r["silicon_ttft_ms"]),
                tpot_s=_opt(r["silicon_tpot_ms"]),
                concurrency=source_concurrency(r["silicon_data_source"]),
                workers=_workers(r) if disagg else None,
                release=row_release(r["backend_version"], r["silicon_data_source"]),
                speculative=speculative.get(str(r["id"]), "none"),
                radix_cache=not radix_cache_off(r),
                kv_cache="fp8" if kv_cache_fp8(r) else None,
                redundant_slots=redundant_slots(r),
            )
        )
    return tuple(out)
