"""C++ evasions of the static checks, by structure rather than by example: build flags read like the
sources they change (`static/load_inline.py`), `functions=` entries that are no identifiers, the
compiler's first translation phases (line splices, digraphs, both branches of an `#if`:
`static/cpp_preprocess.py`), libtorch's `torch::nn` modules and pointers to ATen members, and file,
process and thread functions matched by name however the syntax around them looks
(`static/cpp_rules.py`). Each evasion is paired with the honest code next to it, which stays clean."""

from __future__ import annotations

import pytest
from cudice.verifier.config import VerifyConfig
from cudice.verifier.source.result import Diagnostic, Severity
from cudice.verifier.static.checks import check_source
from cudice.verifier.static.cpp_preprocess import expand_macros, macro_choices, replace_digraphs, splice_lines
from cudice.verifier.static.cuda import CppSource, check_cpp_sources
from cudice.verifier.static.policy import Strictness

_KERNEL = r"""
#include <torch/extension.h>
__global__ void relu_kernel(const float* x, float* y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
"""
_HOST = r"""
torch::Tensor relu_fwd(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    %s
    return y;
}
"""


def _candidate(host_line: str = "", kwargs: str = "", setup: str = "", extra: str = "") -> str:
    src = _KERNEL + extra + _HOST % host_line
    return (
        "import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n"
        f"{setup}\nSRC = r'''{src}'''\n"
        "ext = load_inline(name='m', cpp_sources='torch::Tensor relu_fwd(torch::Tensor x);', "
        f"cuda_sources=SRC, functions=['relu_fwd']{kwargs})\n"
        "class ModelNew(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return ext.relu_fwd(x)\n"
    )


def _errors(text: str) -> set[str]:
    diags = check_source(text, "cand.py", VerifyConfig())
    return {d.code for d in diags if d.severity is Severity.ERROR}


def _cpp(host: str, *, cuda: bool = True) -> list[Diagnostic]:
    return check_cpp_sources([CppSource(host, lambda _l, _c: None, cuda)], None, Strictness.DEFAULT)


def _cpp_errors(host: str) -> set[str]:
    return {d.code for d in _cpp(host) if d.severity is Severity.ERROR}


def test_the_honest_candidate_is_clean() -> None:
    assert _errors(_candidate()) == set()


# -- build flags -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        ", extra_cuda_cflags=['-O3', '--use_fast_math', '-lineinfo', '-arch=sm_90', '-DBLOCK=256']",
        ", extra_cflags=['-O3', '-std=c++17', '-DNDEBUG', '-march=native', '-Wno-unused']",
        ", extra_cuda_cflags=['-U__CUDA_NO_HALF_OPERATORS__', '-U__CUDA_NO_HALF_CONVERSIONS__']",
        ", extra_cuda_cflags=['-Xptxas', '-v', '-gencode', 'arch=compute_90,code=sm_90', '-t', '4']",
        ", extra_ldflags=['-lcublas', '-L/usr/local/cuda/lib64', '-Wl,-rpath,/usr/local/cuda/lib64']",
        ", extra_cuda_cflags=FLAGS",
        ", extra_cuda_cflags=['--compiler-options', \"'-fPIC'\"]",
    ],
)
def test_usual_flags_pass(kwargs: str) -> None:
    assert _errors(_candidate(kwargs=kwargs, setup="FLAGS = ['-O3']")) == set()


@pytest.mark.parametrize(
    "flags",
    [
        "extra_cuda_cflags=['-DACT=at::relu']",
        "extra_cuda_cflags=['-D', 'ACT=at::relu']",
        "extra_cuda_cflags=['-O3 -DACT=at::relu']",  # torch joins the flags with spaces
        "extra_cuda_cflags=[\"-D'ACT=at::relu'\"]",  # the shell removes the quotes
        "extra_cuda_cflags=['--define-macro=ACT=at::relu']",
        "extra_cuda_cflags=['-DBLOCK=1,ACT=at::relu']",  # nvcc splits -D at commas
        "extra_cuda_cflags=['-Xcompiler', '-DACT=at::relu']",
        "extra_cuda_cflags=['-Xcompiler=-O3,-DACT=at::relu']",
        "extra_cflags=['-DACT=at::relu']",
        "extra_cuda_cflags=FLAGS",
    ],
)
def test_a_command_line_define_is_read_like_a_define(flags: str) -> None:
    text = _candidate("auto z = ACT(x);", kwargs=", " + flags, setup="FLAGS = ['-DACT=at::relu']")
    assert "static.cpp_torch_op" in _errors(text)


