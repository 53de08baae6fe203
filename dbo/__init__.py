"""dbo: a multi-threaded DBO (dual-batch overlap) runtime simulator.

The public API is re-exported here; see docs/protocol.md for the protocol and docs/streams.md for
the stream backends.
"""

from . import costs, registry, split, streams, trace
from .api import (
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
from .context import StepState, SyncPrimitives, UBatchContext
from .errors import (
    CaptureError,
    DBOError,
    HandoffTimeout,
    RecvHookConflict,
    RegistryError,
    StepHung,
    StreamError,
    StreamTimeout,
    UBatchAborted,
    UBatchFailed,
    UnregisteredThreadError,
)
from .orchestrator import STREAM_LAYOUTS, UBatchOrchestrator
from .capture import CapturedStep
from .registry import ubatch_scope
from .split import merge_outputs, split_batch, split_tokens
from .streams import current_stream, get_backend, launch, set_stream, use_stream
from .trace import Tracer

__all__ = [
    "costs",
    "registry",
    "split",
    "streams",
    "trace",
    "UBatchOrchestrator",
    "STREAM_LAYOUTS",
    "StepState",
    "SyncPrimitives",
    "UBatchContext",
    "Tracer",
    "get_backend",
    "current_stream",
    "set_stream",
    "use_stream",
    "launch",
    "ubatch_scope",
    "split_batch",
    "split_tokens",
    "merge_outputs",
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
    "CaptureError",
    "CapturedStep",
    "DBOError",
    "HandoffTimeout",
    "RecvHookConflict",
    "RegistryError",
    "StepHung",
    "StreamError",
    "StreamTimeout",
    "UBatchAborted",
    "UBatchFailed",
    "UnregisteredThreadError",
]
