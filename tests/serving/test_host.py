"""The engine's host between steps (``demos.serving.host``): SGLang releases that resolve their mamba strategy
to ``no_buffer`` run hybrid Gated DeltaNet models without the overlap schedule, and each step of such a run
costs the host's time on top of the GPU's; every other engine, model and release hides it."""

from __future__ import annotations

import pytest

from demos.errors import ConfigError
from demos.serving.__main__ import main
from demos.serving.api import simulate
from demos.serving.host import HOST_STEP_S, check_release, host_step_seconds, overlap_off_reason, overlap_off_release
from demos.zoo.models import get_preset

pytestmark = pytest.mark.timeout(600)

QWEN35 = get_preset("qwen3.5-397b-a17b")


def test_the_host_figure_is_the_published_lfm2_measurement():
    # SGLang #38131: 364.3 tok/s without the overlap, 498.5 with it, batch 1
    assert HOST_STEP_S == pytest.approx(0.739e-3, abs=1e-6)


@pytest.mark.parametrize(
    "release, off",
    [
        ("0.5.8.post1", True),
        ("0.5.9", True),
        ("0.5.10.post1", True),
        ("nightly-dev-20260216", True),
        ("nightly-dev-20260604", True),
        ("nightly-dev-20260704", False),
        ("0.5.23", False),
        ("0.6.1", False),
    ],
)
def test_the_releases_read_resolve_as_read(release, off):
    assert overlap_off_release(release) is off


@pytest.mark.parametrize("release", ["0.5.14", "nightly-dev-20260620", "glm5-hopper", ""])
def test_a_release_between_or_outside_the_ones_read_is_one_line(release):
    with pytest.raises(ConfigError, match="was not read"):
        overlap_off_release(release)


def test_only_sglang_serving_a_gated_deltanet_hybrid_exposes_its_host():
    assert "0.74 ms" in overlap_off_reason("sglang", "0.5.9", QWEN35)
    assert host_step_seconds("sglang", "0.5.9", QWEN35) == HOST_STEP_S
    assert host_step_seconds("sglang", None, QWEN35) == 0.0  # the pinned 0.5.23 resolves to extra_buffer
    for engine in ("vllm", "trtllm"):
        assert host_step_seconds(engine, "0.5.9", QWEN35) == 0.0
    for other in ("deepseek-v3", "kimi-k3", "minimax-m3"):  # MLA; KDA hybrid (not read); block-sparse
        assert host_step_seconds("sglang", "0.5.9", get_preset(other)) == 0.0
    # a model without the layers never reads the release: an unread one is no error there
    assert host_step_seconds("sglang", "0.5.14", get_preset("deepseek-v3")) == 0.0


def test_each_decode_step_costs_the_host_on_top_of_the_gpu():
    """A decode pool gives every running request a token each step, so each gap between a request's tokens
    is one step: without the overlap the mean TPOT is longer by the host's time exactly, on the same grid
    of step times. The bug this catches: the host charged per request, per token or not at all."""
    kw = dict(
        engine="sglang", pool="decode", gpu="h200", ep=8, attention_tp=8, concurrency=4, isl=256, osl=16,
        requests=8, warmup=4, overlap="none", search=False, pricers={},
    )  # fmt: skip
    on = simulate("qwen3.5-397b-a17b", release="0.5.23", **kw)
    off = simulate("qwen3.5-397b-a17b", release="0.5.10.post1", **kw)  # both run the fused all-reduce: one grid
    assert off.runs[0].tpot_ms.p50 - on.runs[0].tpot_ms.p50 == pytest.approx(HOST_STEP_S * 1e3, rel=1e-6)
    assert any("without its overlap schedule" in s for s in off.sources)
    assert not any("host between steps" in s for s in on.sources)


