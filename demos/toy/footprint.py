"""How much memory a toy-MoE run will take, known before anything is allocated, and what follows from it.

``choose_meta(cfg, probe, backend, notes)`` decides whether the run uses meta tensors (shapes only, the
math skipped), or refuses it, from the weights (``ModelConfig.weight_bytes``) and everything that grows
with the tokens (``ModelConfig.activation_bytes``: the states, each ubatch's buffers, the transport's
receive buffers, the workspace slots; an estimate 5-25% above what the model allocates):

* on ``virtual`` without ``--meta``: meta when the two together exceed ``META_AUTO_BYTES`` (1 GiB),
  so that a 2,000,000-token step simulates in bounded memory instead of allocating tens of GB;
* with real tensors (``threads``, ``inline``, ``cuda``, or a small model on virtual): refused in one line
  when the weights exceed the fixed limit (``real_limit``), or when weights and activations exceed
  ``AVAILABLE_FRACTION`` of the memory available now (``/proc/meminfo``'s MemAvailable on the CPU, the
  device's free memory on cuda), giving the estimate and what is available.
"""

from __future__ import annotations

from typing import Any

import torch

from demos.errors import ConfigError, field_ref

__all__ = [
    "AVAILABLE_FRACTION",
    "META_AUTO_BYTES",
    "REAL_LIMIT_BYTES",
    "REAL_LIMIT_FRACTION",
    "available_bytes",
    "choose_meta",
    "real_limit",
]

META_AUTO_BYTES = 1 << 30  # virtual: weights and activations above 1 GiB -> meta tensors (math skipped)
REAL_LIMIT_BYTES = 4 << 30  # CPU backends (real tensors): refuse weights above 4 GiB
REAL_LIMIT_FRACTION = 0.5  # cuda: refuse weights above this share of the device's free memory
AVAILABLE_FRACTION = 0.8  # refuse a run whose estimate exceeds this share of the memory available now


def real_limit(backend: str) -> tuple[int, str]:
    """The most bytes of real weights a run on ``backend`` may take, and how that limit was set:
    on cuda ``REAL_LIMIT_FRACTION`` of the current device's free memory (``torch.cuda.mem_get_info``),
    elsewhere the fixed ``REAL_LIMIT_BYTES``."""
    if backend != "cuda":
        return REAL_LIMIT_BYTES, "the fixed limit for real tensors on the CPU backends"
    index = torch.cuda.current_device()
    try:
        free, total = torch.cuda.mem_get_info(index)
    except RuntimeError as e:
        first = (str(e).strip().splitlines() or [""])[0]
        raise ConfigError(
            f"{field_ref('backend')} cuda: could not read the free memory of cuda:{index}: {first}"
        ) from None
    why = f"{REAL_LIMIT_FRACTION:g} of the {free / 2**30:.1f} GiB free of {total / 2**30:.1f} GiB on cuda:{index}"
    return int(free * REAL_LIMIT_FRACTION), why


def available_bytes(backend: str) -> int | None:
    """Memory available now where the run's tensors live: the host's MemAvailable (Linux), the current
    device's free memory on cuda; None when it cannot be read."""
    if backend == "cuda":
        try:
            return int(torch.cuda.mem_get_info(torch.cuda.current_device())[0])
        except RuntimeError:
            return None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def choose_meta(cfg: Any, probe: Any, backend: str, notes: list[str]) -> bool:
    """Whether the run uses meta tensors (module docstring); refusals raise ConfigError. ``probe``: the
    run's ``ModelConfig`` in float32 on the CPU; ``notes`` receives the line that says why meta was chosen."""
    weights = probe.weight_bytes()
    acts = probe.activation_bytes(cfg.ubatches, cfg.schedule)
    if cfg.meta and backend != "virtual":
        raise ConfigError(
            f"{field_ref('meta')} skips the math, which only the virtual backend can time; "
            f"add {field_ref('backend')} virtual"
        )
    if cfg.meta is None and backend == "virtual" and weights + acts > META_AUTO_BYTES:
        notes.append(
            f"the weights ({_gib(weights)}) and activations ({_gib(acts)}) would take {_gib(weights + acts)} "
            "in float32: meta tensors, math skipped"
        )
        return True
    if cfg.meta:
        return True
    limit, why = real_limit(backend)
    if weights > limit:
        raise ConfigError(
            f"this model needs {_gib(weights)} of weights, over the {_gib(limit)} limit "
            f"({why}); simulate it with {field_ref('backend')} virtual (meta tensors)"
        )
    free = available_bytes(backend)
    if free is not None and weights + acts > AVAILABLE_FRACTION * free:
        where = "on the GPU" if backend == "cuda" else "on this machine"
        raise ConfigError(
            f"this run needs about {_gib(weights + acts)} ({_gib(weights)} of weights, {_gib(acts)} that grow with "
            f"{field_ref('tokens')}), more than {AVAILABLE_FRACTION:.0%} of the {_gib(free)} available {where}: "
            f"use fewer {field_ref('tokens')}, or {field_ref('backend')} virtual (meta tensors)"
        )
    return False
