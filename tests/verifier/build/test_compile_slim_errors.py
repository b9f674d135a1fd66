"""A structural compile error is the slim build's verdict; every other slim failure gets the full rebuild.

`slim_errors_stand` (build/compile.py) keeps a failed slim compile as the verdict only when every
error is structural (missing `;`/`)`/`}`, an extra `}`, an unterminated string) inside the
generated file and the file names no macro the two header sets define differently. The rule
is checked on real g++ and nvcc output: structural errors are kept, and errors a missing
declaration or macro causes (the names torch, c10, std or pybind11 headers would declare) are
not. The `slow` tests build KernelBench-like candidates against torch: a syntax error is
reported by the slim build alone with the full build's diagnostics, an error naming an at::
function the slim set lacks is rebuilt with the full headers, and a good file still builds.

Undeclared names: `slim_errors_stand` also keeps a slim "not declared" / "is undefined" error
when the full headers spell the name nowhere a lookup could find it
(headers.full_header_names) and the name sits where it can only be read. Checked on real
g++/nvcc output with a given name set, and on torch builds: relu_broken's undeclared `vv` is the
slim build's verdict with the full build's message and place; a name only the full headers
declare (pythoncapi_compat's `PyLong_IsZero`) still rebuilds, whether used rightly (the build
succeeds) or wrongly (the full build's own error).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from build_compare import build_text, outcome
from cudice.verifier.build.compile import BuildResult, slim_errors_stand
from cudice.verifier.build.generated import GeneratedFile, GeneratedModule, Piece
from cudice.verifier.build.headers import (
    HeaderNames,
    Overlay,
    ensure_overlay,
    full_header_names,
    macro_differences,
    outer_scope_words,
)
from cudice.verifier.build.toolchain import cuda_home
from cudice.verifier.config import VerifyConfig
from cudice.verifier.source.result import Severity
from verifier_marks import needs_nvcc

ROOT = Path(__file__).resolve().parents[3]

STRUCTURAL = {
    "missing_semicolon": "int k(int a) {\n    int b = a + 1\n    return b;\n}\n",
    "unbalanced_paren": "int k(int a) { int b = (a + 1; return b; }\n",
    "unclosed_brace": "int k(int a) {\n    if (a) { a += 1;\n    return a;\n}\nint g(int q) { return q; }\n",
    "extra_brace": "int k(int a) { return a; }\n}\nint g(int q) { return q; }\n",
    "missing_expression": "int k(int a) { int b = ; return (a + ); }\n",
    "unterminated_string": 'const char* k() { return "abc; }\n',
}
# each names something only a header (torch, c10, std, pybind11) would declare or define
MISSING_DECLARATION = {
    "std_template": "int k(int a) { std::vector<int> v(a); return v.size(); }\n",
    "at_type": "int k(int a) { at::Tensor t; return a; }\n",
    "torch_function": "int k(int a) { auto t = torch::empty({a}); return a; }\n",
    "unknown_template": "int k(int a) { return foo<int>(a); }\n",
    "unknown_type": "int k(int a) { Foo y; y.v = a; return a; }\n",
    "unknown_type_pointer": "int k(int a) { Foo* y = nullptr; return a; }\n",
    "unknown_cast": "int k(float a) { return (Index)a; }\n",
    "template_overload_missing": "namespace at { int foo(int); }\nint k(int a) { return at::foo<int>(a); }\n",
    "macro_in_declarator": "void C10_LAUNCH_BOUNDS_1(256) k(float* x) { x[0] = 1; }\n",
    "macro_in_parameter": "void k(float* C10_RESTRICT x) { x[0] = 1; }\n",
    "macro_before_function": "C10_HOST_DEVICE inline int k(int a) { return a; }\n",
    "macro_statement": 'int k(int a) { TORCH_CHECK(a > 0, "positive"); return a; }\n',
    "macro_constant": "int k(int a) { return a + FOO_CONST; }\n",
    "macro_module": 'int k(int a) { return a; }\nPYBIND11_MODULE(ext, m) { m.def("k", &k); }\n',
}


def _compile(tmp_path: Path, text: str, cuda: bool) -> tuple[GeneratedModule, str, str]:
    """(module of one user piece, its file name, the compiler's output with the file called so)."""
    name = "cuda.cu" if cuda else "main.cpp"
    src = tmp_path / ("k.cu" if cuda else "k.cpp")
    src.write_text(text)
    if cuda:
        nvcc = str(Path(cuda_home()) / "bin" / "nvcc")
        cmd = [nvcc, "-std=c++20", "-gencode=arch=compute_90,code=sm_90", "-c", str(src), "-o", os.devnull]
    else:
        cmd = ["g++", "-std=c++20", "-fsyntax-only", str(src)]
    run = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "LC_ALL": "C"}, timeout=600)
    assert run.returncode != 0, run.stderr
    piece = Piece(1, text.count("\n") + 1, None)
    module = GeneratedModule("m", (GeneratedFile(name, text, (piece,)),))
    return module, name, (run.stdout + run.stderr).replace(str(src), f"/build/{name}")


def _no_macros(name: str, includes: tuple[str, ...]) -> frozenset[str]:
    return frozenset()


@needs_nvcc
@pytest.mark.parametrize("cuda", [False, True], ids=["g++", "nvcc"])
@pytest.mark.parametrize("case", sorted(STRUCTURAL))
def test_structural_errors_stand(case: str, cuda: bool, tmp_path: Path) -> None:
    module, name, output = _compile(tmp_path, STRUCTURAL[case], cuda)
    assert slim_errors_stand(module, name, output, _no_macros), output
    # ... unless the file names a macro the two header sets define differently, or that is unknown
    assert not slim_errors_stand(module, name, output, lambda n, i: frozenset({"b", "k"}))
    assert not slim_errors_stand(module, name, output, lambda n, i: None)


