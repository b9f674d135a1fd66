"""Static anti-cheat checks: the corpus gets its declared verdicts, honest kernels pass clean,
findings land on the offending line (C++ ones mapped into the .py file), strictness levels act
as documented (docs/anticheat.md). Pure AST/regex: no compiler runs here."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from corpus.manifest import KINDS, Case, load_corpus
from cudice.verifier.config import VerifyConfig
from cudice.verifier.document import parse_document
from cudice.verifier.result import Diagnostic, Severity, Stage
from cudice.verifier.static_checks import check_document, check_source, has_violation
from cudice.verifier.static_cuda import blank_comments_and_strings, find_functions, find_kernels

REPO = Path(__file__).resolve().parents[2]


def _check(path: Path, policy: str = "default") -> list[Diagnostic]:
    return check_source(path.read_text(encoding="utf-8"), str(path), VerifyConfig(static_policy=policy))


def _codes(diags: list[Diagnostic], severity: Severity) -> set[str]:
    return {d.code for d in diags if d.severity is severity}


# -- the corpus ------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", load_corpus("static"), ids=lambda c: c.name)
def test_static_exploit_is_rejected_with_its_codes(case: Case) -> None:
    diags = _check(case.path)
    assert case.verdict == "static_violation"
    assert has_violation(diags), f"{case.name} ({case.exploit}) passed the static checks"
    missing = set(case.codes) - _codes(diags, Severity.ERROR)
    assert not missing, f"{case.name}: expected errors {missing}, got {[(d.code, d.message) for d in diags]}"
    lines = case.path.read_text().count("\n") + 1
    for d in diags:
        assert d.stage is Stage.STATIC and d.location is not None and d.location.path == str(case.path)
        assert 1 <= d.location.line <= lines
        assert d.message and d.code.startswith("static.")


@pytest.mark.parametrize("case", load_corpus("honest"), ids=lambda c: c.name)
def test_honest_kernel_passes_clean(case: Case) -> None:
    diags = _check(case.path)
    assert diags == [], [(d.code, d.location.line if d.location else None, d.message) for d in diags]


@pytest.mark.parametrize("case", load_corpus("warning"), ids=lambda c: c.name)
def test_warning_case_warns_without_rejecting(case: Case) -> None:
    diags = _check(case.path)
    assert not has_violation(diags)
    assert set(case.codes) <= _codes(diags, Severity.WARNING)


@pytest.mark.parametrize("case", load_corpus("dynamic"), ids=lambda c: c.name)
def test_dynamic_exploit_gets_past_the_static_checks(case: Case) -> None:
    """Dynamic cases hide from the static layer on purpose (macros, token pasting, C++ operators):
    they exist to prove the run-time checks catch what the static ones cannot see."""
    assert not has_violation(_check(case.path))
    assert case.verdict != "correct" and all(c.startswith("dynamic.") for c in case.codes)


@pytest.mark.parametrize("case", load_corpus("hostile"), ids=lambda c: c.name)
def test_hostile_case_reaches_the_sandbox_unless_it_may_be_static(case: Case) -> None:
    """The at-import cases build their sources with `"".join` of literals, which the static stage now
    reads: it must not turn a case that has to reach the sandbox into `static_violation`."""
    assert not has_violation(_check(case.path)) or "static_violation" in case.verdict.split("|")


def test_corpus_covers_every_kind() -> None:
    kinds = {c.kind for c in load_corpus()}
    assert kinds >= {"honest", "static", "warning", "dynamic", "hostile"} and kinds <= set(KINDS)
    assert len(load_corpus("dynamic")) >= 6 and len(load_corpus("hostile")) >= 10


@pytest.mark.parametrize("name", ["relu_cuda.py", "softmax_cuda.py"])
def test_shipped_examples_pass_clean(name: str) -> None:
    assert _check(REPO / "examples" / name) == []


def test_detection_and_false_positive_rates() -> None:
    """The figures docs/anticheat.md reports: every static exploit caught, no honest kernel flagged."""
    exploits = load_corpus("static")
    honest = load_corpus("honest") + [c for c in load_corpus("warning")]
    caught = sum(
        has_violation(_check(c.path)) and set(c.codes) <= _codes(_check(c.path), Severity.ERROR)
        for c in exploits
    )
    flagged = sum(has_violation(_check(c.path)) for c in honest)
    texts = [(c.path.read_text(), str(c.path)) for c in load_corpus()]
    t0 = time.perf_counter()  # reported for docs/anticheat.md, not asserted (the CPU may be shared)
    for text, path in texts:
        check_source(text, path)
    per_file_ms = (time.perf_counter() - t0) * 1000 / len(texts)
    print(
        f"static detection {caught}/{len(exploits)}, false positives {flagged}/{len(honest)}, "
        f"{per_file_ms:.1f} ms per file"
    )
    assert len(exploits) >= 60 and len(load_corpus("honest")) >= 14
    assert caught == len(exploits) and flagged == 0


# -- locations ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case_name", "code", "needle"),
    [
        ("cpp_stream_create", "static.cpp_stream_create", "cudaStreamCreateWithFlags"),
        ("cpp_pointer_cache", "static.cpp_pointer_cache", "static std::unordered_map"),
        ("cpp_std_thread", "static.cpp_std_thread", "std::thread"),
        ("cpp_timer_interpose", "static.timer_patch", "cudaEventElapsedTime"),
        ("wrapper_calls_aten", "static.cpp_torch_op", "torch::relu"),
        ("wrapper_calls_aten", "static.kernel_never_launched", "__global__ void relu_kernel"),
        ("torch_op_decoy_kernel", "static.torch_op_in_forward", "return torch.relu(x)"),
        ("try_except_fallback", "static.fallback_to_reference", "try:"),
        ("timer_patch_event", "static.timer_patch", "elapsed_time ="),
        ("python_thread", "static.stream_or_thread", "import threading"),
        ("inherits_model", "static.inherits_model", "class ModelNew(Model)"),
        ("output_cache_self", "static.output_cache", "self.last = relu_ext"),
    ],
)
def test_finding_is_located_on_the_offending_line(case_name: str, code: str, needle: str) -> None:
    path = next(c.path for c in load_corpus() if c.name == case_name)
    lines = path.read_text().splitlines()
    hits = [d for d in _check(path) if d.code == code]
    assert hits, f"{case_name}: no {code}"
    assert any(d.location and needle in lines[d.location.line - 1] for d in hits), [
        (d.location.line, lines[d.location.line - 1]) for d in hits if d.location
    ]


# -- policy details: no false alarms on glue, and the strictness levels ---------------------------

_GLUE_HEADER = (
    '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
__global__ void k(const float* x, float* y, const float* w, int n) { }
void run(torch::Tensor x, torch::Tensor y, torch::Tensor w) {
    k<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), '''
    '''w.data_ptr<float>(), x.numel());
}
"""
ext = load_inline(name="g", cpp_sources="void run(torch::Tensor x, torch::Tensor y, torch::Tensor w);",
                  cuda_sources=src, functions=["run"])


