"""The model, GPU and cluster flags that ``demos.overlap --model`` and ``demos.predict`` share.

``add_model_flags(parser)`` adds ``--model --weights --kv-cache-dtype --gpu --nodes --gpus-per-node --ep
--attention-tp --phase --context --imbalance --comm-sms --schedule --shrink``; ``load_model(text)`` turns
``--model`` into a ``ModelSpec`` (a preset name, or a HuggingFace config.json path); ``workload_of(ns,
tokens=, ubatches=)`` builds the ``Workload`` from the parsed flags, ``workload_for(spec, gpu=, nodes=, ...)``
from keyword arguments of the same names (``demos.prediction.predict``); both apply ``--weights`` and
``--kv-cache-dtype`` (``weights``, ``kv_cache_dtype``) to the spec (``precise_spec``, through
``demos.zoo.models.with_precision``). Every bad value is a ``ConfigError`` whose fields are the flags' names
with underscores (``flag_of`` spells them as flags), rendered as one line.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from demos.errors import ConfigError, field_ref
from demos.zoo.hardware import GPUS
from demos.zoo.kernel_times import KERNEL_SOURCES
from demos.zoo.models import (
    ALIASES,
    PRESET_NAMES,
    ModelConfigError,
    ModelSpec,
    ModelSpecError,
    UnknownPresetError,
    get_preset,
    load_config,
    shrink,
    with_precision,
)
from demos.zoo.models.precision import KV_CACHE_DTYPES, WEIGHT_DTYPES
from demos.zoo.workload import PHASES, WORKLOAD_SCHEDULES, Workload, cluster_for

__all__ = [
    "TOY",
    "add_model_flags",
    "flag_of",
    "int_list",
    "is_config_path",
    "load_model",
    "parse_imbalance",
    "precise_spec",
    "shrunk_spec",
    "workload_for",
    "workload_of",
]

TOY = "toy"
"""``--model toy``: the toy MoE of ``demos.toy`` (the default of ``demos.overlap``)."""


def flag_of(field: str) -> str:
    """The flag of a field named in a ConfigError (``gpus_per_node`` -> ``--gpus-per-node``)."""
    return "--" + field.replace("_", "-")


def is_config_path(text: str) -> bool:
    """Whether ``--model`` names a file (ends in .json or holds a path separator) rather than a preset."""
    return text.endswith(".json") or os.sep in text or (os.altsep is not None and os.altsep in text)


def load_model(text: str | os.PathLike | ModelSpec) -> ModelSpec:
    """The ``ModelSpec`` ``--model`` names: a preset (``PRESET_NAMES``, ``ALIASES``) or a config.json
    (a path-like object always is one); a ``ModelSpec`` passes through. Errors are ``ConfigError`` naming
    ``--model`` and, for a file, the file and its field."""
    if isinstance(text, ModelSpec):
        return text
    if not isinstance(text, (str, os.PathLike)):
        raise ConfigError(
            f"{field_ref('model')} must be a preset name, a path to a config.json or a ModelSpec, got {text!r}"
        )
    try:
        if isinstance(text, os.PathLike) or is_config_path(text):
            return load_config(text)
        return get_preset(text)
    except UnknownPresetError as e:
        raise ConfigError(f"{field_ref('model')}: {e}; or {TOY}, or a path to a config.json") from None
    except (ModelConfigError, ModelSpecError) as e:
        raise ConfigError(f"{field_ref('model')}: {e}") from None


def parse_imbalance(text: str) -> float | str:
    """``--imbalance``: a number >= 1, or ``auto``."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number or 'auto': {text!r}") from None


def int_list(text: str) -> tuple[int, ...]:
    """A comma-separated list of ints (``8,16,32``)."""
    try:
        out = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of ints: {text!r}") from None
    if not out:
        raise argparse.ArgumentTypeError(f"an empty list: {text!r}")
    return out