@needs_nvcc
@pytest.mark.parametrize("cuda", [False, True], ids=["g++", "nvcc"])
@pytest.mark.parametrize("case", sorted(MISSING_DECLARATION))
def test_errors_a_missing_declaration_causes_go_to_the_full_build(
    case: str, cuda: bool, tmp_path: Path
) -> None:
    module, name, output = _compile(tmp_path, MISSING_DECLARATION[case], cuda)
    assert not slim_errors_stand(module, name, output, _no_macros), output


def test_errors_outside_the_file_or_unlocated_go_to_the_full_build() -> None:
    text = "int k(int a) {\n    int b = a + 1\n    return b;\n}\n"
    module = GeneratedModule("m", (GeneratedFile("cuda.cu", text, (Piece(1, 5, None),)),))
    in_header = '/torch/include/ATen/core/Tensor.h(12): error: expected a ";"\n'
    assert not slim_errors_stand(module, "cuda.cu", in_header, _no_macros)
    assert not slim_errors_stand(module, "cuda.cu", "ptxas fatal error: something\n", _no_macros)
    assert not slim_errors_stand(module, "cuda.cu", "", _no_macros)  # failed without a message
    assert not slim_errors_stand(module, "main.cpp", '/b/cuda.cu(3): error: expected a ";"\n', _no_macros)
    assert slim_errors_stand(module, "cuda.cu", '/b/cuda.cu(3): error: expected a ";"\n', _no_macros)


# --- real torch builds -------------------------------------------------------------------------

# one full torch-extension build takes 100-150 s on an idle 2-core box and ~4x that at load 6
BUILD_TIMEOUT = pytest.mark.timeout(2400)

GOOD = (ROOT / "examples" / "relu_cuda.py").read_text()
# a `;` missing in the kernel (nvcc) and in a C++ helper (g++, so main.cpp is built: pybind11 path)
SYNTAX = GOOD.replace("float v = x[i];", "float v = x[i]").replace(
    'relu_cpp_source = "torch::Tensor relu_cuda(torch::Tensor x);"',
    'relu_cpp_source = """torch::Tensor relu_cuda(torch::Tensor x);\n'
    'int helper(int a) {\n    int b = a + 1\n    return b;\n}\n"""',
)
# at::get_num_threads is declared by the full headers (ATen/Parallel.h), not the slim set: the
# slim error says it is missing, the full one that it takes no argument; the missing `;` beside it
# does not make the slim outcome count
MISSING_IN_SLIM = GOOD.replace("float v = x[i];", "float v = x[i]").replace(
    "auto xc = x.contiguous();", "auto xc = x.contiguous();\n    int t = at::get_num_threads(1);"
)


def _build(text: str, name: str, config: VerifyConfig, mode: str) -> BuildResult:
    """`build_text` of the case's text, read as `/virtual/{name}.py`. The extension keeps the
    example's name: the cases' full builds compile the same `main.cpp` with the same flags (an
    object the session's build cache holds once: ~20-50 s of g++ per case otherwise), and each
    case's own `cuda.cu` is compiled for it, since its text differs."""
    return build_text(text, name, config, mode)


def _errors(build: BuildResult) -> set[int]:
    return {d.location.line for d in build.diagnostics if d.severity is Severity.ERROR and d.location}


@needs_nvcc
@pytest.mark.slow
@BUILD_TIMEOUT
def test_syntax_error_is_reported_from_the_slim_build_alone(session_config: VerifyConfig) -> None:
    auto = _build(SYNTAX, "slim_syntax", session_config, "auto")
    assert not auto.ok and auto.build_path == "fast", (auto.build_path, auto.output[-2000:])
    assert set(auto.step_wall_s) == {"slim.main.cpp", "slim.cuda.cu"}  # no full-header compile ran
    full = _build(SYNTAX, "slim_syntax", session_config, "full")
    assert not full.ok and full.build_path == "full"
    assert outcome(auto) == outcome(full), (auto.output[-2000:], full.output[-2000:])
    lines = SYNTAX.splitlines()
    # nvcc stops at the token after `x[i]`, g++ at the one after `a + 1`: the next lines
    expected = {lines.index("        float v = x[i]") + 2, lines.index("    int b = a + 1") + 2}
    assert _errors(auto) == expected, auto.diagnostics


@needs_nvcc
@pytest.mark.slow
@BUILD_TIMEOUT
def test_syntax_error_in_the_c_abi_build_is_reported_from_the_slim_build_alone(
    session_config: VerifyConfig,
) -> None:
    """The C-ABI shim appended to `cuda.cu` names Python's macros: its own `<Python.h>` defines them
    in both builds, so they do not stop the slim verdict."""
    text = GOOD.replace("float v = x[i];", "float v = x[i]")
    auto = _build(text, "slim_syntax_cabi", session_config, "auto")
    assert not auto.ok and auto.build_path == "cabi-fast", (auto.build_path, auto.output[-2000:])
    assert set(auto.step_wall_s) == {"slim.cuda.cu"}
    full = _build(text, "slim_syntax_cabi", session_config, "full")
    assert outcome(auto) == outcome(full), (auto.output[-2000:], full.output[-2000:])
    assert _errors(auto) == {text.splitlines().index("        float v = x[i]") + 2}


