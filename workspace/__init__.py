"""workspace: per-ubatch scratch memory carved into 256-byte aligned views (see docs/workspace.md).

The manager singleton (``init_workspace_manager`` / ``current_workspace_manager``) is
process-global. Finds the calling ubatch's slot through ``dbo.registry``.

Modules: ``layout`` (pure layout functions), ``policy`` (growth policies), ``manager`` (the
manager and its hot path), ``growth``, ``persistent`` and ``introspection`` (parts of the manager), ``lanes``,
``observers``, ``singleton``, ``errors``, ``tracking`` (a live-bytes tracker for memory studies)
and ``sanitizer`` (an isolation checker, off by default; import ``workspace.sanitizer`` to use it).
"""

from workspace import layout as layout
from workspace import policy as policy
from workspace.diagnostics import DEBUG_ENV
from workspace.errors import WorkspaceError, WorkspaceLockedError
from workspace.lanes import current_workspace_lane
from workspace.layout import ALIGNMENT
from workspace.manager import WorkspaceManager
from workspace.observers import WorkspaceObserver
from workspace.policy import DEFAULT_GROWTH
from workspace.singleton import (
    current_workspace_manager,
    init_workspace_manager,
    is_workspace_manager_initialized,
    lock_workspace,
    reset_workspace_manager,
    unlock_workspace,
    use_workspace_lane,
)

__all__ = [
    "ALIGNMENT",
    "DEBUG_ENV",
    "DEFAULT_GROWTH",
    "WorkspaceError",
    "WorkspaceLockedError",
    "WorkspaceManager",
    "WorkspaceObserver",
    "current_workspace_lane",
    "current_workspace_manager",
    "init_workspace_manager",
    "is_workspace_manager_initialized",
    "lock_workspace",
    "reset_workspace_manager",
    "unlock_workspace",
    "use_workspace_lane",
]