def add_model_flags(parser: argparse.ArgumentParser, *, model_default: str | None, sweep: bool = False) -> None:
    """The shared flags (module docstring). ``model_default``: ``--model``'s default (None: required);
    ``sweep``: ``--comm-sms`` takes a list and there is no ``--shrink`` (``demos.predict``)."""
    a = parser.add_argument
    a(
        "--model",
        default=model_default,
        required=model_default is None,
        metavar="NAME|PATH",
        help=f"a preset ({', '.join((*PRESET_NAMES, *ALIASES))}) or a HuggingFace config.json of those families"
        + (f"; {TOY}: the toy MoE (default)" if model_default == TOY else ""),
    )
    a(
        "--weights",
        default=None,
        choices=tuple(WEIGHT_DTYPES),
        help="run the weights at this precision instead of the config's: bf16, fp8 (E4M3, every weight) or fp4 "
        "(the routed experts in a 4-bit block format, MXFP4's bytes; the rest in the activation dtype) (default: the "
        "config's)",
    )
    a(
        "--kv-cache-dtype",
        default=None,
        choices=tuple(KV_CACHE_DTYPES),
        help="the KV cache's precision instead of the config's activation dtype: bf16 or fp8 (E4M3)",
    )
    a(
        "--gpu",
        default="h100",
        choices=tuple(GPUS),
        help="GPU profile (datasheet figures, docs/clusters.md; default h100)",
    )
    a("--nodes", type=int, default=1, help="nodes in the cluster (default 1)")
    a("--gpus-per-node", type=int, default=None, help="GPUs per node (default: the GPU's: 8, gb200 4)")
    a(
        "--ep",
        type=int,
        default=None,
        help="expert-parallel degree: ranks the routed experts are sharded over (default: every GPU of the cluster)",
    )
    a(
        "--attention-tp",
        type=int,
        default=1,
        metavar="N",
        help="attention tensor parallelism: N GPUs of one NVLink domain run attention together on their group's "
        "--tokens, each with heads/N heads, and each runs the MoE on its 1/N of them (vLLM -tp N with "
        "--enable-expert-parallel; docs/clusters.md). Default 1: data-parallel attention",
    )
    a(
        "--kernels",
        choices=KERNEL_SOURCES,
        default="roofline",
        help="where kernel times come from: roofline (curves fitted per GPU family to measured tables, the "
        "default) or measured (the tables themselves where they have the shape; needs pip install -e "
        "'.[measured]'; docs/kernels.md)",
    )
    a(
        "--phase",
        default="decode",
        choices=PHASES,
        help="decode (one new token per request) or prefill (default decode)",
    )
    a(
        "--context",
        type=int,
        default=2048,
        help="decode: cached tokens per request; prefill: tokens per prompt (default 2048)",
    )
    a(
        "--imbalance",
        type=parse_imbalance,
        default="auto",
        metavar="X|auto",
        help="busiest rank's expert load over the mean (1 = balanced, as EPLB aims for), or auto: the fluctuation "
        "of a balanced router's loads at each token count, 1 + sqrt(2 ln(ep) / (tokens x top-k)) (default auto)",
    )
    a(
        "--comm-sms",
        type=int_list if sweep else int,
        default=None,
        metavar="N,..." if sweep else "N",
        help="SMs DeepEP's normal (ht) kernels take from compute while they run (default 20; ll takes none)"
        + ("; a list sweeps them" if sweep else ""),
    )
    a(
        "--schedule",
        default=None,
        choices=WORKLOAD_SCHEDULES,
        help="ll = DeepEP low-latency kernels, ht = normal kernels (default: ll for decode, ht for prefill)",
    )
    if sweep:
        return
    a(
        "--shrink",
        type=int,
        default=None,
        metavar="F",
        help="divide the widths and the expert count by F and do the real math (threads and inline; default 32 "
        "there, none on virtual)",
    )


def _int(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"{field_ref(name)} must be an int >= {low}, got {value!r}")
    return value


def workload_of(ns: argparse.Namespace, *, tokens: int, ubatches: int, spec: ModelSpec | None = None) -> Workload:
    """The ``Workload`` of the parsed flags at ``tokens`` per rank and ``ubatches`` (``spec``: the model
    already loaded, shrunk or not)."""
    return workload_for(
        load_model(ns.model) if spec is None else spec,
        gpu=ns.gpu,
        nodes=ns.nodes,
        gpus_per_node=ns.gpus_per_node,
        ep=ns.ep,
        phase=ns.phase,
        context=ns.context,
        imbalance=ns.imbalance,
        comm_sms=ns.comm_sms if not isinstance(ns.comm_sms, tuple) else ns.comm_sms[0],
        schedule=ns.schedule,
        tokens=tokens,
        ubatches=ubatches,
        attention_tp=ns.attention_tp,
        weights=getattr(ns, "weights", None),
        kv_cache_dtype=getattr(ns, "kv_cache_dtype", None),
    )


def workload_for(
    spec: ModelSpec,
    *,
    gpu: Any,
    nodes: int,
    gpus_per_node: int | None,
    ep: int | None,
    phase: str,
    context: int,
    imbalance: float | str,
    comm_sms: int | None,
    schedule: str | None,
    tokens: int,
    ubatches: int,
    attention_tp: int = 1,
    weights: str | None = None,
    kv_cache_dtype: str | None = None,
) -> Workload:
    """The ``Workload`` of ``spec`` at the precision ``weights`` and ``kv_cache_dtype`` ask (``precise_spec``)
    with the flags' values given by name (``workload_of``'s checks, in its order: the precision, the cluster,
    then tokens, context and ubatches, then the rest)."""
    spec = precise_spec(spec, weights=weights, kv_cache_dtype=kv_cache_dtype)
    cluster = cluster_for(gpu, nodes, gpus_per_node, ep)
    return Workload(
        spec,
        cluster,
        phase=phase,
        tokens=_int("tokens", tokens, 1),
        context=_int("context", context, 1),
        schedule=schedule,
        ubatches=_int("ubatches", ubatches, 1),
        imbalance=imbalance,
        comm_sms=comm_sms,
        attention_tp=attention_tp,
    )


def shrunk_spec(spec: ModelSpec, factor: int | None) -> ModelSpec:
    """``spec`` shrunk by ``factor`` (None or 1: as it is), keeping at least 8 routed experts."""
    if factor is None or factor == 1:
        return spec
    _int("shrink", factor, 1)
    return shrink(spec, factor, min_experts=min(8, spec.moe.routed_experts) if spec.moe is not None else 1)


def precise_spec(spec: ModelSpec, *, weights: str | None, kv_cache_dtype: str | None) -> ModelSpec:
    """``spec`` at ``--weights`` and ``--kv-cache-dtype`` (None: the config's), by ``with_precision``; a bad
    value is a ConfigError naming the flag and listing the choices."""
    try:
        return with_precision(spec, weights=weights, kv_cache=kv_cache_dtype)
    except ModelSpecError as e:
        name = {"with_precision.weights": "weights", "with_precision.kv_cache": "kv_cache_dtype"}.get(e.field)
        if name is None:
            raise ConfigError(f"{field_ref('model')}: {e}") from None
        raise ConfigError(f"{field_ref(name)} {e.reason}") from None