@needs_nvcc
@pytest.mark.slow
@BUILD_TIMEOUT
def test_error_on_a_name_the_slim_set_lacks_gets_the_full_build(session_config: VerifyConfig) -> None:
    auto = _build(MISSING_IN_SLIM, "slim_missing", session_config, "auto")
    assert not auto.ok and auto.build_path == "cabi-fallback", (auto.build_path, auto.output[-2000:])
    assert "cuda.cu" in auto.step_wall_s  # rebuilt with the full headers
    full = _build(MISSING_IN_SLIM, "slim_missing", session_config, "full")
    assert outcome(auto) == outcome(full), (auto.output[-2000:], full.output[-2000:])
    messages = [d.message for d in auto.diagnostics if d.severity is Severity.ERROR]
    assert messages and not any("no member" in m for m in messages), messages  # the full build's words


@needs_nvcc
@pytest.mark.slow
@BUILD_TIMEOUT
def test_good_file_still_builds_with_slim_headers(session_config: VerifyConfig) -> None:
    auto = _build(GOOD, "slim_good", session_config, "auto")
    assert auto.ok and auto.build_path == "cabi-fast", auto.output[-2000:]
    assert not any(d.severity is Severity.ERROR for d in auto.diagnostics)


@needs_nvcc
@pytest.mark.slow
@BUILD_TIMEOUT
def test_macro_differences_name_what_only_the_full_headers_define(session_config: VerifyConfig) -> None:
    from cudice.verifier.build.toolchain import probe_toolchain

    tc = probe_toolchain(session_config.cache_dir, session_config.arch_list_env)
    overlay = ensure_overlay(session_config.cache_dir, tc.cflags)
    flags = f"{tc.cuda_cflags} -Xcompiler -idirafter,{shlex.quote(str(overlay.standins))}"
    slim = f"-I{shlex.quote(str(overlay.device))} {flags}"
    names = macro_differences(overlay, tc.nvcc, flags, slim, cuda=True)
    assert names is not None
    assert "PYBIND11_MODULE" in names  # the full torch/extension.h brings pybind11; the device set does not
    assert "TORCH_CHECK" not in names and "AT_DISPATCH_FLOATING_TYPES" not in names  # in both sets
    assert macro_differences(overlay, tc.nvcc, flags, slim, cuda=True) == names  # cached
    assert macro_differences(overlay, tc.nvcc, "--no-such-flag", slim, cuda=True) is None


def test_a_macro_is_compared_where_it_is_used_before_or_after_the_files_own_includes() -> None:
    """`PY_M` differs between the header sets, unless the file's own `<Python.h>` defines it on both."""

    def differing(name: str, includes: tuple[str, ...]) -> frozenset[str]:
        return frozenset() if "<Python.h>" in includes else frozenset({"PY_M"})

    error = '/b/cuda.cu(5): error: expected a ";"\n'
    after = "int k(int a) { return a }\n#include <Python.h>\nint g() { return PY_M; }\n"
    before = "int g() { return PY_M; }\n#include <Python.h>\nint k(int a) { return a }\n"
    for text, stands in ((after, True), (before, False)):
        module = GeneratedModule("m", (GeneratedFile("cuda.cu", text, (Piece(1, 4, None),)),))
        assert slim_errors_stand(module, "cuda.cu", error, differing) is stands


# --- undeclared names ---------------------------------------------------------------------------

NO_NAMES = HeaderNames(frozenset(), frozenset())

# a typo'd name read where no parse could declare it: kept when no header spells it
UNDECLARED_KEPT = {
    "kernel_local": "void k(const float* x, float* out, int n) {\n"
    "    for (int i = 0; i < n; ++i) { float v = x[i]; out[i] = vv > 0.0f ? v : 0.0f; }\n}\n",
    "operand": "int k(int a) { int b = a + qq; return b; }\n",
    "returned": "int k(int a) {\n    return zork;\n}\n",
    "argument_of_a_read_call": "int g(int q) { return q; }\nint k(int a) { return g(a) + g(zork); }\n",
    "with_structural": "int k(int a) {\n    int b = zork\n    return b;\n}\nint g() { return qq * 2; }\n",
}
# places where a header type could turn the statement into a declaration of the name, or names
# written qualified: the full build decides
UNDECLARED_NOT_KEPT = {
    "statement_call": "void k() { F(zork); }\n",
    "call_statement_of_known": "int g(int q) { return q; }\nvoid k() { g(zork); }\n",
    "after_star": "int k(int a) { int b = a * zork; return b; }\n",
    "define_before_include": "#define FOO 1\n#include <cstdio>\nint k(int a) { return a + zork; }\n",
}


def _names(*words: str) -> Callable[[str, tuple[str, ...]], HeaderNames]:
    return lambda name, includes: HeaderNames(frozenset(words), frozenset())


@needs_nvcc
@pytest.mark.parametrize("cuda", [False, True], ids=["g++", "nvcc"])
@pytest.mark.parametrize("case", sorted(UNDECLARED_KEPT))
def test_undeclared_name_no_header_spells_stands(case: str, cuda: bool, tmp_path: Path) -> None:
    module, name, output = _compile(tmp_path, UNDECLARED_KEPT[case], cuda)
    assert slim_errors_stand(module, name, output, _no_macros, _names()), output
    undeclared = {"kernel_local": "vv", "operand": "qq", "with_structural": "qq"}.get(case, "zork")
    # ... not when a full header spells the name, when the names are unknown, or without the check
    assert not slim_errors_stand(module, name, output, _no_macros, _names(undeclared))
    assert not slim_errors_stand(module, name, output, _no_macros, lambda n, i: None)
    assert not slim_errors_stand(module, name, output, _no_macros)