@pytest.mark.parametrize(
    ("flags", "code"),
    [
        ("extra_cuda_cflags=['-UBLOCK']", "static.dynamic_source"),
        ("extra_cuda_cflags=['-include', 'x.h']", "static.dynamic_source"),
        ("extra_cflags=['-imacros', 'x.h']", "static.dynamic_source"),
        ("extra_cuda_cflags=['-I/tmp']", "static.dynamic_source"),
        ("extra_cuda_cflags=['-Xcompiler', '-include,/tmp/x.h']", "static.dynamic_source"),
        ("extra_cflags=['-Wp,-DACT=at::relu']", "static.dynamic_source"),
        ("extra_cflags=['-trigraphs']", "static.dynamic_source"),
        ("extra_cflags=['-std=c++14']", "static.dynamic_source"),  # ISO C++14 reads trigraphs
        ("extra_cflags=['-std', 'c++14']", "static.dynamic_source"),
        ("extra_cuda_cflags=['-arch', 'sm_90;id']", "static.cpp_file_or_process"),
        ("extra_cuda_cflags=['--options-file', 'f.txt']", "static.dynamic_source"),
        ("extra_cuda_cflags=['-fplugin=/tmp/p.so']", "static.dynamic_source"),
        ("extra_cuda_cflags=[make_flags()]", "static.dynamic_source"),
        ("extra_cuda_cflags=['-O3; touch /tmp/x']", "static.cpp_file_or_process"),
        ("extra_cuda_cflags=['-DX=$(id)']", "static.cpp_file_or_process"),
        ("extra_cuda_cflags=[\"-DX='a;b'\"]", "static.cpp_file_or_process"),
        ("extra_ldflags=['-Wl,--wrap=_ZN2at4_ops4relu4callERKNS_6TensorE']", "static.timer_patch"),
        ("extra_ldflags=['-Wl,--defsym,mine=_ZN2at4_ops4relu4callERKNS_6TensorE']", "static.timer_patch"),
        ("extra_ldflags=['-Xlinker', '--wrap=cudaEventElapsedTime']", "static.timer_patch"),
        ("extra_ldflags=['-Wl,-T,my.ld']", "static.timer_patch"),
        ("extra_ldflags=['/tmp/evil.o']", "static.dynamic_source"),
        ("extra_ldflags=['-Wl,-R,/tmp/syms.so']", "static.dynamic_source"),
        ("extra_include_paths=['/tmp']", "static.dynamic_source"),
        ("sycl_sources=['int x;']", "static.dynamic_source"),
    ],
)
def test_flags_the_checks_cannot_model_are_refused(flags: str, code: str) -> None:
    assert code in _errors(_candidate(kwargs=", " + flags, setup="def make_flags():\n    return '-O3'"))


# -- functions= ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("functions", "code"),
    [
        ("['relu_fwd', 'at::relu']", "static.cpp_torch_op"),
        ("['relu_fwd', 'torch :: relu']", "static.cpp_torch_op"),
        ("['relu_fwd<float>']", "static.dynamic_source"),
        ("['relu_fwd), m.def(\"x\", &relu_fwd']", "static.dynamic_source"),
        ("{'relu_fwd': 'doc\"); m.def(\"x\", &at::relu); //'}", "static.dynamic_source"),
        ("NAMES", "static.dynamic_source"),
    ],
)
def test_functions_entries_must_be_identifiers(functions: str, code: str) -> None:
    text = _candidate(setup="import os\nNAMES = os.environ['F'].split()").replace(
        "functions=['relu_fwd']", f"functions={functions}"
    )
    assert code in _errors(text)


def test_functions_as_a_dict_of_plain_docstrings_is_clean() -> None:
    text = _candidate().replace("functions=['relu_fwd']", "functions={'relu_fwd': 'ReLU forward'}")
    assert _errors(text) == set()


# -- translation phases ----------------------------------------------------------------------------


def test_line_splices_join_identifiers_and_keep_offsets() -> None:
    text = "int a;\nauto y = at::re\\\nlu(x);\n"
    spliced, back = splice_lines(text)
    assert "at::relu(x)" in spliced and back is not None
    assert text[back[spliced.index("lu(x)")]] == "l"


def test_digraphs_are_read_as_their_tokens_without_moving_offsets() -> None:
    code = "%:define NS at\nvoid f() <% int a<:2:>; std::vector<::ns::T> v; %>"
    out = replace_digraphs(code)
    assert len(out) == len(code)
    assert out.startswith("# define NS at") and "{  int a[ 2 ]; std::vector<::ns::T> v;  }" in out


