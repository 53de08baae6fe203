"""The engine's host between steps: hidden by its overlap scheduler, exposed where a release turns it off.

Every engine modelled runs its host work between forwards (scheduling the next batch, processing the last
one's tokens) one step ahead, on the CPU, while the GPU runs the current step: SGLang's overlap schedule,
TensorRT-LLM's overlap scheduler (both on by default), vLLM's async scheduling (on by default in its recent
releases; the older ones without it are not modelled). The serving run charges that host time nothing
(docs/serving.md). ``host_step_seconds(engine, release, spec)`` is the
exception read in an engine's source, the host time each step costs where it is not hidden:

* **SGLang, hybrid Gated DeltaNet models** (Qwen3-Next, Qwen3.5: a ``GatedDeltaNet`` in ``linear_attention``
  layers). SGLang keeps their recurrent states in its mamba pool and prefix-caches them with its
  ``MambaRadixCache``; its ``mamba_scheduler_strategy`` default ``auto`` resolved to ``no_buffer``, and
  ``ServerArgs._handle_mamba_radix_cache`` then sets ``disable_overlap_schedule`` whenever the radix cache is
  on (its default) and no speculative decoding runs; Qwen3-Next's handler sets the SM100 attention backend
  to triton, so the Blackwell exception for ``trtllm_mha`` (radix cache off, overlap back on) does not apply.
  Read in a stored ``server_args.py`` of early 2026; the SGLang pull request that proposed resolving ``auto``
  to ``extra_buffer`` (#27220, 2026-06-04) still states it for Qwen3.5-35B-A3B; by 2026-07-04 (#30127, the
  resolution moved to ``arg_groups/overrides.py``) ``auto`` resolves to ``extra_buffer`` where the
  architecture supports it and the overlap is wanted, which Gated DeltaNet's does: overlap on.
  ``overlap_off_release`` holds those dates as releases: 0.5.10 and older, and nightlies to 2026-06-04, run
  without the overlap; 0.5.23 (the pinned one) and nightlies from 2026-07-04 with it; a release between
  was not read and is refused for these models. Kimi Delta Attention models are not covered (their
  handling was not read). The handler turns the overlap off only with the radix cache on: a server
  launched with ``--disable-radix-cache`` keeps it (the handler's own warning suggests that flag), as does
  one on ``trtllm_mha`` (the handler then turns the radix cache off and the overlap back on), so
  ``radix_cache=False`` exposes nothing. InferenceX's SGLang scripts for Qwen3.5 pass
  ``--disable-radix-cache`` (every version from 2026-02-19; ``SiliconRow.radix_cache``), so its measured rows
  ran with the overlap on; rows that record no launch flags are taken to have run the default (on), a
  guess.

``HOST_STEP_S``, what the host costs a step when exposed, is one published measurement, not fitted: SGLang
pull request #38131 (2026-09-05) turned the overlap back on for LFM2 under ``no_buffer`` and measured
steady decode at batch 1 on an RTX 5090: 364.3 tokens/s without the overlap, 498.5 with it, so
``1/364.3 - 1/498.5`` s = 0.74 ms of host per step (the step itself about 2 ms). A guess for other models,
GPUs and hosts: server CPUs, tensor-parallel ranks (each runs its own scheduler) and larger batches (the
per-request part of the processing) may all take longer, and no measurement here says by how much.
"""

from __future__ import annotations

from typing import Any

from demos.errors import ConfigError, field_ref
from demos.zoo.engine_allreduce import SGLANG_NIGHTLY, SGLANG_RELEASE, sglang_release_point
from demos.zoo.models import GatedDeltaNet
from demos.zoo.models.linear_spec import linear_of

__all__ = [
    "HOST_STEP_S",
    "check_radix_cache",
    "check_release",
    "gated_deltanet_hybrid",
    "host_step_seconds",
    "overlap_off_release",
    "overlap_off_reason",
]

HOST_STEP_S = 1 / 364.3 - 1 / 498.5
"""Seconds of host work a decode step exposes without the overlap schedule (module docstring: SGLang
#38131, LFM2 at batch 1 on an RTX 5090)."""

_LAST_NO_BUFFER = ((0, 5, 10), "20260604")
"""The newest SGLang release and nightly date read resolving ``auto`` to ``no_buffer`` (overlap off)."""
_FIRST_EXTRA_BUFFER = ((0, 5, 23), "20260704")
"""The oldest SGLang release and nightly date read resolving it to ``extra_buffer`` (overlap on)."""