class Model(nn.Module):
    def forward(self, x):
        return x


def get_inputs():
    return [torch.randn(4, 4)]
'''
)


def _glue(forward_body: str, init_body: str = "pass", policy: str = "default") -> list[Diagnostic]:
    text = (
        _GLUE_HEADER
        + f"""

class ModelNew(nn.Module):
    def __init__(self, features: int = 4):
        super().__init__()
        {init_body}

    def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
{forward_body}
"""
    )
    return check_source(text, "cand.py", VerifyConfig(static_policy=policy))


GLUE_FORWARDS = {
    "empty_like + grid maths": """
        y = torch.empty_like(x)
        n = x.numel()
        blocks = (n + 255) // 256 * 2
        assert blocks > 0 and x.size(0) * x.size(1) == n
        ext.run(x, y, self.weight)
        return y""",
    "views and metadata": """
        B, C = x.shape
        x2 = x.contiguous().view(B, -1).transpose(0, 1).reshape(-1)
        y = x2.new_empty(x2.shape)
        if x.dim() != 2 or x.dtype != torch.float32 or not x.is_cuda:
            raise ValueError("bad input")
        ext.run(x2, y, self.weight.to(x.device))
        return y.view(C, B).t()""",
    "raise on bad input, no fallback": """
        if x.numel() == 0:
            raise RuntimeError("empty input")
        y = torch.empty(x.shape, device=x.device, dtype=x.dtype)
        ext.run(x, y, self.weight)
        return y""",
}


@pytest.mark.parametrize("body", GLUE_FORWARDS.values(), ids=list(GLUE_FORWARDS))
@pytest.mark.parametrize("policy", ["strict", "default", "lenient"])
def test_glue_is_never_flagged(body: str, policy: str) -> None:
    init = (
        "self.weight = nn.Parameter(torch.randn(features, features) * 0.02)\n        "
        "self.register_buffer('bias', torch.zeros(features))"
    )
    diags = _glue(body, init, policy)
    assert diags == [], [(d.code, d.location.line if d.location else None, d.message) for d in diags]


@pytest.mark.parametrize(
    ("body", "what"),
    [
        ("        y = torch.empty_like(x)\n        ext.run(x, y, x)\n        return y * scale", "y * scale"),
        (
            "        y = torch.empty_like(x)\n        ext.run(x, y, x)\n        y += 1\n        return y",
            "y += 1",
        ),
        ("        y = torch.empty_like(x)\n        ext.run(x, y, x)\n        return y.sum(dim=1)", ".sum"),
        (
            "        y = torch.empty_like(x)\n        ext.run(x, y, x)\n        return torch.softmax(y, 1)",
            "softmax",
        ),
        (
            "        y = torch.empty_like(x)\n        ext.run(x, y, x)\n        return nn.functional.gelu(y)",
            "gelu",
        ),
        ("        y = torch.empty_like(x)\n        ext.run(x @ x, y, x)\n        return y", "@"),
        ("        y = torch.empty_like(x)\n        ext.run(x, y, x)\n        return -y", "-y"),
        (
            "        y = torch.empty_like(x)\n        ext.run(x, y, x)\n"
            "        return torch.where(y > 0, y, x)",
            "where",
        ),
        (
            "        f = torch.relu\n        y = torch.empty_like(x)\n"
            "        ext.run(x, y, x)\n        return f(y)",
            "f = torch.relu",
        ),
        (
            "        import operator\n        y = torch.empty_like(x)\n"
            "        ext.run(x, y, x)\n        return operator.mul(y, 2)",
            "operator.mul",
        ),
    ],
)
def test_compute_in_forward_is_an_error(body: str, what: str) -> None:
    diags = _glue(body)
    assert "static.torch_op_in_forward" in _codes(diags, Severity.ERROR), what


def test_torch_ops_in_a_helper_called_by_forward_are_found() -> None:
    text = (
        _GLUE_HEADER
        + """

def _post(y):
    return torch.tanh(y)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        ext.run(x, y, x)
        return self._finish(y)

    def _finish(self, y):
        return _post(y)
"""
    )
    diags = check_source(text, "c.py")
    hits = [d for d in diags if d.code == "static.torch_op_in_forward"]
    assert hits and hits[0].location is not None
    assert "torch.tanh" in text.splitlines()[hits[0].location.line - 1]


def test_strictness_levels() -> None:
    zeros = "        y = torch.zeros_like(x)\n        ext.run(x, y, x)\n        return y"
    assert _glue(zeros, policy="default") == []
    assert "static.torch_op_in_forward" in _codes(_glue(zeros, policy="strict"), Severity.ERROR)
    compute = "        y = torch.empty_like(x)\n        ext.run(x, y, x)\n        return torch.relu(y)"
    lenient = _glue(compute, policy="lenient")
    assert not has_violation(lenient) and "static.torch_op_in_forward" in _codes(lenient, Severity.WARNING)
    # lenient still rejects a forward that launches no kernel at all
    no_kernel = "        return torch.relu(x)"
    assert "static.kernel_never_launched" in _codes(_glue(no_kernel, policy="lenient"), Severity.ERROR)
    with pytest.raises(ValueError, match="static_policy"):
        VerifyConfig(static_policy="paranoid")


def test_precision_warning_is_silent_for_a_half_precision_reference() -> None:
    text = (REPO / "tests/verifier/corpus/precision_half.py").read_text()
    text = text.replace("# cudice: reference=references/relu.py\n", "")
    text += """

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x.half())


def get_inputs():
    return [torch.randn(4, 4).half()]
"""
    assert "static.precision_downgrade" not in {d.code for d in check_source(text, "h.py")}


def test_a_launch_inside_a_comment_does_not_count() -> None:
    text = _GLUE_HEADER.replace(
        "k<<<(x.numel() + 255) / 256, 256>>>", "// k<<<1, 1>>>(...) is what we would do\n    (void)"
    ).replace("(x.data_ptr<float>(), y.data_ptr<float>(), w.data_ptr<float>(), x.numel());", "0;")
    text += """

class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        ext.run(x, y, x)
        return y
"""
    diags = check_source(text, "c.py")
    assert "static.kernel_never_launched" in _codes(diags, Severity.ERROR)


def test_raw_cu_documents_get_the_cpp_checks() -> None:
    text = (
        'extern "C" __global__ void k(float* x) { }\n#include <thread>\nvoid h() { std::thread t([]{}); }\n'
    )
    diags = check_document(parse_document(text, "k.cu"))
    assert "static.cpp_std_thread" in _codes(diags, Severity.ERROR)
    assert all(d.location is not None and d.location.path == "k.cu" for d in diags)


def test_document_without_model_new_has_nothing_to_check() -> None:
    assert check_source((REPO / "examples/relu.py").read_text(), "relu.py") == []


# -- C++ scanning helpers -------------------------------------------------------------------------


def test_blanking_keeps_offsets_and_hides_comments() -> None:
    text = 'a /* cudaStreamCreate */ b // std::thread\n"str" c'
    out = blank_comments_and_strings(text)
    assert len(out) == len(text) and out.count("\n") == 1
    assert "cudaStreamCreate" not in out and "std::thread" not in out and out.endswith('"   " c')


def test_function_and_kernel_finder() -> None:
    code = blank_comments_and_strings("""
namespace x {
template <int T>
__global__ void __launch_bounds__(256) kern(float* p) { if (p) { p[0] = 1; } }
__device__ float helper(float v) { return v; }
}
struct S { int f() { return 1; } };
static const int kN = 4;
torch::Tensor wrap(torch::Tensor t) const {
    auto l = [&]() { kern<4><<<1, 1>>>(nullptr); };
    return t;
}
""")
    fns = {f.name: f for f in find_functions(code)}
    assert set(fns) == {"kern", "helper", "wrap"}
    assert fns["kern"].is_device and fns["helper"].is_device and not fns["wrap"].is_device
    assert [name for name, _ in find_kernels(code)] == ["kern"]


# -- through the CLI (what the editor and scripts see) -----------------------------------------------


@pytest.mark.parametrize("case_name", ["torch_op_decoy_kernel", "cpp_stream_create", "inherits_model"])
def test_cli_reports_static_violation_with_located_codes(case_name: str) -> None:
    import json
    import subprocess
    import sys

    case = next(c for c in load_corpus("static") if c.name == case_name)
    proc = subprocess.run(
        [sys.executable, "-m", "cudice.server.cli", "verify", "--json", "--compile-only", str(case.path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["verdict"] == "static_violation" and out["speedup"] is None
    found = {d["code"] for d in out["diagnostics"] if d["severity"] == "error"}
    assert set(case.codes) <= found
    assert all(
        d["line"] >= 1 and d["column"] >= 1 for d in out["diagnostics"] if d["code"].startswith("static.")
    )


def test_every_anticheat_code_is_documented() -> None:
    import re

    sources = [*(REPO / "verifier").glob("static_*.py"), REPO / "verifier" / "dynamic_checks.py"]
    codes = {m for p in sources for m in re.findall(r"\"((?:static|dynamic)\.[a-z_]+)\"", p.read_text())}
    docs = (REPO / "docs" / "diagnostics.md").read_text()
    assert len(codes) >= 25
    assert not [c for c in sorted(codes) if f'<a id="{c}"></a>' not in docs]


# -- class 6: PyTorch or the host doing the work, unseen ------------------------------------------


@pytest.mark.parametrize(
    ("body", "what"),
    [
        (
            "        y = torch.empty_like(x)\n        ext.run(x, y, x)\n"
            "        return torch.from_numpy(y.cpu().numpy())",
            ".cpu()",
        ),
        (
            "        h = x.to('cpu')\n        y = torch.empty_like(x)\n"
            "        ext.run(x, y, x)\n        return y",
            ".to('cpu')",
        ),
        (
            "        h = x.to(device=torch.device('cpu:0'))\n        ext.run(x, x, x)\n        return x",
            "torch.device",
        ),
        (
            "        h = torch.empty(4, device='cpu')\n        ext.run(x, h, x)\n        return h",
            "device='cpu'",
        ),
        (
            "        y = torch.empty_like(x)\n        ext.run(x, y, x)\n"
            "        return torch.tensor(y.tolist())",
            ".tolist()",
        ),
        (
            "        import numpy as np\n        y = torch.empty_like(x)\n"
            "        ext.run(x, y, x)\n        return np.exp(y)",
            "np.exp",
        ),
    ],
)
def test_host_round_trips_are_errors_and_lenient_warns(body: str, what: str) -> None:
    assert "static.host_compute" in _codes(_glue(body), Severity.ERROR), what
    lenient = _glue(body, policy="lenient")
    assert not has_violation(lenient) and "static.host_compute" in _codes(lenient, Severity.WARNING), what


@pytest.mark.parametrize(
    "body",
    [
        "        y = torch.empty_like(x)\n"
        "        ext.run(x.to(x.device), y.to('cuda'), x.to(torch.float32))\n        return y",
        "        n = math.sqrt(x.size(-1))\n        y = torch.empty(x.shape, device='cuda:0')\n"
        "        ext.run(x, y, x)\n        return y",
    ],
)
def test_device_moves_to_the_gpu_are_glue(body: str) -> None:
    assert _glue("        import math\n" + body) == []


def test_module_level_aliases_reach_forward() -> None:
    aliases = (
        "import functools\n_aten = torch.ops.aten\nT = torch\nF = T.nn.functional\n"
        "mm = functools.partial(torch.mm)\n"
    )
    for call in ("_aten._softmax(y, 1, False)", "F.softmin(y, 1)", "mm(y, y)"):
        text = (
            _GLUE_HEADER
            + aliases
            + f"""

class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        ext.run(x, y, x)
        return {call}
"""
        )
        assert "static.torch_op_in_forward" in _codes(check_source(text, "c.py"), Severity.ERROR), call


@pytest.mark.parametrize(
    "binding",
    [
        ("self.fn = ext.run", "self.fn(x, y, x)"),
        ("self.fn = getattr(ext, 'run')", "self.fn(x, y, x)"),
        ("self.fn = functools.partial(ext.run)", "self.fn(x, y, x)"),
        ("self.ext = ext", "launch = self.ext.run\n        launch(x, y, x)"),
        ("pass", "run_kernel(x, y, x)"),
    ],
)
def test_extension_functions_under_other_names_count_as_launches(binding: tuple[str, str]) -> None:
    init, call = binding
    text = (
        _GLUE_HEADER
        + f"""
import functools
run_kernel = ext.run


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        {init}

    def forward(self, x):
        y = torch.empty_like(x)
        {call}
        return y
"""
    )
    diags = check_source(text, "c.py")
    assert diags == [], [(d.code, d.message) for d in diags]


def _cpp(body: str, policy: str = "default") -> list[Diagnostic]:
    text = (
        f'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
__global__ void k(float* y) {{ }}
{body}
torch::Tensor run(torch::Tensor x) {{
    k<<<1, 1>>>(x.data_ptr<float>());
    return helper(x);
}}
"""
ext = load_inline(name="g", cpp_sources="torch::Tensor run(torch::Tensor x);", '''
        """cuda_sources=src, functions=["run"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.run(x)
"""
    )
    return check_source(text, "c.py", VerifyConfig(static_policy=policy))


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ("torch::Tensor helper(torch::Tensor x) { return mm(x, x); }", "static.cpp_torch_op"),
        (
            "torch::Tensor helper(const torch::Tensor& x) { auto y = x.contiguous(); return exp(y); }",
            "static.cpp_torch_op",
        ),
        ("using namespace at;\nTensor helper(Tensor x) { return log_softmax(x, 1); }", "static.cpp_torch_op"),
        (
            "static torch::Tensor cached;\ntorch::Tensor helper(torch::Tensor x) { return x; }",
            "static.cpp_pointer_cache",
        ),
        (
            "std::vector<int> sizes(10);\ntorch::Tensor helper(torch::Tensor x) { return x; }",
            "static.cpp_pointer_cache",
        ),
        (
            "int open(const char* p) { return 0; }\n"
            'torch::Tensor helper(torch::Tensor x) { ::open("/tmp/x", 0); return x; }',
            "static.cpp_file_or_process",
        ),
        (
            '#include <dlfcn.h>\ntorch::Tensor helper(torch::Tensor x) { dlopen("libx.so", 1); return x; }',
            "static.cpp_file_or_process",
        ),
        (
            "TORCH_LIBRARY(mine, m) { }\ntorch::Tensor helper(torch::Tensor x) { return x; }",
            "static.dispatcher_override",
        ),
    ],
)
def test_cpp_cheats_are_found(body: str, code: str) -> None:
    assert code in _codes(_cpp(body), Severity.ERROR)


