"""Worker pieces that need no GPU: output comparison and timing statistics."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from cudice.verifier.timing import summarize  # noqa: E402
from cudice.verifier.worker import _compare, run_job  # noqa: E402


def test_compare_accepts_within_tolerance_and_reports_errors() -> None:
    ref = torch.randn(64, 32)
    ok, why, max_abs, _ = _compare(ref, ref + 1e-4, 1e-2, 1e-2)
    assert ok and why == "" and 0 < max_abs < 2e-4


@pytest.mark.parametrize(
    ("cand", "needle"),
    [
        (lambda r: r[:-1], "shape"),
        (lambda r: r.double(), "dtype"),
        (lambda r: r + 1.0, "differs"),
        (lambda r: torch.where(r > 0, torch.full_like(r, float("nan")), r), "NaN"),
        (lambda r: (r, r), "outputs"),
    ],
)
def test_compare_rejects(cand: object, needle: str) -> None:
    ref = torch.randn(16, 8)
    ok, why, _, _ = _compare(ref, cand(ref), 1e-2, 1e-2)  # type: ignore[operator]
    assert not ok and needle in why


def test_nan_never_passes_even_where_the_reference_has_nan() -> None:
    ref = torch.tensor([float("nan"), 1.0])
    assert not _compare(ref, ref.clone(), 1e-2, 1e-2)[0]


def test_summarize_quartiles_and_median() -> None:
    t = summarize([4.0, 1.0, 3.0, 2.0, 5.0])
    assert (t.median_ms, t.min_ms, t.max_ms, t.q1_ms, t.q3_ms, t.num_trials) == (3.0, 1.0, 5.0, 2.0, 4.0, 5)


def test_worker_without_gpu_reports_instead_of_crashing(tmp_path: object) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    job = {
        "candidate_path": "c.py",
        "candidate_source": "class ModelNew: pass\n",
        "reference_path": "r.py",
        "reference_source": "",
        "config": {"cache_dir": str(tmp_path), "arch_list": ["9.0"]},
    }
    out = run_job(job)
    assert out["verdict"] == "compiled" and out["diagnostics"][0]["code"] == "verify.no_gpu"


REF = """
import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.lin = nn.Linear(k, k)
    def forward(self, x):
        return torch.relu(self.lin(x))
def get_inputs():
    return [torch.randn(8, 16)]
def get_init_inputs():
    return [16]
"""

CAND = """
import torch
import torch.nn as nn
class ModelNew(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.lin = nn.Linear(k, k)
    def forward(self, x):
        return torch.relu(self.lin(x)) OFFSET
"""


@pytest.fixture
def cpu_as_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the worker's GPU path on the CPU: `.cuda()` is the identity, syncs are no-ops."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "fake-cpu")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "manual_seed", lambda *a: None)
    monkeypatch.setattr(torch.Tensor, "cuda", lambda self, *a, **k: self)
    monkeypatch.setattr(torch.nn.Module, "cuda", lambda self, *a, **k: self)


@pytest.mark.parametrize(
    ("offset", "verdict"), [("", "correct"), ("+ 0.5", "incorrect"), ("[:-1]", "incorrect")]
)
def test_correctness_loop_on_cpu(cpu_as_cuda: None, tmp_path: object, offset: str, verdict: str) -> None:
    job = {
        "candidate_path": "c.py",
        "candidate_source": CAND.replace("OFFSET", offset),
        "reference_path": "r.py",
        "reference_source": REF,
        "skip_timing": True,
        "config": {"cache_dir": str(tmp_path), "arch_list": ["9.0"], "num_trials": 3},
    }
    out = run_job(job)
    assert out["verdict"] == verdict, out
    if verdict == "correct":
        # same seed before both constructors: identical Linear weights, so the outputs match exactly
        assert out["num_correct_trials"] == 3 and out["max_abs_err"] == 0.0
    else:
        assert any(d["code"] == "correctness.mismatch" for d in out["diagnostics"])


def test_exception_in_forward_is_a_located_runtime_error(cpu_as_cuda: None, tmp_path: object) -> None:
    job = {
        "candidate_path": "c.py",
        "candidate_source": CAND.replace("OFFSET", "+ undefined_name"),
        "reference_path": "r.py",
        "reference_source": REF,
        "skip_timing": True,
        "config": {"cache_dir": str(tmp_path), "arch_list": ["9.0"]},
    }
    out = run_job(job)
    assert out["verdict"] == "runtime_error"
    (d,) = [d for d in out["diagnostics"] if d["code"] == "runtime.exception"]
    assert "undefined_name" in d["message"] and d["line"] == 9  # the `return` line of forward


@pytest.mark.parametrize(
    ("module", "who"), [("cudice.verifier.worker", ""), ("cudice.verifier.judge", "judge: ")]
)
def test_a_job_that_raises_is_reported_as_a_crash_on_the_result_pipe(
    module: str, who: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib
    import io
    import json
    import os

    main = importlib.import_module(module).main
    monkeypatch.setattr("sys.stdin", io.StringIO("this is not a JSON job"))
    read_fd, write_fd = os.pipe()
    assert main(["--result-fd", str(write_fd)]) == 0
    with os.fdopen(read_fd) as pipe:
        out = json.loads(pipe.read())
    assert (out["verdict"], out["stage"]) == ("crash", "load")
    assert "JSONDecodeError" in out["error"] and "Traceback" in out["error"]
    (d,) = out["diagnostics"]
    assert d["code"] == "runtime.worker_error" and d["message"].startswith(f"{who}JSONDecodeError: ")


@pytest.mark.parametrize(("cand_ms", "suspicious"), [([1.0, 1.0, 1.0], False), ([0.01, 0.01, 0.01], True)])
def test_record_timing_fills_the_figures_and_flags_a_suspicious_speedup(
    cand_ms: list[float], suspicious: bool
) -> None:
    from cudice.verifier.judging import record_timing
    from cudice.verifier.result import Location
    from cudice.verifier.timing import from_samples

    cmp = from_samples([2.0, 2.0, 2.0], cand_ms, input_bytes=0, output_bytes=0)
    out: dict[str, object] = {}
    diags: list = []
    where = Location("c.py", 7)
    record_timing(cmp, where, out, diags, "; timed here")
    assert out["speedup"] == pytest.approx(2.0 / cand_ms[0]) and out["is_suspicious"] is suspicious
    assert out["candidate"] == {
        "median_ms": cand_ms[0],
        "min_ms": cand_ms[0],
        "max_ms": cand_ms[0],
        "q1_ms": cand_ms[0],
        "q3_ms": cand_ms[0],
        "num_trials": 3,
    }
    codes = [d.code for d in diags]
    assert codes == (["timing.suspicious", "timing.speedup"] if suspicious else ["timing.speedup"])
    assert all(d.location == where for d in diags) and diags[-1].message.endswith("; timed here).")
