"""The project's source files parsed once per test session: several tests walk every module's syntax tree
(the import graph, the layer rules, private names, flag parsing), and parsing the tree again for each costs
seconds. A file changed on disk since it was parsed is parsed again; callers only read the trees."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

__all__ = ["parsed"]


@functools.cache
def _parse(path: str, mtime_ns: int, size: int) -> ast.Module:
    return ast.parse(Path(path).read_text(encoding="utf-8"), path)


def parsed(path: Path) -> ast.Module:
    """The syntax tree of the Python file ``path`` (read-only: it is shared)."""
    st = path.stat()
    return _parse(str(path), st.st_mtime_ns, st.st_size)
