"""Both engines' lines and their notes (``serve_lines`` -> ``EngineLines``; the package docstring), and
what selects each overlap strategy in each engine for the model (``overlap_flags``)."""

from __future__ import annotations

from dataclasses import dataclass

from demos.prediction.engines._atom import atom_command
from demos.prediction.engines._carry import model_flags
from demos.prediction.engines._deployment import Deployment
from demos.prediction.engines._releases import ATOM_VERSION, SGLANG_MEGAMOE_MODEL_TYPES, VLLM_MEGAMOE_MODEL_TYPES
from demos.prediction.engines._sglang import sglang_command, sglang_refusal
from demos.prediction.engines._shared import HEAD_IP, MODEL, PORT
from demos.prediction.engines._vllm import vllm_command, vllm_refusal
from demos.vocabulary import Overlap


@dataclass(frozen=True)
class EngineLines:
    """``vllm`` and ``sglang``: the command line(s) for each engine, or a ``#`` line saying why the
    engine cannot run the cluster as predicted; the pinned versions they were checked against;
    ``notes``: each placeholder in the lines explained, then what each engine does with the setting; ``atom``
    and ``atom_version``: AMD's engine's line on AMD GPUs ("" on NVIDIA's)."""

    vllm: str
    sglang: str
    vllm_version: str
    sglang_version: str
    notes: tuple[str, ...]
    atom: str = ""
    atom_version: str = ""


def overlap_flags(deployment: Deployment) -> dict[str, str]:
    """What selects each overlap strategy in each engine, one line per strategy (``dbo``, ``sbo``, ``fused``), for
    the model's architecture (``VLLM_DBO_REFUSED_MODEL_TYPES``, ``SGLANG_TBO_MODEL_TYPES``, ``SGLANG_SBO_MODEL_TYPES``,
    ``SGLANG_MEGAMOE_MODEL_TYPES``, ``VLLM_MEGAMOE_MODEL_TYPES``)."""
    d, sg = deployment, f"SGLang {deployment.engines.sglang}"
    tbo = "SGLang --enable-two-batch-overlap"
    sbo = "SGLang --enable-single-batch-overlap (with --moe-a2a-backend deepep)"
    if sglang_refusal(d, Overlap.DBO):
        tbo = f"{sg} has no two-batch overlap for {d.served.model_type}"
    if sglang_refusal(d, Overlap.SBO):
        sbo = f"{sg} has no single-batch overlap for {d.served.model_type}"
    dbo = "vLLM --enable-dbo with the threshold below"
    if vllm_refusal(d, Overlap.DBO):
        dbo = f"vLLM {d.engines.vllm} refuses DBO for {d.served.model_type}"
    elif d.vendor == "amd" or d.network == "efa-gda":  # the backend its lines run is not one DBO takes
        backend = "mori" if d.vendor == "amd" else "deepep_v2"
        dbo = f"vLLM {d.engines.vllm} runs DBO over DeepEP V1's or NIXL-EP's backends only, not {backend}"
    if d.network == "efa-gda":
        tbo = f"{sg} has no two-batch overlap with --moe-a2a-backend deepep_v2"
    if d.vendor == "amd":
        a = f"ATOM {ATOM_VERSION}"
        return {
            "dbo": f"{dbo}; {tbo}; {a} --enable-tbo (prefill) or --enable-tbo all (decode too)",
            "sbo": f"SGLang's single-batch overlap hooks DeepEP's combine, not MoRI's; vLLM and {a} have none",
            "fused": "DeepGEMM's fused MoE kernel runs on NVIDIA GPUs only",
        }
    mt = d.served.model_type
    fused = "SGLang --moe-a2a-backend megamoe (without --enable-two-batch-overlap)"
    if mt is not None and mt not in SGLANG_MEGAMOE_MODEL_TYPES:
        fused = f"{sg} has no fused MoE kernel for {mt}"
    v_fused = "vLLM --moe-backend deep_gemm_mega_moe (SM100 GPUs; without --enable-dbo)"
    if mt is not None and mt not in VLLM_MEGAMOE_MODEL_TYPES:
        v_fused = f"vLLM {d.engines.vllm} has no fused MoE kernel for {mt}"
    return {
        "dbo": f"{dbo}; {tbo}",
        "sbo": f"{sbo}; vLLM has no single-batch overlap",
        "fused": f"{fused}; {v_fused}",
    }


def serve_lines(
    deployment: Deployment,
    overlap: Overlap | str,
    threshold: int | None,
    *,
    vllm: tuple[Overlap | str, int | None] | None = None,
) -> EngineLines:
    """Both engines' lines for ``deployment`` (the package docstring) with ``overlap`` none, dbo (vLLM's DBO,
    SGLang's two-batch overlap) or sbo (SGLang's single-batch overlap) on; ``threshold``: tokens per
    attention TP group from which DBO pays (None: the engine's default). ``vllm``: vLLM's own
    ``(overlap, threshold)`` where its answer differs from SGLang's (a serving run of vLLM's rule decided
    it: ``demos.prediction.workload``); None: the same as SGLang's."""
    if not isinstance(deployment, Deployment):
        raise ValueError(f"deployment must be a Deployment, got {deployment!r}")
    overlap = Overlap.parse(overlap, "overlap")
    v_overlap, v_threshold = (overlap, threshold) if vllm is None else (Overlap.parse(vllm[0], "overlap"), vllm[1])
    for t in (threshold, v_threshold):
        if t is not None and (isinstance(t, bool) or not isinstance(t, int) or t < 1):
            raise ValueError(f"threshold must be a positive integer or None, got {t!r}")
    first: list[str] = []  # the model's notes, then the placeholders', then each engine's
    model, flags = model_flags(deployment, first)
    if model == MODEL and not any(n.startswith(MODEL) for n in first):
        first.insert(
            0,
            f"{MODEL}: fill in the model: a folder holding its config.json and its weights (the same path on "
            "every node), or its Hugging Face repo id",
        )
    notes: list[str] = []
    vllm_line = vllm_command(model, flags["vllm"], deployment, v_overlap, v_threshold, notes)
    sglang = sglang_command(model, flags["sglang"], deployment, overlap, threshold, notes)
    atom = atom_command(model, deployment, overlap, notes)
    head = [
        f"{HEAD_IP}: the address of the head node (node 0), reachable from every node",
        f"{PORT}: a free TCP port on the head node, the same on every node (vLLM: its data-parallel RPC port; "
        "SGLang: its distributed init port)",
    ]
    notes[0:0] = first + [n for n in head if n.split(":")[0] in vllm_line + sglang]
    e = deployment.engines
    return EngineLines(vllm_line, sglang, e.vllm, e.sglang, tuple(notes), atom, ATOM_VERSION if atom else "")
