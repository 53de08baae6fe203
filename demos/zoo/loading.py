"""Loading a real model and building its workload from values given by name: the library behind the
model, GPU and cluster flags of ``demos.overlap --model`` and ``demos.predict`` (their flags are
``demos._cli.model_flags``).

``load_model(text)`` turns a model name into a ``ModelSpec`` (a HuggingFace config.json, or the snapshot
folder holding one, where that path exists; else a preset name); ``workload_for(spec, gpu=, nodes=,
...)`` builds the ``Workload`` from keyword arguments named as the flags with underscores
(``demos.prediction.predict``), applying ``weights`` and ``kv_cache_dtype`` to the spec (``precise_spec``,
through ``demos.zoo.models.with_precision``); ``shrunk_spec`` makes the small spec of a real-math run.
Every bad value is a ``ConfigError`` whose fields are those names (the command line spells them as its
flags), rendered as one line.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from demos.errors import ConfigError, field_ref
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
    spec_from_config,
    with_precision,
)
from demos.zoo.workload import Workload, cluster_for

__all__ = [
    "TOY",
    "is_config_path",
    "load_model",
    "precise_spec",
    "shrunk_spec",
    "workload_for",
]

TOY = "toy"
"""``--model toy``: the toy MoE of ``demos.toy`` (the default of ``demos.overlap``)."""


def is_config_path(text: str) -> bool:
    """Whether a model name is read as a file rather than taken for a preset: a path that exists (a file,
    or a folder holding a config.json, as a HuggingFace snapshot is) always is, and so is one that looks
    like a path (ends in .json or holds a path separator) whether it exists or not."""
    return (
        os.path.exists(text)
        or text.endswith(".json")
        or os.sep in text
        or (os.altsep is not None and os.altsep in text)
    )


def _read_config(path: str | os.PathLike, name: str) -> ModelSpec:
    """The spec of the config.json at ``path``, or of the one in the folder ``path`` (a HuggingFace
    snapshot); ``name``: the model as given, for the errors."""
    if os.path.isdir(path):
        found = os.path.join(path, "config.json")
        if not os.path.isfile(found):
            also = ""
            try:
                get_preset(name)
                also = f" (the preset {name} is read where no file or folder of that name exists)"
            except UnknownPresetError:
                pass
            raise ConfigError(
                f"{field_ref('model')} {name}: a folder without a config.json (a HuggingFace snapshot folder "
                f"holds one){also}"
            )
        path = found
    return load_config(path)


def load_model(text: str | os.PathLike | ModelSpec) -> ModelSpec:
    """The ``ModelSpec`` ``text`` names: a config.json, or a folder holding one (a HuggingFace snapshot),
    where a file or folder of that name exists (a path-like object always is a path); else a HuggingFace id
    (``org/name``) whose config.json the measured extra holds a copy of; else a preset (``PRESET_NAMES``,
    ``ALIASES``); a ``ModelSpec`` passes through. Errors are ``ConfigError`` naming the
    field ``model`` and, for a file, the file and its field; a name that is neither an existing path nor a
    preset says both."""
    if isinstance(text, ModelSpec):
        return text
    if not isinstance(text, (str, os.PathLike)):
        raise ConfigError(
            f"{field_ref('model')} must be a preset name, a path to a config.json or a ModelSpec, got {text!r}"
        )
    try:
        if isinstance(text, os.PathLike) or os.path.exists(text):
            return _read_config(text, os.fspath(text))
        if _HF_ID.fullmatch(text):
            return _from_extra(text)
        return get_preset(text)
    except UnknownPresetError:
        known = ", ".join(sorted((*PRESET_NAMES, *ALIASES)))
        raise ConfigError(
            f"{field_ref('model')} {text}: no file or folder of that name exists, and no preset has that name "
            f"(presets: {known}; a HuggingFace id the measured extra holds a config.json of; or {TOY})"
        ) from None
    except (ModelConfigError, ModelSpecError) as e:
        raise ConfigError(f"{field_ref('model')}: {e}") from None


_HF_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")
"""A HuggingFace repository id, ``org/name`` (a name that is no existing path)."""


def _from_extra(repo_id: str) -> ModelSpec:
    """The spec of ``repo_id``'s config.json as the measured extra holds a copy of it
    (``demos.zoo.measured.model_config_path``), its source the repository's file and the copy read."""
    from demos.zoo import measured

    try:
        path = measured.model_config_path(repo_id)
    except measured.MeasuredTablesError:
        raise ConfigError(
            f"{field_ref('model')} {repo_id}: no file or folder of that name exists; a HuggingFace id is read "
            f"from the config.json copies of the measured extra, not installed: {measured.INSTALL_HINT}"
        ) from None
    if path is None:
        raise ConfigError(
            f"{field_ref('model')} {repo_id}: no file or folder of that name exists, and the measured extra "
            f"(aiconfigurator-core {measured.package_version()}) holds no copy of its config.json "
            f"({len(measured.model_config_ids())} repositories: python -c 'from demos.zoo.measured import "
            "model_config_ids; print(*model_config_ids(), sep=chr(10))')"
        )
    config = json.loads(path.read_text(encoding="utf-8"))
    source = (
        f"huggingface.co/{repo_id} config.json (the copy in aiconfigurator-core {measured.package_version()}: "
        f"model_configs/{path.name})"
    )
    return spec_from_config(config, source=source, name=repo_id)


def _int(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"{field_ref(name)} must be an int >= {low}, got {value!r}")
    return value


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
    moe_tp: int = 1,
    network: str = "ib",
    redundant_slots: int = 0,
) -> Workload:
    """The ``Workload`` of ``spec`` at the precision ``weights`` and ``kv_cache_dtype`` ask (``precise_spec``)
    with the other values given by name, checked in this order: the precision, the cluster, then tokens,
    context and ubatches, then the rest."""
    spec = precise_spec(spec, weights=weights, kv_cache_dtype=kv_cache_dtype)
    cluster = cluster_for(gpu, nodes, gpus_per_node, ep, network)
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
        moe_tp=moe_tp,
        redundant_slots=redundant_slots,
    )


def shrunk_spec(spec: ModelSpec, factor: int | None) -> ModelSpec:
    """``spec`` shrunk by ``factor`` (None or 1: as it is), keeping at least 8 routed experts."""
    if factor is None or factor == 1:
        return spec
    _int("shrink", factor, 1)
    return shrink(spec, factor, min_experts=min(8, spec.moe.routed_experts) if spec.moe is not None else 1)


def precise_spec(spec: ModelSpec, *, weights: str | None, kv_cache_dtype: str | None) -> ModelSpec:
    """``spec`` at ``weights`` and ``kv_cache_dtype`` (None: the config's), by ``with_precision``; a bad
    value is a ConfigError naming the field and listing the choices."""
    try:
        return with_precision(spec, weights=weights, kv_cache=kv_cache_dtype)
    except ModelSpecError as e:
        name = {"with_precision.weights": "weights", "with_precision.kv_cache": "kv_cache_dtype"}.get(e.field)
        if name is None:
            raise ConfigError(f"{field_ref('model')}: {e}") from None
        raise ConfigError(f"{field_ref(name)} {e.reason}") from None