def overlap_off_release(release: str) -> bool:
    """Whether SGLang ``release`` (``0.5.9``, ``0.5.10.post1``, ``nightly-dev-20260216-d3bae71e``) resolves
    its mamba strategy ``auto`` to ``no_buffer`` and so runs a hybrid Gated DeltaNet model without the
    overlap schedule (module docstring); a release between the ones read is a ``ConfigError``."""
    try:
        version, date = sglang_release_point(release)
    except ValueError:  # not a release: not read either
        version = date = None
    if version is not None:
        if version <= _LAST_NO_BUFFER[0]:
            return True
        if version >= _FIRST_EXTRA_BUFFER[0]:
            return False
    elif date is not None:
        if date <= _LAST_NO_BUFFER[1]:
            return True
        if date >= _FIRST_EXTRA_BUFFER[1]:
            return False
    raise ConfigError(
        f"{field_ref('release')} SGLang {release!r}: whether it runs hybrid Gated DeltaNet models without its "
        "overlap schedule was not read (read: 0.5.10 and older and nightlies to nightly-dev-20260604 without, "
        "0.5.23 and nightlies from nightly-dev-20260704 with it; docs/serving.md)"
    )


def check_release(engine: str, release: str | None) -> None:
    """A ``ConfigError`` in one line where ``release`` cannot be ``engine``'s: only SGLang's host behaviour
    depends on its release here (every other engine runs as its pinned release), and an SGLang release is a
    version (``0.5.9``, ``0.5.10.post1``) or a dated nightly (``nightly-dev-YYYYMMDD``)."""
    if release is None:
        return
    if engine != "sglang":
        raise ConfigError(
            f"{field_ref('release')} {release!r}: only SGLang's host behaviour depends on its release here; "
            f"{engine} runs as its pinned release (leave {field_ref('release')} out)"
        )
    if not (SGLANG_RELEASE.match(release) or SGLANG_NIGHTLY.match(release)):
        raise ConfigError(
            f"{field_ref('release')} {release!r} is not an SGLang release: give a version (0.5.9, 0.5.10.post1) or "
            f"a dated nightly (nightly-dev-20260216)"
        )


def check_radix_cache(engine: str, disable_radix_cache: bool) -> None:
    """A ``ConfigError`` in one line for the radix cache turned off on an engine other than SGLang: only
    SGLang's host depends on it here."""
    if disable_radix_cache and engine != "sglang":
        raise ConfigError(
            f"{field_ref('disable_radix_cache')} is SGLang's only: its radix cache changes its host behaviour "
            f"here; {engine} runs as its pinned release (leave it out)"
        )


def gated_deltanet_hybrid(spec: Any) -> bool:
    """Whether model ``spec`` (a ``ModelSpec``) has Gated DeltaNet layers (the models the rule covers)."""
    return any(isinstance(linear_of(spec.attention, i), GatedDeltaNet) for i in range(spec.num_layers))


def overlap_off_reason(engine: str, release: str | None, spec: Any, radix_cache: bool = True) -> str | None:
    """Why ``engine`` at ``release`` (None: the pinned one) runs model ``spec`` (a ``ModelSpec``) with its host
    exposed, or None where its overlap hides it (module docstring); ``radix_cache``: SGLang's radix cache on
    (its default; off, ``--disable-radix-cache``, keeps the overlap)."""
    if engine != "sglang" or not radix_cache or not gated_deltanet_hybrid(spec):
        return None
    from demos.prediction.engines import SGLANG_VERSION

    release = release or SGLANG_VERSION
    if not overlap_off_release(release):
        return None
    return (
        f"SGLang {release} runs hybrid Gated DeltaNet models without its overlap schedule (mamba radix cache "
        f"no_buffer): {HOST_STEP_S * 1e3:.2f} ms of host a step"
    )


def host_step_seconds(engine: str, release: str | None, spec: Any, radix_cache: bool = True) -> float:
    """Seconds each step of ``engine`` at ``release`` serving ``spec`` (``radix_cache``: as
    ``overlap_off_reason``) adds for its host: ``HOST_STEP_S`` where ``overlap_off_reason`` names one, else 0."""
    return HOST_STEP_S if overlap_off_reason(engine, release, spec, radix_cache) else 0.0