@pytest.mark.parametrize(
    "body",
    [
        "torch::Tensor helper(torch::Tensor x) { int n = max(1, (int)x.numel()); "
        "float s = sqrt(2.0f) + exp(0.5f);\n"
        "  (void)n; (void)s; return x; }",
        "#include <algorithm>\n#include <vector>\n"
        "torch::Tensor helper(torch::Tensor x) { std::vector<int> v{3, 1};\n"
        "  v.erase(std::remove(v.begin(), v.end(), 1), v.end()); std::sort(v.begin(), v.end()); return x; }",
        "__host__ __device__ float relu(float v) { return v > 0.f ? v : 0.f; }\n"
        "torch::Tensor helper(torch::Tensor x) { float r = relu(1.0f); (void)r; return x; }",
        "struct Cfg { std::vector<int64_t> dims; };\n"
        "static at::Tensor helper(const at::Tensor& x) { Cfg c{x.sizes().vec()};\n"
        "  (void)c; return x; }",
        "std::vector<torch::Tensor> pair(torch::Tensor x);\ntorch::Tensor helper(torch::Tensor x) {\n"
        '  if (x.numel() < 0) { fprintf(stderr, "bad\\n"); exit(1); } return x; }',
    ],
)
def test_cpp_glue_is_not_flagged(body: str) -> None:
    diags = _cpp(body)
    assert diags == [], [(d.code, d.message) for d in diags]


