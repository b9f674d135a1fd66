"""A compile-only verdict checks the source without building an object (build/objects.py
`compile_object(check_only=True)`, which `build_module` uses when nothing will be linked).

Small sources without torch (a second or two each): for nvcc (through its split steps, the host
compiler's last pass left out, `cudafe++` without writing its host source) and for g++
(`-fsyntax-only`), a check and a build of the same text report the same outcome and the same
messages, CUDA-specific errors and EDG warnings of both front ends included; the check writes no
object and is cached apart from the build, so a later build still produces one.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from cudice.verifier.build.objects import compile_object
from verifier_marks import needs_nvcc

GOOD_CU = """
__global__ void twice(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
void launch(const float* x, float* y, int n) { twice<<<(n + 255) / 256, 256>>>(x, y, n); }
"""
HOST_ERROR_CU = GOOD_CU.replace("void launch(", "void launch(int unused\n")
DEVICE_ERROR_CU = GOOD_CU.replace("2.0f * x[i];", "2.0f * x[i] + undeclared_on_device;")
WARNING_CU = GOOD_CU.replace("int i =", "int unused_but_set = 3; int i =")

# what the host front end reports in a check without writing its host source (`--no_code_gen`):
# CUDA rules, template instantiations, deleted copies of kernel arguments, EDG warnings (not the
# host compiler's own warnings, such as g++'s -Wreturn-type: a check never runs that pass)
FRONT_END_CU = {
    "host_calls_device": "__device__ int d() { return 1; }\nint h() { return d(); }\n",
    "device_var_read_on_host": "__device__ int v;\nint h() { return v; }\n",
    "non_void_kernel": "__global__ int k() { return 1; }\n",
    "launch_arity": "__global__ void k(int a, int b, int c) {}\nvoid h() { k<<<1, 1>>>(1, 2); }\n",
    "shared_initializer": "__global__ void k() { __shared__ int s = 3; (void)s; }\n",
    "deleted_copy_of_a_kernel_argument": (
        "struct S { S(const S&) = delete; S() {} int v; };\n"
        "__global__ void k(S s) {}\nvoid h() { S s; k<<<1, 1>>>(s); }\n"
    ),
    "template_instantiated_from_host": (
        "template <typename T> T f(T x) { return x.nope(); }\nint g() { return f(3); }\n"
    ),
    "template_kernel_instantiated_by_a_launch": (
        "template <typename T> __global__ void k(T* x) { x->nope(); }\nvoid g(float* p) { k<<<1, 1>>>(p); }\n"
    ),
    "edg_warning": "__global__ void k() { int never_referenced; }\n",
    "device_lambda_without_the_flag": (
        "template <typename F> __global__ void k(F f) { f(1); }\n"
        "void h() { k<<<1, 1>>>([] __device__ (int a) { return a; }); }\n"
    ),
    "consteval_not_constant": "consteval int c(int x) { return x; }\nint h(int y) { return c(y); }\n",
    "overloaded_kernels_launched": (
        "__global__ void k(int a) {}\n__global__ void k(float a) {}\n"
        "void h() { k<<<1, 1>>>(1); k<<<1, 1>>>(1.0f); }\n"
    ),
}

GOOD_CPP = "int twice(int x) { return 2 * x; }\n"
ERROR_CPP = "int twice(int x) { return 2 * y; }\n"


def _text(output: str) -> str:
    """Compiler output without the object folder, which differs between a check and a build."""
    return re.sub(r"\S*/objects/[0-9a-f]{32}/", "", output)


def _pair(tmp_path: Path, compiler: str, flags: str, name: str, text: str) -> tuple[object, object]:
    build = compile_object(tmp_path / "build", compiler, flags, name, text, 300.0, split_nvcc=True)
    check = compile_object(tmp_path / "check", compiler, flags, name, text, 300.0, check_only=True)
    return build, check


@needs_nvcc
@pytest.mark.parametrize("text", [GOOD_CU, HOST_ERROR_CU, DEVICE_ERROR_CU, WARNING_CU])
def test_an_nvcc_check_reports_what_the_build_reports(tmp_path: Path, text: str) -> None:
    build, check = _pair(tmp_path, "nvcc", "-gencode=arch=compute_90,code=sm_90 -std=c++17", "k.cu", text)
    assert (check.ok, _text(check.output)) == (build.ok, _text(build.output))  # type: ignore[attr-defined]
    assert check.path is None and not list((tmp_path / "check").rglob("*.o"))  # type: ignore[attr-defined]
    assert (build.path is not None) == build.ok  # type: ignore[attr-defined]


@needs_nvcc
@pytest.mark.parametrize("name", sorted(FRONT_END_CU))
def test_the_host_front_end_reports_in_a_check_what_it_reports_in_a_build(tmp_path: Path, name: str) -> None:
    flags = "-gencode=arch=compute_90,code=sm_90 -std=c++20"
    build, check = _pair(tmp_path, "nvcc", flags, "k.cu", FRONT_END_CU[name])
    assert (check.ok, _text(check.output)) == (build.ok, _text(build.output))  # type: ignore[attr-defined]


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
@pytest.mark.parametrize("text", [GOOD_CPP, ERROR_CPP])
def test_a_host_compiler_check_reports_what_the_build_reports(tmp_path: Path, text: str) -> None:
    build, check = _pair(tmp_path, "g++", "-std=c++17 -Wall", "main.cpp", text)
    assert (check.ok, _text(check.output)) == (build.ok, _text(build.output))  # type: ignore[attr-defined]
    assert check.path is None and not list((tmp_path / "check").rglob("*.o"))  # type: ignore[attr-defined]
    assert build.ok == (text == GOOD_CPP)  # type: ignore[attr-defined]


@needs_nvcc
def test_a_check_and_a_build_of_one_text_are_cached_apart(tmp_path: Path) -> None:
    flags = "-gencode=arch=compute_90,code=sm_90 -std=c++17"
    first = compile_object(tmp_path, "nvcc", flags, "k.cu", GOOD_CU, 300.0, check_only=True)
    again = compile_object(tmp_path, "nvcc", flags, "k.cu", GOOD_CU, 300.0, check_only=True)
    built = compile_object(tmp_path, "nvcc", flags, "k.cu", GOOD_CU, 300.0, split_nvcc=True)
    assert first.ok and first.path is None and again.cached and again.path is None
    assert built.ok and not built.cached and built.path is not None and built.path.is_file()


@needs_nvcc
@pytest.mark.parametrize("text", [HOST_ERROR_CU, DEVICE_ERROR_CU, GOOD_CU])
def test_a_build_after_its_failed_check_fails_as_the_build_would_without_compiling(
    tmp_path: Path, text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed check decides the build (objects.compile_object reads it: how build/batch.py's
    checks decide builds that link): the output, its folder named as the build's, is what a build
    in a cache without the check prints, and no compiler runs; a passed check decides nothing."""
    from cudice.verifier.build import nvcc_split, objects

    flags = "-gencode=arch=compute_90,code=sm_90 -std=c++17"
    alone = compile_object(tmp_path / "alone", "nvcc", flags, "k.cu", text, 300.0, split_nvcc=True)
    check = compile_object(tmp_path / "both", "nvcc", flags, "k.cu", text, 300.0, check_only=True)
    ran: list[object] = []
    if not check.ok:
        for mod in (nvcc_split, objects):
            monkeypatch.setattr(mod, "run_process", lambda *a, **k: ran.append(a) or (1, "", False, False))
        monkeypatch.setattr(nvcc_split, "run", lambda *a, **k: ran.append(a) or (1, "", False, False))
    build = compile_object(tmp_path / "both", "nvcc", flags, "k.cu", text, 300.0, split_nvcc=True)
    assert build.ok == alone.ok == (text == GOOD_CU) and not ran
    assert build.output.replace(str(tmp_path / "both"), "") == alone.output.replace(
        str(tmp_path / "alone"), ""
    )
    assert build.cached != build.ok and (build.path is not None) == build.ok
