"""``demos.fidelity.peer``: aiconfigurator's estimate of the measured rows. Everything but the last test runs
without the ``peer`` extra: a stand-in with ``cli_estimate``'s keywords takes the calls."""

from __future__ import annotations

import inspect
import json
import sys

import pytest

from demos.fidelity import peer as P
from demos.zoo import measured
from demos.zoo.measured import SiliconRow

needs_tables = pytest.mark.skipif(not measured.available(), reason="needs the measured extra")


def fake_cli_estimate(
    model_path,
    system_name,
    *,
    mode="agg",
    backend_name="trtllm",
    backend_version=None,
    isl=1024,
    osl=1024,
    batch_size=128,
    tp_size=1,
    pp_size=1,
    attention_dp_size=1,
    moe_tp_size=None,
    moe_ep_size=None,
    gemm_quant_mode=None,
    moe_quant_mode=None,
    prefill_tp_size=None,
    prefill_pp_size=None,
    prefill_attention_dp_size=None,
    prefill_moe_tp_size=None,
    prefill_moe_ep_size=None,
    prefill_batch_size=None,
    prefill_num_workers=None,
    decode_tp_size=None,
    decode_pp_size=None,
    decode_attention_dp_size=None,
    decode_moe_tp_size=None,
    decode_moe_ep_size=None,
    decode_batch_size=None,
    decode_num_workers=None,
):
    """A stand-in for aiconfigurator 0.12.0's ``cli_estimate`` (the keywords the mapping uses, the same
    defaults): ttft = isl / 10 ms, tpot = batch / 10 ms, for a readable check."""
    if mode == "disagg":
        for name, v in (("prefill_batch_size", prefill_batch_size), ("decode_batch_size", decode_batch_size)):
            if v is None:
                raise ValueError(f"{name} is required for disagg mode.")
    batch = batch_size if mode == "agg" else decode_batch_size

    class Result:
        ttft = isl / 10
        tpot = batch / 10

    Result.backend_version = backend_version
    return Result()


class Recorder:
    """Records every call's keywords and answers with ``answer(**kwargs)``."""

    def __init__(self, answer=fake_cli_estimate):
        self.calls: list[dict] = []
        self._answer = answer
        self.__signature__ = inspect.signature(fake_cli_estimate)  # what the adapter binds against

    def __call__(self, *args, **kwargs):
        self.calls.append(kwargs)
        return self._answer(*args, **kwargs)


AGG = SiliconRow(
    id="r-agg",
    engine="sglang",
    model="deepseek-ai/DeepSeek-R1",
    system="h200_sxm",
    precision="fp8",
    mode="agg",
    isl=1024,
    osl=512,
    batch=64,
    tp=8,
    attention_dp=1,
    moe_ep=8,
    moe_tp=1,
    prefill=None,
    ttft_s=0.250,
    tpot_s=0.008,
)
AGG_RECORD = {
    "id": "r-agg",
    "backend_version": "0.5.9",
    "gemm_quant_mode": "fp8_block",
    "moe_quant_mode": "fp8_block",
    "batch_size": "64",
    "tp_size": "8",
    "pp_size": "1",
    "attention_dp_size": "1",
    "moe_tp_size": "1",
    "moe_ep_size": "8",
}
DISAGG = SiliconRow(
    id="r-disagg",
    engine="trtllm",
    model="moonshotai/Kimi-K2.5",
    system="gb200",
    precision="fp4",
    mode="disagg",
    isl=8192,
    osl=1024,
    batch=48,
    tp=8,
    attention_dp=1,
    moe_ep=8,
    moe_tp=1,
    prefill=(1, 4, 4, 1, 1),
    ttft_s=0.400,
    tpot_s=0.010,
)
DISAGG_RECORD = {
    "id": "r-disagg",
    "backend_version": "1.1.0-dev.2",
    "gemm_quant_mode": "nvfp4",
    "moe_quant_mode": "nvfp4",
    "prefill_batch_size": "1",
    "prefill_num_workers": "2",
    "prefill_tp_size": "1",
    "prefill_pp_size": "1",
    "prefill_attention_dp_size": "4",
    "prefill_moe_tp_size": "1",
    "prefill_moe_ep_size": "4",
    "decode_batch_size": "48",
    "decode_num_workers": "3",
    "decode_tp_size": "8",
    "decode_pp_size": "1",
    "decode_attention_dp_size": "1",
    "decode_moe_tp_size": "1",
    "decode_moe_ep_size": "8",
}
# the same row as the CSV has it when the workers' batch and count were not recorded
BARE = DISAGG._replace(id="r-bare", batch=0)
BARE_RECORD = {
    **DISAGG_RECORD,
    "id": "r-bare",
    **{k: "" for k in ("prefill_batch_size", "prefill_num_workers", "decode_batch_size", "decode_num_workers")},
}
RECORDS = {"r-agg": AGG_RECORD, "r-disagg": DISAGG_RECORD, "r-bare": BARE_RECORD}