@needs_nvcc
@pytest.mark.parametrize("cuda", [False, True], ids=["g++", "nvcc"])
@pytest.mark.parametrize("case", sorted(UNDECLARED_NOT_KEPT))
def test_undeclared_name_where_a_header_could_matter_goes_to_the_full_build(
    case: str, cuda: bool, tmp_path: Path
) -> None:
    module, name, output = _compile(tmp_path, UNDECLARED_NOT_KEPT[case], cuda)
    assert not slim_errors_stand(module, name, output, _no_macros, _names()), output


@needs_nvcc
def test_gcc_spelling_suggestion_must_not_depend_on_the_headers(tmp_path: Path) -> None:
    """g++ appends `did you mean 'v'?`: a header name as close as `v` could be suggested instead."""
    module, name, output = _compile(tmp_path, UNDECLARED_KEPT["kernel_local"], cuda=False)
    assert "did you mean" in output, output
    assert slim_errors_stand(module, name, output, _no_macros, _names("value", "vectorize"))
    assert not slim_errors_stand(module, name, output, _no_macros, _names("vw"))
    assert not slim_errors_stand(module, name, output, _no_macros, _names("Vv_"))


def test_member_and_qualified_undeclared_names_go_to_the_full_build() -> None:
    text = "int k(int a) {\n    return a + s.zork + ns::zork;\n}\n"
    module = GeneratedModule("m", (GeneratedFile("cuda.cu", text, (Piece(1, 4, None),)),))
    error = '/b/cuda.cu(2): error: identifier "zork" is undefined\n'
    assert not slim_errors_stand(module, "cuda.cu", error, _no_macros, _names())
    plain = "int k(int a) {\n    return a + zork;\n}\n"
    module = GeneratedModule("m", (GeneratedFile("cuda.cu", plain, (Piece(1, 4, None),)),))
    assert slim_errors_stand(module, "cuda.cu", error, _no_macros, _names())
    # the module's own name: the full build's TORCH_EXTENSION_NAME
    error_m = '/b/cuda.cu(2): error: identifier "m" is undefined\n'
    module = GeneratedModule(
        "m", (GeneratedFile("cuda.cu", plain.replace("zork", "m"), (Piece(1, 4, None),)),)
    )
    assert not slim_errors_stand(module, "cuda.cu", error_m, _no_macros, _names())


def test_outer_scope_words_leave_out_parameters_locals_and_bodies_only() -> None:
    text = """
namespace at { struct Scalar { Scalar(int vv) : Scalar(vv, true) {} int member; void f(int p) { int loc; } };
int (*fp)(int param); typedef void (vfun)(int q); int (S::*pm)(int r);
template <typename TT, int NN = 3> struct Box { TT inner; };
template <class U> U ident(U uu) { int tmpl_local; return uu; }
enum class E : int { Enumer = 1 };
extern "C" { int cfunc(int cp); }
auto lam = [](int lp) { return lp; };
const char* s = "str { word";
struct S* maker(int mp) { int counted_local; return 0; }
}
"""
    words = outer_scope_words(text)
    for declared in ("Scalar", "member", "f", "fp", "vfun", "pm", "Box", "inner", "ident", "E", "Enumer"):
        assert declared in words, declared
    for declared in ("cfunc", "lam", "s", "maker", "counted_local"):  # a `struct` return type: kept
        assert declared in words, declared
    for hidden in ("vv", "p", "loc", "param", "q", "r", "NN", "uu", "tmpl_local", "cp", "lp", "word"):
        assert hidden not in words, hidden
    assert "vv" in outer_scope_words(text.replace("int member;", "int member; }"))  # unbalanced: every word


BROKEN = (ROOT / "examples" / "relu_broken.py").read_text()
# pythoncapi_compat's PyLong_IsZero: declared at global scope by the full torch/extension.h
# (torch/csrc/utils/pythoncapi_compat.h), not by the slim set nor the shim's own <Python.h>
FULL_ONLY = "PyLong_IsZero"
FULL_ONLY_USED = GOOD.replace(
    "auto xc = x.contiguous();", f"auto xc = x.contiguous();\n    int z = {FULL_ONLY}(nullptr) + 1;"
)
FULL_ONLY_MISUSED = GOOD.replace(
    "auto xc = x.contiguous();", f"auto xc = x.contiguous();\n    int z = {FULL_ONLY}(1, 2);"
)


@needs_nvcc
@pytest.mark.slow
@BUILD_TIMEOUT
def test_undeclared_typo_is_reported_from_the_slim_build_alone(session_config: VerifyConfig) -> None:
    """relu_broken.py: `vv` in the kernel; no full header spells it, so no full rebuild."""
    auto = _build(BROKEN, "slim_undeclared", session_config, "auto")
    assert not auto.ok and auto.build_path == "cabi-fast", (auto.build_path, auto.output[-2000:])
    assert set(auto.step_wall_s) == {"slim.cuda.cu"}  # no full-header compile ran
    full = _build(BROKEN, "slim_undeclared", session_config, "full")
    assert not full.ok and full.build_path == "full"
    assert outcome(auto) == outcome(full), (auto.output[-2000:], full.output[-2000:])
    errors = [d for d in auto.diagnostics if d.severity is Severity.ERROR]
    assert [d.message for d in errors] == ['identifier "vv" is undefined'], errors
    assert _errors(auto) == {BROKEN.splitlines().index("        out[i] = vv > 0.0f ? x[i] : 0.0f;") + 1}


