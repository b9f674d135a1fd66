"""The sources `load_inline` receives, evaluated from the AST (`verifier/static/sources.py`):
what the file fixes is recovered exactly, anything else is reported as dynamic, never guessed."""

from __future__ import annotations

import ast

import pytest
from cudice.verifier.static.sources import load_inline_nodes, resolve_call_sources


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


# -- names and the preprocessed view the static checks read ------------------------------------


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("torch.cuda.torch.relu", "torch.relu"),
        ("torch.utils.cpp_extension.os.system", "os.system"),
        ("torch.nn.functional.gelu", "torch.nn.functional.gelu"),
        ("torch.cuda.current_stream", "torch.cuda.current_stream"),
    ],
)
def test_canonical_paths_restart_at_a_reexported_module(path: str, expected: str) -> None:
    from cudice.verifier.static.names import canonical

    assert canonical(path) == expected


def test_every_call_that_resolves_to_load_inline_is_found() -> None:
    from cudice.verifier.static.names import LoadInlineUses, import_aliases

    tree = ast.parse(
        "import torch.utils.cpp_extension as ce\nfrom torch.utils.cpp_extension import load_inline as li\n"
        "a = li(name='a', cpp_sources='')\nb = ce.load_inline(name='b', cpp_sources='')\n"
        "def f():\n    make = ce.load_inline\n    return make(name='c', cpp_sources='')\n"
        "g = [li]\n"
    )
    uses = LoadInlineUses.of(tree, import_aliases(tree))
    names = sorted(k.value.value for c in uses.calls for k in c.keywords if k.arg == "name")  # type: ignore[attr-defined]
    assert names == ["a", "b", "c"]
    assert [ast.unparse(v) for v in uses.values] == ["li"]


def test_functions_of_a_call_are_read_from_constants() -> None:
    from cudice.verifier.static.sources import call_functions

    tree = ast.parse("F = ['relu', 'gelu']\nx = li(name='a', cpp_sources='', functions=F)")
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call))
    assert call_functions(tree, call) == ("relu", "gelu")


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("#define CAT(a, b) a##b\nCAT(pthread_, create)(t);", "pthread_create(t);"),
        ("#define C2(a, b) a##b\n#define CAT(a, b) C2(a, b)\nCAT(f, open)(p);", "fopen(p);"),
        ("#define NS at\nNS::relu(x);", "at::relu(x);"),
        ("#define S(x) #x\nS(relu);", '" ";'),
        ("#define LOOP LOOP + 1\nLOOP;", "LOOP + 1;"),
        ("#define F(x) x\nint F;", "int F;"),
        ("#define V(...) g(__VA_ARGS__)\nV(1, 2);", "g(1, 2);"),
    ],
)
def test_macros_expand_like_the_preprocessor(code: str, expected: str) -> None:
    from cudice.verifier.static.cpp_preprocess import expand_macros

    text = expand_macros(code).text
    assert text.splitlines()[-1] == expected


def test_expanded_text_maps_back_to_the_invocation() -> None:
    from cudice.verifier.static.cpp_preprocess import expand_macros, join_scopes

    code = "#define CAT(a, b) a##b\nint x;\n  CAT(f, open)(p);\nat :: relu(y);"
    ex = join_scopes(expand_macros(code))
    i = ex.text.index("fopen")
    assert ex.source_offset(i) == code.index("CAT(f") and ex.is_expanded(i)
    j = ex.text.index("at::relu")
    assert ex.source_offset(j) == code.index("at ::") and not ex.is_expanded(j)
    assert ex.source_offset(ex.text.index("relu")) == code.index("relu")
