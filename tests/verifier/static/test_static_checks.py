"""Static anti-cheat checks: the corpus gets its declared verdicts, honest kernels pass clean,
findings land on the offending line (C++ ones mapped into the .py file), strictness levels act
as documented (docs/anticheat.md). Pure AST/regex: no compiler runs here."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from corpus.manifest import KINDS, Case, load_corpus
from cudice.verifier.config import VerifyConfig
from cudice.verifier.source.document import parse_document
from cudice.verifier.source.result import Diagnostic, Severity, Stage
from cudice.verifier.static.checks import check_document, check_source, has_violation
from cudice.verifier.static.cuda import blank_comments_and_strings, find_functions, find_kernels

REPO = Path(__file__).resolve().parents[3]


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
    """Dynamic cases hide from the static layer on purpose (macros, token pasting, side streams):
    they exist to prove the run-time checks catch what the static ones cannot see."""
    diags = _check(case.path)
    errors = [d for d in diags if d.severity is Severity.ERROR]
    assert not has_violation(diags), [(d.code, d.message) for d in errors]
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
    fns = {f.qualname: f for f in find_functions(code)}
    assert set(fns) == {"kern", "helper", "S::f", "wrap"}  # a member defined in its class body too
    assert fns["S::f"].name == "f" and fns["S::f"].cls == "S" and not fns["S::f"].is_device
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

    sources = [*(REPO / "verifier" / "static").glob("*.py"), REPO / "verifier" / "run" / "dynamic_checks.py"]
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
    from cudice.verifier.source.result import Location
    from cudice.verifier.static.checks import check_built_sources

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


# -- names resolve to what they are, not to how they are spelled ---------------------------------

_PY_HEADER = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
__global__ void k(float* y, int n) { }
void run(torch::Tensor y) { k<<<1, 256>>>(y.data_ptr<float>(), y.numel()); }
"""
ext = load_inline(name="g", cpp_sources="void run(torch::Tensor y);", cuda_sources=src, functions=["run"])
'''


def _py(rest: str, policy: str = "default") -> list[Diagnostic]:
    return check_source(_PY_HEADER + rest, "n.py", VerifyConfig(static_policy=policy))


_FORWARD = """
    def forward(self, x):
        y = torch.empty_like(x)
        ext.run(y)
        return {ret}
"""


@pytest.mark.parametrize(
    "rest",
    [
        # module re-exports: every path through `torch.cuda` that names torch is torch
        "import torch.cuda as tc\nclass ModelNew(nn.Module):" + _FORWARD.format(ret="tc.torch.relu(x)"),
        "from torch.cuda import torch as T\nclass ModelNew(nn.Module):" + _FORWARD.format(ret="T.relu(x)"),
        "class ModelNew(nn.Module):" + _FORWARD.format(ret="torch.cuda.torch.nn.functional.gelu(x)"),
        "class ModelNew(nn.Module):" + _FORWARD.format(ret="torch.cuda.comm.reduce_add([x, y])"),
        # helper classes and functions reached from forward
        "class H:\n    @staticmethod\n    def run(x):\n        return torch.tanh(x)\n"
        "class ModelNew(nn.Module):" + _FORWARD.format(ret="H.run(x)"),
        "class H:\n    def __call__(self, x):\n        return torch.tanh(x)\n_h = H()\n"
        "class ModelNew(nn.Module):" + _FORWARD.format(ret="_h(x)"),
        "class H:\n    def go(self, x):\n        return x.sigmoid()\n"
        "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.h = [H()][0]\n" + _FORWARD.format(ret="self.h.go(x)"),
        "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.f = lambda t: torch.sigmoid(t)\n" + _FORWARD.format(ret="self.f(x)"),
        "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        def inner(t):\n            return torch.sigmoid(t)\n        self.f = inner\n"
        + _FORWARD.format(ret="self.f(x)"),
        # the call protocol: a base's forward, `_call_impl`, `__getattribute__`, a metaclass
        "class Base(nn.Module):\n    def forward(self, x):\n        ext.run(x)\n"
        "        return torch.relu(x)\n"
        "class ModelNew(Base):\n    pass\n",
        "class ModelNew(nn.Module):\n    def _call_impl(self, x):\n        return torch.relu(x)\n"
        + _FORWARD.format(ret="y"),
        "class ModelNew(nn.Module):\n    def __getattribute__(self, name):\n"
        "        return torch.relu if name == 'forward' else super().__getattribute__(name)\n"
        + _FORWARD.format(ret="y"),
        "class M(type(nn.Module)):\n    def __call__(cls, *a):\n        return nn.ReLU()\n"
        "class ModelNew(nn.Module, metaclass=M):" + _FORWARD.format(ret="y"),
        "def meta(name, bases, ns):\n    ns['forward'] = lambda s, x: torch.relu(x)\n"
        "    return type(nn.Module)(name, bases, ns)\n"
        "class ModelNew(nn.Module, metaclass=meta):" + _FORWARD.format(ret="y"),
        "def deco(c):\n    c.run = lambda s, x: torch.relu(x)\n    return c\n"
        "@deco\nclass ModelNew(nn.Module):" + _FORWARD.format(ret="y"),
    ],
)
def test_compute_reached_through_any_name_is_found(rest: str) -> None:
    diags = _py(rest)
    assert "static.torch_op_in_forward" in _codes(diags, Severity.ERROR), [(d.code, d.message) for d in diags]


@pytest.mark.parametrize(
    "init",
    [
        "self.forward = self.fast",
        'setattr(self, "forward", self.fast)',
        'object.__setattr__(self, "forward", self.fast)',
        'super().__setattr__("forward", self.fast)',
        'self.__dict__["forward"] = self.fast',
        "type(self).forward = ModelNew.fast",
        "self.__class__ = nn.ReLU",
        "self.register_forward_hook(lambda m, i, o: o)",
        "self._forward_hooks[0] = lambda m, i, o: o",
        "torch.nn.modules.module._global_forward_hooks[0] = lambda m, i, o: o",
    ],
)
def test_replacing_what_a_call_runs_is_rejected(init: str) -> None:
    rest = (
        "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        f"        {init}\n    def fast(self, x):\n        return x\n" + _FORWARD.format(ret="y")
    )
    assert "static.monkey_patch" in _codes(_py(rest), Severity.ERROR)


def test_a_computed_setattr_name_is_rejected_and_a_prefixed_one_is_not() -> None:
    init = "for n in names:\n            setattr(self, n, nn.Parameter(torch.zeros(1)))"
    rest = (
        "names = [input()]\nclass ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        f"        {init}\n" + _FORWARD.format(ret="y")
    )
    assert "static.dynamic_code" in _codes(_py(rest), Severity.ERROR)
    clean = rest.replace("setattr(self, n,", 'setattr(self, f"w{n}",').replace(
        "names = [input()]", "names = ['a']"
    )
    assert _py(clean) == [], [(d.code, d.message) for d in _py(clean)]


def test_a_second_model_new_is_rejected() -> None:
    rest = "class ModelNew(nn.Module):" + _FORWARD.format(ret="y") + "\nModelNew = nn.ReLU\n"
    assert "static.monkey_patch" in _codes(_py(rest), Severity.ERROR)


@pytest.mark.parametrize(
    ("imports", "call"),
    [
        ("from torch.utils.cpp_extension import load_inline as li", "li"),
        ("import torch.utils.cpp_extension as ce", "ce.load_inline"),
        ("from torch.utils import cpp_extension as ce", "ce.load_inline"),
        ("import torch.utils.cpp_extension\nbuild = torch.utils.cpp_extension.load_inline", "build"),
        ("from torch.utils.cpp_extension import load_inline\nmake = load_inline", "make"),
    ],
)
def test_load_inline_under_any_name_has_its_sources_checked(imports: str, call: str) -> None:
    text = f'''
