"""The real-weights limit: a share of the device's free memory on cuda, fixed on the CPU backends.
On a CPU, torch.cuda is faked (is_available, current_device, mem_get_info)."""

from __future__ import annotations

import pytest
import torch

from demos.toy.config import ConfigError, OverlapConfig, resolve
from demos.toy.footprint import REAL_LIMIT_BYTES, REAL_LIMIT_FRACTION, real_limit

GiB = 1 << 30
BIG = dict(tokens=4096, hidden=2048)  # ~4.4 GiB of float32 weights: over the fixed 4 GiB


def fake_cuda(mp: pytest.MonkeyPatch, free: int, total: int = 141 * GiB, index: int = 0) -> list:
    asked = []
    mp.setattr(torch.cuda, "is_available", lambda: True)
    mp.setattr(torch.cuda, "current_device", lambda: index)
    mp.setattr(torch.cuda, "mem_get_info", lambda device=None: (asked.append(device), (free, total))[1])
    return asked


def test_cpu_backends_keep_the_fixed_limit():
    assert real_limit("threads") == (REAL_LIMIT_BYTES, "the fixed limit for real tensors on the CPU backends")
    with pytest.raises(ConfigError) as info:
        resolve(OverlapConfig(backend="threads", **BIG))
    msg = str(info.value)
    assert "\n" not in msg and "4.4 GiB of weights" in msg and "4.0 GiB limit" in msg and "backend virtual" in msg


def test_cuda_limit_is_a_share_of_the_free_memory(monkeypatch):
    asked = fake_cuda(monkeypatch, free=130 * GiB, index=1)
    limit, why = real_limit("cuda")
    assert limit == int(130 * GiB * REAL_LIMIT_FRACTION) and asked == [1]
    assert "130.0 GiB free of 141.0 GiB on cuda:1" in why
    res = resolve(OverlapConfig(backend="cuda", **BIG))  # over the CPU limit, well under the GPU's
    assert res.backend == "cuda" and res.model.device == "cuda" and not res.meta


def test_cuda_refuses_weights_over_the_share_and_names_the_numbers(monkeypatch):
    fake_cuda(monkeypatch, free=6 * GiB, total=80 * GiB)
    with pytest.raises(ConfigError) as info:
        resolve(OverlapConfig(backend="cuda", **BIG))
    msg = str(info.value)
    assert "\n" not in msg
    for part in ("4.4 GiB of weights", "3.0 GiB limit", "6.0 GiB free of 80.0 GiB on cuda:0", "backend virtual"):
        assert part in msg, (part, msg)
    # a small model fits in the same free memory
    assert resolve(OverlapConfig(backend="cuda")).backend == "cuda"


def test_a_failed_memory_query_is_a_one_line_config_error(monkeypatch):
    fake_cuda(monkeypatch, free=0)

    def broken(device=None):
        raise RuntimeError("CUDA error: out of memory\nmore lines")

    monkeypatch.setattr(torch.cuda, "mem_get_info", broken)
    with pytest.raises(ConfigError, match=r"could not read the free memory of cuda:0: CUDA error: out of memory$"):
        resolve(OverlapConfig(backend="cuda"))


# --- the activations: what grows with the tokens (issue 24) --------------------------------------------------


def test_virtual_goes_meta_when_the_activations_would_not_fit():
    # small weights, two million tokens: the states and buffers alone are tens of GB
    res = resolve(OverlapConfig(backend="virtual", tokens=2_000_000, layers=2))
    assert res.meta and any("activations" in n for n in res.notes)


def test_real_tensors_refuse_a_run_over_the_available_memory_with_the_estimate(monkeypatch):
    import demos.toy.footprint as fp

    monkeypatch.setattr(fp, "available_bytes", lambda backend: 8 * GiB)
    with pytest.raises(ConfigError) as info:
        resolve(OverlapConfig(backend="threads", tokens=2_000_000, layers=2))
    msg = str(info.value)
    assert "\n" not in msg and "8.0 GiB available" in msg and "GiB that grow with tokens" in msg


@pytest.mark.slow
def test_the_estimate_is_close_above_what_the_model_allocates():
    import gc
    import warnings

    import workspace
    from demos.toy.runner import Runner

    cfg = OverlapConfig(backend="virtual", tokens=2048, hidden=256, experts=16, topk=4, steps=1, warmup=1)
    res = resolve(cfg)
    r = Runner(cfg, res)
    try:
        r.step(False, False)
        r.step(True, False)
        seen, total = set(), 0
        with warnings.catch_warnings():  # the scan touches deprecated module attributes of torch
            warnings.simplefilter("ignore", FutureWarning)
            tensors = [o for o in gc.get_objects() if isinstance(o, torch.Tensor)]
        for o in tensors:
            if o.device.type == "cpu":
                st = o.untyped_storage()
                if st.data_ptr() not in seen:
                    seen.add(st.data_ptr())
                    total += st.nbytes()
    finally:
        r.close()
        workspace.reset_workspace_manager()
    est = res.model.activation_bytes(cfg.ubatches, cfg.schedule) + res.model.weight_bytes()
    assert total <= est <= 1.5 * total
