"""``--weights`` and ``--kv-cache-dtype``: the shared model flags that put the model at another precision
(``demos._cli.model_flags``: parsed, applied by ``workload_of`` and ``workload_for``, refused in one line)."""

from __future__ import annotations

import json

import pytest

from demos._cli import OneLineParser
from demos._cli.model_flags import add_model_flags, flag_of, workload_of
from demos.errors import ConfigError
from demos.overlap import main
from demos.zoo.loading import precise_spec, workload_for
from demos.zoo.memory import memory_estimate
from demos.zoo.models import get_preset

pytestmark = pytest.mark.timeout(120)

CLUSTER = {"gpu": "h100", "nodes": 1, "gpus_per_node": None, "ep": 8, "phase": "decode", "context": 2048}
RUN = {**CLUSTER, "imbalance": "auto", "comm_sms": None, "schedule": None, "tokens": 64, "ubatches": 2}


def parse(*args: str, sweep: bool = False):
    p = OneLineParser(prog="test")
    add_model_flags(p, model_default=None, sweep=sweep)
    return p.parse_args(["--model", "glm-4.5-air", *args])


@pytest.mark.parametrize("sweep", [False, True])  # demos.overlap's flags and demos.predict's
def test_the_flags_parse_and_default_to_the_config(sweep):
    ns = parse("--weights", "fp4", "--kv-cache-dtype", "fp8", sweep=sweep)
    assert (ns.weights, ns.kv_cache_dtype) == ("fp4", "fp8")
    ns = parse(sweep=sweep)
    assert (ns.weights, ns.kv_cache_dtype) == (None, None)


@pytest.mark.parametrize("args", [["--weights", "int4"], ["--kv-cache-dtype", "fp4"], ["--weights"]])
def test_a_bad_flag_value_is_one_line(capsys, args):
    with pytest.raises(SystemExit) as info:
        parse(*args)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and args[0] in err


def test_workload_of_applies_the_flags():
    ns = parse("--weights", "fp8", "--kv-cache-dtype", "fp8", "--ep", "8")
    w = workload_of(ns, tokens=64, ubatches=2)
    assert (w.spec.precision.weights, w.spec.precision.experts, w.spec.precision.kv_cache) == ("fp8_e4m3",) * 3
    plain = workload_of(parse("--ep", "8"), tokens=64, ubatches=2)
    assert plain.spec == get_preset("glm-4.5-air")  # no flag: the config's precision


def test_fp8_halves_the_weights_a_gpu_holds_and_fp8_kv_halves_its_cache():
    spec = get_preset("glm-4.5-air")  # a BF16 checkpoint
    bf16 = memory_estimate(workload_for(spec, **RUN))
    fp8 = memory_estimate(workload_for(spec, weights="fp8", kv_cache_dtype="fp8", **RUN))
    table = spec.vocab_size * spec.hidden_size * 2 * 2.0  # embedding and head, kept in BF16
    assert fp8.weights - table == pytest.approx((bf16.weights - table) / 2, rel=1e-12)
    assert fp8.kv_cache == pytest.approx(bf16.kv_cache / 2, rel=1e-12)


@pytest.mark.parametrize(
    "kwargs,flag,choices",
    [
        ({"weights": "int4"}, "--weights", "bf16, fp8, fp4"),
        ({"kv_cache_dtype": "e4m3"}, "--kv-cache-dtype", "bf16, fp8"),
    ],
)
def test_workload_for_refuses_a_bad_value_in_one_line_naming_the_flag(kwargs, flag, choices):
    with pytest.raises(ConfigError) as info:
        workload_for(get_preset("glm-4.5"), **{**RUN, **kwargs})
    line = info.value.render(flag_of)
    assert "\n" not in line and line.startswith(f"{flag} must be one of {choices}; got "), line


def test_precise_spec_names_the_model_when_it_is_not_a_spec():
    with pytest.raises(ConfigError) as info:
        precise_spec("glm-4.5", weights="fp8", kv_cache_dtype=None)
    assert info.value.render(flag_of) == "--model: with_precision.spec: must be a ModelSpec, got str"


def test_the_command_line_reports_the_smaller_weights(tmp_path, capsys):
    """demos.overlap --model with --weights fp8: the JSON report's memory holds the FP8 weights."""
    base = ["--model", "glm-4.5-air", "--ep", "8", "--tokens", "32"]
    reports = []
    for extra in ([], ["--weights", "fp8", "--kv-cache-dtype", "fp8"]):
        path = tmp_path / f"r{len(reports)}.json"
        assert main([*base, *extra, "--json", str(path)]) == 0
        reports.append(json.loads(path.read_text())["memory"])
    capsys.readouterr()
    assert reports[1]["weights"] < 0.6 * reports[0]["weights"]
    assert reports[1]["kv_cache"] == pytest.approx(reports[0]["kv_cache"] / 2)
