"""On a GPU: an eager DBO step of the demo's ll schedule makes no host sync (skipped without one).

``torch.cuda.set_sync_debug_mode("error")`` is process-wide: a synchronizing CUDA call in any
thread (a ubatch thread included) raises, which fails the step with ``UBatchFailed`` naming the
op. The orchestrator's own waits poll ``query()``, which is not a sync. Not run on a GPU yet.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@contextlib.contextmanager
def sync_debug(mode: str):
    old = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode(mode)
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(old)


def _runner(schedule: str, **shapes):
    import workspace
    from demos.toy.config import OverlapConfig, resolve
    from demos.toy.runner import Runner

    cfg = OverlapConfig(backend="cuda", schedule=schedule, steps=1, **shapes)
    runner = Runner(cfg, resolve(cfg))
    try:
        for _ in range(2):  # warm: the workspace grows, cuBLAS handles are made
            runner.step(False, False)
            runner.step(True, False)
        runner.manager.lock()
        torch.cuda.synchronize()
    except BaseException:
        runner.close()
        workspace.reset_workspace_manager()
        raise
    return runner


@pytest.mark.parametrize("shapes", [{}, dict(layers=2, tokens=4096, hidden=2048)], ids=["default", "large"])
def test_eager_dbo_ll_step_makes_no_host_sync(shapes):
    import workspace

    runner = _runner("ll", **shapes)
    try:
        ref = runner.output()
        with sync_debug("error"):
            runner.step(True, False)  # raises UBatchFailed naming the op on the first sync
        torch.cuda.synchronize()
        assert torch.equal(runner.output(), ref)  # DBO steps are bitwise equal to each other
    finally:
        runner.close()
        workspace.reset_workspace_manager()


def test_sync_debug_mode_error_does_fail_a_step_that_syncs():
    """The check above can fail: a step with a `.item()` in a ubatch thread is refused."""
    import dbo

    x = torch.ones(4, device="cuda")
    with dbo.UBatchOrchestrator(2, backend="cuda") as orch:

        def step(u):
            dbo.launch(torch.Tensor.add_, x, 1.0)
            return x.sum().item()  # a host sync

        with sync_debug("error"), pytest.raises(dbo.UBatchFailed, match="synchroniz"):
            orch.run(step, [0, 1])
