"""The trunk every family reader builds around its attention and MoE (``demos.zoo.models.hf_config``): the
``ModelSpec`` of the config's common fields, its dense first layers and MTP modules where the family has them.
"""

from __future__ import annotations

from typing import Any

from demos.zoo.models.hf_config._fields import Fields
from demos.zoo.models.hf_config._quantization import read_precision
from demos.zoo.models.spec import ModelSpec, MoESpec, Precision


def trunk(
    f: Fields,
    name: str,
    source: str,
    attention: Any,
    moe: MoESpec,
    *,
    dense_first: bool,
    precision: Precision | None = None,
) -> ModelSpec:
    """The trunk around ``attention`` and ``moe``: every layer an MoE layer, or (``dense_first``) DeepSeek's
    ``first_k_dense_replace`` dense layers of ``intermediate_size`` first and its MTP modules beside. An
    ``fp8`` quantization covers every weight but gpt-oss's, which covers its experts only; ``precision``
    replaces what ``f`` gives (Kimi-K2.5's, read beside its ``text_config``)."""
    first_k = f.get_int("first_k_dense_replace") if dense_first else 0
    return ModelSpec(
        name=name,
        source=source,
        model_type=f.model_type,
        hidden_size=f.get_int("hidden_size"),
        num_layers=f.get_int("num_hidden_layers"),
        vocab_size=f.get_int("vocab_size"),
        first_k_dense=first_k,
        dense_intermediate_size=f.get_int("intermediate_size") if first_k else None,
        attention=attention,
        moe=moe,
        tie_embeddings=f.get_bool("tie_word_embeddings", False),
        precision=precision or read_precision(f, expert_only_quant=f.model_type == "gpt_oss"),
        mtp_layers=f.get_int("num_nextn_predict_layers", 0) if dense_first else 0,
    )
