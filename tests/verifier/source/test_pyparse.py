"""The verifier's parser is safe to call from many threads at once.

CPython 3.11's AST constructor keeps its recursion counter in interpreter-wide state, so two
threads parsing at once can fail a good file with `SystemError` (verifier/source/pyparse.py says
when). The race itself needs a finalizer to switch threads in the middle of a parse, which a
test cannot arrange on demand; these tests pin the lock that rules it out.
"""

from __future__ import annotations

import ast
import threading

import pytest
from cudice.verifier.source import pyparse


def test_parses_never_overlap(monkeypatch: pytest.MonkeyPatch) -> None:
    inside = 0
    most = 0
    count = threading.Lock()
    go = threading.Event()
    real = ast.parse

    def slow_parse(*args: object, **kwargs: object) -> ast.AST:
        nonlocal inside, most
        with count:
            inside += 1
            most = max(most, inside)
        go.wait(0.02)  # long enough for the other threads to arrive if nothing stops them
        with count:
            inside -= 1
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ast, "parse", slow_parse)
    threads = [threading.Thread(target=pyparse.parse, args=("x = 1\n",)) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert most == 1


def test_same_answers_and_errors_as_ast_parse() -> None:
    tree = pyparse.parse("def f(a):\n    return a + 1\n", filename="k.py")
    assert ast.dump(tree) == ast.dump(ast.parse("def f(a):\n    return a + 1\n"))
    with pytest.raises(SyntaxError) as err:
        pyparse.parse("def f(:\n", filename="k.py")
    assert err.value.filename == "k.py" and err.value.lineno == 1
    with pytest.raises((SyntaxError, ValueError)):  # which one depends on the Python version
        pyparse.parse("x = 1\x00\n")