@pytest.mark.parametrize(
    "host",
    [
        _KERNEL + "%:define NS at\ntorch::Tensor f(torch::Tensor x) { return NS::relu(x); }",
        _KERNEL + "torch::Tensor f(torch::Tensor x) <% return at::relu(x); %>",
        _KERNEL + "torch::Tensor f(torch::Tensor x) { return at::re\\\nlu(x); }",
        _KERNEL + "torch::Tensor f(torch::Tensor x) { return at::re\\  \nlu(x); }",
        _KERNEL + "#def\\\nine NS at\ntorch::Tensor f(torch::Tensor x) { return NS::relu(x); }",
        _KERNEL + "// a comment that goes on \\\n#define NS at\n#define NS2 at\n"
        "torch::Tensor f(torch::Tensor x) { return NS2::relu(x); }",
        _KERNEL + "#define P(a, b) a %:%: b\ntorch::Tensor f(torch::Tensor x) { return at::P(re, lu)(x); }",
        _KERNEL + "#if 1\n#define NS at\n#else\n#define NS mine\n#endif\n"
        "torch::Tensor f(torch::Tensor x) { return NS::relu(x); }",
        _KERNEL
        + "#ifdef __CUDA_ARCH__\n#define NS mine\n#elif 1\n#define NS at\n#else\n#define NS mine2\n#endif\n"
        "torch::Tensor f(torch::Tensor x) { return NS::relu(x); }",
        _KERNEL + "#define NS at\n#if 0\n#undef NS\n#define NS mine\n#endif\n"
        "torch::Tensor f(torch::Tensor x) { return NS::relu(x); }",
        _KERNEL
        + "#if 1\n#define A at\n#else\n#define A mine\n#endif\n#if 0\n#define B foo\n#else\n#define B relu\n"
        "#endif\ntorch::Tensor f(torch::Tensor x) { return A::B(x); }",
    ],
)
def test_the_compilers_first_phases_are_read(host: str) -> None:
    assert "static.cpp_torch_op" in _cpp_errors(host)


def test_every_definition_of_a_conditional_macro_is_a_reading() -> None:
    code = "#if 1\n#define NS at\n#else\n#define NS mine\n#endif\nNS::relu(x);"
    assert len(macro_choices(code)) == 2
    assert "at::relu" in expand_macros(code).text or any(
        "at::relu" in expand_macros(code, (), c).text for c in macro_choices(code)
    )
    sequential = "#define N 1\nint a = N;\n#undef N\n#define N 2\nint b = N;"
    assert macro_choices(sequential) == []


def test_conditional_definitions_in_honest_code_stay_clean() -> None:
    host = _KERNEL + (
        "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800\n#define BLOCK 256\n"
        "#else\n#define BLOCK 128\n#endif\n"
        "torch::Tensor f(torch::Tensor x) {\n  auto y = torch::empty_like(x);\n  int64_t n = x.numel();\n"
        "  relu_kernel<<<(n + BLOCK - 1) / BLOCK, BLOCK>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);\n"
        "  return y;\n}\n"
    )
    assert _cpp_errors(host) == set()


def test_trigraphs_are_not_read() -> None:
    """C++17 removed trigraphs; g++ and nvcc warn `trigraph ??= ignored` and reject the line, and the
    flags that would turn them on (`-trigraphs`, `-std=c++14`) are refused above."""
    assert replace_digraphs("??=define NS at") == "??=define NS at"


# -- libtorch modules, member pointers, function objects -----------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "torch::nn::ReLU act; auto z = act->forward(x);",
        "auto z = torch::nn::ReLU()->forward(x);",
        "auto z = torch::nn::functional::relu(x);",
        "auto z = torch::nn::Linear(4, 4)(x);",
        "namespace tnn = torch::nn; tnn::ReLU act; auto z = act(x);",
        "using T = at::Tensor; auto f = &T::relu; auto z = (x.*f)();",
        "typedef at::Tensor T; auto f = &T::relu; auto z = (x.*f)();",
        "auto f = &at::Tensor::relu; auto z = (x.*f)();",
        "auto f = &decltype(x)::relu; auto z = (x.*f)();",
        "auto z = std::multiplies<>{}(x, x);",
        "auto z = std::greater<>()(x, 0);",
    ],
)
def test_library_objects_are_aten_work(line: str) -> None:
    assert "static.cpp_torch_op" in _errors(_candidate(line))


