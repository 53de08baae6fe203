"""``demos.prediction.engines``: the vLLM and SGLang serve lines, every flag one of the pinned release's
flags, vLLM's data parallel size the EP over attention TP, a cluster an engine cannot run refused in
words, and every placeholder explained."""

from __future__ import annotations

import itertools
import re

import pytest

from demos.prediction.engines import (
    SGLANG_FLAGS,
    SGLANG_VERSION,
    VLLM_FLAGS,
    VLLM_VERSION,
    Deployment,
    EngineLines,
    Engines,
    serve_lines,
)

MODEL = "deepseek-ai/DeepSeek-V3"
GPN = 8


def _grid():
    """(model, kwargs) over 1 and 9 nodes, ep == world and ep < world, attention TP 1 and 8, both phases,
    both schedules, each overlap, a threshold or none, the model id given or not."""
    for nodes, half, tp, phase, schedule, overlap, model, threshold in itertools.product(
        (1, 9),
        (False, True),
        (1, 8),
        ("decode", "prefill"),
        ("ll", "ht"),
        ("none", "dbo", "sbo"),
        (MODEL, None),
        (None, 1, 100),
    ):
        world = nodes * GPN
        kw = dict(world=world, ep=world // 2 if half else world, gpus_per_node=GPN, nodes=nodes, attention_tp=tp)
        yield model, dict(kw, phase=phase, schedule=schedule, overlap=overlap, threshold=threshold)


def _lines(model, *, overlap, threshold, **deployment) -> EngineLines:
    """``serve_lines`` of the ``Deployment`` of ``model`` and ``deployment``'s fields."""
    return serve_lines(Deployment(model, **deployment), overlap, threshold)


GRID = [(m, kw, _lines(m, **kw)) for m, kw in _grid()]


def unknown_flags(text: str, known: frozenset[str]) -> list[str]:
    """The flags of ``text`` (each token that starts with ``--``, up to the end of its name: a ``,``, ``)``
    or ``=`` after it is not part of it) that are not in ``known``."""
    return [f for f in re.findall(r"(?<!\S)--[A-Za-z0-9][A-Za-z0-9_-]*", text) if f not in known]


def commands(text: str) -> list[str]:
    """The command lines of an engine's text (its ``#`` lines left out)."""
    return [ln for ln in text.splitlines() if ln and not ln.startswith("#")]


def value(line: str, flag: str) -> str:
    tokens = line.split()
    return tokens[tokens.index(flag) + 1]


def test_every_flag_printed_is_one_of_the_pinned_releases():
    for _, kw, r in GRID:
        assert unknown_flags(r.vllm, VLLM_FLAGS) == [], (kw, r.vllm)
        assert unknown_flags(r.sglang, SGLANG_FLAGS) == [], (kw, r.sglang)
        assert (r.vllm_version, r.sglang_version) == (VLLM_VERSION, SGLANG_VERSION) == ("0.34.0", "0.5.23")


def test_the_flag_check_catches_a_planted_wrong_flag():
    """The check above can fail: a line with one flag misspelled (``--tp`` is no SGLang flag; its
    argparse would only take it as an abbreviation) is caught, and only that flag."""
    _, _, r = next(g for g in GRID if g[1]["ep"] == g[1]["world"] and g[1]["attention_tp"] == 1)
    assert unknown_flags(r.vllm.replace("--data-parallel-size ", "--data-parallel-sizes "), VLLM_FLAGS) == [
        "--data-parallel-sizes"
    ]
    assert unknown_flags(r.sglang.replace("--tp-size", "--tp"), SGLANG_FLAGS) == ["--tp"]
    assert "--tp" not in SGLANG_FLAGS and "--dp" not in SGLANG_FLAGS


def test_vllm_data_parallel_size_is_the_ep_over_the_attention_tp():
    seen = 0
    for _, kw, r in GRID:
        for line in commands(r.vllm):
            tp = int(value(line, "--tensor-parallel-size"))
            assert tp == kw["attention_tp"]
            assert int(value(line, "--data-parallel-size")) == kw["ep"] // tp
            assert "--enable-expert-parallel" in line.split()
            if kw["nodes"] > 1:
                local = int(value(line, "--data-parallel-size-local"))
                assert local * kw["nodes"] == kw["ep"] // tp
            seen += 1
    assert seen


def test_ep_below_the_world_is_refused_in_words_not_printed_as_another_cluster():
    refused = [(kw, r) for _, kw, r in GRID if kw["ep"] < kw["world"]]
    assert refused
    for kw, r in refused:
        for text in (r.vllm, r.sglang):
            assert commands(text) == [], text
            assert text.startswith("# not expressible in ")
            assert f"not the predicted {kw['ep']}" in text
            assert f"{kw['world'] // kw['ep']} separate deployments of {kw['ep']} GPUs" in text
            assert not re.search(r"--[a-z-]+ \d", text), text  # no flag with a size: no cluster at all


def test_the_overlap_flags_follow_the_overlap_and_the_phase():
    for _, kw, r in GRID:
        if kw["ep"] < kw["world"]:
            continue
        v, s = " ".join(commands(r.vllm)).split(), commands(r.sglang)[0].split()
        dp = kw["ep"] // kw["attention_tp"]
        dbo = kw["overlap"] == "dbo" and dp > 1
        assert ("--enable-dbo" in v) is dbo
        flag = f"--dbo-{kw['phase']}-token-threshold"
        other = "--dbo-prefill-token-threshold" if kw["phase"] == "decode" else "--dbo-decode-token-threshold"
        assert other not in v
        if dbo and kw["threshold"] is not None:
            assert int(value(" ".join(v), flag)) == max(kw["threshold"], 2)  # vLLM refuses below 2 micro-batches
        else:
            assert flag not in v
        assert ("--enable-two-batch-overlap" in s) is (kw["overlap"] == "dbo" and dp > 1)
        assert ("--enable-single-batch-overlap" in s) is (kw["overlap"] == "sbo" and dp > 1)
        if kw["overlap"] != "none" and dp == 1:  # one attention group: no all-to-all to overlap
            assert r.sglang.startswith(f"# SGLang {SGLANG_VERSION} overlaps micro-batches only around DeepEP")
        if kw["overlap"] == "sbo":
            assert r.vllm.startswith(f"# vLLM {VLLM_VERSION} has no single-batch overlap")
        if kw["overlap"] == "dbo" and dp == 1:
            assert r.vllm.startswith(f"# vLLM {VLLM_VERSION} runs DBO only with --data-parallel-size > 1")
        if kw["overlap"] == "dbo" and dp > 1:
            assert any("two-batch overlap has no token threshold" in n for n in r.notes)


def test_the_schedule_picks_deepep_kernels_in_both_engines():
    for _, kw, r in GRID:
        if kw["ep"] < kw["world"]:
            continue
        s = commands(r.sglang)[0]
        if kw["ep"] // kw["attention_tp"] > 1:
            assert value(s, "--moe-a2a-backend") == "deepep"
            assert value(s, "--deepep-mode") == {"ll": "low_latency", "ht": "normal"}[kw["schedule"]]
        else:  # one attention group: the experts sharded by --ep-size, their outputs all-reduced
            assert "--moe-a2a-backend" not in s and int(value(s, "--ep-size")) == kw["world"]
        for line in commands(r.vllm):
            if kw["ep"] // kw["attention_tp"] > 1:
                want = {"ll": "deepep_low_latency", "ht": "deepep_high_throughput"}[kw["schedule"]]
                assert value(line, "--all2all-backend") == want
            else:  # DP 1: vLLM's MoE has no all-to-all, so no backend is named
                assert "--all2all-backend" not in line


def test_sglang_sizes_and_the_multi_node_launch():
    for _, kw, r in GRID:
        if kw["ep"] < kw["world"]:
            continue
        s = commands(r.sglang)
        assert len(s) == 1 and s[0].startswith("python -m sglang.launch_server --model-path ")
        assert int(value(s[0], "--tp-size")) == kw["world"]
        groups = kw["world"] // kw["attention_tp"]
        assert (int(value(s[0], "--attn-dp-size")) if "--attn-dp-size" in s[0] else 1) == groups
        if kw["nodes"] > 1:
            assert s[0].endswith(f"--nnodes {kw['nodes']} --node-rank <NODE_RANK> --dist-init-addr <HEAD_IP>:<PORT>")
            head, other = commands(r.vllm)
            assert "--headless" not in head and "--data-parallel-start-rank" not in head
            assert other.endswith("--headless") or "--headless --enable-dbo" in other
            assert "--data-parallel-start-rank <START_RANK>" in other
            for line in (head, other):
                assert "--data-parallel-address <HEAD_IP> --data-parallel-rpc-port <PORT>" in line
        else:
            assert "--nnodes" not in s[0] and len(commands(r.vllm)) == 1


def test_every_placeholder_is_explained_and_the_model_filled_when_given():
    for model, kw, r in GRID:
        used = set(re.findall(r"<[A-Z_]+>", r.vllm + r.sglang))
        explained = {n.split(":")[0].split(" ")[0] for n in r.notes if n.startswith("<")}
        assert used <= explained, (used, r.notes)
        if model is None:
            assert any(n.startswith("<MODEL>: fill in") and "config.json" in n for n in r.notes)
        else:
            assert "<MODEL>" not in r.vllm + r.sglang + " ".join(r.notes)
            for line in commands(r.vllm) + commands(r.sglang):
                assert f" {model} " in line


def test_the_result_is_typed_and_bad_input_is_refused():
    r = _lines(
        MODEL,
        world=8,
        ep=8,
        gpus_per_node=8,
        nodes=1,
        attention_tp=1,
        phase="decode",
        schedule="ll",
        overlap="dbo",
        threshold=100,
    )
    assert isinstance(r, EngineLines) and isinstance(r.notes, tuple)
    assert r.vllm == (
        f"vllm serve {MODEL} --tensor-parallel-size 1 --data-parallel-size 8 --enable-expert-parallel "
        "--all2all-backend deepep_low_latency --enable-dbo --dbo-decode-token-threshold 100"
    )
    assert r.sglang == (
        f"python -m sglang.launch_server --model-path {MODEL} --tp-size 8 --attn-dp-size 8 "
        "--moe-a2a-backend deepep --deepep-mode low_latency --enable-two-batch-overlap"
    )
    good = dict(world=8, ep=8, gpus_per_node=8, nodes=1, attention_tp=1, phase="decode", schedule="ll")
    for bad in (
        dict(world=16),
        dict(ep=3),
        dict(attention_tp=0),
        dict(phase="mixed"),
        dict(schedule="normal"),
        dict(overlap="tbo"),
        dict(threshold=0),
    ):
        with pytest.raises(ValueError):
            _lines(MODEL, **{**good, "overlap": "dbo", "threshold": 10, **bad})


def test_a_tp_group_wider_than_a_node_is_refused_for_vllms_multi_node_launch():
    r = _lines(
        None,
        world=72,
        ep=72,
        gpus_per_node=4,
        nodes=18,
        attention_tp=8,
        phase="decode",
        schedule="ll",
        overlap="dbo",
        threshold=64,
    )
    assert r.vllm.startswith("# not expressible in vLLM") and commands(r.vllm) == []
    assert commands(r.sglang)  # SGLang's --tp-size is the whole world: its line stands


def test_a_deployment_is_passed_whole_and_holds_the_pinned_engines():
    """The lines take one object: the cluster, attention TP, phase, schedule and the engines' releases;
    another release than the pinned one is refused (its flags were never read)."""
    d = Deployment(MODEL, 16, 16, 8, 2, 1, "decode", "ll")
    assert (d.phase, d.schedule, d.engines) == ("decode", "ll", Engines())
    r = serve_lines(d, "dbo", 64)
    assert (r.vllm_version, r.sglang_version) == (VLLM_VERSION, SGLANG_VERSION)
    with pytest.raises(ValueError, match="engines.vllm: the lines are checked against 0.34.0 only"):
        Engines(vllm="0.35.0")
    with pytest.raises(ValueError, match="schedule must be one of ll, ht, got 'normal'"):
        Deployment(MODEL, 16, 16, 8, 2, 1, "decode", "normal")
