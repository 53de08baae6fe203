"""A serving workload written as one string, ``SPEC``: the form ``python -m demos.predict --workload``
and ``predict(..., workload=)`` take (docs/predict.md, "A workload"), and what it means for
``simulate``'s arrivals (``demos.serving.api``; docs/serving.md, "What one run is"):

* ``closed:CONCURRENCY:ISL:OSL``: a closed loop of CONCURRENCY clients, each request ISL prompt and OSL
  output tokens (``closed:64:1k:1k``; ``simulate(concurrency=, isl=, osl=)``, its warm-up the default 2C);
* ``poisson:RATE:ISL:OSL``: an open loop, RATE requests per second (``poisson:20:2k:256``;
  ``simulate(rate=, isl=, osl=)``);
* ``trace:PATH``: a request trace, its format by its suffix as ``simulate`` reads it (``.jsonl``:
  Mooncake, else Azure's CSV; ``simulate(trace=)``).

ISL and OSL are token counts as every token flag takes them (``demos.tokens``: ``1k`` = 1024). A bad
SPEC is one ``ValueError`` line that says the forms; the trace's file is read by ``simulate``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from demos.tokens import parse_token_count

__all__ = ["FORMS", "KINDS", "WorkloadSpec"]

KINDS = ("closed", "poisson", "trace")
FORMS = "closed:CONCURRENCY:ISL:OSL, poisson:RATE:ISL:OSL or trace:PATH"
"""The SPEC forms, as the one-line errors and the help say them."""


@dataclass(frozen=True)
class WorkloadSpec:
    """A parsed SPEC (module docstring): ``kind`` (one of ``KINDS``) and its fields, None where the kind
    has none. ``str()`` writes it back (token counts as plain integers)."""

    kind: str
    concurrency: int | None = None
    rate: float | None = None
    isl: int | None = None
    osl: int | None = None
    trace: str | None = None

    @classmethod
    def parse(cls, text: str) -> WorkloadSpec:
        """The workload ``text`` names; a ``ValueError`` of one line when it names none."""
        if not isinstance(text, str):
            raise ValueError(f"expected a string {FORMS}, got {text!r}")
        kind, sep, rest = text.strip().partition(":")
        if kind not in KINDS or not sep:
            raise ValueError(f"expected {FORMS}, got {text!r}")
        if kind == "trace":
            if not rest.strip():
                raise ValueError(f"trace:PATH needs the trace's path, got {text!r}")
            return cls("trace", trace=rest.strip())
        parts = rest.split(":")
        first = "CONCURRENCY" if kind == "closed" else "RATE"
        if len(parts) != 3 or any(not p.strip() for p in parts):
            raise ValueError(f"{kind}:{first}:ISL:OSL takes three values, got {text!r}")
        try:
            isl, osl = (parse_token_count(p) for p in parts[1:])
        except ValueError as e:
            raise ValueError(f"{text!r}: ISL and OSL: {e}") from None
        if isl < 1 or osl < 1:
            raise ValueError(f"{text!r}: ISL and OSL must be at least 1 token")
        if kind == "closed":
            try:
                n = int(parts[0])
            except ValueError:
                n = 0
            if n < 1:
                raise ValueError(f"{text!r}: CONCURRENCY must be a positive integer, got {parts[0]!r}")
            return cls("closed", concurrency=n, isl=isl, osl=osl)
        try:
            rate = float(parts[0])
        except ValueError:
            rate = 0.0
        if not rate > 0 or rate == float("inf"):
            raise ValueError(f"{text!r}: RATE must be a positive number of requests per second, got {parts[0]!r}")
        return cls("poisson", rate=rate, isl=isl, osl=osl)

    def __str__(self) -> str:
        if self.kind == "trace":
            return f"trace:{self.trace}"
        first = self.concurrency if self.kind == "closed" else f"{self.rate:g}"
        return f"{self.kind}:{first}:{self.isl}:{self.osl}"

    def arrivals(self) -> dict[str, Any]:
        """``simulate``'s keyword arguments for these arrivals."""
        if self.kind == "trace":
            return {"trace": os.fspath(self.trace)}
        if self.kind == "closed":
            return {"concurrency": self.concurrency, "isl": self.isl, "osl": self.osl}
        return {"rate": self.rate, "isl": self.isl, "osl": self.osl}

    def flags(self) -> list[str]:
        """``python -m demos.serving``'s flags for these arrivals."""
        return [x for k, v in self.arrivals().items() for x in (f"--{k}", str(v) if k != "rate" else f"{v:g}")]