@pytest.mark.parametrize(
    "line",
    [
        "float s = std::plus<float>()(1.0f, 2.0f); (void)s;",
        "auto sz = x.sizes(); int64_t p = std::accumulate(sz.begin(), sz.end(), (int64_t)1, "
        "std::multiplies<int64_t>()); (void)p;",
        "auto f = &at::Tensor::numel; (void)f;",
    ],
)
def test_function_objects_on_numbers_stay_clean(line: str) -> None:
    assert _errors(_candidate(line, extra="#include <numeric>\n")) == set()


def test_a_forward_of_the_candidates_own_class_is_its_own() -> None:
    extra = (
        "struct Launcher {\n  void forward(const float* x, float* y, int64_t n) {\n"
        "    relu_kernel<<<(n + 255) / 256, 256>>>(x, y, n);\n  }\n};\n"
    )
    assert (
        _errors(
            _candidate("Launcher l; l.forward(x.data_ptr<float>(), y.data_ptr<float>(), n);", extra=extra)
        )
        == set()
    )


# -- files, processes, threads by name --------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "code"),
    [
        ('std::FILE* f = std::fopen("/tmp/a", "w");', "static.cpp_file_or_process"),
        ('FILE* f = ::fopen("/tmp/a", "w");', "static.cpp_file_or_process"),
        ('FILE* f = (fopen)("/tmp/a", "w");', "static.cpp_file_or_process"),
        ('FILE* f = (std::fopen)("/tmp/a", "w");', "static.cpp_file_or_process"),
        ('auto g = [](auto fn) { return fn("/tmp/a", "w"); }; g(fopen);', "static.cpp_file_or_process"),
        ("decltype(&popen) p = nullptr; (void)p;", "static.cpp_file_or_process"),
        ('(system)("true");', "static.cpp_file_or_process"),
        ('std::system("true");', "static.cpp_file_or_process"),
        ('(remove)("/tmp/a");', "static.cpp_file_or_process"),
        ('auto g = [](auto fn) { return fn("/tmp/a", 0); }; g(open);', "static.cpp_file_or_process"),
        ('void* h = dlopen("libx.so", 2); (void)h;', "static.cpp_file_or_process"),
        ("thrd_t t; thrd_create(&t, nullptr, nullptr);", "static.cpp_std_thread"),
        ("pthread_t t; pthread_create(&t, nullptr, nullptr, nullptr);", "static.cpp_std_thread"),
        ("std::thread t([] {}); t.detach();", "static.cpp_std_thread"),
        ("auto fut = std::async([] { return 1; });", "static.cpp_std_thread"),
        ("if (fork() == 0) {}", "static.cpp_std_thread"),
    ],
)
def test_file_process_and_thread_functions_are_matched_by_name(line: str, code: str) -> None:
    assert code in _errors(
        _candidate(line, extra="#include <cstdio>\n#include <thread>\n#include <future>\n")
    )


def test_using_namespace_std_makes_bare_thread_a_thread() -> None:
    extra = "#include <thread>\nusing namespace std;\n"
    assert "static.cpp_std_thread" in _errors(_candidate("thread t([] {}); t.join();", extra=extra))


@pytest.mark.parametrize(
    "line",
    [
        "int my_fopen_count = 0; (void)my_fopen_count;",
        "auto clone = x.clone(); (void)clone;",
        "int thread = 0, system_count = 0, open = 1; (void)thread; (void)system_count; (void)open;",
        "std::vector<int> v{1, 0}; v.erase(std::remove(v.begin(), v.end(), 0), v.end());",
        "bool open = n > 0; if (open) { n += 1; } bool again = open; (void)again;",
    ],
)
def test_names_that_only_contain_or_resemble_the_words_stay_clean(line: str) -> None:
    diags = check_source(
        _candidate(line, extra="#include <vector>\n#include <algorithm>\n"), "c.py", VerifyConfig()
    )
    assert not {d.code for d in diags} & {"static.cpp_file_or_process", "static.cpp_std_thread"}


def test_device_code_and_directives_are_not_host_calls() -> None:
    host = (
        "#include <sys/syscall.h>\n"
        "__device__ int open(int x) { return x; }\n"
        "__global__ void k(int* y) { y[0] = open(1); }\n"
    )
    assert not {d.code for d in _cpp(host)} & {"static.cpp_file_or_process", "static.cpp_std_thread"}


@pytest.mark.parametrize(
    "host",
    [
        # a digit separator is no character literal: the call between two of them is code
        _KERNEL + "torch::Tensor f(torch::Tensor x) { int n = 1'000; auto y = at::relu(x); int m = 2'0; "
        "return y; }",
        # a raw string ends at `)delim"` only: the `"` inside it ends nothing
        _KERNEL + 'torch::Tensor f(torch::Tensor x) { auto s = R"d(")d"; auto y = at::relu(x); auto q = ""; '
        "return y; }",
    ],
)
def test_literals_are_read_as_the_compiler_reads_them(host: str) -> None:
    assert "static.cpp_torch_op" in _cpp_errors(host)