@needs_nvcc
@pytest.mark.slow
@BUILD_TIMEOUT
def test_undeclared_name_only_the_full_headers_declare_gets_the_full_build(
    session_config: VerifyConfig,
) -> None:
    from cudice.verifier.build.toolchain import probe_toolchain

    tc = probe_toolchain(session_config.cache_dir, session_config.arch_list_env)
    overlay = ensure_overlay(session_config.cache_dir, tc.cflags)
    flags = f"{tc.cuda_cflags} -Xcompiler -idirafter,{shlex.quote(str(overlay.standins))}"
    full_names = full_header_names(overlay, tc.nvcc, flags, cuda=True)
    slim_names = full_header_names(
        overlay, tc.nvcc, f"-I{shlex.quote(str(overlay.device))} {flags}", cuda=True
    )
    assert full_names is not None and slim_names is not None
    assert FULL_ONLY in full_names.identifiers and FULL_ONLY not in slim_names.identifiers
    assert "vv" not in full_names.identifiers  # only c10::Scalar's parameters are called so
    assert {"PYBIND11_MODULE", "TORCH_CHECK"} <= full_names.macros

    used = _build(FULL_ONLY_USED, "slim_full_only", session_config, "auto")
    assert used.ok and used.build_path == "cabi-fallback", (used.build_path, used.output[-2000:])
    assert "cuda.cu" in used.step_wall_s  # the slim error was not the verdict: the full build compiled it

    misused = _build(FULL_ONLY_MISUSED, "slim_full_only_bad", session_config, "auto")
    assert not misused.ok and misused.build_path == "cabi-fallback", misused.build_path
    full = _build(FULL_ONLY_MISUSED, "slim_full_only_bad", session_config, "full")
    assert outcome(misused) == outcome(full), (misused.output[-2000:], full.output[-2000:])
    messages = [d.message for d in misused.diagnostics if d.severity is Severity.ERROR]
    assert messages and not any("undefined" in m for m in messages), messages  # the full build's words


# --- `#error` and errors about the user's own declarations ---------------------------------------

KERNEL = (
    "#include <cstdint>\n"
    "__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t n) {\n"
    "    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    for (; i < n; i += gridDim.x) {\n"
    "        float v = x[i];\n"
    "        out[i] = v > 0.0f ? v : 0.0f;\n"
    "    }\n"
    "}\n"
)
LAUNCH = "void launch(const float* x, float* o, int64_t n) { relu_kernel<<<1, 32>>>(x, o); }\n"
# the kernel's parameters and locals carry names some header spells (members, enumerators):
# they are found as locals all the same
HEADER_WORDS = ("x", "n", "i", "out", "v", "o", "p", "fmaxf", "at", "Tensor")
# errors in code whose every name is the user's, a local, a keyword or a CUDA built-in: kept
USER_ONLY_KEPT = {
    "hash_error": KERNEL.replace("\n", "\n#error this kernel needs sm_90\n", 1),
    "type_error": KERNEL.replace("float v = x[i];", "float* p = x; float v = p[i];"),
    "redefinition": KERNEL
    + "__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t n) { }\n",
    "launch_arity": KERNEL + LAUNCH,
    # after the last `#include` (one before it could change what a header declares)
    "user_macro": KERNEL.replace("\n", "\n#define BLOCK 256\n", 1).replace(
        "float v = x[i];", "float* p = x; float v = p[i] * BLOCK;"
    ),
}
# the same errors where a header could change the reading: the full build decides
USER_ONLY_NOT_KEPT = {
    # a function only the headers declare, beside the error
    "header_function": KERNEL.replace("float v = x[i];", "float* p = x; float v = fmaxf(p[i], 0.f);"),
    # a file-scope name a header spells (not a local): which declaration it is, the full build says
    "header_global": "float p[4];\n"
    + KERNEL.replace("float v = x[i];", "const float* r = p; float* w = r; float v = x[i];"),
    # another declaration of the kernel's name takes a header type: overload resolution differs
    "overload_elsewhere": "namespace at { struct Tensor {}; }\nvoid relu_kernel(at::Tensor t);\n"
    + KERNEL
    + LAUNCH,
    # a user macro whose body names a header function
    "macro_body": KERNEL.replace("\n", "\n#define CLAMP(a) fmaxf(a, 0.f)\n", 1).replace(
        "float v = x[i];", "float* p = x; float v = CLAMP(p[i]);"
    ),
    # conditional compilation inside the declaration
    "conditional": KERNEL.replace("float v = x[i];", "\n#if 1\nfloat* p = x;\n#endif\nfloat v = p[i];"),
    # a `#define` before an `#include`: a header only the full build reads could fail on it too
    "define_before_include": "#define WANT_SM90 1\n"
    + KERNEL.replace("\n", "\n#error this kernel needs sm_90\n", 1),
    # a template: instantiated from code the rule does not read
    "template": KERNEL.replace("__global__ void", "template <typename T> __global__ void").replace(
        "float v = x[i];", "float* p = x; float v = p[i];"
    )
    + "template __global__ void relu_kernel<int>(const float* __restrict__, float* __restrict__, int64_t);\n",
}


def _user_only(text: str, cuda: bool) -> str:
    """The case for `cuda`, or its host-only spelling for g++ (no launch syntax, no built-ins)."""
    if cuda:
        return text
    for a, b in (
        ("__global__ ", ""),
        ("<<<1, 32>>>", ""),
        ("__restrict__ ", ""),
        ("(int64_t)blockIdx.x * blockDim.x + threadIdx.x", "0"),
        ("gridDim.x", "1"),
    ):
        text = text.replace(a, b)
    return text


