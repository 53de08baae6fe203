"""Inputs as users type them (issue 47, item 5): ``--model`` reads a HuggingFace snapshot folder's
config.json and a path that exists as a file even where a preset has its name, and a name that is neither
says both."""

from __future__ import annotations

import json

import pytest

from demos.errors import ConfigError
from demos.prediction import predict
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
