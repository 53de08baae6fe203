"""Inputs as users type them (issue 47, item 5), the accepted side; the refusals are batched with every
command's others in tests/commands/test_cli_edges.py (``BAD_INPUTS``). ``--model`` reads a HuggingFace
snapshot folder's config.json and a path that exists as a file even where a preset has its name; GPU names
take any case, on the command line and from Python; token counts and contexts take k = 1024 and
M = 1024 x 1024."""

from __future__ import annotations

import json

import pytest

from demos._cli.values import TOKEN_SUFFIXES, token_count
from demos.errors import ConfigError
from demos.predict import build_parser
from demos.prediction import predict
from demos.zoo.hardware import GPUS, ClusterSpec, get_gpu
from demos.zoo.loading import is_config_path, load_model
from demos.zoo.models import get_preset
from demos.zoo.models.presets import preset_config

pytestmark = pytest.mark.timeout(180)


def _snapshot(folder, preset: str):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(preset_config(preset)))
    (folder / "model.safetensors.index.json").write_text("{}")  # a snapshot holds more than its config
    return folder


def _shape(spec):
    """The spec without where it came from (its name and source name the file)."""
    return json.dumps({k: v for k, v in vars(spec).items() if k not in ("name", "source")}, default=repr)


def test_a_snapshot_folder_is_read_through_its_config_json(tmp_path):
    folder = _snapshot(tmp_path / "Kimi-K2-Instruct", "kimi-k2")
    spec = load_model(str(folder))
    assert spec.source == str(folder / "config.json")
    assert _shape(spec) == _shape(load_model(str(folder / "config.json"))) == _shape(get_preset("kimi-k2"))
    assert _shape(load_model(folder)) == _shape(spec)  # a path-like object too
    # and predict reads it: the same steps as the preset on the same rack
    rack = {"gpu": "gb200", "nodes": 18, "ep": 72, "tokens": [8]}
    a, b = predict(str(folder), **rack), predict("kimi-k2", **rack)
    assert [p.step_no_dbo_s for p in a.points] == [p.step_no_dbo_s for p in b.points]
    assert [p.step_dbo_s for p in a.points] == [p.step_dbo_s for p in b.points]


def test_a_path_that_exists_is_a_file_even_where_a_preset_has_its_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _snapshot(tmp_path / "deepseek-v3", "kimi-k2")  # a local snapshot folder named as the preset
    assert is_config_path("deepseek-v3")
    assert load_model("deepseek-v3").moe.routed_experts == get_preset("kimi-k2").moe.routed_experts == 384
    (tmp_path / "notes.md").write_text("# not a config\n")
    with pytest.raises(ConfigError, match=r"^model: notes\.md: not valid JSON"):
        load_model("notes.md")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError) as info:
        load_model("empty")
    assert str(info.value) == "model empty: a folder without a config.json (a HuggingFace snapshot folder holds one)"
    (tmp_path / "kimi-k2").mkdir()  # an empty folder named as a preset: the folder is read, and the line says so
    with pytest.raises(ConfigError, match=r"the preset kimi-k2 is read where no file or folder of that name exists"):
        load_model("kimi-k2")


def test_a_name_that_is_neither_a_path_nor_a_preset_says_both(tmp_path):
    for name in ("llama", str(tmp_path / "nope.json")):
        with pytest.raises(ConfigError) as info:
            load_model(name)
        message = str(info.value)
        assert message.startswith(f"model {name}: no file or folder of that name exists, and no preset has that name")
        assert "kimi-k2" in message and "\n" not in message


@pytest.mark.slow  # a whole run (the fast tier leaves it out: docs/testing.md)
def test_gpu_names_take_any_case_from_the_command_line_and_from_python():
    parser = build_parser()
    for typed in ("H200", "h200", "GB200", " B200 "):
        assert parser.parse_args(["--model", "deepseek-v3", "--gpu", typed]).gpu == typed.strip().lower()
    assert get_gpu("GB200") is GPUS["gb200"] and get_gpu(" H100 ") is GPUS["h100"]
    assert ClusterSpec(nodes=18, gpus_per_node=4, ep=72, gpu="GB200").gpu is GPUS["gb200"]
    upper = predict("kimi-k2", gpu="GB200", nodes=18, ep=72, tokens=[8]).to_dict()
    lower = predict("kimi-k2", gpu="gb200", nodes=18, ep=72, tokens=[8]).to_dict()
    assert upper == lower and upper["gpu"] == "gb200"


@pytest.mark.parametrize(
    "typed, tokens",
    [("8", 8), ("4k", 4096), ("4K", 4096), ("1.5k", 1536), ("1M", 1024 * 1024), (" 2k ", 2048), ("16384", 16384)],
)
def test_token_counts_take_k_and_m_as_powers_of_two(typed, tokens):
    assert token_count(typed) == tokens
    assert TOKEN_SUFFIXES == {"k": 1024, "K": 1024, "M": 1024 * 1024}


def test_the_token_flags_take_the_suffixes():
    ns = build_parser().parse_args(["--model", "deepseek-v3", "--tokens", "1k,2k,64", "--context", "4k"])
    assert ns.tokens == (1024, 2048, 64) and ns.context == 4096
    ns = build_parser().parse_args(["--model", "deepseek-v3", "--tokens", "8,16", "--context", "2000"])
    assert ns.tokens == (8, 16) and ns.context == 2000  # plain counts as before
