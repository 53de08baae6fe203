"""``MoESpec``: the MoE part of a model's MoE layers, as pure data (``demos.zoo.models.spec``)."""

from __future__ import annotations

from dataclasses import dataclass

from demos.zoo.models._checks import ModelSpecError, check_bool, check_choice, check_int

__all__ = ["SCORING_FUNCS", "MoESpec"]

SCORING_FUNCS = ("softmax", "sigmoid", "sqrtsoftplus")


@dataclass(frozen=True)
class MoESpec:
    """The MoE part of every MoE layer.

    ``routed_experts`` gated experts of ``intermediate_size``, ``top_k`` of them per token, plus
    ``shared_experts`` always-on experts of the same size. Routing: ``scoring`` of the router logits,
    ``norm_topk_prob`` renormalizes the chosen weights, ``routed_scaling_factor`` scales them; experts are in
    ``n_group`` equal groups of which a token may use ``topk_group`` (1 and 1: no group limit).
    ``router_bias``: the router linear has a bias (gpt-oss); ``score_correction_bias``: a per-expert bias used
    only for selection (DeepSeek-V3's auxiliary-loss-free balancing); ``expert_bias``: expert projections
    carry biases (gpt-oss); ``hash_layers``: the first ``hash_layers`` MoE layers route each token by a
    fixed table of its token id instead of a gate (DeepSeek-V4's ``num_hash_layers``); ``latent_size``: the
    routed experts run at this width, not the hidden size (a latent MoE, Kimi-K3's
    ``routed_expert_hidden_size``): each MoE layer projects its normed input down to it before the dispatch
    (``routed_expert_down_proj``) and the combined output back up after the combine, through an RMSNorm
    (``routed_expert_norm``, ``routed_expert_up_proj``), so the all-to-all carries rows of this width; the
    router and the shared experts see the hidden width. None: the hidden size.
    """

    routed_experts: int
    top_k: int
    intermediate_size: int
    shared_experts: int = 0
    scoring: str = "softmax"
    norm_topk_prob: bool = True
    routed_scaling_factor: float = 1.0
    n_group: int = 1
    topk_group: int = 1
    router_bias: bool = False
    score_correction_bias: bool = False
    expert_bias: bool = False
    hash_layers: int = 0
    latent_size: int | None = None

    def __post_init__(self) -> None:
        check_int("MoESpec", "routed_experts", self.routed_experts, minimum=1)
        check_int("MoESpec", "top_k", self.top_k, minimum=1)
        if self.top_k > self.routed_experts:
            raise ModelSpecError(
                "MoESpec.top_k", f"must be <= routed_experts ({self.routed_experts}), got {self.top_k}"
            )
        check_int("MoESpec", "intermediate_size", self.intermediate_size, minimum=1)
        check_int("MoESpec", "shared_experts", self.shared_experts, minimum=0)
        check_choice("MoESpec", "scoring", self.scoring, SCORING_FUNCS)
        check_bool("MoESpec", "norm_topk_prob", self.norm_topk_prob)
        factor = self.routed_scaling_factor
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not factor > 0:
            raise ModelSpecError("MoESpec.routed_scaling_factor", f"must be a number > 0, got {factor!r}")
        check_int("MoESpec", "n_group", self.n_group, minimum=1)
        if self.routed_experts % self.n_group:
            raise ModelSpecError(
                "MoESpec.n_group", f"must divide routed_experts ({self.routed_experts}), got {self.n_group}"
            )
        check_int("MoESpec", "topk_group", self.topk_group, minimum=1)
        if self.topk_group > self.n_group:
            raise ModelSpecError("MoESpec.topk_group", f"must be <= n_group ({self.n_group}), got {self.topk_group}")
        reachable = self.topk_group * (self.routed_experts // self.n_group)
        if self.top_k > reachable:
            raise ModelSpecError(
                "MoESpec.top_k",
                f"must be <= the {reachable} experts of topk_group ({self.topk_group}) groups, got {self.top_k}",
            )
        for name in ("router_bias", "score_correction_bias", "expert_bias"):
            check_bool("MoESpec", name, getattr(self, name))
        check_int("MoESpec", "hash_layers", self.hash_layers, minimum=0)
        if self.latent_size is not None:
            check_int("MoESpec", "latent_size", self.latent_size, minimum=1)
