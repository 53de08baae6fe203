"""``--model org/name``: a HuggingFace id read from the measured extra's copy of its config.json
(``demos.zoo.loading.load_model``, ``demos.zoo.measured.model_config_path``; issue 45)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from demos.errors import ConfigError
from demos.zoo import measured
from demos.zoo.loading import load_model
from demos.zoo.models import load_config
from demos.zoo.models.presets import preset_config

needs_extra = pytest.mark.skipif(not measured.available(), reason="needs the measured extra")


@needs_extra
def test_an_id_the_extra_holds_loads_its_copy_and_says_so():
    spec = load_model("zai-org/GLM-5-FP8")
    copy = measured.model_config_path("zai-org/GLM-5-FP8")
    assert spec.name == "zai-org/GLM-5-FP8" and spec.model_type == "glm_moe_dsa"
    assert spec.source.startswith("huggingface.co/zai-org/GLM-5-FP8 config.json (the copy in aiconfigurator-core ")
    assert copy.name in spec.source
    assert dataclasses.replace(spec, name="x", source="x") == dataclasses.replace(
        load_config(copy), name="x", source="x"
    )
    assert "zai-org/GLM-5-FP8" in measured.model_config_ids() and len(measured.model_config_ids()) > 50


@needs_extra
def test_an_id_the_extra_lacks_or_cannot_express_is_one_line():
    with pytest.raises(ConfigError) as info:
        load_model("nobody/no-such-model")
    message = str(info.value)
    assert "\n" not in message and "holds no copy of its config.json" in message and "model_config_ids" in message
    with pytest.raises(ConfigError, match="model_type 'minimax_m3_vl' .* is not supported"):
        load_model("nvidia/MiniMax-M3-NVFP4")


def test_without_the_extra_an_id_says_how_to_install_it(monkeypatch):
    def missing():
        raise measured.MeasuredTablesError(measured.INSTALL_HINT)

    monkeypatch.setattr(measured, "_modules", missing)
    with pytest.raises(ConfigError) as info:
        load_model("zai-org/GLM-5-FP8")
    message = str(info.value)
    assert "\n" not in message and "pip install -e '.[measured]'" in message
    assert load_model("glm-5").name == "glm-5"  # a preset needs no extra


@needs_extra
def test_an_existing_folder_of_that_name_wins_over_the_copy(tmp_path, monkeypatch):
    folder = tmp_path / "zai-org" / "GLM-5-FP8"
    folder.mkdir(parents=True)
    config = {**preset_config("glm-5"), "num_hidden_layers": 10}
    (folder / "config.json").write_text(json.dumps(config))
    monkeypatch.chdir(tmp_path)
    assert load_model("zai-org/GLM-5-FP8").num_layers == 10


@needs_extra
def test_the_engine_lines_serve_the_repository_named(capsys):
    from demos.predict import main

    argv = ["--model", "zai-org/GLM-5-FP8", "--gpu", "b200", "--nodes", "2", "--ep", "16", "--tokens", "64,256"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "vllm serve zai-org/GLM-5-FP8 " in out and "--model-path zai-org/GLM-5-FP8 " in out
    assert "model: huggingface.co/zai-org/GLM-5-FP8 config.json (the copy in aiconfigurator-core" in out
