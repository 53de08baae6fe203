"""Many command invocations in one Python subprocess, each run as ``python -m module args`` runs it.

A command's process spends about 2.5 s importing torch before it reads its flags, so a test file that
checks dozens of bad inputs, each in its own process, spends most of its time importing. ``run_lines``
starts one interpreter for a list of ``(module, args)`` command lines and in it runs each module as
``__main__`` with its arguments (``runpy.run_module``: the command's own ``if __name__ == "__main__"``
path, its ``SystemExit`` status), with stdout and stderr captured per invocation. What a separate
process would add, the interpreter's start and the imports, is shared; a test of that part (Ctrl-C
during the imports, signals) must still start its own process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import NamedTuple

from tests.support.paths import ROOT, python_env
from tests.support.timing import slack

_DRIVER = r"""
import io, json, runpy, sys
cases = json.loads(sys.stdin.read())
real_out, real_err, argv0 = sys.stdout, sys.stderr, sys.argv[0]
results = []
for module, args in cases:
    out, err = io.StringIO(), io.StringIO()
    sys.stdout, sys.stderr, sys.argv = out, err, [argv0, *args]
    code = 0
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.stdout, sys.stderr = real_out, real_err
    results.append([code, out.getvalue(), err.getvalue()])
real_out.write(json.dumps(results))
"""


class Invocation(NamedTuple):
    """One command line's exit status and what it wrote."""

    returncode: int
    stdout: str
    stderr: str


def run_lines(lines: list[tuple[str, list[str]]], timeout: float = 120) -> list[Invocation]:
    """``python -m module *args`` for each ``(module, args)`` of ``lines``, in one subprocess, in order
    (module docstring)."""
    p = subprocess.run(
        [sys.executable, "-c", _DRIVER],
        input=json.dumps([[m, list(a)] for m, a in lines]),
        cwd=ROOT,
        env=python_env(),
        capture_output=True,
        text=True,
        timeout=slack(timeout),
    )
    assert p.returncode == 0, p.stderr
    return [Invocation(*r) for r in json.loads(p.stdout)]
