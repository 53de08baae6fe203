"""Racks and hosts as users type them (issue 47, item 3; issue 46): a node is one host (a GB200 compute tray of
4, an HGX H100 of 8), so a GB200 NVL72 rack typed as one node of 72 is predicted as its 18 hosts, with launch
lines for 18 hosts and a line saying so (a host typed larger than its server otherwise is refused); and the
reason line measures the all-to-all as the table does, also where its kernels hold the SMs for all of it (an EP
group within one host)."""

from __future__ import annotations

import json

import pytest

from demos.errors import ConfigError
from demos.predict import PROG, main
from demos.prediction import predict

pytestmark = pytest.mark.timeout(180)

RACK_AS_ONE_HOST = ["--model", "kimi-k2", "--gpu", "gb200", "--nodes", "1", "--gpus-per-node", "72", "--ep", "72"]
RACK_NOTE = (
    f"{PROG}: --gpus-per-node 72 is one NVL72 rack: predicted as --nodes 18 (4 GPUs per node, one gb200 host each)\n"
)


def test_a_gb200_rack_typed_as_one_node_is_predicted_as_its_18_hosts(tmp_path, capsys):
    """Issue 46 names the rack as users do (``--gpus-per-node 72``); a node is still a host: the answer is that
    of 18 hosts of 4, the same as typing them, and one stderr line says so."""
    typed, hosts = tmp_path / "typed.json", tmp_path / "hosts.json"
    assert main([*RACK_AS_ONE_HOST, "--tokens", "8", "--json", str(typed)]) == 0
    assert capsys.readouterr().err.startswith(RACK_NOTE)
    args = ["--model", "kimi-k2", "--gpu", "gb200", "--nodes", "18", "--ep", "72", "--tokens", "8"]
    assert main([*args, "--json", str(hosts)]) == 0
    assert "NVL72 rack" not in capsys.readouterr().err
    got, want = json.loads(typed.read_text()), json.loads(hosts.read_text())
    assert (got["nodes"], got["gpus_per_node"], got["ep"]) == (18, 4, 72)
    # the same answer; the basis line repeats the cluster as typed, for the serving command it suggests
    assert "--gpus-per-node 72" in got["recommendation"].pop("basis")
    assert "--nodes 18" in want["recommendation"].pop("basis")
    assert got == want
    rack = predict("kimi-k2", gpu="gb200", nodes=1, gpus_per_node=72, ep=72, tokens=[8])
    typed_py = json.loads(json.dumps(rack.to_dict()))
    typed_py["recommendation"].pop("basis")
    assert got == typed_py
    # the launch lines are those of 18 hosts: 4 data-parallel ranks on each, SGLang on 18 nodes
    rec = rack.recommendation
    assert "--data-parallel-size-local 4" in rec.vllm and "--nnodes 18" in rec.sglang


def test_a_host_typed_larger_than_its_server_that_is_not_whole_racks_is_refused():
    with pytest.raises(ConfigError) as info:
        predict("kimi-k2", gpu="gb200", nodes=1, gpus_per_node=36, ep=36, tokens=[8])
    assert (
        str(info.value)
        == "gpus_per_node 36 is 9 hosts of 4 (one gb200 host holds 4 GPUs): use nodes 9 (4 GPUs per node) for 36 GPUs"
    )
    with pytest.raises(ConfigError, match="one h200 host holds 8 GPUs"):
        predict("deepseek-v3", gpu="h200", nodes=1, gpus_per_node=16, ep=16, tokens=[8])


def test_the_reason_line_measures_the_all_to_all_as_the_table_does_within_one_host():
    # EP 8 on one HGX H200: each low-latency kernel is the single-node kernel, held on the SMs but for the
    # busiest rank's excess, so the comm engine sees almost nothing while the table's stages show it all
    pred = predict("deepseek-v3", gpu="h200", nodes=1, ep=8, tokens=[64])
    (p,) = pred.points
    a2a = p.stages["dispatch"] + p.stages["combine"]
    assert a2a > 0.05 * p.step_no_dbo_s  # not nothing: the table shows it
    reason = pred.recommendation.reasons["graph"]
    assert f"the all-to-all is {a2a / p.step_no_dbo_s:.0%} of the step ({a2a * 1e3:.2f} ms)" in reason, reason
    assert "hold the SMs for all but" in reason and "within one node" in reason
    assert "nothing in flight for DBO to hide" in reason
