"""Batched compile-only checks (verifier/build/batch.py) equal the single checks they stand for.

The fast path's proof is the slow path: every candidate is checked by `check_many` with one cache
and by `build_module(link=False)` alone with another, and the two results must agree in outcome,
build path, every diagnostic (file, line, column, message) and the compiler output (the cache
folders' names aside). The mix: good candidates of bench/kb_candidates.py, a host-side error, a
device-side error, an error in a template instantiated by a launch, an EDG warning, two candidates
that define the same macro with different values (a `static_assert` fails if one leaks into the
other), two candidates with the same kernel and function names, and candidates the batch refuses.
The scanner's refusals (build/batch_scan.py) and the attribution of messages are tested without a
compiler.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from cudice.verifier.build import batch, batch_scan
from cudice.verifier.build.compile import BuildResult, build_module
from cudice.verifier.build.generated import GeneratedModule, from_call
from cudice.verifier.build.headers import HeaderNames
from cudice.verifier.config import VerifyConfig
from cudice.verifier.source.document import parse_document
from verifier_marks import needs_nvcc

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
import kb_candidates  # bench/kb_candidates.py, the benchmark's candidates


def kb(i: int, *edits: tuple[str, str], name: str | None = None) -> str:
    """Template `i` of bench/kb_candidates.py with `edits` (old, new) applied; `name` renames the module."""
    src = kb_candidates.candidate(i).source
    for old, new in edits:
        assert old in src, old
        src = src.replace(old, new, 1)
    if name is not None:
        src = re.sub(r"load_inline\(name='(\w+)'", f"load_inline(name='{name}'", src)
    return src


def module_of(text: str, name: str) -> tuple[GeneratedModule, str]:
    doc = parse_document(text, f"/virtual/{name}.py")
    module = from_call(doc, doc.load_inline_calls[0])
    assert module is not None
    return module, doc.path


def comparable(res: BuildResult, cache: Path) -> tuple[object, ...]:
    output = re.sub(r"objects/[0-9a-f]{32}/", "objects/<key>/", res.output.replace(str(cache), "<cache>"))
    return res.ok, res.build_path, res.diagnostics, output, res.undecided, res.cached


KERNEL = "float v = x[i];"
MIX = {
    "good_relu": kb(0),
    "good_sigmoid": kb(1),
    "good_softmax": kb(15),
    "good_matmul": kb(21),
    # a `;` missing at the end of the host function: one structural error, the slim verdict stands
    # (a missing `;` before a declaration would also leave its name undeclared further on, which
    # the full headers spell, and cost both checks a full-header rebuild: template_error has one)
    "host_error": kb(2, ("return y;", "return y")),
    "device_error": kb(3, (KERNEL, "float v = x[i] + undeclared_on_device;")),
    "template_error": kb(
        4,
        ("__global__", "template <typename T> __global__ void nope(T* p) { p->missing(); }\n__global__"),
        ("return y;", "nope<<<1, 1>>>(y.data_ptr<float>());\n    return y;"),
    ),
    "warning": kb(5, (KERNEL, "float v = x[i]; int never_read = 3;")),
    "two_warnings": kb(7, (KERNEL, "float v = x[i]; int unused_a = 2; int unused_b = 3;")),
    "host_warning_and_error": kb(
        11, ("auto xc = x.contiguous();", "auto xc = x.contiguous(); int unused = 1; float q = undeclared;")
    ),
    "macro_256": kb(
        0,
        ("__global__", '#define BLOCK 256\nstatic_assert(BLOCK == 256, "leaked");\n__global__'),
        ("const int threads = 256;", "const int threads = BLOCK;"),
        name="kb0_relu_256",
    ),
    "macro_128": kb(
        0,
        ("__global__", '#define BLOCK 128\nstatic_assert(BLOCK == 128, "leaked");\n__global__'),
        ("const int threads = 256;", "const int threads = BLOCK;"),
        name="kb0_relu_128",
    ),
    "include_after_code": kb(6, ("torch::Tensor kb6", "#include <vector>\ntorch::Tensor kb6")),
    "header_name": kb(8, ("__global__", "__device__ float gelu(float v) { return v; }\n__global__")),
    "not_c_abi": kb(13, ("__global__ void", 'extern "C" __global__ void')),
    "static_helper": kb(
        9,
        (
            "__global__",
            "static __device__ float twice(float v) { return 2.0f * v; }\n"
            "constexpr float kb_half_factor = 0.5f;\n__global__",
        ),
        (KERNEL, "float v = twice(x[i]) * kb_half_factor;"),
    ),
    "unreferenced_static": kb(
        12, ("__global__", "static __device__ float never_called(float v) { return v; }\n__global__")
    ),
}


@pytest.fixture(scope="module")
def mixed_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    batched_cfg = VerifyConfig(cache_dir=tmp_path_factory.mktemp("batched"), compile_only=True)
    single_cfg = VerifyConfig(cache_dir=tmp_path_factory.mktemp("single"), compile_only=True)
    modules = [module_of(text, name) for name, text in MIX.items()]
    report = batch.BatchReport()
    batched = batch.check_many(modules, batched_cfg, max_batch=8, report=report)
    single = [build_module(m, path, single_cfg, link=False) for m, path in modules]
    return {
        "batched": {n: comparable(r, batched_cfg.cache_dir) for n, r in zip(MIX, batched, strict=True)},
        "single": {n: comparable(r, single_cfg.cache_dir) for n, r in zip(MIX, single, strict=True)},
        "raw": dict(zip(MIX, single, strict=True)),
        "report": report,
    }


@needs_nvcc
@pytest.mark.slow
@pytest.mark.timeout(2400)  # the first test pays the fixture: both caches' checks and full rebuilds
@pytest.mark.parametrize("name", list(MIX))
def test_batched_check_equals_the_single_check(
    name: str, mixed_results: dict[str, dict[str, object]]
) -> None:
    # outcome, build path, diagnostics (file, line, column, message), compiler output, undecided, cached
    assert mixed_results["batched"][name] == mixed_results["single"][name]


@needs_nvcc
@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_the_mix_exercises_what_it_claims(mixed_results: dict[str, object]) -> None:
    raw: dict[str, BuildResult] = mixed_results["raw"]  # type: ignore[assignment]
    report: batch.BatchReport = mixed_results["report"]  # type: ignore[assignment]
    assert raw["good_relu"].ok and raw["macro_256"].ok and raw["macro_128"].ok and raw["warning"].ok
    assert not raw["host_error"].ok and not raw["device_error"].ok and not raw["template_error"].ok
    assert any(d.severity.value == "warning" for d in raw["warning"].diagnostics)
    # a batch-decided slim error that is the verdict, and one rebuilt with the full headers
    host, template = raw["host_error"], raw["template_error"]
    assert host.build_path == "cabi-fast" and set(host.step_wall_s) == {"slim.cuda.cu"}, host.build_path
    assert template.build_path == "cabi-fallback" and "cuda.cu" in template.step_wall_s, template.build_path
    # every candidate but the refused ones was decided by a batch
    refused = {
        "include_after_code": "#include",
        "header_name": "gelu",
        "not_c_abi": "C-ABI",
        "unreferenced_static": "never_called",
    }
    for i, name in enumerate(MIX):
        assert (refused[name] in report.how[i]) if name in refused else report.how[i] == "batch", (
            name,
            report.how[i],
        )
    assert report.decided == len(MIX) - len(refused)
    assert report.rounds >= 2  # the errors' candidates left, the others batched again


# -- without a compiler ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "why"),
    [
        ("int a;\n#include <vector>\n", "#include"),
        ("#undef TORCH_CHECK\n", "#undef"),
        ('extern "C" __global__ void k() {}\n', "extern"),
        ("struct S {};\nS operator+(S a, S b) { return a; }\n", "operator"),
        ("using namespace at;\n", "using"),
        ("using std::max;\n", "using"),
        ("void f() { ::g(); }\nint x = ::y;\n", "::x"),
        ("void f() {\n", "balance"),
        ("#if 1\nint a;\n", "#if"),
        ("#pragma once\n", "#pragma"),
        ("int c = __COUNTER__;\n", "__COUNTER__"),
        ("/* open\n", "unterminated"),
        ("template <> struct std::hash<int> {};\n", "qualified by std"),
        ("int main() { return 0; }\n", "main"),
        # EDG warns of unreferenced internal-linkage names only in the main file, which a batch is not
        ("static __device__ float unused(float q) { return q; }\n", "unreferenced"),
        ("constexpr int B = 4;\n", "unreferenced"),
        ("const int B = 4;\n__global__ void k(int* x) { int B = 3; x[0] = B; }\n", "unreferenced"),
        ("namespace { float g(float a) { return a; } }\n", "unreferenced"),
        ("const int B = 4;\nvoid f(float* p) { float* B = p; p[0] = *B; }\n", "unreferenced"),
        ("#ifdef X\n#endif\nconst int B = 2;\nint f() { return B; }\n", "conditional"),
    ],
)
def test_code_the_batch_cannot_isolate_is_refused(code: str, why: str) -> None:
    scan, reason = batch_scan.scan_code(code)
    assert scan is None and reason is not None and why in reason


def test_names_declared_at_namespace_scope() -> None:
    code = """