import torch
import torch.nn as nn
{imports}

src = r"""
__global__ void k(float* y) {{ }}
torch::Tensor run(torch::Tensor x) {{ k<<<1, 1>>>(x.data_ptr<float>()); return at::softmax(x, 1); }}
"""
ext = {call}(name="g", cpp_sources="torch::Tensor run(torch::Tensor x);", cuda_sources=src, functions=["run"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.run(x)
'''
    diags = check_source(text, "li.py")
    assert _codes(diags, Severity.ERROR) == {"static.cpp_torch_op"}, [(d.code, d.message) for d in diags]
    unreadable = text.replace("cuda_sources=src", "cuda_sources=open('k.cu').read()")
    assert "static.dynamic_source" in _codes(check_source(unreadable, "li.py"), Severity.ERROR)
    honest = text.replace("return at::softmax(x, 1);", "return x;")
    assert check_source(honest, "li.py") == []


@pytest.mark.parametrize(
    "use",
    [
        "functools.partial(load_inline, name='g')",
        "[load_inline][0]",
        "getattr(__builtins__, 'id')(load_inline)",
    ],
)
def test_load_inline_passed_around_as_a_value_is_rejected(use: str) -> None:
    text = f"import functools\nfrom torch.utils.cpp_extension import load_inline\nbuilder = {use}\n"
    text += "import torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"
    assert "static.dynamic_source" in _codes(check_source(text, "v.py"), Severity.ERROR)


def test_an_undefined_source_name_is_reported_as_undefined_on_its_line() -> None:
    text = _PY_HEADER.replace("cuda_sources=src", "cuda_sources=cuda_srcx")
    text += "class ModelNew(nn.Module):" + _FORWARD.format(ret="y")
    (d,) = [d for d in check_source(text, "u.py") if d.code == "static.dynamic_source"]
    line = text.splitlines()[d.location.line - 1] if d.location else ""
    assert "name `cuda_srcx` is not defined in this file" in d.message and "cuda_srcx" in line
    assert "built at run time" not in d.message
    # and the parse stage does not contradict it with a note that the sources are built at run time
    doc = parse_document(text, "u.py")
    assert not [p for p in doc.problems if p.code == "parse.unmappable_source"], doc.problems
    # a name the file does bind, but not once at module level, still gets the note
    twice = "if True:\n    cuda_srcx = src\nelse:\n    cuda_srcx = ''\n"
    bound = text.replace("class ModelNew", twice + "class ModelNew")
    notes = [p for p in parse_document(bound, "u.py").problems if p.code == "parse.unmappable_source"]
    assert notes and "not a single module-level assignment" in notes[0].message


# -- C++: what the compiler sees, not what the source spells ------------------------------------------


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (
            "namespace x = at::native;\nT helper(T t) { return x::relu(t); }",
            "static.cpp_torch_op",
        ),
        (
            "namespace a = torch;\nnamespace b = a;\nT helper(T t) { return b::sigmoid(t); }",
            "static.cpp_torch_op",
        ),
        (
            "namespace mine { using at::relu; }\nT helper(T t) { return mine::relu(t); }",
            "static.cpp_torch_op",
        ),
        (
            "#define CALL(f) at::f\nT helper(T t) { return CALL(tanh)(t); }",
            "static.cpp_torch_op",
        ),
        (
            "T helper(T t) { return c10::cuda::some_op<float>(t); }",
            "static.cpp_torch_op",
        ),
        (
            "#include <pybind11/pybind11.h>\nnamespace py = pybind11;\n"
            'T helper(T t) { py::module_::import("torch"); return t; }',
            "static.cpp_torch_op",
        ),
        (
            'T helper(T t) { PyObject_CallMethod(nullptr, "relu", nullptr); return t; }',
            "static.cpp_torch_op",
        ),
        (
            '#define P(a, b) a##b\nT helper(T t) { P(po, pen)("ls", "r"); return t; }',
            "static.cpp_file_or_process",
        ),
        (
            "#define P(a, b) a##b\nT helper(T t) { std::P(thr, ead) th([]{}); th.join(); return t; }",
            "static.cpp_std_thread",
        ),
        (
            "#define P(a, b) a##b\nP(TORCH_LIB, RARY)(mine, m) { }\nT helper(T t) { return t; }",
            "static.dispatcher_override",
        ),
        (
            "#define Q(x) #x\n#define P(a, b) a##b\nT helper(T t) { P(us, leep)(Q(1)[0]); return t; }",
            "static.sleep",
        ),
    ],
)
def test_cpp_names_resolve_through_aliases_and_macros(body: str, code: str) -> None:
    diags = _cpp("using T = torch::Tensor;\n" + body)
    assert code in _codes(diags, Severity.ERROR), [(d.code, d.message) for d in diags]


def test_a_finding_inside_a_macro_lands_on_its_invocation() -> None:
    body = '#define CAT(a, b) a##b\n\n\nT helper(T t) {\n  CAT(f, open)("x", "w");\n  return t; }'
    text = _cpp_text("using T = torch::Tensor;\n" + body)
    (d,) = [d for d in check_source(text, "m.py") if d.code == "static.cpp_file_or_process"]
    assert d.location is not None and "CAT(f, open)" in text.splitlines()[d.location.line - 1]


def test_streams_and_statics_seen_only_through_a_macro_warn() -> None:
    body = (
        "#define PASTE(a, b) a##b\n#define KEEP static\n"
        "T helper(T t) { KEEP torch::Tensor c; cudaStream_t s;\n"
        "  PASTE(cudaStream, Create)(&s); return t; }"
    )
    diags = _cpp("using T = torch::Tensor;\n" + body)
    assert not has_violation(diags)
    assert {"static.cpp_stream_create", "static.cpp_pointer_cache"} <= _codes(diags, Severity.WARNING)


@pytest.mark.parametrize(
    "body",
    [
        "T helper(T t) { auto s = at::cuda::getCurrentCUDAStream(); "
        "c10::cuda::CUDAGuard g(t.device()); (void)s; return t; }",
        "#include <pybind11/pybind11.h>\nT helper(T t) { return t; }\n"
        'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.attr("version") = 1; }',
        '#define CHECK_CUDA(x) TORCH_CHECK(x.is_cuda(), #x " must be a CUDA tensor")\n'
        "#define CHECK_INPUT(x) CHECK_CUDA(x); TORCH_CHECK(x.is_contiguous(), #x)\n"
        "T helper(T t) { CHECK_INPUT(t); return t; }",
        "using namespace at;\nT helper(T t) { auto s = cuda::getCurrentCUDAStream(); (void)s; return t; }",
        "namespace mine { using namespace at; int64_t blocks(int64_t n) { return (n + 255) / 256; } }\n"
        "T helper(T t) { auto b = mine::blocks(t.numel()); (void)b; return t; }",
    ],
)
def test_cpp_glue_through_macros_and_namespaces_is_not_flagged(body: str) -> None:
    diags = _cpp("using T = torch::Tensor;\n" + body)
    assert diags == [], [(d.code, d.message) for d in diags]


def _cpp_text(body: str, launch: str = "k<<<1, 1>>>(x.data_ptr<float>());") -> str:
    return f'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
__global__ void k(float* y) {{ }}
{body}
torch::Tensor run(torch::Tensor x) {{
    {launch}
    return helper(x);
}}
"""
ext = load_inline(name="g", cpp_sources="torch::Tensor run(torch::Tensor x);", cuda_sources=src,
                  functions=["run"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.run(x)
'''


@pytest.mark.parametrize(
    "launch",
    [
        "launch(k, dim3(1), dim3(1), x.data_ptr<float>());",
        "launch(&k, dim3(1), dim3(1), x.data_ptr<float>());",
        "launch<void (*)(float*)>(k, dim3(1), dim3(1), x.data_ptr<float>());",
    ],
)
def test_a_kernel_passed_to_a_launching_helper_counts_as_launched(launch: str) -> None:
    helper = (
        "template <typename K, typename... A> void launch(K kernel, dim3 g, dim3 b, A... a) "
        "{ kernel<<<g, b>>>(a...); }\ntorch::Tensor helper(torch::Tensor t) { return t; }"
    )
    diags = check_source(_cpp_text(helper, launch), "t.py")
    assert diags == [], [(d.code, d.message) for d in diags]
    unlaunched = _cpp_text(helper.replace("kernel<<<g, b>>>(a...);", "(void)kernel;"), launch)
    assert "static.kernel_never_launched" in _codes(check_source(unlaunched, "t.py"), Severity.ERROR)


def test_a_kernel_passed_to_a_launching_lambda_counts_as_launched() -> None:
    launch = (
        "auto go = [](auto kernel, dim3 g, dim3 b, auto... a) { kernel<<<g, b>>>(a...); };\n"
        "    go(k, dim3(1), dim3(1), x.data_ptr<float>());"
    )
    diags = check_source(_cpp_text("torch::Tensor helper(torch::Tensor t) { return t; }", launch), "t.py")
    assert diags == [], [(d.code, d.message) for d in diags]


_TEMPLATE_LAUNCHERS = """
template <typename scalar_t>
__global__ void relu_kernel(const scalar_t* x, scalar_t* y, int64_t n) { }
template <typename scalar_t, int Threads = 256>
void launch_relu(const scalar_t* x, scalar_t* y, int64_t n) {
    relu_kernel<scalar_t><<<(int)((n + Threads - 1) / Threads), Threads>>>(x, y, n);
}
template <> void launch_relu<double, 256>(const double* x, double* y, int64_t n) {
    relu_kernel<double><<<1, 1>>>(x, y, n);
}
namespace detail {
template <typename T, typename = std::enable_if_t<(sizeof(T) > 2)>>
void go(const T* x, T* y, int64_t n) { launch_relu<T>(x, y, n); }
}
template <typename V> struct Vec { V v; };
template <typename T> void via_vec(const float* x, float* y, int64_t n) { launch_relu<float>(x, y, n); }
#define RUN(stmt) do { stmt; } while (0)
"""


@pytest.mark.parametrize(
    "call",
    [
        "launch_relu<float>(x.data_ptr<float>(), y.data_ptr<float>(), n);",
        "launch_relu<float, 128>(x.data_ptr<float>(), y.data_ptr<float>(), n);",
        "launch_relu < float > (x.data_ptr<float>(), y.data_ptr<float>(), n);",
        "::launch_relu<float>(x.data_ptr<float>(), y.data_ptr<float>(), n);",
        "detail::go<float>(x.data_ptr<float>(), y.data_ptr<float>(), n);",
        "detail::go(x.data_ptr<float>(), y.data_ptr<float>(), n);",
        "via_vec<Vec<std::pair<int, int>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);",
        'AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "relu", [&] {\n'
        "        launch_relu<scalar_t>(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), n);\n    });",
        'AT_DISPATCH_SWITCH(x.scalar_type(), "relu", AT_DISPATCH_CASE(at::kFloat, [&] {\n'
        "        detail::go<scalar_t>(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), n); }));",
        "RUN(launch_relu<float>(x.data_ptr<float>(), y.data_ptr<float>(), n));",
        "C10_CUDA_KERNEL_LAUNCH_CHECK(), launch_relu<double>(x.data_ptr<double>(), y.data_ptr<double>(), n);",
        "auto fn = &launch_relu<float>;\n    fn(x.data_ptr<float>(), y.data_ptr<float>(), n);",
        "std::invoke(launch_relu<float, 256>, x.data_ptr<float>(), y.data_ptr<float>(), n);",
    ],
)
def test_a_template_host_function_that_launches_counts_however_it_is_called(call: str) -> None:
    """`launch_relu<scalar_t>(...)` inside `AT_DISPATCH_*`'s lambda (KernelBench's idiom) and every other
    spelling of calling a host function template reaches its launch: explicit and nested template
    arguments, default template parameters, `::`/namespace qualification, macros, function pointers."""
    run = f"""
torch::Tensor run(torch::Tensor x) {{
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    {call}
    return y;
}}"""
    text = _cpp_text(_TEMPLATE_LAUNCHERS + run, "").replace("return helper(x);", "return x;")
    text = text.replace("torch::Tensor run(torch::Tensor x) {\n    \n    return x;\n}\n", "")
    text = text.replace("__global__ void k(float* y) { }\n", "")
    diags = check_source(text, "t.py")
    assert diags == [], [(d.code, d.message) for d in diags]
    # the same file with the call made to a function that does not launch: the kernel is a decoy
    unlaunched = text.replace(call, "(void)n;")
    assert "static.kernel_never_launched" in _codes(check_source(unlaunched, "t.py"), Severity.ERROR)


def test_a_similar_name_is_no_call_of_a_launching_template() -> None:
    """`launch_relu2<float>(...)` does not reach `launch_relu`; naming it in a string or comment neither."""
    run = """
void launch_relu2(const float* x, float* y, int64_t n) { }
torch::Tensor run(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    launch_relu2(x.data_ptr<float>(), y.data_ptr<float>(), n);  // not launch_relu<float>(...)
    TORCH_CHECK(n >= 0, "launch_relu<float>(x)");
    return y;
}"""
    text = _cpp_text(_TEMPLATE_LAUNCHERS + run, "").replace("return helper(x);", "return x;")
    text = text.replace("torch::Tensor run(torch::Tensor x) {\n    \n    return x;\n}\n", "")
    text = text.replace("__global__ void k(float* y) { }\n", "")
    assert "static.kernel_never_launched" in _codes(check_source(text, "t.py"), Severity.ERROR)


def test_the_explicit_template_call_corpus_file_passes_the_static_checks() -> None:
    """The KernelBench `AT_DISPATCH_FLOATING_TYPES(..., [&] { launch_relu<scalar_t>(...); })` idiom,
    measured on a GPU as a false `static.kernel_never_launched` before template calls were followed."""
    path = REPO / "tests/verifier/corpus/honest2_explicit_template_call.py"
    assert _check(path) == [] and _check(path, "strict") == []


def test_function_headers_with_template_parameter_defaults_and_specialisations_are_found() -> None:
    code = (
        "template <typename T, int N = 4, typename = std::enable_if_t<(sizeof(T) > 2)>>\n"
        "void launch(const T* x) { }\n"
        "template <> void launch<float, 4>(const float* x) { }\n"
        "template <template <typename> class C, typename T>\nT apply(C<T> c) { return T(); }\n"
        "int table[] = {1, 2};\n"
    )
    assert [(f.name, f.is_device) for f in find_functions(code)] == [
        ("launch", False),
        ("launch", False),
        ("apply", False),
    ]


def test_a_misnamed_launch_is_reported_where_it_is_written_not_as_a_decoy() -> None:
    text = _cpp_text("T helper(T t) { return t; }", "kk<<<1, 1>>>(x.data_ptr<float>());")
    diags = check_source(text, "t.py")
    (d,) = [d for d in diags if d.code == "static.kernel_never_launched"]
    assert "launches `kk`, which is not defined" in d.message and "decoy" not in d.message
    assert d.location is not None and "kk<<<" in text.splitlines()[d.location.line - 1]


@pytest.mark.parametrize(
    "rest",
    [
        "class Base(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"
        "class ModelNew(Base):\n    def forward(self, x):\n        ext.run(x)\n"
        "        return super().forward(x)\n",
        "class ModelNew(nn.Module):\n    def helper(self, x):\n        return torch.relu(x)\n"
        + _FORWARD.format(ret="type(self).helper(self, x)"),
    ],
)
def test_methods_reached_through_super_and_type_are_read(rest: str) -> None:
    assert "static.torch_op_in_forward" in _codes(_py(rest), Severity.ERROR)


@pytest.mark.parametrize(
    "line",
    [
        "from torch import *",
        "from torch.nn.functional import *",
        "import operator\nop = operator.methodcaller('relu')",
    ],
)
def test_names_the_checks_cannot_resolve_are_rejected(line: str) -> None:
    rest = line + "\nclass ModelNew(nn.Module):" + _FORWARD.format(ret="y")
    assert "static.dynamic_code" in _codes(_py(rest), Severity.ERROR)


@pytest.mark.parametrize(
    "builder",
    [
        "with contextlib.nullcontext(torch.utils.cpp_extension) as ce:\n    b = ce.load_inline\n",
        "class B:\n    li = load_inline\nb = B.li\n",
        "if True:\n    b = load_inline\n",
    ],
)
def test_load_inline_bound_where_the_checks_cannot_follow_is_rejected(builder: str) -> None:
    text = "import contextlib\nimport torch\nfrom torch.utils.cpp_extension import load_inline\n" + builder
    text += "import torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"
    assert "static.dynamic_source" in _codes(check_source(text, "b.py"), Severity.ERROR)


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ("using at::special_erfcx;\nT helper(T t) { return special_erfcx(t); }", "static.cpp_torch_op"),
        ("T helper(T t) { return at :: /* spaced */\n special_erfcx(t); }", "static.cpp_torch_op"),
        (
            "struct Op { static T run(T t) { return at::relu(t); } };\nT helper(T t) { return Op::run(t); }",
            "static.cpp_torch_op",
        ),
        (
            "auto op = [](T t) { return t.sigmoid(); };\nT helper(T t) { return op(t); }",
            "static.cpp_torch_op",
        ),
        (
            'T helper(T t) {\n  _Pragma("omp parallel for")\n'
            "  for (int i = 0; i < 4; ++i) { }\n  return t; }",
            "static.cpp_std_thread",
        ),
        (
            "using namespace at;\nT helper(T t) { cuda::blas::gemm<float>('n', 'n', 1, 1, 1, 1.f, "
            "nullptr, 1, nullptr, 1, 0.f, nullptr, 1); return t; }",
            "static.cpp_torch_op",
        ),
        ("T helper(T t) { std :: thread th([] {}); th.join(); return t; }", "static.cpp_std_thread"),
        (
            'extern "C" int run_py(const char* c) __asm__("PyRun_SimpleString");\n'
            "T helper(T t) { return t; }",
            "static.cpp_file_or_process",
        ),
        (
            '#include <cstdio>\nT helper(T t) { auto f = &fopen; f("x", "w"); return t; }',
            "static.cpp_file_or_process",
        ),
        (
            "void cb(void*) { }\nT helper(T t) { cudaLaunchHostFunc(0, cb, nullptr); return t; }",
            "static.cpp_std_thread",
        ),
        ('T helper(T t) { PyRun_SimpleString("import torch"); return t; }', "static.cpp_torch_op"),
        (
            "#include <cstdio>\nstatic FILE* my_open(const char*, const char*) "
            '__attribute__((weakref("fopen")));\nT helper(T t) { my_open("x", "w"); return t; }',
            "static.cpp_file_or_process",
        ),
        (
            "#include <pybind11/pybind11.h>\nusing namespace pybind11;\n"
            'T helper(T t) { getattr(module_::import("torch"), "relu")(t); return t; }',
            "static.cpp_torch_op",
        ),
    ],
)
def test_cpp_symbols_reached_under_other_names_are_found(body: str, code: str) -> None:
    diags = _cpp("using T = torch::Tensor;\n" + body)
    assert code in _codes(diags, Severity.ERROR), [(d.code, d.message) for d in diags]