@needs_nvcc
@pytest.mark.parametrize("cuda", [False, True], ids=["g++", "nvcc"])
@pytest.mark.parametrize("case", sorted(USER_ONLY_KEPT))
def test_errors_about_the_users_own_declarations_stand(case: str, cuda: bool, tmp_path: Path) -> None:
    module, name, output = _compile(tmp_path, _user_only(USER_ONLY_KEPT[case], cuda), cuda)
    assert slim_errors_stand(module, name, output, _no_macros, _names(*HEADER_WORDS)), output
    # ... not when a macro differs, or (past `#error`) when the header names are unknown or a
    # header spells the kernel's name
    assert not slim_errors_stand(module, name, output, lambda n, i: frozenset({"x", "n", "i"}))
    if case != "hash_error":
        assert not slim_errors_stand(module, name, output, _no_macros, lambda n, i: None)
        assert not slim_errors_stand(module, name, output, _no_macros, _names(*HEADER_WORDS, "relu_kernel"))


@needs_nvcc
@pytest.mark.parametrize("cuda", [False, True], ids=["g++", "nvcc"])
@pytest.mark.parametrize("case", sorted(USER_ONLY_NOT_KEPT))
def test_errors_where_a_header_could_matter_go_to_the_full_build(
    case: str, cuda: bool, tmp_path: Path
) -> None:
    module, name, output = _compile(tmp_path, _user_only(USER_ONLY_NOT_KEPT[case], cuda), cuda)
    assert not slim_errors_stand(module, name, output, _no_macros, _names(*HEADER_WORDS)), output


# a launch's argument count in a host function that takes tensors: a stand-in `at::Tensor` (its
# words count as header names below, as torch's do) keeps these small
TENSOR = (
    "#include <cstdint>\n"
    "namespace at { struct Tensor { template <typename T> T* data_ptr() const { return nullptr; }"
    " int64_t numel() const { return 0; } }; }\n"
)
SCALE = (
    "__global__ void scale_kernel(const float* x, float* y, float s, int64_t n) {\n"
    "    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n) y[i] = s * x[i];\n"
    "}\n"
)
TENSOR_WORDS = ("at", "Tensor", "data_ptr", "numel", "x", "y", "n", "s", "min")


def _host(launch: str, kernel: str = SCALE) -> str:
    return (
        TENSOR
        + kernel
        + "at::Tensor scale(at::Tensor x, at::Tensor y) {\n"
        + "    int64_t n = x.numel();\n"
        + f"    {launch}\n"
        + "    return y;\n}\n"
    )


ARITY_KEPT = {
    "too_few": _host("scale_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);"),
    "too_many": _host(
        "scale_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), 2.0f, n, n);"
    ),
    "stream_and_launch_bounds": _host(
        "scale_kernel<<<1, 256, 0, 0>>>(x.data_ptr<float>(), y.data_ptr<float>());",
        SCALE.replace("__global__ void", "__global__ void __launch_bounds__(256)"),
    ),
    "defaulted_parameter": _host(
        "scale_kernel<<<1, 256>>>(x.data_ptr<float>());", SCALE.replace("int64_t n)", "int64_t n = 0)")
    ),
    "plain_call": _host(
        "int64_t b = blocks(n);\n    (void)b;",
        SCALE + "int64_t blocks(int64_t n, int64_t per) { return (n + per - 1) / per; }\n",
    ),
}
ARITY_NOT_KEPT = {
    # a header could declare another `scale_kernel` (an overload): its name is among theirs
    "header_spells_the_kernel": ARITY_KEPT["too_few"],
    # a second declaration of the kernel: which one is called, overload resolution says
    "declared_twice": "__global__ void scale_kernel(const float*, float*, float, int64_t);\n"
    + ARITY_KEPT["too_few"],
    # a comma template arguments could enclose: how many arguments there are depends on the names
    "comma_in_angles": _host(
        "scale_kernel<<<1, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n < 2, n > 1, n);"
    ),
    # a macro among the arguments
    "macro_argument": _host("scale_kernel<<<1, 256>>>(x.data_ptr<float>(), PAIR);").replace(
        "at::Tensor scale(", "#define PAIR y.data_ptr<float>(), 2.0f\nat::Tensor scale(", 1
    ),
    # a kernel in a namespace (and called through it)
    "namespaced_kernel": _host(
        "k::scale_kernel<<<1, 256>>>(x.data_ptr<float>());", "namespace k {\n" + SCALE + "}\n"
    ),
}


@needs_nvcc
@pytest.mark.parametrize("case", sorted(ARITY_KEPT))
def test_a_wrong_argument_count_of_the_users_own_function_stands(case: str, tmp_path: Path) -> None:
    module, name, output = _compile(tmp_path, ARITY_KEPT[case], True)
    assert "arguments in function call" in output, output
    assert slim_errors_stand(module, name, output, _no_macros, _names(*TENSOR_WORDS)), output
    # ... not when the headers' names are unknown or the file names a macro they define differently
    assert not slim_errors_stand(module, name, output, _no_macros, lambda n, i: None)
    assert not slim_errors_stand(module, name, output, lambda n, i: frozenset({"n"}), _names(*TENSOR_WORDS))


@needs_nvcc
@pytest.mark.parametrize("case", sorted(ARITY_NOT_KEPT))
def test_a_wrong_argument_count_where_the_headers_could_matter_gets_the_full_build(
    case: str, tmp_path: Path
) -> None:
    module, name, output = _compile(tmp_path, ARITY_NOT_KEPT[case], True)
    words = (*TENSOR_WORDS, "scale_kernel") if case == "header_spells_the_kernel" else TENSOR_WORDS
    assert not slim_errors_stand(module, name, output, _no_macros, _names(*words)), output