def fake_peer(tmp_path=None, answer=fake_cli_estimate, resolve=lambda system, engine: f"default-{engine}"):
    cache = P.PeerCache(tmp_path / "peer.json") if tmp_path is not None else None
    return P.Peer(estimate=Recorder(answer), version="aiconfigurator test", resolve_version=resolve, cache=cache)


def test_an_aggregated_row_maps_to_its_fields_and_the_default_database():
    peer = fake_peer()
    est = P.peer_estimate(AGG, peer, record=AGG_RECORD)
    assert peer.estimate.calls == [
        dict(
            model_path="deepseek-ai/DeepSeek-R1",
            system_name="h200_sxm",
            mode="agg",
            backend_name="sglang",
            backend_version="default-sglang",  # the package's default slot, not the measured 0.5.9
            isl=1024,
            osl=512,
            gemm_quant_mode="fp8_block",
            moe_quant_mode="fp8_block",
            batch_size=64,
            tp_size=8,
            pp_size=1,
            attention_dp_size=1,
            moe_tp_size=1,
            moe_ep_size=8,
        )
    ]
    assert est == P.PeerEstimate(pytest.approx(0.1024), pytest.approx(0.0064), None, "default-sglang")
    assert est.estimated


def test_a_disaggregated_row_maps_each_workers_fields_and_no_top_level_ones():
    peer = fake_peer()
    P.peer_estimate(DISAGG, peer, record=DISAGG_RECORD)
    (call,) = peer.estimate.calls
    assert call == dict(
        model_path="moonshotai/Kimi-K2.5",
        system_name="gb200",
        mode="disagg",
        backend_name="trtllm",
        backend_version="default-trtllm",
        isl=8192,
        osl=1024,
        gemm_quant_mode="nvfp4",
        moe_quant_mode="nvfp4",
        prefill_tp_size=1,
        prefill_pp_size=1,
        prefill_attention_dp_size=4,
        prefill_moe_tp_size=1,
        prefill_moe_ep_size=4,
        prefill_batch_size=1,
        prefill_num_workers=2,
        decode_tp_size=8,
        decode_pp_size=1,
        decode_attention_dp_size=1,
        decode_moe_tp_size=1,
        decode_moe_ep_size=8,
        decode_batch_size=48,
        decode_num_workers=3,
    )


def test_absent_fields_are_left_out_and_a_recorded_zero_is_passed():
    """As aiconfigurator's script does: a field the CSV leaves empty is not passed (the API's default
    applies), an empty quantization mode is None, and a recorded 0 is passed as 0."""
    record = {**AGG_RECORD, "pp_size": "", "moe_tp_size": "0", "moe_ep_size": "0", "gemm_quant_mode": ""}
    args = P.estimate_args(AGG, record)
    assert "pp_size" not in args
    assert args["moe_tp_size"] == 0 and args["moe_ep_size"] == 0
    assert args["gemm_quant_mode"] is None and args["backend_version"] is None


def test_without_the_resolver_backend_version_none_reaches_the_call():
    peer = fake_peer(resolve=None)
    P.peer_estimate(AGG, peer, record=AGG_RECORD)
    assert peer.estimate.calls[0]["backend_version"] is None


def test_the_default_version_is_looked_up_once_per_system_and_engine():
    asked = []
    peer = fake_peer(resolve=lambda system, engine: asked.append((system, engine)) or "v")
    for i in range(3):
        P.peer_estimate(AGG._replace(id=f"a{i}", batch=i + 1), peer, record={**AGG_RECORD, "batch_size": str(i + 1)})
    P.peer_estimate(DISAGG, peer, record=DISAGG_RECORD)
    assert asked == [("h200_sxm", "sglang"), ("gb200", "trtllm")]
    assert len(peer.estimate.calls) == 4