def test_unqualified_aten_call_warns_in_lenient() -> None:
    diags = _cpp("torch::Tensor helper(torch::Tensor x) { return matmul(x, x); }", policy="lenient")
    assert not has_violation(diags) and "static.cpp_torch_op" in _codes(diags, Severity.WARNING)


def test_a_source_built_at_run_time_is_rejected_on_its_expression() -> None:
    text = (
        _GLUE_HEADER.replace("cuda_sources=src", 'cuda_sources=open("k.cu").read()')
        + """

class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        ext.run(x, y, x)
        return y
"""
    )
    diags = [d for d in check_source(text, "c.py") if d.code == "static.dynamic_source"]
    assert diags and diags[0].severity is Severity.ERROR and diags[0].location is not None
    assert 'open("k.cu")' in text.splitlines()[diags[0].location.line - 1]
    lenient = check_source(text, "c.py", VerifyConfig(static_policy="lenient"))
    assert not has_violation(lenient) and "static.dynamic_source" in _codes(lenient, Severity.WARNING)


@pytest.mark.parametrize(
    ("line", "code"),
    [
        ("from torch import library", "static.dispatcher_override"),
        ("torch.ops.load_library('libcheat.so')", "static.dispatcher_override"),
        ("torch.utils.cpp_extension.load(name='x', sources=['x.cu'])", "static.dynamic_source"),
        ("import pathlib\npathlib.Path('x.pth').open('w')", "static.harness_tampering"),
        ("import os\nos.setsid()", "static.harness_tampering"),
        ("import sysconfig", "static.harness_tampering"),
        ("CMD = '/proc/self/cmdline'", "static.harness_tampering"),
    ],
)
def test_python_side_dispatcher_file_and_process_apis(line: str, code: str) -> None:
    text = (
        _GLUE_HEADER
        + line
        + """

class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        ext.run(x, y, x)
        return y
"""
    )
    assert code in _codes(check_source(text, "c.py"), Severity.ERROR)