# -- tensor methods by the tensor API -----------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "auto z = x.prelu(torch::zeros({1}, x.options()));",
        "auto z = x.contiguous().view(-1).sum_to_size({1});",
        "std::vector<torch::Tensor> ts{x}; auto z = ts[0].prelu(x);",
        "auto w = x.contiguous(); auto z = w.logaddexp(x);",
    ],
)
def test_a_tensor_api_method_on_a_tensor_is_aten_work(line: str) -> None:
    assert "static.cpp_torch_op" in _errors(_candidate(line))


@pytest.mark.parametrize(
    "line",
    [
        "std::vector<int64_t> v{1, 2}; auto it = std::find(v.begin(), v.end(), 2); (void)it;",
        "auto opts = x.options().dtype(torch::kFloat32); (void)opts;",
        "auto s = x.sizes().vec(); s.push_back(1); (void)s;",
        "auto z = out_fn(x).index({0}); (void)z;",
    ],
)
def test_methods_of_other_objects_stay_clean(line: str) -> None:
    extra = "#include <vector>\n#include <algorithm>\ntorch::Tensor out_fn(torch::Tensor t) { return t; }\n"
    diags = check_source(_candidate(line, extra=extra), "c.py", VerifyConfig())
    assert not [d for d in diags if d.code == "static.cpp_torch_op"], [d.message for d in diags]


def test_a_definition_restored_by_pop_macro_is_read() -> None:
    host = _KERNEL + (
        '#define NS at\n#pragma push_macro("NS")\n#undef NS\n#define NS mine\n#pragma pop_macro("NS")\n'
        "torch::Tensor f(torch::Tensor x) { return NS::relu(x); }"
    )
    assert "static.cpp_torch_op" in _cpp_errors(host)


def test_a_class_of_the_candidates_own_may_have_an_open_member() -> None:
    extra = "struct Tiles {\n  int n = 0;\n  void open(int k) { n = k; }\n  void reset() { open(0); }\n};\n"
    diags = check_source(_candidate("Tiles t; t.open(4); t.reset();", extra=extra), "c.py", VerifyConfig())
    assert not [d for d in diags if d.code == "static.cpp_file_or_process"], [d.message for d in diags]


@pytest.mark.parametrize(
    "line",
    [
        "auto mul = std::multiplies<>{}; auto z = mul(x, x);",
        "std::multiplies<> mul; auto z = mul(x, x);",
        "auto z = std::invoke(std::multiplies<>{}, x, x);",
        "std::vector<torch::Tensor> ts{x, x}; std::vector<torch::Tensor> out(2); "
        "std::transform(ts.begin(), ts.end(), out.begin(), std::negate<>());",
        "std::vector<torch::Tensor> ts{x, x}; "
        "auto s = std::accumulate(ts.begin(), ts.end(), x, std::plus<>());",
    ],
)
def test_stored_or_handed_function_objects_on_tensors_are_aten_work(line: str) -> None:
    extra = "#include <functional>\n#include <numeric>\n#include <algorithm>\n#include <vector>\n"
    assert "static.cpp_torch_op" in _errors(_candidate(line, extra=extra))


def test_stored_function_objects_on_numbers_stay_clean() -> None:
    line = (
        "auto mul = std::multiplies<int64_t>{}; int64_t p = mul(x.size(0), 2); "
        "std::vector<float> v{1.f, 2.f}; "
        "std::transform(v.begin(), v.end(), v.begin(), std::negate<float>()); "
        "(void)p;"
    )
    extra = "#include <functional>\n#include <algorithm>\n#include <vector>\n"
    assert _errors(_candidate(line, extra=extra)) == set()


def test_a_quote_after_a_keyword_opens_a_character_literal_not_a_digit_separator() -> None:
    """`return'"'` is `return '"'`: a scanner that took that `'` for a digit separator read the `"`
    as a string running to the next one and blanked the ATen call between them."""
    from cudice.verifier.static.cpp_scan import blank_comments_and_strings

    code = "return'\"', out.copy_(at::relu(x)), '\"';"
    assert "at::relu(x)" in blank_comments_and_strings(code)
    numbers = "int n = 1'000'000; long m = 0x1p-3;"
    assert blank_comments_and_strings(numbers) == numbers
