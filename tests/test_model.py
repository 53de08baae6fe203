"""demos.moe.model and demos.moe.comm: the workspace patterns, standalone use, the transport interface."""

from __future__ import annotations

import pytest
import torch

import dbo
import workspace
from demos.moe.comm import ModelledLinkTransport, Transport, wire_dtype_for
from demos.moe.model import ModelConfig, ToyMoE, kernel_name, parse_kernel_name

CFG = ModelConfig(layers=2, tokens=16, hidden=32, experts=4, topk=2, shared_chunk=6)


@pytest.fixture
def manager():
    m = workspace.init_workspace_manager("cpu", num_ubatches=2)
    yield m
    workspace.reset_workspace_manager()


class Spy:
    """Records every get_simultaneous request and the views it returned."""

    def __init__(self, m, monkeypatch):
        self.calls = []
        real = m.get_simultaneous

        def spy(*specs):
            views = real(*specs)
            self.calls.append((specs, views))
            return views

        monkeypatch.setattr(m, "get_simultaneous", spy)


def _ranges(views):
    return [(v.data_ptr(), v.data_ptr() + v.numel() * v.element_size()) for v in views]


@pytest.mark.parametrize("schedule", ["ll", "ht"])
def test_standalone_forward_uses_the_reference_workspace_patterns(manager, monkeypatch, schedule):
    spy = Spy(manager, monkeypatch)
    model = ToyMoE(CFG, ModelledLinkTransport(), num_slots=2, schedule=schedule)
    moe = []
    real_moe = model._moe_workspace
    monkeypatch.setattr(model, "_moe_workspace", lambda *a: moe.append(real_moe(*a)) or moe[-1])
    out = model.forward(range(0, CFG.tokens))  # no orchestrator: the default inline stream, dbo_* no-ops
    assert torch.isfinite(out).all()
    # four requests per layer: attention context, attention query, router, MoE
    assert len(spy.calls) == 4 * CFG.layers
    ctx, query = spy.calls[0][1], spy.calls[1][1]
    # the query attention's output lands exactly where the context attention's output was
    assert ctx[0].data_ptr() == query[0].data_ptr() and ctx[0].shape == query[0].shape
    assert ctx[1].data_ptr() == query[1].data_ptr()
    # MoE: workspace13 and fused_out share one region; workspace2 and the rest are separate
    mw = moe[0]
    assert mw.ws13.data_ptr() == mw.fused_out.data_ptr()
    (c0, c1), (w0, w1) = _ranges([mw.ws13])[0], _ranges([mw.ws2])[0]
    assert c1 <= w0 or w1 <= c0
    # the shared expert's max-size chunk buffer: sized for a full chunk, used sliced
    assert mw.sh_h.shape[0] == CFG.shared_chunk and CFG.tokens % CFG.shared_chunk != 0


def test_views_are_carved_from_the_callers_slot(manager):
    model = ToyMoE(CFG, ModelledLinkTransport(), num_slots=2)
    with dbo.UBatchOrchestrator(2, backend="virtual") as orch:
        orch.run(model.forward, dbo.split_tokens(CFG.tokens, 2))
    ranges = manager.slot_ranges()
    assert all(n > 0 for _, n in ranges) and ranges[0][0] != ranges[1][0]


def test_forward_without_a_workspace_manager_fails_clearly():
    workspace.reset_workspace_manager()
    model = ToyMoE(CFG, ModelledLinkTransport(), num_slots=1)
    with pytest.raises(RuntimeError, match="workspace manager is not initialised"):
        model.forward(range(0, CFG.tokens))


def test_config_validation():
    with pytest.raises(ValueError, match="topk"):
        ToyMoE(ModelConfig(experts=2, topk=3), ModelledLinkTransport(), num_slots=1)
    with pytest.raises(ValueError, match="hidden"):
        ModelConfig(hidden=0).validate()
    with pytest.raises(ValueError, match="schedule"):
        ToyMoE(CFG, ModelledLinkTransport(), num_slots=1, schedule="fast")
    c = ModelConfig(hidden=256, topk=2).resolved()
    assert (c.expert_ffn, c.shared_ffn, c.context) == (256, 512, 128)


def test_kernel_names_round_trip():
    assert parse_kernel_name(kernel_name("shared", 3, 1, "c2")) == ("shared", 3, 1)
    assert parse_kernel_name("something else") is None


def test_transport_interface_and_link_model():
    with pytest.raises(TypeError):
        Transport()  # abstract: a transport must implement dispatch/combine and their send halves
    tr = ModelledLinkTransport("ib400")
    assert tr.seconds(45_000_000) == pytest.approx(5e-6 + 1e-3)
    tr.scale_bandwidth(0.5)
    assert tr.link.bandwidth == pytest.approx(22.5e9) and tr.link.latency == 5e-6
    tr.scale_bandwidth(2.0)  # always relative to the base link
    assert tr.link.bandwidth == pytest.approx(90e9)
    assert wire_dtype_for(torch.float32) == torch.bfloat16
    assert wire_dtype_for(torch.bfloat16) == torch.float8_e4m3fn


def test_transfers_are_comm_kernels_with_modelled_seconds(manager):
    tracer = dbo.Tracer()
    model = ToyMoE(CFG, ModelledLinkTransport(), num_slots=2, schedule="ht")
    with dbo.UBatchOrchestrator(1, backend="virtual", tracer=tracer) as orch:
        orch.run(model.forward, [range(0, CFG.tokens)])
    comm = [r for r in tracer.records if r.kind == "comm" and parse_kernel_name(r.name)[0] in ("dispatch", "combine")]
    assert len(comm) == 2 * CFG.layers
    rows = CFG.tokens * CFG.topk
    d = next(r for r in comm if r.name.startswith("dispatch"))
    c = next(r for r in comm if r.name.startswith("combine"))
    assert d.duration == pytest.approx(model.transport.seconds(rows * CFG.hidden * 2))  # bf16 on the wire
    assert c.duration == pytest.approx(model.transport.seconds(rows * CFG.hidden * 4))  # float32 back
