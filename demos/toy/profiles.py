"""The toy's built-in ``h200`` device profile, read from the data file beside it (``h200_profile.json``:
the device figures fitted to the toy on an H200 and the kernels each toy op issues, each figure's
source in its ``sources``), with the H200 host's measured costs (``demos.zoo.hardware.hosts``).

Importing ``demos.toy`` registers it in ``dbo.costs``' named table, so ``profile="h200"`` works
wherever the toy is in use; the runtime alone knows only ``cpu``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from dbo.costs import DeviceProfile, OpCost, register_profile
from demos.zoo.hardware.hosts import H200_HOST

DATA_FILE = Path(__file__).with_name("h200_profile.json")


def load_h200(path: Path = DATA_FILE) -> DeviceProfile:
    """The toy's h200 profile from ``path`` (module docstring)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    device = DeviceProfile.from_dict(data["profile"])
    ops = {op: OpCost(**cost) for op, cost in data["ops"].items()}
    return replace(device, host=replace(H200_HOST, ops=ops))


H200 = register_profile(load_h200())
"""The profile, registered as ``"h200"``."""