def test_a_source_built_from_constants_gets_the_cpp_checks_on_its_expression() -> None:
    text = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

N = 256
src = f"""
__global__ void k(float* y) {{ }}
void run(torch::Tensor x) {{
    cudaStream_t s;
    cudaStreamCreate(&s);
    k<<<{N}, 1, 0, s>>>(x.data_ptr<float>());
}}
"""
ext = load_inline(name="g", cpp_sources="void run(torch::Tensor x);", cuda_sources=src, functions=["run"])


class ModelNew(nn.Module):
    def forward(self, x):
        ext.run(x)
        return x
'''
    diags = check_source(text, "c.py")
    hits = [d for d in diags if d.code == "static.cpp_stream_create"]
    assert (
        hits and hits[0].location is not None and "static.dynamic_source" not in _codes(diags, Severity.ERROR)
    )
    assert text.splitlines()[hits[0].location.line - 1].startswith("src = f")


def test_reading_files_and_setting_build_variables_are_allowed() -> None:
    text = (
        _GLUE_HEADER
        + """
import os
import pathlib
os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0"
os.environ.setdefault("MAX_JOBS", "4")
NOTES = pathlib.Path(__file__).with_suffix(".md")
_text = open(NOTES).read() if NOTES.exists() else ""
_again = NOTES.open().read() if NOTES.exists() else ""


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        ext.run(x, y, x)
        return y
"""
    )
    diags = check_source(text, "c.py")
    assert diags == [], [(d.code, d.message) for d in diags]


@pytest.mark.parametrize(
    ("store", "flagged"),
    [
        ("_state = load_inline(name='g2', cpp_sources='', cuda_sources='')", False),  # a lazy loader
        ("_state = y", True),  # the output kept across calls
    ],
)
def test_global_in_forward_code_is_a_cache_unless_it_only_builds_the_extension(
    store: str, flagged: bool
) -> None:
    text = (
        _GLUE_HEADER
        + f"""
_state = None


def _keep(y):
    global _state
    if _state is None:
        {store}
    return y


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        ext.run(x, y, x)
        return _keep(y)
"""
    )
    assert ("static.output_cache" in _codes(check_source(text, "c.py"), Severity.ERROR)) is flagged


def test_layers_held_for_their_weights_are_glue_and_calling_them_is_not() -> None:
    init = "self.layers = nn.ModuleList([nn.Linear(features, features)])"
    weights = (
        "        y = torch.empty_like(x)\n        ext.run(x, y, self.layers[0].weight)\n        return y"
    )
    assert _glue(weights, init) == []
    for call in ("self.layers[0](y)", "[f(y) for f in self.layers][0]"):
        body = f"        y = torch.empty_like(x)\n        ext.run(x, y, x)\n        return {call}"
        assert "static.torch_op_in_forward" in _codes(_glue(body, init), Severity.ERROR), call


def test_sources_received_at_run_time_get_the_cpp_checks_on_the_call() -> None:
    from cudice.verifier.result import Location
    from cudice.verifier.static_checks import check_built_sources

    where = Location("cand.py", 12, 7)
    honest = (
        "__global__ void k(float* y) { }\nvoid run(torch::Tensor x) { k<<<1, 1>>>(x.data_ptr<float>()); }"
    )
    assert check_built_sources("void run(torch::Tensor x);", [honest], ["run"], where) == []
    cheat = (
        "torch::Tensor run(torch::Tensor x) { return at::relu(x); }\nTORCH_LIBRARY_IMPL(aten, CUDA, m) { }"
    )
    diags = check_built_sources([cheat], None, ["run"], where)
    assert {"static.cpp_torch_op", "static.dispatcher_override"} <= _codes(diags, Severity.ERROR)
    assert all(d.location == where for d in diags)


DISPATCH_HALF = (
    '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = """
#include <torch/extension.h>
template <typename scalar_t>
__global__ void twice_kernel(const scalar_t* x, scalar_t* y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] + x[i];
}
torch::Tensor twice(torch::Tensor x) {
    auto y = torch::empty_like(x);
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "twice", [&] {
        twice_kernel<scalar_t><<<(x.numel() + 255) / 256, 256>>>('''
    '''x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), x.numel());
    });
    return y;
}
"""
ext = load_inline(name="twice_ext", cpp_sources="torch::Tensor twice(torch::Tensor x);", cuda_sources=src,
                  functions=["twice"])


class Model(nn.Module):
    def forward(self, x):
        return x + x


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.twice(x)


def get_inputs():
    return [torch.randn(64, 64)]
'''
)


def test_half_types_added_to_a_dispatch_are_no_precision_downgrade() -> None:
    """`AT_DISPATCH_*_AND2(at::kHalf, ...)` instantiates the kernel for more dtypes; a float32 input still
    computes in float32. A real half conversion in the same source is still named."""
    assert "static.precision_downgrade" not in {d.code for d in check_source(DISPATCH_HALF, "d.py")}
    downgraded = DISPATCH_HALF.replace(
        "auto y = torch::empty_like(x);", "auto y = torch::empty_like(x, x.options().dtype(at::kHalf));"
    )
    assert "static.precision_downgrade" in {d.code for d in check_source(downgraded, "d.py")}