def test_a_disaggregated_run_charges_the_host_on_its_decode_steps():
    """The coupled run prices both sides' steps with the host (``demos.serving.coupled``): the decode side's
    gaps each hold one step, so its TPOT grows by the host's time, give or take how the prefill side's
    longer steps move the arrivals. The bug this catches: the release not passed to the coupled run."""
    from demos.serving.coupled import Side, simulate_disaggregated

    kw = dict(
        engine="sglang", prefill=Side("h200", ep=8, attention_tp=8), decode=Side("h200", ep=8, attention_tp=8),
        concurrency=4, isl=256, osl=16, requests=8, warmup=4, pricers={},
    )  # fmt: skip
    on = simulate_disaggregated("qwen3.5-397b-a17b", release="0.5.23", **kw)[0]["none"].tpot_ms.p50
    off = simulate_disaggregated("qwen3.5-397b-a17b", release="0.5.10.post1", **kw)[0]["none"].tpot_ms.p50
    assert off - on == pytest.approx(HOST_STEP_S * 1e3, rel=0.2)


def test_a_release_only_sglang_can_have_is_refused_in_one_line(capsys):
    """Only SGLang's host depends on its release here: a release for another engine, or a string that is no
    SGLang release, is refused before any step runs (the bug this catches: a release silently ignored, a user
    believing vLLM 0.10's behaviour was modelled)."""
    check_release("sglang", "0.5.9")
    check_release("sglang", "nightly-dev-20260216")
    check_release("vllm", None)
    with pytest.raises(ConfigError, match="only SGLang"):
        check_release("vllm", "0.19.0")
    with pytest.raises(ConfigError, match="not an SGLang release"):
        check_release("sglang", "latest")
    with pytest.raises(ConfigError, match="only SGLang"):
        simulate("qwen3-30b-a3b", engine="trtllm", gpu="h100", concurrency=4, isl=64, osl=4, release="1.2.0")
    argv = ["--model", "qwen3-30b-a3b", "--engine", "vllm", "--concurrency", "4", "--isl", "64", "--osl", "4"]
    assert main([*argv, "--release", "0.19.0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--release" in err[0] and "only SGLang" in err[0]


def test_a_server_without_its_radix_cache_keeps_the_overlap_at_any_release():
    """SGLang's handler turns the overlap off only with the radix cache on: ``--disable-radix-cache`` keeps
    it, so a 0.5.10.post1 server launched so steps as the pinned release does (both run the fused all-reduce;
    InferenceX's Qwen3.5 runs). The bug this catches: the host charged whatever the server's flags."""
    assert overlap_off_reason("sglang", "0.5.9", QWEN35, radix_cache=False) is None
    assert host_step_seconds("sglang", "0.5.9", QWEN35, radix_cache=False) == 0.0
    kw = dict(
        engine="sglang", pool="decode", gpu="h200", ep=8, attention_tp=8, concurrency=4, isl=256, osl=16,
        requests=8, warmup=4, overlap="none", search=False, pricers={},
    )  # fmt: skip
    pinned = simulate("qwen3.5-397b-a17b", release="0.5.23", **kw)
    no_radix = simulate("qwen3.5-397b-a17b", release="0.5.10.post1", disable_radix_cache=True, **kw)
    assert no_radix.runs[0].tpot_ms.p50 == pinned.runs[0].tpot_ms.p50
    assert not any("host between steps" in s for s in no_radix.sources)


def test_the_radix_cache_off_is_sglangs_only_and_refused_elsewhere_in_one_line(capsys):
    from demos.serving.host import check_radix_cache

    check_radix_cache("sglang", True)
    check_radix_cache("vllm", False)
    with pytest.raises(ConfigError, match="SGLang's only"):
        check_radix_cache("trtllm", True)
    argv = ["--model", "qwen3-30b-a3b", "--engine", "vllm", "--concurrency", "4", "--isl", "64", "--osl", "4"]
    assert main([*argv, "--disable-radix-cache"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--disable-radix-cache" in err[0] and "SGLang's only" in err[0]
