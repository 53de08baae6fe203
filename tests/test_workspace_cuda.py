"""WorkspaceManager on a CUDA device (skipped without one): absolute alignment, cache flush, peak memory."""

from __future__ import annotations

import pytest
import torch

from workspace import WorkspaceManager

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

MiB = 1 << 20


def test_views_are_256_byte_aligned_on_the_device() -> None:
    m = WorkspaceManager("cuda", 2)
    views = m.get_simultaneous(((3,), torch.int8), ((17,), torch.float32), ((5, 7), torch.bfloat16))
    assert all(v.device.type == "cuda" for v in views)
    assert [v.data_ptr() % 256 for v in views] == [0, 0, 0]


def test_growth_flushes_the_cache_and_peaks_at_the_new_size(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    m = WorkspaceManager("cuda", 1)
    (v,) = m.get_simultaneous(((64 * MiB,), torch.uint8))
    del v
    calls = []
    real_empty_cache = torch.cuda.empty_cache
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: (calls.append(1), real_empty_cache()))
    torch.cuda.reset_peak_memory_stats()
    base_alloc = torch.cuda.memory_allocated() - 64 * MiB
    (v,) = m.get_simultaneous(((128 * MiB,), torch.uint8))
    assert calls, "growth on CUDA must call torch.cuda.empty_cache() between free and allocate"
    peak = torch.cuda.max_memory_allocated() - base_alloc
    assert peak <= 128 * MiB + MiB, f"peak {peak / MiB:.1f} MiB: old and new were resident together"
    # Without the flush the freed 64 MiB block would stay reserved next to the new 128 MiB one.
    assert torch.cuda.memory_reserved() <= 128 * MiB + 32 * MiB
    del v, m
