"""Token-balanced splitting and merging."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dbo.split import merge_outputs, slice_tensor, split_batch, split_tokens


def test_split_tokens_last_takes_the_remainder():
    assert split_tokens(10, 3) == [range(0, 3), range(3, 6), range(6, 10)]
    assert split_tokens(8, 2) == [range(0, 4), range(4, 8)]
    assert split_tokens(1, 1) == [range(0, 1)]


def test_split_tokens_rejects_empty_ubatches_and_bad_types():
    with pytest.raises(ValueError, match="at least one token"):
        split_tokens(3, 4)
    with pytest.raises(ValueError):
        split_tokens(4, 0)
    with pytest.raises(TypeError):
        split_tokens(4.0, 2)


def test_straddling_request_appears_in_both_ubatches():
    u0, u1 = split_batch([5, 10, 1], 2)  # 16 tokens, cut at 8: request 1 straddles
    assert (u0.tokens, u0.requests, u0.query_lens, u0.first_offset) == (range(0, 8), range(0, 2), (5, 3), 0)
    assert (u1.tokens, u1.requests, u1.query_lens, u1.first_offset) == (range(8, 16), range(1, 3), (7, 1), 3)
    assert u1.straddles_start and not u0.straddles_start


def test_cut_on_a_request_boundary_does_not_straddle():
    u0, u1 = split_batch([4, 4], 2)
    assert u0.requests == range(0, 1) and u1.requests == range(1, 2) and u1.first_offset == 0


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=1, max_size=20), st.integers(1, 8))
def test_split_batch_covers_every_token_once(lens, n):
    total = sum(lens)
    if total < n:
        with pytest.raises(ValueError):
            split_batch(lens, n)
        return
    slices = split_batch(lens, n)
    assert [s.ubatch_id for s in slices] == list(range(n))
    per_request = [0] * len(lens)
    for s in slices:
        assert sum(s.query_lens) == s.num_tokens > 0
        for r, q in zip(s.requests, s.query_lens):
            per_request[r] += q
    assert per_request == lens
    sizes = [s.num_tokens for s in slices]
    assert all(sz == total // n for sz in sizes[:-1]) and sizes[-1] == total - (n - 1) * (total // n)


def test_slice_and_merge_round_trip_with_tuples_and_none():
    x = torch.arange(20).reshape(10, 2)
    parts = slice_tensor(x, split_tokens(10, 3))
    assert all(p.untyped_storage().data_ptr() == x.untyped_storage().data_ptr() for p in parts)  # views
    assert torch.equal(merge_outputs(parts), x)
    merged = merge_outputs([(p, None, [p * 2]) for p in parts])
    assert torch.equal(merged[0], x) and merged[1] is None and torch.equal(merged[2][0], x * 2)
    with pytest.raises(ValueError):
        merge_outputs([(x,), (x, x)])
    with pytest.raises(ValueError):
        merge_outputs([None, x])
    with pytest.raises(TypeError):
        merge_outputs(["a", "b"])