#define BLOCK 256
#pragma unroll
namespace helpers { __device__ inline float twice(float v) { return 2 * v; } }
template <typename T, int N> __global__ void __launch_bounds__(256) k(const T* __restrict__ x, T* y) {
    int local = 3; y[0] = x[0] + local;
}
struct Pair { float a, b; };
enum Mode { FAST, SLOW = 2 };
enum class Scoped { A };
typedef float4 vec_t;
using real = float;
static __constant__ float table[BLOCK];
const int threads = 128;
const int blocks = threads * 2;
torch::Tensor run(torch::Tensor x) { return x; }
void Pair_fill(Pair& p) { p.a = 1; }
static __device__ float halve(float v) { return v / 2; }
__global__ void uses(float* y) { y[0] = halve(table[0]) + FAST + blocks; }
"""
    scan, why = batch_scan.scan_code(code)
    assert why is None and scan is not None
    assert scan.macros == ("BLOCK",)
    assert set(scan.declared) == {
        "helpers", "twice", "k", "Pair", "Mode", "FAST", "SLOW", "Scoped", "vec_t", "real", "table",
        "threads", "blocks", "run", "Pair_fill", "halve", "uses",
    }  # fmt: skip
    assert scan.internal == {"table", "threads", "blocks", "halve"}


def test_a_header_name_or_macro_keeps_a_candidate_out() -> None:
    names = HeaderNames(frozenset({"gelu", "C10_WARP_SIZE", "PyObject"}), frozenset({"C10_WARP_SIZE"}))

    def clash(code: str) -> str | None:
        scan, why = batch_scan.scan_code(code)
        assert scan is not None, why
        return batch_scan.clash(scan, "tail words", names, frozenset({"Py_ssize_t"}))

    assert clash("__device__ float my_gelu(float x) { return x; }\n") is None
    assert "gelu" in (clash("__device__ float gelu(float x) { return x; }\n") or "")
    assert "header macro" in (clash("#define C10_WARP_SIZE 32\n") or "")
    assert "shim" in (clash("#define Py_ssize_t long\n") or "")
    assert "shim" in (clash("#define words 1\n") or "")  # the candidate's own part of the shim spells it
    assert "PyObject" in (clash("#define DECLARE(n) int n;\nDECLARE(PyObject);\n") or "")


def fake_jobs(n: int) -> list[batch.Job]:
    scan, _ = batch_scan.scan_code("")
    return [
        batch.Job(i, None, "", "", (), 0, "", 0, "", 0, scan, f"/c/objects/k{i}/cuda.cu")  # type: ignore[arg-type]
        for i in range(n)
    ]


def message(source: str, line: int, text: str, severity: str = "error", note: str = "") -> str:
    return (
        f"{source}({line}): {severity}: {text}\n  code\n  ^\n"
        + (f"          {note}\n" if note else "")
        + "\n"
    )


REMARK = 'Remark: The warnings can be suppressed with "-diag-suppress <warning-number>"\n\n'


def test_a_failed_host_front_end_decides_the_candidates_with_errors() -> None:
    jobs = fake_jobs(3)
    out = (
        message(jobs[0].source, 5, 'identifier "a" is undefined')
        + message(jobs[2].source, 7, 'argument of type "cudice_batch_2::S" is incompatible')
        + message(jobs[2].source, 9, 'identifier "b" is undefined')
        + '3 errors detected in the compilation of "/b/cuda.cu".\n'
    )
    decided, retry = batch._attribute(jobs, [(0, "", False, False), (2, out, False, False)], [], "/b/cuda.cu")
    assert retry == [jobs[1]]
    assert decided[jobs[0]] == (
        False,
        message(jobs[0].source, 5, 'identifier "a" is undefined')
        + f'1 error detected in the compilation of "{jobs[0].source}".\n',
    )
    assert decided[jobs[2]][1] == (
        message(jobs[2].source, 7, 'argument of type "S" is incompatible')
        + message(jobs[2].source, 9, 'identifier "b" is undefined')
        + f'2 errors detected in the compilation of "{jobs[2].source}".\n'
    )


def test_warnings_get_the_remark_after_each_candidates_first_one() -> None:
    jobs = fake_jobs(2)
    w = [
        message(j.source, 3, f'variable "v{j.index}" was declared but never referenced', "warning #177-D")
        for j in jobs
    ]
    steps = [(0, "", False, False)] * 2
    device = [(0, "", False, False), (0, w[0] + REMARK + w[1] + w[1], False, False), *steps]
    decided, retry = batch._attribute(jobs, steps, device, "/b/cuda.cu")
    assert retry == [] and decided[jobs[0]] == (True, w[0] + REMARK)
    assert decided[jobs[1]] == (True, w[1] + REMARK + w[1])


def test_what_no_candidate_owns_goes_to_single_checks() -> None:
    jobs = fake_jobs(3)
    ok = (0, "", False, False)
    header = message(
        "/torch/include/x.h",
        40,
        "no instance",
        note=f"detected during instantiation at line 8 of {jobs[1].source}",
    )
    failed = header + '1 error detected in the compilation of "/b/cuda.cu".\n'
    # a header's error whose note names a candidate: that one alone, the others again
    assert batch._attribute(jobs, [ok, (2, failed, False, False)], [], "/b/cuda.cu") == (
        {},
        [jobs[0], jobs[2]],
    )
    # the wrapper's own lines, a line that is no message, a preprocessor's message: nobody is decided
    wrapper = (
        message("cudice-batch-end-1", 1, 'expected a ";"')
        + '1 error detected in the compilation of "/b/cuda.cu".\n'
    )
    assert batch._attribute(jobs, [ok, (2, wrapper, False, False)], [], "/b/cuda.cu") == ({}, [])
    assert batch._attribute(
        jobs, [ok, ok], [ok, (0, "nvvm says hi\n", False, False), ok, ok], "/b/cuda.cu"
    ) == ({}, [])
    pre = (1, f"{jobs[2].source}:4:2: error: #error stop\n", False, False)
    assert batch._attribute(jobs, [pre], [], "/b/cuda.cu") == ({}, jobs[:2])
    # ptxas speaks of the whole unit's code
    assert batch._attribute(
        jobs, [ok, ok], [ok, ok, (0, "ptxas warning\n", False, False), ok], "/b/cuda.cu"
    ) == ({}, [])
