"""The engine lines carry what the prediction assumed (``demos.prediction.engines``, issue 47): the
checkpoint at the predicted weights (or the engine's quantization, or a placeholder with what to convert),
the KV cache dtype, the request cap and the memory share at the memory model's limit, the expert-load
balancing of redundant slots and of a given imbalance, and no overlap the pinned SGLang cannot run for the
model's architecture; every flag still one of the pinned releases'."""

from __future__ import annotations

import itertools
import json
import math
import shlex

import pytest

from demos.prediction import predict
from demos.prediction.engines import (
    EPLB_MODEL_TYPES,
    SGLANG_FLAGS,
    SGLANG_SBO_MODEL_TYPES,
    SGLANG_TBO_MODEL_TYPES,
    VLLM_DBO_REFUSED_MODEL_TYPES,
    VLLM_FLAGS,
    Deployment,
    ExpertBalance,
    ServedModel,
    overlap_flags,
    serve_lines,
)
from demos.zoo.memory import ServingLimit, ServingLimits
from demos.zoo.models import ALIASES, PRESET_NAMES, checkpoints, get_preset, weights_name
from demos.zoo.models.presets import preset_config
from tests.prediction.test_engines import commands, unknown_flags, value

QWEN = {"bf16": "Qwen/Qwen3-235B-A22B", "fp8": "Qwen/Qwen3-235B-A22B-FP8", "fp4": "nvidia/Qwen3-235B-A22B-NVFP4"}
LIMITS = ServingLimits(ServingLimit(510, 0.87654), ServingLimit(500, 0.8712))


def _lines(
    *,
    served=ServedModel(),
    limits=None,
    experts=ExpertBalance(),
    model="org/m",
    nodes=2,
    tp=1,
    phase="decode",
    overlap="dbo",
    threshold=64,
):
    world = nodes * 8
    d = Deployment(model, world, world, 8, nodes, tp, phase, "ll", served=served, limits=limits, experts=experts)
    return serve_lines(d, overlap, threshold)


def _flags(line: str) -> dict[str, str | None]:
    """A command line's flags and their values (None for a switch), read as the shell would."""
    tokens = shlex.split(line)
    out: dict[str, str | None] = {}
    for i, t in enumerate(tokens):
        if t.startswith("--"):
            nxt = tokens[i + 1] if i + 1 < len(tokens) else None
            out[t] = None if nxt is None or nxt.startswith("--") else nxt
    return out


def _every_command(r) -> list[str]:
    return commands(r.vllm) + commands(r.sglang)


def test_the_checkpoint_at_the_predicted_weights_is_served():
    r = _lines(served=ServedModel("fp8", "bf16", "bf16", tuple(QWEN.items()), "qwen3_moe"), model=QWEN["bf16"])
    assert [shlex.split(line)[2] for line in commands(r.vllm)] == [QWEN["fp8"]] * 2  # vllm serve MODEL
    assert [_flags(line)["--model-path"] for line in commands(r.sglang)] == [QWEN["fp8"]]
    assert not any("--quantization" in line for line in _every_command(r))
    assert any(n.startswith(QWEN["fp8"] + ": the FP8 checkpoint") for n in r.notes)
    fp4 = _lines(served=ServedModel("fp4", "bf16", "bf16", tuple(QWEN.items()), "qwen3_moe"), model=QWEN["bf16"])
    assert all(f" {QWEN['fp4']} " in line for line in _every_command(fp4))


def test_fp8_without_an_fp8_checkpoint_is_the_engines_quantization_said_in_the_notes():
    r = _lines(served=ServedModel("fp8", "bf16", model_type="mixtral"), model="mistralai/Mixtral-8x7B-v0.1")
    for line in _every_command(r):
        assert _flags(line)["--quantization"] == "fp8" and " mistralai/Mixtral-8x7B-v0.1 " in line
    assert any(n.startswith("--quantization fp8 (both engines)") for n in r.notes)
    same = _lines(served=ServedModel("bf16", "bf16"), model="mistralai/Mixtral-8x7B-v0.1")
    assert not any("--quantization" in line for line in _every_command(same))


