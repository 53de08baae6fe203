"""Stream layer: the inline backend (kernels run at launch, on the launching thread)."""

from __future__ import annotations

import pytest
import torch

from dbo.costs import Transfer
from dbo.streams import InlineBackend
from dbo.trace import Tracer

# --- inline --------------------------------------------------------------------------------------


def test_inline_runs_synchronously_and_raises_at_once():
    tr = Tracer()
    with InlineBackend(tracer=tr) as b:
        s = b.new_stream("s")
        x = torch.zeros(1)
        s.launch(torch.Tensor.fill_, x, 3.0)
        assert x.item() == 3.0  # before any synchronize
        with pytest.raises(ZeroDivisionError):
            s.launch(lambda: 1 / 0)
        s.launch(torch.Tensor.fill_, x, 4.0)  # the stream does not become failed
        ev = b.new_event()
        ev.record(s)
        assert ev.query() and ev.time is not None
        assert [k.name for k in tr.records] == ["fill_", "<lambda>", "fill_"]
        assert b.kernel_seconds("comm", Transfer(150e6), ()) == pytest.approx(3e-6 + 1e-3)