def test_a_source_line_gcc_echoes_is_not_a_second_error() -> None:
    """gcc prints `    2 | #error x` under the message: one error, not two."""
    from cudice.verifier.build.messages import parse_messages

    output = (
        "/b/main.cpp:2:2: error: #error needs sm_90\n    2 | #error needs sm_90\n      |  ^~~~~\n"
        "/b/main.cpp:5:20: error: invalid conversion from 'const float*' to 'float*' [-fpermissive]\n"
        "    5 |     float* p = x;\n      |                ^\n      |                |\n"
        "      |                const float*\n"
    )
    assert [(m.line, m.message) for m in parse_messages(output)] == [
        (2, "#error needs sm_90"),
        (5, "invalid conversion from 'const float*' to 'float*' [-fpermissive]"),
    ]


# relu_cuda.py with an error in the kernel only the user's declarations explain (a type error),
# one in a `#error` line, one in a host function that takes a tensor (the launch's argument count:
# `_arity_error_stands`)
USER_TYPE_ERROR = GOOD.replace("float v = x[i];", "float* p = x; float v = p[i];")
USER_HASH_ERROR = GOOD.replace(
    "#include <cuda_runtime.h>\n", "#include <cuda_runtime.h>\n#error needs sm_90\n"
)
LAUNCH_ARITY = GOOD.replace("out.data_ptr<float>(), n);", "out.data_ptr<float>());")


@needs_nvcc
@pytest.mark.slow
@BUILD_TIMEOUT
@pytest.mark.parametrize(
    ("case", "text", "line_of"),
    [
        ("slim_type_error", USER_TYPE_ERROR, "        float* p = x; float v = p[i];"),
        ("slim_hash_error", USER_HASH_ERROR, "#error needs sm_90"),
    ],
)
def test_user_only_error_is_reported_from_the_slim_build_alone(
    case: str, text: str, line_of: str, session_config: VerifyConfig
) -> None:
    auto = _build(text, case, session_config, "auto")
    assert not auto.ok and auto.build_path == "cabi-fast", (auto.build_path, auto.output[-2000:])
    assert set(auto.step_wall_s) == {"slim.cuda.cu"}  # no full-header compile ran
    full = _build(text, case, session_config, "full")
    assert not full.ok and full.build_path == "full"
    assert outcome(auto) == outcome(full), (auto.output[-2000:], full.output[-2000:])
    assert _errors(auto) == {text.splitlines().index(line_of) + 1}, auto.diagnostics
    assert len([d for d in auto.diagnostics if d.severity is Severity.ERROR]) == 1, auto.diagnostics


@needs_nvcc
@pytest.mark.slow
@BUILD_TIMEOUT
def test_lists_prepared_ahead_serve_the_first_error_verdict(tmp_path: Path) -> None:
    """`api.prepare_first_error` (for a long-lived process to run while it waits) computes
    the lists a slim error verdict reads for the usual include set, so the first error of a
    session, here in the example's kernel, computes none of its own."""
    from cudice.verifier.api import prepare_first_error

    config = VerifyConfig(cache_dir=tmp_path, compile_only=True)

    def lists() -> set[str]:
        return {p.name for pattern in ("macros-*.txt", "names-*.txt") for p in tmp_path.rglob(pattern)}

    assert prepare_first_error(config) is True  # ran to the end
    prepared = lists()
    assert any(n.startswith("macros-") for n in prepared) and any(n.startswith("names-") for n in prepared)
    assert not [p for p in tmp_path.rglob(".*-*") if p.name.startswith((".macros-", ".names-"))]
    auto = _build(USER_TYPE_ERROR, "prepared_type_error", config, "auto")
    assert not auto.ok and auto.build_path == "cabi-fast", (auto.build_path, auto.output[-2000:])
    assert set(auto.step_wall_s) == {"slim.cuda.cu"}  # the slim compile alone: no full rebuild
    assert lists() == prepared  # nothing computed on the way to the verdict
    assert prepare_first_error(config) is True and lists() == prepared  # a second call reads the cache


def _process_groups() -> dict[int, int]:
    """pid -> process group of every live (not zombie) process, from /proc."""
    groups: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[0] != "Z":
                groups[int(entry.name)] = int(fields[2])
    return groups


@needs_nvcc
@pytest.mark.timeout(600)
def test_a_cancelled_preparation_leaves_no_preprocessor_behind(
    tmp_path: Path, session_config: VerifyConfig
) -> None:
    """`prepare_first_error(config, cancel)` in a thread, cancelled once nvcc runs `gcc -E`: it
    returns False, every process it started (nvcc, its shell, gcc, cc1plus) is gone, and neither a
    list nor a work folder is left in the cache."""
    from cudice.verifier.api import prepare_first_error
    from cudice.verifier.build.toolchain import probe_toolchain

    # the toolchain probe (a Python process, cached per build cache) comes from the session's cache
    probe_toolchain(session_config.cache_dir, session_config.arch_list_env)
    for probed in session_config.cache_dir.glob("toolchain-*.json"):
        shutil.copy(probed, tmp_path / probed.name)
    config = VerifyConfig(cache_dir=tmp_path, compile_only=True)
    cancel = threading.Event()
    outcome: list[bool] = []
    prep = threading.Thread(target=lambda: outcome.append(prepare_first_error(config, cancel)), daemon=True)
    prep.start()
    seen: dict[int, str] = {}  # pid -> program, of every process the preparation started
    deadline = time.monotonic() + 300
    while "cc1plus" not in seen.values():  # until a preprocessor under nvcc runs (bounded: a busy box)
        _note_descendants(seen)
        assert prep.is_alive() and time.monotonic() < deadline, f"no preprocessor seen: {outcome}, {seen}"
        time.sleep(0.02)
    cancel.set()
    prep.join(120)
    assert not prep.is_alive() and outcome == [False]
    sessions = {p for p, name in seen.items() if name == "nvcc"}  # each nvcc leads a session of its own
    assert sessions, seen
    left = {p: g for p, g in _process_groups().items() if p in seen or g in sessions}
    assert not left, {p: _command(p) for p in left}  # neither a child of this test nor one orphaned
    lists = ("macros-", "names-", ".macros-", ".names-")
    assert not [p.name for p in tmp_path.rglob("*") if p.name.startswith(lists)]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("which", ["macros", "names"])
