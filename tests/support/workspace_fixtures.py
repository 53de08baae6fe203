"""Fixtures for tests that use the process-wide workspace manager or the isolation sanitizer.

Import them into a test module (``from tests.support.workspace_fixtures import manager``): pytest
finds fixtures in the module's namespace, and an autouse one then applies to that module only.
"""

from __future__ import annotations

import pytest

import workspace
from workspace import sanitizer


@pytest.fixture
def manager():
    """The process-wide workspace manager for 2 ubatches on the CPU, reset after the test."""
    m = workspace.init_workspace_manager("cpu", num_ubatches=2)
    yield m
    workspace.reset_workspace_manager()


@pytest.fixture(autouse=True)
def sanitizer_off():
    """Every test of a module that imports this starts and ends with the sanitizer off (autouse)."""
    sanitizer.disable()
    yield
    sanitizer.disable()
