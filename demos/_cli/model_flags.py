"""The model, GPU and cluster flags that ``demos.overlap --model`` and ``demos.predict`` share.

``add_model_flags(parser)`` adds ``--model --weights --kv-cache-dtype --gpu --nodes --gpus-per-node --ep
--attention-tp --moe-tp --kernels --phase --context --imbalance --comm-sms --schedule --shrink``; ``workload_of(ns,
tokens=, ubatches=)`` builds the ``Workload`` from the parsed flags (``demos.zoo.loading.workload_for``, with
``--model`` loaded by ``load_model``). A ``ConfigError`` names its fields as the flags' names with
underscores; ``flag_of`` spells them as flags. This module is the command line's (the commands layer,
docs/design.md "Packages"): the library it calls is ``demos.zoo.loading``.
"""

from __future__ import annotations

import argparse

from demos._cli.values import int_list, token_count
from demos.zoo.hardware import GPUS
from demos.zoo.hardware.cluster import NETWORKS
from demos.zoo.kernel_times import KERNEL_SOURCES
from demos.zoo.loading import TOY, load_model, workload_for
from demos.zoo.models import ALIASES, PRESET_NAMES, ModelSpec
from demos.zoo.models.precision import KV_CACHE_DTYPES, WEIGHT_DTYPES
from demos.zoo.workload import IMBALANCE_MODELS, PHASES, WORKLOAD_SCHEDULES, Workload

__all__ = ["add_model_flags", "flag_of", "gpu_name", "int_list", "parse_imbalance", "workload_of"]


def flag_of(field: str) -> str:
    """The flag of a field named in a ConfigError (``gpus_per_node`` -> ``--gpus-per-node``)."""
    return "--" + field.replace("_", "-")


def parse_imbalance(text: str) -> float | str:
    """``--imbalance``: a number >= 1, ``auto`` or ``power-law`` (``demos.zoo.workload.IMBALANCE_MODELS``)."""
    word = text.strip().lower()
    if word in IMBALANCE_MODELS:
        return word
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number, 'auto' or 'power-law': {text!r}") from None


def gpu_name(text: str) -> str:
    """``--gpu``: a GPU name in any case (``H200``, ``GB200``), as the built-ins spell it."""
    return text.strip().lower()


def add_model_flags(parser: argparse.ArgumentParser, *, model_default: str | None, sweep: bool = False) -> None:
    """The shared flags (module docstring). ``model_default``: ``--model``'s default (None: required);
    ``sweep``: ``--comm-sms`` takes a list and there is no ``--shrink`` (``demos.predict``)."""
    a = parser.add_argument
    a(
        "--model",
        default=model_default,
        required=model_default is None,
        metavar="NAME|PATH",
        help=f"a preset ({', '.join((*PRESET_NAMES, *ALIASES))}) or a HuggingFace config.json of those families, "
        "or the snapshot folder holding one (a path that exists is always read as one)"
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
        type=gpu_name,
        choices=tuple(GPUS),
        help="GPU profile, in any case (datasheet figures, docs/clusters.md; default h100)",
    )
    a("--nodes", type=int, default=1, help="hosts in the cluster (default 1; one GB200 NVL72 rack is 18 of 4)")
    a(
        "--network",
        default="ib",
        choices=NETWORKS,
        help="the scale-out network between nodes: ib or roce (RDMA the GPU initiates: DeepEP on NVIDIA, MoRI on "
        "AMD), efa (AWS EFA through CPU proxies, UCCL-EP's tables) or efa-gda (EFA with GPU-initiated RDMA, DeepEP "
        "V2's tables); docs/clusters.md (default ib)",
    )
    a(
        "--gpus-per-node",
        type=int,
        default=None,
        help="GPUs per host, at most the GPU's server (default: the GPU's: 8, gb200 and gb300 4)",
    )
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
        "--moe-tp",
        type=int,
        default=1,
        metavar="N",
        help="MoE tensor parallelism: every routed expert on every GPU at 1/N of its width, over one attention TP "
        "group that is the whole EP group (N = --attention-tp = --ep; the engines' TP MoE: vLLM without "
        "--enable-expert-parallel, SGLang without --ep-size). Default 1: the experts sharded by EP",
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
        type=token_count,
        default=2048,
        help="decode: cached tokens per request; prefill: tokens per prompt (default 2048; k = 1024, "
        "M = 1024 x 1024: 4k = 4096)",
    )
    a(
        "--imbalance",
        type=parse_imbalance,
        default="auto",
        metavar="X|auto|power-law",
        help="busiest rank's expert load over the mean (1 = balanced, as EPLB aims for), or auto: the fluctuation "
        "of a balanced router's loads at each token count, 1 + sqrt(2 ln(ep) / (tokens x top-k)) (default auto), or "
        "power-law: the busiest rank under aiconfigurator's skewed routing (alpha 1.01)",
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


def workload_of(ns: argparse.Namespace, *, tokens: int, ubatches: int, spec: ModelSpec | None = None) -> Workload:
    """The ``Workload`` of the parsed flags at ``tokens`` per rank and ``ubatches`` (``spec``: the model
    already loaded, shrunk or not)."""
    return workload_for(
        load_model(ns.model) if spec is None else spec,
        gpu=ns.gpu,
        nodes=ns.nodes,
        gpus_per_node=ns.gpus_per_node,
        ep=ns.ep,
        network=getattr(ns, "network", "ib"),
        phase=ns.phase,
        context=ns.context,
        imbalance=ns.imbalance,
        comm_sms=ns.comm_sms if not isinstance(ns.comm_sms, tuple) else ns.comm_sms[0],
        schedule=ns.schedule,
        tokens=tokens,
        ubatches=ubatches,
        attention_tp=ns.attention_tp,
        moe_tp=getattr(ns, "moe_tp", 1),
        weights=getattr(ns, "weights", None),
        kv_cache_dtype=getattr(ns, "kv_cache_dtype", None),
    )
