"""How far a prediction's kind has been checked: the one recorded list of the validation figures the
report's ``checked`` line quotes.

``SILICON``: ``python -m demos.validate silicon`` (no-DBO decode steps against measured deployments of
``aiconfigurator-core``'s ``silicon_sample.csv``), per GPU: rows, signed median error, the error of the
row furthest off. ``PUBLISHED``: ``python -m demos.validate published`` (DBO answers against published
deployments), per case: its GPU family and phase, and how many of its quantities fell within target.
Both as of ``CHECKED_ON``; ``tests/prediction/test_trust.py`` reruns both commands and fails when a
figure here is no longer what they print, so the list cannot go stale unseen.

``checked_line(gpu, family, phase)`` is the line: the GPU's own figures where it has measured steps, else
its family's (said so), else "not checked"; prefill steps are not checked against silicon (the measured
TTFT rows hold more than a forward: fidelity.md, "Real models").
"""

from __future__ import annotations

from demos.vocabulary import Phase

__all__ = ["CHECKED_ON", "PUBLISHED", "SILICON", "checked_line"]

CHECKED_ON = "2026-12-07"

SILICON = {
    # gpu: (family, rows, median error, max error), decode
    "h200": ("hopper", 18, -0.073, -0.231),
    "b200": ("blackwell", 40, -0.052, -0.398),
    "gb200": ("blackwell", 73, -0.008, 0.676),
    "gb300": ("blackwell", 49, -0.013, -0.343),
}

PUBLISHED = {
    # case: (family, phase, quantities within target, quantities)
    "lmsys-dsv3-decode-h100-ep72": ("hopper", Phase.DECODE, 4, 4),
    "atom-gptoss-decode-mi355x": ("cdna4", Phase.DECODE, 1, 2),
}


def _silicon(gpu: str, family: str) -> str:
    mine = {g: v for g, v in SILICON.items() if g == gpu} or {g: v for g, v in SILICON.items() if v[0] == family}
    if not mine:
        return f"no-DBO steps: not checked against measured deployments on {family} GPUs"
    figures = "; ".join(f"{g} median {m:+.1%}, max {x:+.1%} over {n} rows" for g, (_, n, m, x) in mine.items())
    whose = "" if gpu in mine else f" (no measured steps on {gpu}: its family's)"
    return f"no-DBO decode steps against measured deployments{whose}: {figures}"


def checked_line(gpu: str, family: str, phase: str) -> str:
    """The report's ``checked`` line for a prediction of ``phase`` on ``gpu`` of ``family`` (module
    docstring)."""
    if phase == Phase.DECODE:
        steps = _silicon(gpu, family)
    else:
        steps = "prefill steps: not checked against measured deployments (their TTFT holds more than a forward)"
    cases = [(c, w, n) for c, (f, p, w, n) in PUBLISHED.items() if f == family and p == phase]
    answers = (
        "; ".join(f"{c} {w} of {n} quantities within target" for c, w, n in cases)
        if cases
        else f"not checked against published {phase} deployments on {family} GPUs"
    )
    return f"{steps} (validate silicon); DBO answers: {answers} (validate published); as of {CHECKED_ON}"
