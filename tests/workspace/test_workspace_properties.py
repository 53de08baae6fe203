"""Property tests: random requests are laid out aligned, in order, disjoint, inside the slot, exactly sized."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dbo.registry import use_ubatch
from demos.bench import reference_views
from tests.support.views import start_of
from workspace import WorkspaceManager
from workspace.layout import align_up, canonical_request, plan

DTYPES = [
    torch.uint8,
    torch.int8,
    torch.bool,
    torch.float16,
    torch.bfloat16,
    torch.int32,
    torch.float32,
    torch.int64,
    torch.float64,
    torch.complex128,
]

shapes = st.lists(st.integers(min_value=0, max_value=40), min_size=0, max_size=4)
shape_forms = shapes.flatmap(lambda s: st.sampled_from([tuple(s), list(s), torch.Size(s)]))
specs = st.tuples(st.one_of(shape_forms, st.integers(min_value=0, max_value=500)), st.sampled_from(DTYPES))
requests = st.lists(specs, min_size=0, max_size=8)


def as_shape(shape) -> tuple[int, ...]:
    return (shape,) if isinstance(shape, int) else tuple(shape)


@settings(deadline=None, max_examples=100)
@given(request=requests, ubatch=st.integers(min_value=0, max_value=2))
def test_random_requests_layout(request, ubatch) -> None:
    m = WorkspaceManager("cpu", 3)
    with use_ubatch(ubatch):
        views = m.get_simultaneous(*request)
        again = m.get_simultaneous(*request)
    assert len(views) == len(request)
    assert all(a is b for a, b in zip(views, again))
    base, capacity = m.slot_ranges()[ubatch]
    expected_total = sum(align_up(torch.Size(as_shape(s)).numel() * d.itemsize) for s, d in request)
    assert m.slot_sizes() == [expected_total] * 3
    cursor = 0
    prev_end = base
    for v, (shape, dtype) in zip(views, request):
        size = v.numel() * v.element_size()
        start = start_of(v)
        assert tuple(v.shape) == as_shape(shape) and v.dtype == dtype and v.is_contiguous()
        assert size == torch.Size(as_shape(shape)).numel() * dtype.itemsize
        assert start - base == cursor, "offsets must be the running sum of sizes rounded up to 256"
        assert (start - base) % 256 == 0
        assert start >= prev_end, "views overlap or are out of request order"
        assert start + size <= base + capacity, "view outside its slot"
        prev_end = start + size
        cursor += align_up(size)
    other = [r for i, r in enumerate(m.slot_ranges()) if i != ubatch]
    for v in views:
        if v.numel():
            assert all(not (b <= start_of(v) < b + n) for b, n in other), "view inside a sibling's slot"


@settings(deadline=None, max_examples=50)
@given(request=st.lists(st.tuples(shapes.map(tuple), st.sampled_from(DTYPES)), min_size=1, max_size=8))
def test_matches_the_plain_reference_algorithm(request) -> None:
    m = WorkspaceManager("cpu", 1)
    views = m.get_simultaneous(*request)
    layout = plan(canonical_request(request))
    assert m.slot_sizes() == [layout.total]
    buf = torch.empty(layout.total, dtype=torch.uint8)
    ref = reference_views(buf, request)
    for v, r in zip(views, ref):
        assert v.shape == r.shape and v.dtype == r.dtype and v.stride() == r.stride()
        assert start_of(v) - m.slot_ranges()[0][0] == start_of(r) - buf.data_ptr()
