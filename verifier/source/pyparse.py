"""Python's parser, one call at a time per process.

Role: the one place the verifier (and the trainer's corpus tools) turn Python text into an
`ast` tree. The verifier parses in pool threads, the editor's workers in their own threads,
and CPython 3.11 keeps the AST constructor's recursion counter in interpreter-wide state
(https://github.com/python/cpython/issues/106905). When the garbage collector runs a
finalizer in the middle of a parse and another thread parses meanwhile, the first parse
fails with `SystemError: AST constructor recursion depth mismatch` although its text is
fine. A verdict must not depend on that, so every parse here holds one process-wide lock.

Contract: `parse` is `ast.parse` (same arguments, same exceptions: `SyntaxError`, or on older
Pythons `ValueError` for a NUL byte) made safe to call from any number of threads. Parses are
short (milliseconds for a kernel file), so serialising them costs nothing measurable.

Not covered: `ast.parse` called directly by other libraries in other threads; they can
still race with each other and with us.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str | bytes, filename: str = "<unknown>", mode: str = "exec") -> ast.Module:
    """`ast.parse(source, filename, mode)` under the process-wide parser lock."""
    with _LOCK:
        return ast.parse(source, filename=filename, mode=mode)  # type: ignore[return-value]
