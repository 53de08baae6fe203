"""The parts an op of the generic transformer is made of, and how they fold into the op's one ``Work``.

An op (``demos.zoo.ops``) issues several device kernels: GEMMs and memory passes (norms, activations,
quantizations, residual adds). ``gemm``, ``bmm`` and ``memory_pass`` are the ``dbo.costs.Work`` of one
such part, their flops and bytes counted by ``demos.zoo.work``. ``Folder`` times each part on its own
(``demos.zoo.kernel_times.KernelTimes``: the GPU family's fitted curves, or measured tables: a GEMM part its
GEMM time, a memory pass its bytes at a streaming kernel's bandwidth) and folds an op's parts into one
``Work`` that carries their summed seconds (``Work.seconds``: the time was fitted, so no flops stand in
for it) and their summed bytes (which the profile's bandwidth, the largest share any curve reaches,
never makes longer). The virtual backend charges that Work at least the per-kernel floor of each kernel
the op issues (``demos.zoo.ops``).
"""

from __future__ import annotations

from dbo.costs import DeviceProfile, Work
from demos.zoo.kernel_times import KernelTimes
from demos.zoo.models.dtypes import dtype
from demos.zoo.work import gemm_work, pass_work

__all__ = ["Folder", "bmm", "gemm", "math_dtype", "memory_pass"]


def math_dtype(storage: str) -> str:
    """The ``dbo.costs.DTYPES`` key a weight stored as ``storage`` multiplies in (``demos.zoo.models.dtypes``)."""
    return dtype(storage).math


def gemm(m: float, n: int, k: int, storage: str, *, weights: float = 1.0) -> Work:
    """Work of ``m`` rows through a (k -> n) weight stored as ``storage``: weight bytes ``weights`` times
    (``demos.zoo.work.gemm_work``)."""
    flops, nbytes = gemm_work(m, n, k, storage, weights=weights)
    return Work(flops=flops, bytes=nbytes, dtype=math_dtype(storage), shape=(max(1, round(m)), n, k))


def bmm(batch: int, m: int, n: int, k: int) -> Work:
    """A BF16 batched GEMM of ``batch`` (m, k) x (k, n) products (MLA's per-head absorptions)."""
    g = gemm(m, n, k, "bfloat16")
    return Work(flops=batch * g.flops, bytes=batch * g.bytes, dtype="bfloat16", shape=g.shape)


def memory_pass(t: float, width: int, passes: float) -> Work:
    """``passes`` BF16 read-and-write memory passes over ``t x width`` values (``demos.zoo.work.pass_work``)."""
    flops, nbytes = pass_work(t, width, passes)
    return Work(flops=flops, bytes=nbytes)


class Folder:
    """Folds the parts of one op into one ``Work`` for ``profile``, each part timed by ``kernels``
    (module docstring); ``op`` names the op in a measured source's fallbacks."""

    def __init__(self, profile: DeviceProfile, kernels: KernelTimes, op: str = ""):
        self.p = profile
        self.kernels = kernels
        self.op = op

    def seconds(self, w: Work) -> float:
        """One part's time (the per-kernel floor and launch overhead are the op's, paid once). A part that
        is itself a fold (MLA's ``q_a`` and ``q_b`` inside its projections) takes the seconds it was timed at
        (its memory and math already in them; read again as a memory pass at the BF16 rate, an FP8 fold
        counted twice)."""
        if w.shape is not None:
            m, n, k = w.shape
            return self.kernels.gemm(self.op, m, n, k, w.dtype, w.flops, w.bytes)
        if w.seconds is not None:
            return w.seconds
        return self.kernels.memory(w.bytes, w.flops)

    def __call__(self, *works: Work) -> Work:
        dt = next((x.dtype for x in works if x.dtype is not None), None)
        t = sum(self.seconds(x) for x in works)
        return Work(seconds=t, bytes=sum(x.bytes for x in works), dtype=dt)

    def named(self, op: str) -> Folder:
        """This folder for the parts of ``op``."""
        return Folder(self.p, self.kernels, op)
