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
    """Memory figures are taken relative to a baseline read after a flush: earlier tests of the same
    process may still hold device memory (live tensors, segments in use), which is not this test's."""
    import gc

    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base_reserved = torch.cuda.memory_reserved()
    m = WorkspaceManager("cuda", 1)
    (v,) = m.get_simultaneous(((64 * MiB,), torch.uint8))
    del v
    assert torch.cuda.memory_reserved() - base_reserved >= 64 * MiB
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
    grown = torch.cuda.memory_reserved() - base_reserved
    assert grown <= 128 * MiB + 32 * MiB, f"{grown / MiB:.1f} MiB reserved over the baseline"
    del v, m


def test_growth_reserves_no_more_than_the_new_size_while_other_memory_is_held() -> None:
    """The same check with memory held by someone else during the whole test (as earlier tests of a
    full run may leave it): the baseline absorbs it."""
    held = torch.empty(96 * MiB, dtype=torch.uint8, device="cuda")
    try:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        base_reserved = torch.cuda.memory_reserved()
        assert base_reserved >= 96 * MiB
        m = WorkspaceManager("cuda", 1)
        (v,) = m.get_simultaneous(((64 * MiB,), torch.uint8))
        del v
        (v,) = m.get_simultaneous(((128 * MiB,), torch.uint8))
        grown = torch.cuda.memory_reserved() - base_reserved
        assert 128 * MiB <= grown <= 128 * MiB + 32 * MiB, f"{grown / MiB:.1f} MiB reserved over the baseline"
        del v, m
    finally:
        del held
        torch.cuda.empty_cache()
