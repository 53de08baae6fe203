"""workspace: per-ubatch scratch memory carved into 256-byte aligned views (see docs/workspace.md).

The manager singleton (``init_workspace_manager`` / ``current_workspace_manager``) is
process-global. Depends only on ``dbo.registry`` to find the calling ubatch's slot.
"""

from . import layout
from .errors import WorkspaceLockedError
from .layout import ALIGNMENT, align_up
from .manager import (
    DEBUG_ENV,
    WorkspaceManager,
    current_workspace_manager,
    init_workspace_manager,
    is_workspace_manager_initialized,
    lock_workspace,
    reset_workspace_manager,
    unlock_workspace,
)

__all__ = [
    "ALIGNMENT",
    "DEBUG_ENV",
    "WorkspaceLockedError",
    "WorkspaceManager",
    "align_up",
    "current_workspace_manager",
    "init_workspace_manager",
    "is_workspace_manager_initialized",
    "layout",
    "lock_workspace",
    "reset_workspace_manager",
    "unlock_workspace",
]