@pytest.mark.parametrize("pred, native, word", [("fp4", "bf16", "quantize it"), ("bf16", "fp8", "convert it")])
def test_weights_no_checkpoint_or_flag_gives_are_a_placeholder_saying_what_to_convert(pred, native, word):
    r = _lines(served=ServedModel(pred, native), model="deepseek-ai/DeepSeek-V3")
    assert all(" <MODEL> " in line and "--quantization" not in line for line in _every_command(r))
    note = next(n for n in r.notes if n.startswith("<MODEL>:"))
    assert f"(--weights {pred})" in note and word in note and "deepseek-ai/DeepSeek-V3" not in r.vllm


def test_the_kv_cache_dtype_is_each_engines_spelling_of_fp8():
    r = _lines(served=ServedModel(kv_cache="fp8"))
    assert all(_flags(line)["--kv-cache-dtype"] == "fp8" for line in commands(r.vllm))
    assert all(_flags(line)["--kv-cache-dtype"] == "fp8_e4m3" for line in commands(r.sglang))
    assert not any("--kv-cache-dtype" in line for line in _every_command(_lines()))


@pytest.mark.parametrize("overlap, tp", [("dbo", 1), ("none", 1), ("dbo", 8), ("sbo", 1)])
def test_the_request_cap_and_memory_share_are_the_limit_of_the_step_each_line_runs(overlap, tp):
    """vLLM's cap is per data-parallel rank (one attention group), SGLang's over all groups; each is the
    limit of the step that line runs: DBO's where the line enables DBO, the plain step's elsewhere."""
    r = _lines(limits=LIMITS, tp=tp, overlap=overlap)
    groups = 16 // tp
    v_dbo = overlap == "dbo"
    s_dbo = overlap == "dbo" and groups > 1
    for line in commands(r.vllm):
        f = _flags(line)
        assert f["--max-num-seqs"] == str(LIMITS.of(v_dbo).tokens) and f["--gpu-memory-utilization"] == "0.9"
    for line in commands(r.sglang):
        f = _flags(line)
        assert f["--max-running-requests"] == str(LIMITS.of(s_dbo).tokens * groups)
        assert f["--mem-fraction-static"] == f"{math.floor(LIMITS.of(s_dbo).static_fraction * 1000) / 1000:.3f}"
    assert sum("at the memory model's limit" in n for n in r.notes) == 2


def test_prefill_lines_take_the_memory_share_but_no_request_cap():
    r = _lines(limits=LIMITS, phase="prefill")
    assert not any("--max-num-seqs" in x or "--max-running-requests" in x for x in _every_command(r))
    assert all("--gpu-memory-utilization" in x for x in commands(r.vllm))
    assert all("--mem-fraction-static" in x for x in commands(r.sglang))
    assert not any("--gpu-memory-utilization" in x for x in _every_command(_lines(phase="prefill")))


def test_redundant_slots_and_a_given_imbalance_turn_on_each_engines_expert_balancing():
    r = _lines(experts=ExpertBalance(32, None), served=ServedModel(model_type="deepseek_v3"))
    for line in commands(r.vllm):
        f = _flags(line)
        assert "--enable-eplb" in f and json.loads(f["--eplb-config"]) == {"num_redundant_experts": 32}
    for line in commands(r.sglang):
        f = _flags(line)
        assert f["--ep-num-redundant-experts"] == "32" and "--enable-eplb" in f
    given = _lines(experts=ExpertBalance(0, 1.3))
    for line in _every_command(given):
        f = _flags(line)
        assert "--enable-eplb" in f and "--eplb-config" not in f and "--ep-num-redundant-experts" not in f
    assert sum("--imbalance 1.3" in n for n in given.notes) == 2
    assert not any("eplb" in line for line in _every_command(_lines()))


@pytest.mark.parametrize(
    "engine, model_type", [("vllm", "gpt_oss"), ("sglang", "mixtral"), ("vllm", "kimi_k25"), ("vllm", "minimax_m2")]
)
def test_an_engine_that_balances_no_expert_of_the_architecture_gets_a_note_not_a_flag(engine, model_type):
    assert model_type not in EPLB_MODEL_TYPES[engine]
    r = _lines(experts=ExpertBalance(16, 1.2), served=ServedModel(model_type=model_type))
    other = "sglang" if engine == "vllm" else "vllm"
    assert not any("eplb" in line or "redundant" in line for line in commands(getattr(r, engine)))
    assert all("--enable-eplb" in line for line in commands(getattr(r, other)))
    assert any(f"no expert-load balancing for {model_type}" in n for n in r.notes)