def test_device_asm_and_type_using_declarations_are_not_flagged() -> None:
    body = (
        "using at::Tensor;\n__device__ float ld(const float* p) { float v;\n"
        '  asm volatile("ld.global.nc.f32 %0, [%1];" : "=f"(v) : "l"(p)); return v; }\n'
        "Tensor helper(Tensor t) { return t; }"
    )
    diags = _cpp(body)
    assert diags == [], [(d.code, d.message) for d in diags]


@pytest.mark.parametrize(
    ("init", "ret"),
    [
        ("self.f = torch.relu", 'getattr(self, "f")(x)'),
        ("pass", "ModelNew.f(x)"),
        ("pass", "type(self).f(x)"),
        ("pass", "self.__class__.f(x)"),
        ("pass", "sum([x, y])"),
        ('self.add_module("act", nn.GELU())', "self.act(x)"),
        ('setattr(self, f"act{0}", nn.GELU())', 'getattr(self, f"act{0}")(x)'),
    ],
)
def test_members_reached_by_name_or_through_the_class_are_judged(init: str, ret: str) -> None:
    rest = (
        "class ModelNew(nn.Module):\n    f = staticmethod(torch.sigmoid)\n"
        f"    def __init__(self):\n        super().__init__()\n        {init}\n" + _FORWARD.format(ret=ret)
    )
    assert "static.torch_op_in_forward" in _codes(_py(rest), Severity.ERROR)


def test_attribute_dicts_are_dynamic_code() -> None:
    rest = "class ModelNew(nn.Module):" + _FORWARD.format(ret='self.__dict__["f"](x)')
    assert "static.dynamic_code" in _codes(_py(rest), Severity.ERROR)


@pytest.mark.parametrize(
    "use",
    [
        "def build():\n    b = torch.utils.cpp_extension.load\n    return b('x', ['k.cu'])\n",
        "from torch.utils.cpp_extension import load as L\nbuilders = [L]\n",
    ],
)
def test_file_builders_under_any_name_are_rejected(use: str) -> None:
    text = "import torch\nimport torch.utils.cpp_extension\n" + use
    text += "import torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"
    assert "static.dynamic_source" in _codes(check_source(text, "l.py"), Severity.ERROR)
