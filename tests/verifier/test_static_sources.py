"""The sources `load_inline` receives, evaluated from the AST (`verifier/static_sources.py`):
what the file fixes is recovered exactly, anything else is reported as dynamic, never guessed."""

from __future__ import annotations

import ast

import pytest
from cudice.verifier.static_sources import load_inline_nodes, resolve_call_sources


def _resolve(text: str) -> list[str | None]:
    tree = ast.parse(text)
    (call,) = load_inline_nodes(tree)
    resolved = resolve_call_sources(tree, call)
    return [s.text for s in resolved.sources] + [None] * len(resolved.dynamic_args)


@pytest.mark.parametrize(
    ("setup", "arg", "expected"),
    [
        (
            "BLOCK = 128\nT = BLOCK * 2\nS = 'float'",
            'f"k<{T}, {S}> {BLOCK:05d} {{}}"',
            "k<256, float> 00128 {}",
        ),
        ("A = 'x'\nB = 'y'", '"".join([A, "\\n", B])', "x\ny"),
        ("N = 4", '"n={} m={m}".format(N, m=N + 1)', "n=4 m=5"),
        ("N = 3", '"#define N %d\\n" % N + "int a;"', "#define N 3\nint a;"),
        (
            "import textwrap\nSRC = '''\n    int a;\n'''",
            "textwrap.dedent(SRC).strip().replace('a', 'b')",
            "int b;",
        ),
    ],
)
def test_sources_fixed_by_the_file_are_recovered_exactly(setup: str, arg: str, expected: str) -> None:
    assert _resolve(f"{setup}\next = load_inline('m', cpp_sources='', cuda_sources={arg})") == ["", expected]


@pytest.mark.parametrize(
    ("setup", "arg"),
    [
        ("import os\nOP = os.environ.get('OP', 'x')", 'f"{OP}"'),  # a field chosen at run time
        ("def make():\n    return 'x'", "make()"),  # a function's result
        ("S = 'a'\nS = 'b'", "S"),  # bound twice: which one depends on the order of execution
        ("S = 'a'\nS += open('k.cu').read()", "S"),
        ("S = 'a'\nS *= 2", "S"),
        ("SRCS = ['a']\nSRCS.append(open('k.cu').read())", "SRCS"),  # the literal list is changed later
        ("S = 'a'\ndef f():\n    global S\n    S = 'b'", "S"),
        ("if True:\n    S = 'a'", "S"),
        ("", "open('k.cu').read()"),
    ],
)
def test_sources_the_file_does_not_fix_are_dynamic(setup: str, arg: str) -> None:
    assert None in _resolve(f"{setup}\next = load_inline('m', cpp_sources='', cuda_sources={arg})")


def test_module_level_concatenation_in_order_is_followed() -> None:
    text = "S = 'a'\nS += 'b'\nT = S\nS += 'c'\next = load_inline('m', cpp_sources=S, cuda_sources=T)"
    # T holds "ab" at run time; reading the later `+=` too gives the checks a superset of the compiled text
    assert _resolve(text) == ["abc", "abc"]


def test_a_list_of_sources_keeps_its_elements_and_kwargs_splat_is_dynamic() -> None:
    assert _resolve("A = 'a'\next = load_inline('m', cpp_sources=[A, 'b' + A], cuda_sources=None)") == [
        "a",
        "ba",
    ]
    assert _resolve("kw = {}\next = load_inline('m', cpp_sources='a', **kw)") == ["a", None]


def test_a_function_local_source_is_read_and_parameters_are_not() -> None:
    text = '''
SRC = "module"


class ModelNew:
    def __init__(self, op="x"):
        src = """local"""
        self.ext = load_inline("m", cpp_sources=src, cuda_sources=[SRC, op])
'''
    assert _resolve(text) == ["local", "module", None]
