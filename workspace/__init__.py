"""workspace: per-ubatch scratch memory carved into 256-byte aligned views (see docs/workspace.md).

The manager singleton (``init_workspace_manager`` / ``current_workspace_manager``) is
process-global. Depends only on ``dbo.registry`` to find the calling ubatch's slot.

Submodules: ``layout`` (pure layout functions), ``policy`` (growth policies), ``manager``,
``tracking`` (a live-bytes tracker for memory studies) and ``sanitizer`` (an isolation checker,
off by default; import ``workspace.sanitizer`` to use it).
"""

from . import layout, policy
from .errors import WorkspaceLockedError
from .layout import ALIGNMENT, align_up
from .manager import (
    DEBUG_ENV,
    WorkspaceManager,
    WorkspaceObserver,
    current_workspace_lane,
    current_workspace_manager,
    init_workspace_manager,
    is_workspace_manager_initialized,
    lock_workspace,
    reset_workspace_manager,
    unlock_workspace,
    use_workspace_lane,
)
from .policy import DEFAULT_GROWTH, POLICIES, GrowthPolicy

__all__ = [
    "ALIGNMENT",
    "DEBUG_ENV",
    "DEFAULT_GROWTH",
    "GrowthPolicy",
    "POLICIES",
    "WorkspaceLockedError",
    "WorkspaceManager",
    "WorkspaceObserver",
    "align_up",
    "current_workspace_lane",
    "current_workspace_manager",
    "init_workspace_manager",
    "is_workspace_manager_initialized",
    "layout",
    "lock_workspace",
    "policy",
    "reset_workspace_manager",
    "unlock_workspace",
    "use_workspace_lane",
]