def test_a_disaggregated_row_without_worker_batches_is_no_estimate_and_no_call():
    peer = fake_peer()
    est = P.peer_estimate(BARE, peer, record=BARE_RECORD)
    assert peer.estimate.calls == []
    assert est.ttft_s is None and est.tpot_s is None and not est.estimated
    assert est.reason == (
        "no estimate: disaggregated row without prefill_batch_size, prefill_num_workers, decode_batch_size, "
        "decode_num_workers"
    )


def test_what_the_package_raises_for_a_row_is_a_one_line_no_estimate():
    def missing_data(**kwargs):
        raise RuntimeError("perf database error: MoE data missing\n  at /x/lib/python3.11/site-packages/pkg/data/v1")

    peer = fake_peer(answer=missing_data)
    est = P.peer_estimate(AGG, peer, record=AGG_RECORD)
    assert est.reason == "no estimate: RuntimeError: perf database error: MoE data missing at pkg/data/v1"
    assert "\n" not in est.reason and est.backend_version == "default-sglang"


@pytest.mark.parametrize("ttft,tpot", [(None, 5.0), (float("nan"), 5.0), (10.0, 0.0), (10.0, float("inf"))])
def test_a_result_without_finite_positive_times_is_no_estimate(ttft, tpot):
    class Result:
        pass

    def answer(model_path, system_name, **kwargs):
        r = Result()
        r.ttft, r.tpot = ttft, tpot
        return r

    peer = P.Peer(estimate=answer, version="t")
    est = P.peer_estimate(AGG, peer, record=AGG_RECORD)
    assert not est.estimated and est.reason.startswith("no estimate: it returned ttft=")


def test_an_argument_the_api_does_not_take_is_our_bug_and_raises():
    def narrow(model_path, system_name, *, mode="agg", isl=1024, osl=1024):
        raise AssertionError("never called")

    with pytest.raises(TypeError, match="cli_estimate does not take these arguments"):
        P.peer_estimate(AGG, P.Peer(estimate=narrow, version="t"), record=AGG_RECORD)


def test_the_cache_answers_a_second_pass_without_a_call_and_keys_on_version_and_arguments(tmp_path):
    peer = fake_peer(tmp_path)
    first = P.peer_rows([AGG, DISAGG, BARE], peer=peer, records=RECORDS)
    assert len(peer.estimate.calls) == 2  # the bare row is answered without a call
    data = json.loads((tmp_path / "peer.json").read_text())
    assert set(data) == {"aiconfigurator test"} and set(data["aiconfigurator test"]) == {"r-agg", "r-disagg", "r-bare"}
    assert data["aiconfigurator test"]["r-agg"]["args"]["batch_size"] == 64

    again = fake_peer(tmp_path)  # a new process: the file only
    assert P.peer_rows([AGG, DISAGG, BARE], peer=again, records=RECORDS) == first
    assert again.estimate.calls == []

    other_version = fake_peer(tmp_path)
    other_version.version = "aiconfigurator other"
    P.peer_rows([AGG], peer=other_version, records=RECORDS)
    assert len(other_version.estimate.calls) == 1

    changed = fake_peer(tmp_path)  # the same row id with other arguments is asked again
    P.peer_estimate(AGG, changed, record={**AGG_RECORD, "batch_size": "32"})
    assert changed.estimate.calls[0]["batch_size"] == 32


