"""The engine lines on AMD GPUs and on EFA (issue 46): MoRI's backends in vLLM's and SGLang's lines with what
SGLang's server args need, ATOM's line beside them (one host only, its flags read from its pinned release), the
hardware queues an overlap needs on HIP, DeepEP V2's backend on EFA's GPU-initiated path, and the JSON keeping
the network and the ATOM line."""

from __future__ import annotations

import pytest

from demos.errors import ConfigError
from demos.prediction import predict
from demos.prediction.engines import Deployment, overlap_flags, serve_lines
from demos.prediction.engines._releases import ATOM_FLAGS, ATOM_VERSION
from demos.vocabulary import Overlap

pytestmark = pytest.mark.timeout(180)


def _deployment(*, vendor="amd", nodes=1, network="ib", phase="decode", schedule="ll"):
    return Deployment(
        "deepseek-ai/DeepSeek-R1", nodes * 8, nodes * 8, 8, nodes, 1, phase, schedule, vendor=vendor, network=network
    )


def _lines(overlap, **kw):
    return serve_lines(_deployment(**kw), overlap, 64 if overlap == Overlap.DBO else None)


def test_amd_lines_run_mori_and_atom_runs_on_one_host():
    two = _lines(Overlap.DBO, nodes=2)
    assert "--all2all-backend mori" in two.vllm and "--all2all-backend deepep" not in two.vllm
    assert "--moe-a2a-backend mori --deepep-mode low_latency" in two.sglang
    # SGLang asserts its default chunked prefill (16,384 on these GPUs) fits MoRI's dispatch buffer (4,096 by default)
    assert "SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK=16384" in two.sglang
    assert "MORI_SHMEM_MODE=ISOLATION" in two.sglang
    assert two.atom.startswith("# not expressible in ATOM") and "one host" in two.atom
    assert two.atom_version == ATOM_VERSION
    one = _lines(Overlap.DBO)
    assert one.atom.startswith("GPU_MAX_HW_QUEUES=5 MORI_SHMEM_MODE=ISOLATION python -m atom.entrypoints.openai_server")
    assert "--enable-tbo all" in one.atom and "--enable-dp-attention --enable-expert-parallel" in one.atom
    flags = {w for w in one.atom.split() if w.startswith("-") and w != "-m"}
    assert flags <= ATOM_FLAGS
    assert "GPU_MAX_HW_QUEUES=5" in one.sglang  # five streams, four queues
    # vLLM 0.34.0 asserts DBO's backend on ROCm (DeepEP's, NIXL-EP's, all-gather/reduce-scatter): not MoRI's
    assert one.vllm.startswith("# vLLM 0.34.0 runs DBO on ROCm with the") and "not mori" in one.vllm
    assert "--enable-dbo" not in one.vllm and "--all2all-backend mori" in one.vllm
    prefill = _lines(Overlap.DBO, phase="prefill", schedule="ht")
    assert prefill.atom.endswith("--enable-tbo") and "--all2all-backend" not in prefill.atom
    off = _lines(Overlap.NONE)
    assert "--enable-tbo" not in off.atom and "GPU_MAX_HW_QUEUES" not in off.atom + off.sglang + off.vllm


def test_sglangs_single_batch_overlap_is_refused_with_mori_and_nvidia_lines_have_no_atom():
    sbo = _lines(Overlap.SBO)
    assert sbo.sglang.startswith("#") and "MoRI dispatcher" in sbo.sglang
    assert "--enable-single-batch-overlap" not in sbo.sglang
    flags = overlap_flags(_deployment())  # what the flags line says matches the lines
    assert "not mori" in flags["dbo"] and "--enable-dbo with" not in flags["dbo"]
    gda = overlap_flags(_deployment(vendor="nvidia", nodes=2, network="efa-gda"))
    assert "not deepep_v2" in gda["dbo"] and "no two-batch overlap with --moe-a2a-backend deepep_v2" in gda["dbo"]
    nv = _lines(Overlap.DBO, vendor="nvidia")
    assert nv.atom == "" and nv.atom_version == "" and "--moe-a2a-backend deepep " in nv.sglang


def test_efa_lines_name_what_the_network_needs():
    gda = _lines(Overlap.DBO, vendor="nvidia", nodes=2, network="efa-gda")
    assert "--all2all-backend deepep_v2" in gda.vllm and "--enable-dbo" not in gda.vllm  # not a DBO backend
    assert gda.vllm.startswith("# vLLM 0.34.0 runs DBO on CUDA with the") and "not deepep_v2" in gda.vllm
    assert "--moe-a2a-backend deepep_v2" in gda.sglang
    assert gda.sglang.startswith("#") and "--enable-two-batch-overlap" not in gda.sglang  # its args refuse TBO
    proxy = _lines(Overlap.DBO, vendor="nvidia", nodes=2, network="efa")
    assert "--all2all-backend deepep_low_latency" in proxy.vllm
    assert any("UCCL-EP" in n for n in proxy.notes)


def test_the_json_keeps_the_network_and_the_atom_line_only_where_there_is_one():
    amd = predict("deepseek-r1", gpu="mi355x", nodes=1, ep=8, tokens=[64]).to_dict()
    assert amd["recommendation"]["atom"].splitlines()[-1].startswith("MORI_SHMEM_MODE=ISOLATION")
    assert amd["recommendation"]["engines"]["atom"] == ATOM_VERSION and amd["network"] == "ib"
    efa = predict("deepseek-r1", gpu="h200", nodes=2, ep=16, network="efa", tokens=[64]).to_dict()
    assert efa["network"] == "efa" and "atom" not in efa["recommendation"]
    assert "over efa" in efa["title"] and "--network efa" in efa["recommendation"]["basis"]
    with pytest.raises(ConfigError, match="EFA serves NVIDIA GPUs"):
        predict("deepseek-r1", gpu="mi355x", nodes=2, ep=16, network="efa", tokens=[64])
