"""A kernel's identity is data: ``launch(..., op=, layer=)`` lands on ``KernelRecord``, on every
backend and through capture and replay, and the virtual backend's per-op corrections are keyed
on the declared op, never on the kernel function's name or on the display name."""

from __future__ import annotations

import pytest
import torch

import dbo
import demos.toy  # noqa: F401  (registers the toy's fitted "h200" profile, used below)
from dbo.costs import HostCosts, OpCost, Work, get_profile
from dbo.streams import VirtualBackend, get_backend
from dbo.trace import Tracer

CPU_BACKENDS = ("inline", "threads", "virtual")


def _copy(src: torch.Tensor, dst: torch.Tensor) -> None:
    dst.copy_(src)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_records_carry_the_declared_op_and_layer(backend: str) -> None:
    b = get_backend(backend)
    try:
        s = b.new_stream("s")
        src, dst = torch.ones(4), torch.zeros(4)
        tr = b.tracer = Tracer()
        s.launch(_copy, src, dst, name="moe copy 3", op="moe_copy", layer=3)
        s.launch(_copy, src, dst)  # no identity declared
        s.synchronize()
        recs = sorted(tr.records, key=lambda r: r.start)
        assert [(r.name, r.op, r.layer) for r in recs] == [("moe copy 3", "moe_copy", 3), ("_copy", None, None)]
    finally:
        b.close()


@pytest.mark.parametrize(
    "op, layer, error",
    [
        ("two words", None, ValueError),
        ("", None, ValueError),
        (3, None, TypeError),
        ("ok", -1, ValueError),
        ("ok", 1.0, TypeError),
        ("ok", True, TypeError),
    ],
)
@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_a_malformed_identity_is_refused_at_launch(backend: str, op, layer, error) -> None:
    b = get_backend(backend)
    try:
        s = b.new_stream("s")
        with pytest.raises(error):
            s.launch(None, op=op, layer=layer)
    finally:
        b.close()


def _profile_with(op_cost: dict[str, OpCost]):
    from dataclasses import replace

    return replace(get_profile("h200"), name="h200-ops", host=HostCosts(launch=1e-6, ops=op_cost))


def _kernel_seconds(profile, fn, **launch) -> float:
    b = VirtualBackend(profile=profile)
    try:
        s = b.new_stream("s")
        tr = b.tracer = Tracer()
        s.launch(fn, name="experts L0 u0", cost=Work(flops=1e12), **launch)
        s.synchronize()
        (rec,) = tr.records
        return rec.duration
    finally:
        b.close()


def _experts(*args) -> None:
    pass


def _renamed_experts(*args) -> None:
    pass


def test_the_virtual_correction_follows_the_declared_op_not_a_name() -> None:
    prof = _profile_with({"experts": OpCost(device=1e-3)})
    plain = _kernel_seconds(prof, _experts)  # no op declared: the display name's first word does not count
    declared = _kernel_seconds(prof, _experts, op="experts")
    renamed = _kernel_seconds(prof, _renamed_experts, op="experts")
    assert declared == pytest.approx(plain + 1e-3)
    assert renamed == declared  # renaming the kernel function changes nothing


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_capture_and_replay_keep_the_identity(backend: str) -> None:
    inputs = [{"src": torch.ones(8), "dst": torch.zeros(8)} for _ in range(2)]

    def step(u) -> None:
        dbo.launch(_copy, u["src"], u["dst"], name="copy", op="copy", layer=7)

    with dbo.UBatchOrchestrator(2, backend) as orch:
        tr = orch.backend.tracer = Tracer()
        cap = orch.capture(step, inputs)
        captured = len(tr.records)
        cap.replay()
        orch.backend.synchronize()
        assert captured and len(tr.records) > captured
        assert all((r.op, r.layer) == ("copy", 7) for r in tr.records)
        cap.close()