def test_the_cache_path_defaults_under_the_users_cache_and_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("DBO_PEER_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert P.default_cache_path() == tmp_path / ".cache" / "dbo-sim" / "peer" / "estimates.json"
    monkeypatch.setenv("DBO_PEER_CACHE", str(tmp_path / "elsewhere.json"))
    assert P.default_cache_path() == tmp_path / "elsewhere.json"
    assert P.PeerCache().path == tmp_path / "elsewhere.json"


def test_an_unreadable_cache_file_is_started_afresh(tmp_path):
    (tmp_path / "peer.json").write_text("{not json")
    peer = fake_peer(tmp_path)
    assert P.peer_estimate(AGG, peer, record=AGG_RECORD).estimated
    peer.cache.save()
    assert "r-agg" in json.loads((tmp_path / "peer.json").read_text())["aiconfigurator test"]


def test_rows_carry_measured_values_estimates_and_signed_errors():
    progress = []
    checks = P.peer_rows(
        [AGG, DISAGG, BARE], lambda i, n, rid: progress.append((i, n, rid)), peer=fake_peer(), records=RECORDS
    )
    assert progress == [(1, 3, "r-agg"), (2, 3, "r-disagg"), (3, 3, "r-bare")]
    agg, dis, bare = checks
    assert (agg.gpu, agg.engine, agg.mode, agg.measured_version) == ("h200", "sglang", "agg", "0.5.9")
    assert agg.ttft_error == pytest.approx(0.1024 / 0.250 - 1)
    assert agg.tpot_error == pytest.approx(0.0064 / 0.008 - 1)
    assert dis.gpu == "gb200" and dis.tpot_error == pytest.approx(0.0048 / 0.010 - 1)
    assert bare.ttft_error is None and bare.tpot_error is None
    d = agg.to_dict()
    assert d["estimate_tpot_s"] == pytest.approx(0.0064) and d["tpot_error"] == pytest.approx(-0.2)
    assert "estimate" not in d and json.dumps(d)


def _check(id, gpu="h200", engine="sglang", mode="agg", ttft=None, tpot=None, m_ttft=1.0, m_tpot=1.0):
    est = P.PeerEstimate(ttft, tpot, None if ttft is not None else "no estimate: x")
    return P.PeerCheck(id, gpu, engine, mode, "m", 1, 1, 1, m_ttft, m_tpot, est)


def test_the_summary_groups_by_gpu_engine_mode_and_phase_with_signed_and_absolute_medians():
    checks = [
        _check("a", ttft=1.10, tpot=0.90),
        _check("b", ttft=0.80, tpot=0.95),
        _check("c", ttft=1.05, tpot=1.30),
        _check("d"),  # no estimate: counted in rows, not in the statistics
        _check("e", mode="disagg", ttft=2.0, tpot=0.5),
        _check("f", gpu="b200", engine="trtllm", mode="disagg"),
    ]
    s = {(x["gpu"], x["engine"], x["mode"], x["phase"]): x for x in P.peer_summary(checks)}
    assert list(s)[:2] == [("b200", "trtllm", "disagg", "ttft"), ("b200", "trtllm", "disagg", "tpot")]
    ttft = s["h200", "sglang", "agg", "ttft"]
    assert (ttft["rows"], ttft["estimated"]) == (4, 3)
    assert ttft["median_error"] == pytest.approx(0.05)  # of +10%, -20%, +5%
    assert ttft["median_abs_error"] == pytest.approx(0.10)
    assert ttft["max_error"] == pytest.approx(-0.20) and ttft["worst"] == "b"
    tpot = s["h200", "sglang", "agg", "tpot"]
    assert tpot["median_error"] == pytest.approx(-0.05) and tpot["max_error"] == pytest.approx(0.30)
    assert s["h200", "sglang", "disagg", "ttft"]["max_error"] == pytest.approx(1.0)
    none = s["b200", "trtllm", "disagg", "tpot"]
    assert (none["rows"], none["estimated"], none["median_error"], none["max_error"]) == (1, 0, None, None)

    text = P.format_peer(P.peer_summary(checks), P.no_estimate_reasons(checks))
    assert "h200   sglang  agg    ttft      4     3    +5.0%     10.0%    -20.0%" in text
    assert "b200   trtllm  disagg tpot      1     0        -         -         -" in text
    assert "no estimate for 2 rows" in text and "      2  x" in text


def test_reasons_that_differ_only_in_a_rows_details_are_one_line():
    moe = "no estimate: PerfDataNotAvailableError: perf database error: MoE data missing for MoeKey {{ tp: {} }} at "
    folder = "aiconfigurator_core/systems/data/b200_sxm/vllm/0.24.0"
    reasons = {moe.format(1) + folder: 3, moe.format(2) + folder: 2, "no estimate: a": 1, "no estimate: b": 1}
    folded = "PerfDataNotAvailableError: perf database error: MoE data missing for MoeKey {...}"
    assert P.reason_kind(moe.format(1) + folder) == folded
    offline = "no estimate: HuggingFaceDownloadError: Failed to download m's config.json: <urlopen error [Errno -2] x>"
    assert P.reason_kind(offline) == "HuggingFaceDownloadError: Failed to download m's config.json: offline"
    assert len(P.reason_kind("no estimate: " + "x" * 300)) == 110
    text = P.format_peer([], reasons, top=2)
    assert text.splitlines()[2:] == [
        "no estimate for 7 rows; the most common reasons (no estimate: ...):",
        "      5  " + folded,
        "      1  a",
        "      1  1 other reasons",
    ]


def test_a_phase_without_a_measured_value_is_not_counted():
    s = P.peer_summary([_check("a", ttft=1.0, tpot=1.0, m_ttft=None)])
    assert [(x["phase"], x["rows"]) for x in s] == [("tpot", 1)]


def test_without_the_extra_the_error_is_one_line_naming_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "aiconfigurator", None)  # import aiconfigurator -> ImportError
    monkeypatch.setitem(sys.modules, "aiconfigurator.cli", None)
    monkeypatch.setitem(sys.modules, "aiconfigurator.cli.api", None)
    with pytest.raises(P.PeerError) as e:
        P.load_peer()
    assert str(e.value) == P.INSTALL_HINT and "\n" not in str(e.value) and "'.[peer]'" in str(e.value)
    with pytest.raises(P.PeerError):
        P.peer_estimate(AGG, record=AGG_RECORD)


