"""Racks and hosts as users type them (issue 47, item 3): a node is one host (a GB200 compute tray of 4, an
HGX H100 of 8), so a GB200 NVL72 rack typed as one host of 72 is refused with the spelling of its 18 hosts,
which predicts the rack and prints launch lines for 18 hosts; and the reason line measures the all-to-all
as the table does, also where its kernels hold the SMs for all of it (an EP group within one host)."""

from __future__ import annotations

import json
import re

import pytest

from demos.errors import ConfigError
from demos.predict import PROG, main
from demos.prediction import predict

pytestmark = pytest.mark.timeout(180)

RACK_AS_ONE_HOST = ["--model", "kimi-k2", "--gpu", "gb200", "--nodes", "1", "--gpus-per-node", "72", "--ep", "72"]
REFUSAL = (
    f"{PROG}: error: --gpus-per-node 72 is a whole NVL72 rack of 18 hosts of 4 (one gb200 host holds 4 GPUs): "
    "use --nodes 18 (4 GPUs per node) for one rack\n"
)


def test_a_gb200_rack_typed_as_one_host_is_refused_with_the_spelling_of_its_18_hosts(tmp_path, capsys):
    assert main([*RACK_AS_ONE_HOST, "--tokens", "8"]) == 2
    assert capsys.readouterr().err == REFUSAL
    # the spelling it names, run as said, is the rack: 18 hosts of 4 on one NVLink domain
    nodes, per = re.search(r"use --nodes (\d+) \((\d+) GPUs per node\)", REFUSAL).groups()
    path = tmp_path / "rack.json"
    args = ["--model", "kimi-k2", "--gpu", "gb200", "--nodes", nodes, "--ep", "72", "--tokens", "8"]
    assert main([*args, "--json", str(path)]) == 0
    capsys.readouterr()
    got = json.loads(path.read_text())
    assert (got["nodes"], got["gpus_per_node"], got["ep"]) == (18, 4, 72) and int(per) == 4
    rack = predict("kimi-k2", gpu="gb200", nodes=18, ep=72, tokens=[8])
    assert got == json.loads(json.dumps(rack.to_dict()))
    # the launch lines are those of 18 hosts: 4 data-parallel ranks on each, SGLang on 18 nodes
    rec = rack.recommendation
    assert "--data-parallel-size-local 4" in rec.vllm and "--nnodes 18" in rec.sglang


def test_a_rack_typed_as_one_host_is_the_same_refusal_from_python():
    with pytest.raises(ConfigError) as info:
        predict("kimi-k2", gpu="gb200", nodes=1, gpus_per_node=72, ep=72, tokens=[8])
    assert str(info.value) == (
        "gpus_per_node 72 is a whole NVL72 rack of 18 hosts of 4 (one gb200 host holds 4 GPUs): "
        "use nodes 18 (4 GPUs per node) for one rack"
    )


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