@pytest.mark.parametrize(
    "model_type", ["glm4_moe", "gpt_oss", "mixtral", "qwen3_moe", "deepseek_v3", "kimi_k25", "minimax_m2"]
)
@pytest.mark.parametrize("overlap", ["dbo", "sbo"])
def test_sglang_prints_no_overlap_it_cannot_run_for_the_architecture(model_type, overlap):
    r = _lines(served=ServedModel(model_type=model_type), overlap=overlap)
    runs = model_type in (SGLANG_TBO_MODEL_TYPES if overlap == "dbo" else SGLANG_SBO_MODEL_TYPES)
    flag = "--enable-two-batch-overlap" if overlap == "dbo" else "--enable-single-batch-overlap"
    assert all((flag in line) == runs for line in commands(r.sglang))
    assert r.sglang.startswith(f"# SGLang 0.5.23 runs {'two' if overlap == 'dbo' else 'single'}-batch") != runs
    if overlap == "dbo" and model_type not in VLLM_DBO_REFUSED_MODEL_TYPES:
        assert all("--enable-dbo" in line for line in commands(r.vllm))  # vLLM's DBO is not the model's to refuse
    says = overlap_flags(Deployment("m", 16, 16, 8, 2, 1, "decode", "ll", served=ServedModel(model_type=model_type)))
    assert (f"has no {'two' if overlap == 'dbo' else 'single'}-batch overlap for {model_type}" in says[overlap]) != runs


def test_vllm_refuses_dbo_for_a_multimodal_model_and_says_so():
    """Kimi-K2.5's vision tower makes vLLM 0.34.0 treat it as multimodal, for which it refuses DBO: the line
    runs without it under a # line saying why (and sizes its memory for the step without DBO)."""
    r = _lines(served=ServedModel(model_type="kimi_k25"), limits=LIMITS)
    assert r.vllm.startswith("# vLLM 0.34.0 refuses DBO for kimi_k25, multimodal")
    assert not any("--enable-dbo" in line or "--dbo-" in line for line in commands(r.vllm))
    assert all(value(line, "--max-num-seqs") == str(LIMITS.without_dbo.tokens) for line in commands(r.vllm))
    assert all("--enable-two-batch-overlap" in line for line in commands(r.sglang))
    says = overlap_flags(Deployment("m", 16, 16, 8, 2, 1, "decode", "ll", served=ServedModel(model_type="kimi_k25")))
    assert says["dbo"] == "vLLM 0.34.0 refuses DBO for kimi_k25; SGLang --enable-two-batch-overlap"
    assert "refuses" not in _lines(served=ServedModel(model_type="kimi_k25"), overlap="none").vllm


def test_kimi_k2_5_serves_its_int4_checkpoint_and_nvidias_nvfp4_at_fp4():
    """Kimi-K2.5 ships INT4 experts (moonshotai/Kimi-K2.5); --weights fp4 serves NVIDIA's NVFP4 checkpoint."""
    own = predict("kimi-k2.5", gpu="b200", nodes=2, ep=16, tokens=[64]).recommendation
    assert all(shlex.split(line)[2] == "moonshotai/Kimi-K2.5" for line in commands(own.vllm))
    assert all(_flags(line)["--model-path"] == "moonshotai/Kimi-K2.5" for line in commands(own.sglang))
    fp4 = predict("kimi-k2.5", gpu="b200", nodes=2, ep=16, weights="fp4", tokens=[64]).recommendation
    assert all(_flags(line)["--model-path"] == "nvidia/Kimi-K2.5-NVFP4" for line in commands(fp4.sglang))