def test_the_adapter_imports_no_aiconfigurator_at_import_time():
    import subprocess

    code = "import sys, demos.fidelity.peer; print(any(m.startswith('aiconfigurator') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.measured
@needs_tables
def test_every_silicon_rows_csv_line_agrees_with_the_row():
    """The CSV line the mapping reads beside each ``SiliconRow`` is that row's: every field the row
    carries is the line's (an absent size read as 0)."""
    records = P.silicon_records()
    rows = measured.silicon_rows()
    assert len(records) == len(rows)

    def size(r, name):
        return int(float(r[name])) if r[name] else 0

    for row in rows:
        r = records[row.id]
        assert (r["model_path"], r["system"], r["mode"], r["backend"]) == (row.model, row.system, row.mode, row.engine)
        assert (size(r, "isl"), size(r, "osl")) == (row.isl, row.osl)
        p = "decode_" if row.mode == "disagg" else ""
        assert (row.batch, row.tp, row.attention_dp, row.moe_ep, row.moe_tp) == tuple(
            size(r, p + f) for f in ("batch_size", "tp_size", "attention_dp_size", "moe_ep_size", "moe_tp_size")
        )
        if row.mode == "disagg":
            fields = ("tp_size", "attention_dp_size", "moe_ep_size", "moe_tp_size", "batch_size")
            assert row.prefill == tuple(size(r, "prefill_" + f) for f in fields)


@pytest.mark.slow
def test_the_real_package_estimates_a_row_as_backend_version_none_does(tmp_path):
    pytest.importorskip("aiconfigurator")
    rows = {r.id: r for r in measured.silicon_rows()}
    records = P.silicon_records()
    row = next(
        r
        for r in rows.values()
        if (r.model, r.system, r.engine, r.mode) == ("deepseek-ai/DeepSeek-R1", "h200_sxm", "sglang", "agg")
        and records[r.id]["batch_size"]
    )
    peer = P.load_peer(tmp_path / "peer.json")
    est = P.peer_estimate(row, peer)
    assert est.estimated, est.reason
    assert est.backend_version == "0.5.14"
    assert 0 < est.tpot_s < est.ttft_s + 1.0

    # what the adapter passes for backend_version is what None resolves to inside the call
    from aiconfigurator.cli.api import cli_estimate

    with P._quiet():
        plain = cli_estimate(**P.estimate_args(row, records[row.id]))
    assert (plain.ttft * 1e-3, plain.tpot * 1e-3) == pytest.approx((est.ttft_s, est.tpot_s))
    peer.cache.save()
    assert row.id in json.loads((tmp_path / "peer.json").read_text())[peer.version]
