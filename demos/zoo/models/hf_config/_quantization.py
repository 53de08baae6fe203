"""The weight dtypes a config.json gives (``demos.zoo.models.hf_config``, "Precision"): ``torch_dtype`` (or
``dtype``) and ``quantization_config`` (fp8, mxfp4, compressed-tensors INT4, modelopt NVFP4), and the
communication and cache dtypes by rule.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping

from demos.zoo.models.hf_config._fields import Fields, show
from demos.zoo.models.spec import Precision, stored_apart

ACTIVATION_DTYPES = ("bfloat16", "float16", "float32")
DEFAULT_DTYPE = "bfloat16"  # when config.json has neither torch_dtype nor dtype (gpt-oss-120b)
QUANT_METHODS = ("fp8", "mxfp4", "compressed-tensors", "modelopt")
FP8_FORMATS = {"e4m3": "fp8_e4m3", "e5m2": "fp8_e5m2", "float8_e4m3fn": "fp8_e4m3", "float8_e5m2": "fp8_e5m2"}
"""``quantization_config.fmt`` -> the storage dtype (MiniMax spells the E4M3 format as torch names it)."""


def compressed_tensors(q: Fields) -> str:
    """The expert dtype of a compressed-tensors ``quantization_config``: one config group of symmetric 4-bit
    weights in groups of 32 with BF16 activations: INT4 (W4A16, Kimi-K2.5's ``pack-quantized`` experts) or
    MXFP4 (Kimi-K3's ``mxfp4-pack-quantized``, ``mxfp4_w4a16``: its activations stay BF16); or the field that
    holds anything else, named."""
    formats = ("pack-quantized", "mxfp4-pack-quantized")
    what = "a compressed-tensors format other than pack-quantized or mxfp4-pack-quantized"
    q.unsupported_unless("format", None, lambda v: v in formats, what)
    fmt = q.get_choice("format", formats)
    groups = q.get_object("config_groups")
    if len(groups) != 1:
        raise q.fail("config_groups", f"has {len(groups)} groups: only one (the routed experts) is supported")
    ((name, group),) = groups.items()
    g = q.nested(f"config_groups.{name}", group) if isinstance(group, Mapping) else None
    if g is None:
        raise q.fail(f"config_groups.{name}", f"must be an object, got {type(group).__name__} {show(group)}")
    g.unsupported_unless("input_activations", None, lambda v: v is None, "quantized activations")
    w = g.nested("weights", g.get_object("weights"))
    w.unsupported_unless("num_bits", None, lambda v: type(v) is int and v == 4, "a bit width other than 4")
    kind = "float" if fmt == "mxfp4-pack-quantized" else "int"  # MXFP4: E2M1 values, an E8M0 scale per 32
    w.unsupported_unless("type", None, lambda v: v == kind, f"a {fmt} weight type other than {kind}")
    w.unsupported_unless("strategy", None, lambda v: v == "group", "a strategy other than group")
    w.unsupported_unless("group_size", None, lambda v: type(v) is int and v == 32, "a group size other than 32")
    w.unsupported_unless("symmetric", True, lambda v: v is True, "asymmetric INT4 (a zero point per group)")
    return "mxfp4_w4a16" if kind == "float" else "int4_g32"


_PART_MODULES = {
    "mlp": ("mlp.down_proj", "mlp.shared_experts.down_proj", "mlp.shared_expert.down_proj"),
    "attention_out": ("self_attn.o_proj", "linear_attn.out_proj"),
}
"""``Precision`` part -> the module names (after ``layers.<i>.``) a checkpoint stores it in: a dense MLP, the
shared experts (DeepSeek's plural, Qwen's singular), attention's output projection (a Gated DeltaNet layer's
``out_proj``)."""

_PREFIXES = ("model.", "language_model.model.", "model.language_model.")
"""Where the layers sit in the families' checkpoints: plain, Kimi-K2.5's (a vision wrapper), Qwen3.5's."""


def modelopt_scope(ignore: tuple[str, ...], layers: int) -> frozenset[str]:
    """The ``Precision`` parts (``mlp``, ``attention_out``) a ModelOpt NVFP4 checkpoint quantizes beside its
    routed experts: those whose modules (``_PART_MODULES``, under any of ``_PREFIXES``) no ``ignore`` pattern
    (fnmatch globs, as ModelOpt writes them) matches in most of the trunk's ``layers`` layers. Most, not all:
    a checkpoint that keeps only its first layer whole in BF16 (nvidia/Kimi-K2.6-NVFP4's ``layers.0*``) still
    runs every other layer's o_proj in NVFP4, an approximation of one layer in sixty. A part a model does not
    have (MiniMax's shared experts) counts as quantized: nothing of it is stored."""
    if not ignore:
        return frozenset(_PART_MODULES)
    pattern = re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in ignore))

    def ignored(i: int, modules: tuple[str, ...]) -> bool:
        return any(pattern.match(f"{prefix}layers.{i}.{m}") for prefix in _PREFIXES for m in modules)

    return frozenset(
        part for part, modules in _PART_MODULES.items() if 2 * sum(ignored(i, modules) for i in range(layers)) < layers
    )


def read_precision(f: Fields, *, expert_only_quant: bool, quant: Fields | None = None) -> Precision:
    """Weight dtypes from torch_dtype (or dtype, default bfloat16) and quantization_config; the rest by rule.

    ``expert_only_quant``: an ``fp8`` quantization covers the routed experts only (gpt-oss keeps attention,
    router, embeddings and head in the activation dtype); the 4-bit formats always do. ``quant``: the
    fields holding ``quantization_config`` when they are not these (Kimi-K2.5's NVFP4 configs hold it at
    the top level, beside ``text_config``).
    """
    field = "dtype" if f.has("dtype") and not f.has("torch_dtype") else "torch_dtype"
    act = f.get_choice(field, ACTIVATION_DTYPES, DEFAULT_DTYPE)
    weights = experts = act
    scope: frozenset[str] = frozenset()
    where = f if quant is None else quant
    config = where.get_object("quantization_config", None)
    if config is not None:
        q = where.nested("quantization_config", config)
        method = q.get_choice("quant_method", QUANT_METHODS)
        if method == "fp8":
            experts = FP8_FORMATS[q.get_choice("fmt", tuple(FP8_FORMATS), "e4m3")]
            weights = act if expert_only_quant else experts
        elif method == "mxfp4":
            experts = "mxfp4"
        elif method == "compressed-tensors":
            experts = compressed_tensors(q)
        else:
            q.unsupported_unless("quant_algo", None, lambda v: v == "NVFP4", "a modelopt algorithm other than NVFP4")
            experts = "nvfp4"
            ignore = q.get_str_list("ignore") if q.has("ignore") else ()
            scope = modelopt_scope(ignore, f.get_int("num_hidden_layers")) if ignore else frozenset()
    dispatch = experts if experts.startswith("fp8") else act
    parts = stored_apart(scope, experts)
    return Precision(weights=weights, experts=experts, dispatch=dispatch, combine=act, kv_cache=act, **parts)