def test_every_flag_is_the_pinned_releases_and_every_line_parses_in_the_shell():
    served = [
        ServedModel(),
        ServedModel("fp8", "bf16", "fp8", tuple(QWEN.items()), "qwen3_moe"),
        ServedModel("fp8", "bf16", "fp8", (), "mixtral"),
        ServedModel("fp4", "fp8", "bf16", (), "gpt_oss"),
    ]
    grid = itertools.product(
        served,
        (None, LIMITS),
        (ExpertBalance(), ExpertBalance(32, 1.5)),
        (1, 9),
        (1, 8),
        ("decode", "prefill"),
        ("none", "dbo", "sbo"),
    )
    for sv, lim, ex, nodes, tp, phase, overlap in grid:
        r = _lines(served=sv, limits=lim, experts=ex, nodes=nodes, tp=tp, phase=phase, overlap=overlap)
        assert unknown_flags(r.vllm, VLLM_FLAGS) == [] and unknown_flags(r.sglang, SGLANG_FLAGS) == []
        for line in _every_command(r):
            tokens = shlex.split(line)
            assert len(set(t for t in tokens if t.startswith("--"))) == sum(t.startswith("--") for t in tokens), line
        used = {p for p in ("<MODEL>", "<HEAD_IP>", "<PORT>") if p in r.vllm + r.sglang}
        assert used <= {n.split(":")[0] for n in r.notes}


def test_bad_carried_fields_are_refused_naming_them():
    for bad, field in (
        (dict(weights="int8"), "served.weights"),
        (dict(kv_cache="fp4"), "served.kv_cache"),
        (dict(checkpoints=(("int8", "x/y"),)), "served.checkpoints"),
    ):
        with pytest.raises(ValueError, match=field):
            ServedModel(**bad)
    with pytest.raises(ValueError, match="experts.redundant"):
        ExpertBalance(-1)
    with pytest.raises(ValueError, match="experts.imbalance"):
        ExpertBalance(0, 0.5)
    with pytest.raises(ValueError, match="limits must be ServingLimits"):
        Deployment("m", 8, 8, 8, 1, 1, "decode", "ll", limits=(1, 2))
    assert value(_lines(limits=LIMITS).vllm.splitlines()[1], "--max-num-seqs") == "500"


def test_every_presets_own_checkpoint_is_the_repository_its_config_came_from():
    """``checkpoints``: a preset's entry at its config's own weights is the repository its config was
    copied from; an alias has its own repository (DeepSeek-R1 is not DeepSeek-V3's checkpoint)."""
    for name in PRESET_NAMES:
        spec = get_preset(name)
        repo = spec.source.split()[0].removeprefix("huggingface.co/")
        assert checkpoints(name)[weights_name(spec.precision)] == repo, name
    for alias, canonical in ALIASES.items():
        own = checkpoints(alias)[weights_name(get_preset(alias).precision)]
        assert own != checkpoints(canonical).get(weights_name(get_preset(canonical).precision)), alias
    assert checkpoints("no-such-model") == {} and checkpoints(None) == {}


@pytest.mark.slow  # a whole run (the fast tier leaves it out: docs/testing.md)
def test_predict_serves_the_predicted_precision_of_the_model_named():
    p = predict("qwen3-235b-a22b", gpu="h200", nodes=2, weights="fp8", kv_cache_dtype="fp8", tokens=[64, 128])
    rec = p.recommendation
    for line in commands(rec.vllm):
        f = _flags(line)
        assert shlex.split(line)[2] == QWEN["fp8"] and f["--kv-cache-dtype"] == "fp8" and int(f["--max-num-seqs"]) > 0
    assert all(_flags(line)["--model-path"] == QWEN["fp8"] for line in commands(rec.sglang))
    r1 = predict("deepseek-r1", gpu="h200", nodes=2, tokens=[64]).recommendation
    assert all(shlex.split(line)[2] == "deepseek-ai/DeepSeek-R1" for line in commands(r1.vllm))
    glm = predict("glm-4.5", gpu="h200", nodes=2, tokens=[64]).recommendation
    assert glm.overlap_flags["dbo"].endswith("SGLang 0.5.23 has no two-batch overlap for glm4_moe")


def test_a_model_folder_is_served_from_that_folder(tmp_path):
    """A HuggingFace snapshot folder holds the weights beside its config.json: the lines serve it."""
    folder = tmp_path / "Qwen3-30B-A3B"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(preset_config("qwen3-30b-a3b")))
    rec = predict(str(folder), gpu="h100", tokens=[64]).recommendation
    assert all(shlex.split(line)[2] == str(folder) for line in commands(rec.vllm))
    assert not any(n.startswith("<MODEL>") for n in rec.notes)
    alone = predict(str(folder / "config.json"), gpu="h100", tokens=[64]).recommendation
    assert all(shlex.split(line)[2] == "<MODEL>" for line in commands(alone.vllm))
