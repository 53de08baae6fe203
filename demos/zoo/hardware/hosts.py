"""Host costs measured on our H200 machine (one H200 SXM 141 GB and its host, torch 2.11, CUDA 13),
running eager steps: what a launch, a stream switch, a handoff, a sync and an event cost there.

Both studies price their eager host with these: the toy's fitted h200 profile
(``demos/toy/profiles/h200.json`` holds its device figures and op counts) and the zoo's eager host
(``demos.zoo.profile.EAGER_HOST``, with the per-launch cost of a small eager op in place of the toy's
own Python per kernel). docs/fidelity.md ("The `h200` profile: where its figures come from") has the measurements.
"""

from __future__ import annotations

from dbo.costs import HostCosts

H200_HOST = HostCosts(
    # one eager launch of a small elementwise op cost ~6 us, of a small GEMM ~16 us
    launch=12e-6,
    # the toy's model code (Python, views, ``out=`` arguments) kept the host ~18-29 us per CUDA kernel
    kernel=17e-6,
    # a ``with torch.cuda.stream(s)`` enter/exit ~9 us, half of it per stream switch
    stream_switch=4.4e-6,
    # a two-thread lock ping-pong ~6.7 us (one handoff)
    handoff=6.7e-6,
    # thread start and join: estimates
    thread_start=60e-6,
    thread_join=10e-6,
    # an idle device synchronize
    sync=5.4e-6,
    # an event record plus wait ~1.5 us
    event=0.77e-6,
    # with two ubatch threads the same per-kernel work took longer (launch API time per kernel +30%,
    # DBO steps of ~1.9x the kernels took ~2.3x as long); fitted
    threaded=1.5,
)
"""The H200 host's eager costs (module docstring); ``ops`` empty: which op issues how many kernels is the
model's to say."""
