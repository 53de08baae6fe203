"""``demos.prediction.predict``: the typed API the command calls. Its ``to_dict()`` is the JSON
``python -m demos.predict --json`` writes for the same arguments (byte for byte), its ``text()`` what the
command prints, a bad argument one ``ConfigError`` naming the keyword (the command names the flag), the
toy goes through it, and the package's public surface is pinned."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

import demos.prediction as prediction
from demos._cli.model_flags import flag_of
from demos.errors import ConfigError
from demos.predict import PROG, main
from demos.prediction import (
    ClusterSetup,
    Crossover,
    Prediction,
    Recommendation,
    Setting,
    SweptPoint,
    ToySetup,
    predict,
)
from demos.zoo.models import get_preset
from demos.zoo.models.presets import preset_config
from demos.zoo.ops import DENSE_GROUPS, MOE_GROUPS
from tests.support.paths import REPO

pytestmark = pytest.mark.timeout(180)

CLUSTER = {"gpu": "h800", "nodes": 9, "ep": 72}
CLUSTER_FLAGS = ["--gpu", "h800", "--nodes", "9", "--ep", "72"]

SAME = [
    pytest.param(
        "deepseek-v3",
        {**CLUSTER, "tokens": [16, 64], "mode": "both", "what_if": {"link": 0.5}, "imbalance": 1.5},
        ["--model", "deepseek-v3", *CLUSTER_FLAGS, "--tokens", "16,64", "--mode", "both"]
        + ["--what-if", "link=0.5", "--imbalance", "1.5"],
        id="decode-both-what-if",
    ),
    pytest.param(
        "qwen3-30b-a3b",
        {"gpu": "h800", "nodes": 2, "phase": "prefill", "tokens": [128, 1024], "comm_sms": [20, 24], "context": 1024},
        ["--model", "qwen3-30b-a3b", "--gpu", "h800", "--nodes", "2", "--phase", "prefill"]
        + ["--tokens", "128,1024", "--comm-sms", "20,24", "--context", "1024"],
        id="prefill-comm-sms",
    ),
    pytest.param(
        "toy",
        {"profile": "cpu", "tokens": [8, 128], "mode": "eager"},
        ["--model", "toy", "--profile", "cpu", "--tokens", "8,128", "--mode", "eager"],
        id="toy",
    ),
]


@pytest.mark.slow  # a whole run (the fast tier leaves it out: docs/testing.md)
@pytest.mark.parametrize("model, kwargs, argv", SAME)
def test_the_api_gives_what_the_command_prints_and_writes(model, kwargs, argv, tmp_path, capsys):
    path = tmp_path / "p.json"
    assert main([*argv, "--json", str(path)]) == 0
    printed = capsys.readouterr().out
    pred = predict(model, **kwargs)
    assert isinstance(pred, Prediction)
    assert pred.to_dict() == json.loads(path.read_text())
    assert json.dumps(pred.to_dict(), indent=2) == path.read_text()  # the same keys in the same order
    assert pred.text() + "\n" == printed


def _documented_tables() -> list[dict[str, list[str]]]:
    """docs/predict.md's "Outputs" tables (the JSON's keys, then a point's dicts): each row's keys (first
    column) and the names its second holds."""
    page = (REPO / "docs" / "predict.md").read_text()
    section = page.split("## Outputs", 1)[1].split("`--csv PATH`", 1)[0]
    tables: list[dict[str, list[str]]] = []
    rows: dict[str, list[str]] | None = None
    for line in section.splitlines():
        if not line.startswith("|"):
            rows = None
            continue
        if rows is None:
            rows = {}
            tables.append(rows)
        if line.startswith("| `"):
            first, second = line.strip("|").split(" | ", 1)
            for key in re.findall(r"`(\w+)`", first):
                rows[key] = re.findall(r"`(\w+)`", second)
    return tables


def _documented_keys() -> dict[str, list[str]]:
    return _documented_tables()[0]


def test_to_dict_holds_the_documented_keys_filled_from_the_typed_fields():
    """Independent of ``to_dict``'s code (which the command uses too): the page's keys, in its order, each
    holding what the typed fields hold."""
    pred = predict("deepseek-v3", **CLUSTER, tokens=[16, 64], mode="both", what_if={"gemm": 0.8})
    doc = _documented_keys()
    got = pred.to_dict()
    assert list(got) == list(doc)
    setup = list(doc)[: list(doc).index("points")]
    typed = {**{f.name: getattr(pred.setup, f.name) for f in dataclasses.fields(pred.setup)}, **vars(pred)}
    assert setup[0] == "title" and all(got[k] == typed[k] for k in setup)
    assert got["sources"] == list(pred.sources) and got["not_modelled"] == list(pred.not_modelled)
    assert got["points"] == [dataclasses.asdict(p) for p in pred.points]
    assert list(got["points"][0]) == doc["points"]
    point_dicts = _documented_tables()[1]
    assert list(point_dicts) == ["stages", "moe_layer_s", "dense_layer_s"] == doc["points"][-4:-1]
    assert doc["points"][-1] == "attention_kinds_s" and got["points"][0]["attention_kinds_s"] is None  # one kind
    for key, names in point_dicts.items():
        assert list(got["points"][0][key]) == names, key
        assert all(isinstance(s, float) and s >= 0 for s in got["points"][0][key].values())
    assert got["crossover"] == {
        m: None if c.tokens is None else dataclasses.asdict(c) for m, c in pred.crossovers.items()
    }
    assert all(c is None or list(c) == doc["crossover"] for c in got["crossover"].values())
    assert got["best"] == {m: dataclasses.asdict(b) for m, b in pred.best.items()}
    assert got["reasons"] == pred.recommendation.reasons
    assert got["recommendation"] == {
        k: (list(v) if isinstance(v, tuple) else v)
        for k, v in ((k, getattr(pred.recommendation, k)) for k in doc["recommendation"])
    }
    assert got["what_if"] == {"gemm": 0.8} and "what-if gemm x0.8" in got["title"]


def test_the_prediction_is_typed_and_read_only():
    pred = predict("deepseek-v3", **CLUSTER, tokens=[16, 64], mode="both")
    assert [(p.tokens, p.mode) for p in pred.points] == [(16, "graph"), (64, "graph"), (16, "eager"), (64, "eager")]
    assert all(isinstance(p, SweptPoint) for p in pred.points)
    assert set(pred.crossovers) == {"graph", "eager"} == set(pred.modes)
    assert all(isinstance(c, Crossover) for c in pred.crossovers.values())
    assert pred.best == {"graph": Setting(2, 0), "eager": Setting(2, 0)}
    rec = pred.recommendation
    assert isinstance(rec, Recommendation) and rec.mode == "graph" and set(rec.reasons) == {"graph", "eager"}
    assert "vllm serve deepseek-ai/DeepSeek-V3 " in rec.vllm
    setup = pred.setup
    assert isinstance(setup, ClusterSetup) and not pred.is_toy
    assert (setup.gpu, setup.nodes, setup.gpus_per_node, setup.ep, setup.attention_tp) == ("h800", 9, 8, 72, 1)
    assert pred.points[0].speedup == pytest.approx(pred.points[0].step_no_dbo_s / pred.points[0].step_dbo_s)
    with pytest.raises(dataclasses.FrozenInstanceError):
        pred.title = "x"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        pred.points[0].speedup = 2.0  # type: ignore[misc]


@pytest.mark.slow  # a whole run (the fast tier leaves it out: docs/testing.md)
def test_a_model_spec_a_config_path_and_a_preset_name_give_the_same_points(tmp_path, capsys):
    args = {**CLUSTER, "tokens": 16}
    by_name = predict("deepseek-v3", **args)
    by_spec = predict(get_preset("deepseek-v3"), **args)
    assert by_spec.points == by_name.points and by_spec.recommendation == by_name.recommendation
    config = tmp_path / "config.json"
    config.write_text(json.dumps(preset_config("deepseek-v3")))
    by_path = predict(config, **args)
    assert by_path.points == by_name.points and by_path.model == "deepseek_v3"
    out = tmp_path / "p.json"
    assert main(["--model", str(config), *CLUSTER_FLAGS, "--tokens", "16", "--json", str(out)]) == 0
    assert json.dumps(by_path.to_dict(), indent=2) == out.read_text()
    assert by_path.text() + "\n" == capsys.readouterr().out


def test_the_toy_has_no_cluster_and_no_serving_flags():
    pred = predict("toy", profile="cpu", tokens=[8], mode="eager")
    assert isinstance(pred, Prediction) and pred.is_toy and pred.model == "toy"
    assert pred.setup == ToySetup("cpu")  # no cluster, context, imbalance or what-if: the toy has none
    assert pred.best == {}
    assert pred.recommendation.enable is None and pred.recommendation.threshold is None
    assert [p.tokens for p in pred.points] == [8] and pred.points[0].fits is None
    assert pred.points[0].moe_layer_s is None and pred.points[0].dense_layer_s is None  # not the zoo's layers
    assert "per op: not broken down" in pred.text(detail=True) and "per op" not in pred.text()
    with pytest.raises(ConfigError, match="trace"):
        pred.write_trace("never.json")


def test_the_sources_name_the_tables_the_gpus_curves_were_fitted_to():
    """A GPU with tables of its own is timed on curves fitted to them (docs/kernels.md); one without, on its
    family's, fitted to the family's GPUs: the ``rests on`` line says which."""
    kernels = {}
    for gpu in ("h200", "h20"):
        pred = predict("deepseek-v3", gpu=gpu, nodes=2, ep=16, tokens=[8], mode="graph")
        kernels[gpu] = next(s for s in pred.sources if s.startswith("kernel times:"))
    assert "the measured GEMM and MLA tables of h200 (" in kernels["h200"]
    assert "tables of h100 and h200, the hopper family's (" in kernels["h20"]


def test_the_sources_name_the_all_reduce_attention_tp_takes():
    """Attention TP's all-reduce takes the engines' fitted line where faster than NCCL's ring
    (``KernelTimes.all_reduce``): the ``rests on`` line names both on a GPU with the line, the ring alone on one
    without (AMD's families), and neither without attention TP."""

    def tp_source(gpu, **kw):
        pred = predict("qwen3-30b-a3b", gpu=gpu, tokens=[8], mode="graph", **kw)
        return [s for s in pred.sources if s.startswith("attention TP collectives:")]

    nvidia = tp_source("h200", ep=8, attention_tp=8, moe_tp=8)
    assert len(nvidia) == 1 and "SGLang's, vLLM's and TRT-LLM's measured kernels" in nvidia[0]
    assert "NCCL's ring cost model" in nvidia[0]
    amd = tp_source("mi355x", ep=8, attention_tp=8, moe_tp=8)
    assert len(amd) == 1 and "measured kernels" not in amd[0] and "NCCL's ring cost model" in amd[0]
    assert tp_source("h200", ep=8) == []


@pytest.mark.slow
def test_detail_prints_each_points_ops_of_one_layer(capsys):
    assert main(["--model", "deepseek-v3", *CLUSTER_FLAGS, "--tokens", "16,64", "--detail"]) == 0
    printed = capsys.readouterr().out
    pred = predict("deepseek-v3", **CLUSTER, tokens=[16, 64])
    assert pred.text(detail=True) + "\n" == printed
    assert "per op" not in pred.text()
    lines = printed.splitlines()
    for key, ops in (("moe_layer_s", MOE_GROUPS), ("dense_layer_s", DENSE_GROUPS)):
        i = next(i for i, line in enumerate(lines) if line.startswith("per op") and f"({key})" in line)
        assert lines[i + 1].split() == ["tokens", "mode", "ub", "sms", *ops, "total"]
        for p, row in zip(pred.points, lines[i + 2 : i + 4]):
            cells = row.split()
            ms = getattr(p, key)
            assert int(cells[0]) == p.tokens and list(ms) == list(ops)
            assert [float(c) for c in cells[4:-1]] == pytest.approx([ms[op] * 1e3 for op in ops], abs=1e-4)
            assert float(cells[-1]) == pytest.approx(sum(ms.values()) * 1e3, abs=1e-4)


BAD = [
    ("deepseek-v3", {"tokens": [0, 8]}, ["--tokens", "0,8"], "tokens"),
    ("deepseek-v3", {"gpus_per_node": 0}, ["--gpus-per-node", "0"], "gpus_per_node"),
    ("deepseek-v3", {"what_if": {"warp": 2}}, ["--what-if", "warp=2"], "what_if"),
    ("deepseek-v3", {"ep": 5}, ["--ep", "5"], "ep"),
    ("deepseek-v3", {"comm_sms": 20}, ["--comm-sms", "20"], "comm_sms"),
    ("deepseek-v3", {"ubatches": [2, 100000]}, ["--ubatches", "2,100000"], "ubatches"),
    ("deepseek-v3", {"profile": "cpu"}, ["--profile", "cpu"], "profile"),
    ("llama", {}, [], "model"),
    ("/nonexistent/config.json", {}, [], "model"),
    ("toy", {}, [], "profile"),
    ("toy", {"profile": "cpu", "ep": 8}, ["--profile", "cpu", "--ep", "8"], "ep"),
    ("toy", {"profile": "nope"}, ["--profile", "nope"], "profile"),
]


@pytest.mark.parametrize("model, kwargs, flags, keyword", BAD)
def test_a_bad_argument_is_one_config_error_naming_the_keyword_before_any_work(
    model, kwargs, flags, keyword, capsys, monkeypatch
):
    def no_work(*a, **k):
        raise AssertionError("a point ran before the arguments were checked")

    monkeypatch.setattr("demos.prediction.api.run_sweep", no_work)
    monkeypatch.setattr("demos.prediction.toy.toy_sweep", no_work)
    with pytest.raises(ConfigError) as info:
        predict(model, **kwargs, progress=no_work)
    message = str(info.value)
    assert "\n" not in message and keyword in message and flag_of(keyword) not in message, message
    assert main(["--model", model, *flags]) == 2
    err = capsys.readouterr().err
    assert err == f"{PROG}: error: {info.value.render(flag_of)}\n"
    assert flag_of(keyword) in err


@pytest.mark.parametrize(
    "kwargs, keyword",
    [
        ({"tokens": "8,16"}, "tokens"),
        ({"tokens": []}, "tokens"),
        ({"gpu": "a100"}, "gpu"),
        ({"mode": "sometimes"}, "mode"),
        ({"phase": "train"}, "phase"),
        ({"what_if": "link=2"}, "what_if"),
        ({"what_if": {"link": "fast"}}, "what_if"),
        ({"imbalance": 0.5}, "imbalance"),
        ({"nodes": "2"}, "nodes"),
        ({"progress": 3}, "progress"),
    ],
)
def test_what_the_flags_parser_refused_is_a_config_error_too(kwargs, keyword):
    with pytest.raises(ConfigError) as info:
        predict("deepseek-v3", **kwargs)
    assert str(info.value).startswith(keyword) and "\n" not in str(info.value)


def test_a_model_of_the_wrong_type_is_a_config_error():
    with pytest.raises(ConfigError, match="^model "):
        predict(3)  # type: ignore[arg-type]


def test_the_public_surface_is_pinned():
    assert sorted(prediction.__all__) == prediction.__all__
    assert prediction.__all__ == [
        "ClusterSetup",
        "ConfigError",
        "Crossover",
        "Deployment",
        "Prediction",
        "Recommendation",
        "Setting",
        "SweptPoint",
        "ToySetup",
        "predict",
    ]
    for name in prediction.__all__:
        assert getattr(prediction, name) is not None