def test_a_cancel_kills_the_preprocessor_and_its_children(which: str, tmp_path: Path) -> None:
    """A "compiler" that never finishes on its own (a shell with a background child, as nvcc runs
    `sh -c gcc ...`): setting the cancel token kills the shell and its child, and the list is None,
    uncached. Without the kill this call would not return for minutes."""
    (tmp_path / "host").mkdir()
    overlay = Overlay(tmp_path, ())
    compiler = "sh -c 'sleep 297 & sleep 298; wait' sh"  # the flags and source become $1, $2, ...
    cancel = threading.Event()
    outcome: list[object] = []

    def lists() -> None:
        if which == "macros":
            outcome.append(macro_differences(overlay, compiler, "-DA", "-DB", cuda=False, cancel=cancel))
        else:
            outcome.append(full_header_names(overlay, compiler, "-DA", cuda=False, cancel=cancel))

    worker = threading.Thread(target=lists, daemon=True)
    worker.start()
    seen: dict[int, str] = {}
    deadline = time.monotonic() + 120
    while list(seen.values()).count("sleep") < 2:  # both children of the shell run (bounded)
        _note_descendants(seen)
        assert worker.is_alive() and time.monotonic() < deadline, (outcome, seen)
        time.sleep(0.02)
    cancel.set()
    worker.join(120)
    assert not worker.is_alive() and outcome == [None]
    assert not set(_process_groups()) & set(seen), {p: _command(p) for p in seen}
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(("macros-", "names-", "."))]


def _note_descendants(seen: dict[int, str]) -> None:
    """Add this process's descendants to `seen` (pid -> program), updating a name that an exec
    changed since (a forked shell becomes `sleep`); the dead keep their last name."""
    from cudice.verifier.process import tree_pids

    for p in tree_pids(os.getpid()):
        if p != os.getpid() and (name := _command(p)):
            seen[p] = name


def _command(pid: int) -> str:
    """The program name of process `pid` ("" when it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return os.path.basename(f.read().split(b"\0", 1)[0].decode(errors="replace"))
    except OSError:
        return ""


@needs_nvcc
@pytest.mark.slow
@BUILD_TIMEOUT
def test_arity_error_in_a_host_function_taking_tensors_is_reported_from_the_slim_build_alone(
    session_config: VerifyConfig,
) -> None:
    auto = _build(LAUNCH_ARITY, "slim_launch_arity", session_config, "auto")
    assert not auto.ok and auto.build_path == "cabi-fast", (auto.build_path, auto.output[-2000:])
    assert set(auto.step_wall_s) == {"slim.cuda.cu"}  # no full-header compile ran
    full = _build(LAUNCH_ARITY, "slim_launch_arity", session_config, "full")
    assert not full.ok and full.build_path == "full"
    assert outcome(auto) == outcome(full), (auto.output[-2000:], full.output[-2000:])
    launch = next(t for t in LAUNCH_ARITY.splitlines() if "<<<" in t)
    assert _errors(auto) == {LAUNCH_ARITY.splitlines().index(launch) + 1}, auto.diagnostics
    (error,) = [d for d in auto.diagnostics if d.severity is Severity.ERROR]
    assert error.message == "too few arguments in function call"


def test_a_line_number_in_an_nvcc_message_is_the_documents() -> None:
    """EDG's "(previous definition at line N)" counts lines of the generated cuda.cu; the user sees
    the `.py` document's line (a line of another file, "at line N of f.h", is left alone)."""
    from cudice.verifier.build.compile import map_messages
    from cudice.verifier.build.generated import from_call
    from cudice.verifier.build.messages import parse_messages
    from cudice.verifier.source.document import parse_document

    doc = parse_document(GOOD, "/virtual/relu_cuda.py")
    module = from_call(doc, doc.load_inline_calls[0])
    assert module is not None
    cu = module.file("cuda.cu")
    assert cu is not None
    generated = (
        cu.text.split("\n").index(next(t for t in cu.text.split("\n") if "void relu_kernel(" in t)) + 1
    )
    in_doc = GOOD.splitlines().index(next(t for t in GOOD.splitlines() if "void relu_kernel(" in t)) + 1
    assert generated != in_doc
    output = (
        f'/b/cuda.cu({generated}): error: function "relu_kernel" has already been defined '
        f"(previous definition at line {generated})\n"
        f'/b/cuda.cu({generated}): error: "f" (declared at line {generated} of /inc/f.h) is wrong\n'
    )
    first, second = map_messages(module, doc.path, parse_messages(output))
    assert first.message.endswith(f"(previous definition at line {in_doc})"), first.message
    assert first.location is not None and first.location.line == in_doc
    assert second.message.endswith(f"(declared at line {generated} of /inc/f.h) is wrong"), second.message
