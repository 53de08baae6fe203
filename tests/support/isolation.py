"""The isolation checker shared by the stress, noise and state-machine tests.

``Isolation`` records, from any thread, the live views of each ubatch and every problem seen: a
view not carved from its ubatch's slot buffer or reaching outside it, two views of one call that
overlap, two slot buffers that overlap, and a view that overlaps a live view of another ubatch.
"""

from __future__ import annotations

import threading

import torch

from tests.support.views import extent
from workspace import WorkspaceManager


class Isolation:
    """Shared checker: the live views of each ubatch, and every problem seen (from any thread)."""

    def __init__(self, ws: WorkspaceManager):
        self.ws = ws
        self.live: dict[int, list[tuple[int, int]]] = {}
        self.problems: list[str] = []
        self.lock = threading.Lock()
        self.calls = 0

    def problem(self, msg: str) -> None:
        with self.lock:
            self.problems.append(msg)

    def drop(self, uid: int) -> None:
        with self.lock:
            self.live[uid] = []

    def handed_out(self, uid: int, views: list[torch.Tensor], specs) -> None:
        """Check a fresh call's views (in the ubatch thread, right after the call)."""
        ws = self.ws
        ranges = ws.slot_ranges()
        base, size = ranges[ws.slot_of(uid)]
        exts = []
        for i, (v, (shape, dtype)) in enumerate(zip(views, specs)):
            if tuple(v.shape) != tuple(shape) or v.dtype != dtype:
                self.problem(f"ubatch {uid}: view {i} is {tuple(v.shape)} {v.dtype}, asked {shape} {dtype}")
            lo, hi = extent(v)
            exts.append((lo, hi))
            st = v.untyped_storage()
            if v.numel() == 0:
                continue
            if st.data_ptr() != base or st.nbytes() != size:
                self.problem(f"ubatch {uid}: view {i} is not carved from slot {uid}'s buffer")
            if not (base <= lo and hi <= base + size):
                self.problem(f"ubatch {uid}: view {i} bytes [{lo:#x}, {hi:#x}) outside slot [{base:#x}, +{size})")
        # the views of one call never overlap
        nonempty = sorted(e for e in exts if e[1] > e[0])
        for (a0, a1), (b0, b1) in zip(nonempty, nonempty[1:]):
            if b0 < a1:
                self.problem(f"ubatch {uid}: two views of one call overlap ([{a0:#x},{a1:#x}) and [{b0:#x},{b1:#x}))")
        # slots never share storage
        held = [(b, n) for b, n in ranges if n > 0]
        for j, (b0, n0) in enumerate(held):
            for b1, n1 in held[j + 1 :]:
                if b0 < b1 + n1 and b1 < b0 + n0:
                    self.problem(f"two slot buffers overlap: {ranges}")
        with self.lock:
            self.calls += 1
            for other, other_ranges in self.live.items():
                if other == uid:
                    continue
                for lo, hi in nonempty:
                    for o0, o1 in other_ranges:
                        if lo < o1 and o0 < hi:
                            self.problems.append(f"ubatch {uid}: a view overlaps a live view of ubatch {other}")
            self.live[uid] = nonempty
