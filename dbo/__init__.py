"""dbo: a multi-threaded DBO (dual-batch overlap) runtime simulator.

The public API is what ``__all__`` lists: vLLM's ``dbo_*`` free functions, the
orchestrator, the current-stream helpers, the batch splitters, the tracer and the errors a caller
catches. Everything else lives in its submodule: the registry (``dbo.registry``), the stream
backends (``dbo.streams``), the cost model (``dbo.costs``), every error type (``dbo.errors``) and
the test seams (``dbo.testing``, never imported here). See docs/protocol.md for the protocol and
docs/streams.md for the stream backends.
"""

from dbo import costs as costs
from dbo import errors as errors
from dbo import registry as registry
from dbo import split as split
from dbo import streams as streams
from dbo import trace as trace
from dbo.api import (
    dbo_current_ubatch_id,
    dbo_enabled,
    dbo_get_previous_event,
    dbo_maybe_run_recv_hook,
    dbo_num_ubatches,
    dbo_register_recv_hook,
    dbo_switch_to_comm,
    dbo_switch_to_comm_sync,
    dbo_switch_to_compute,
    dbo_switch_to_compute_sync,
    dbo_yield,
    dbo_yield_and_switch_from_comm_to_compute,
    dbo_yield_and_switch_from_compute_to_comm,
)
from dbo.errors import (
    CaptureError,
    DBOError,
    HandoffTimeout,
    StepHung,
    StreamError,
    StreamTimeout,
    UBatchFailed,
    UnregisteredThreadError,
)
from dbo.orchestrator import STREAM_LAYOUTS, UBatchOrchestrator
from dbo.registry import use_ubatch
from dbo.split import merge_outputs, split_batch, split_tokens
from dbo.streams import current_stream, get_backend, launch, set_stream, use_stream
from dbo.trace import Tracer

__all__ = [
    # vLLM's free functions
    "dbo_current_ubatch_id",
    "dbo_enabled",
    "dbo_get_previous_event",
    "dbo_maybe_run_recv_hook",
    "dbo_num_ubatches",
    "dbo_register_recv_hook",
    "dbo_switch_to_comm",
    "dbo_switch_to_comm_sync",
    "dbo_switch_to_compute",
    "dbo_switch_to_compute_sync",
    "dbo_yield",
    "dbo_yield_and_switch_from_comm_to_compute",
    "dbo_yield_and_switch_from_compute_to_comm",
    # running a step
    "UBatchOrchestrator",
    "STREAM_LAYOUTS",
    "use_ubatch",
    # streams
    "get_backend",
    "current_stream",
    "set_stream",
    "use_stream",
    "launch",
    # batches and traces
    "split_batch",
    "split_tokens",
    "merge_outputs",
    "Tracer",
    # errors a caller catches (all of them: dbo.errors)
    "DBOError",
    "UBatchFailed",
    "CaptureError",
    "StepHung",
    "HandoffTimeout",
    "UnregisteredThreadError",
    "StreamError",
    "StreamTimeout",
]
