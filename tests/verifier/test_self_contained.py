"""A self-contained candidate (its own `Model` + `get_inputs`) with a build cache under /tmp, on the CPU.

The KernelBench-style benchmark candidates are such files, verified with a `tempfile.mkdtemp`
cache (mode 0700). Two faults made every one of them `runtime_error` on the GPU box (root):
the judge ran the whole file as the reference — the candidate's module-level `load_inline` built
in the judge with torch's own builder and `ModelNew` was defined there — and the runner, an
unprivileged uid inside the boundary, could not open the library in a 0700 cache. Here the real
compile stage, judge, runners and boundary verify a C++-only `load_inline` candidate on the CPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from cudice.verifier import api
from cudice.verifier.config import VerifyConfig
from cudice.verifier.run import boundary
from cudice.verifier.run.sandbox import ChildOutcome, run_in_child
from cudice.verifier.source.reference import reference_only_source
from cudice.verifier.source.result import Stage, Verdict

BENCH = Path(__file__).resolve().parents[2] / "bench"

CANDIDATE = """import os

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(64, 33)]


def get_init_inputs():
    return []


cpp_src = r\'\'\'
torch::Tensor selfc_relu_forward(torch::Tensor x) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const float* a = xc.data_ptr<float>();
    float* b = y.data_ptr<float>();
    for (int64_t i = 0; i < xc.numel(); ++i) b[i] = a[i] > 0.0f ? a[i] : 0.0f;
    return y;
}
\'\'\'

ext = load_inline(name="selfc_relu", cpp_sources=cpp_src, functions="selfc_relu_forward")
forward_fn = ext.selfc_relu_forward


class ModelNew(nn.Module):
    assert os.getpid() == 2, "ModelNew was defined outside its runner (PID 2, below boundary_init)"

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return forward_fn(x)
"""


def test_reference_part_drops_the_build_and_model_new_and_keeps_lines() -> None:
    ref = reference_only_source(CANDIDATE)
    assert ref.count("\n") == CANDIDATE.count("\n")  # tracebacks keep the file's line numbers
    assert "load_inline(" not in ref and "class ModelNew" not in ref and "forward_fn" not in ref
    assert "class Model(nn.Module)" in ref and "def get_inputs" in ref and "cpp_src = r" in ref
    pytest.importorskip("torch")
    ns: dict[str, Any] = {"__name__": "ref"}
    exec(compile(ref, "ref", "exec"), ns)  # no build, no ModelNew: what the judge runs
    assert "Model" in ns and "get_inputs" in ns and "ext" not in ns and "ModelNew" not in ns
    assert (
        reference_only_source("import torch\nx = torch.load('w.pt')\n")
        == "import torch\nx = torch.load('w.pt')\n"
    )
    assert reference_only_source("def (:\n") == "def (:\n"  # unparsable text is left to fail as before


def test_benchmark_candidates_reference_part() -> None:
    sys.path.insert(0, str(BENCH))
    try:
        import kb_candidates
    finally:
        sys.path.remove(str(BENCH))
    for cand in kb_candidates.generate(12):
        ref = reference_only_source(cand.source)
        assert "load_inline(" not in ref and "class ModelNew" not in ref, cand.name
        assert "class Model(" in ref and "def get_inputs" in ref and "def get_init_inputs" in ref, cand.name
        assert ref.count("\n") == cand.source.count("\n")
        compile(ref, cand.name, "exec")


needs_boundary = pytest.mark.skipif(
    boundary.probe() is not None, reason=f"no OS boundary here: {boundary.probe()}"
)


@needs_boundary
@pytest.mark.skipif(os.geteuid() != 0, reason="as another user the runner keeps this uid")
def test_a_library_in_a_mkdtemp_cache_is_readable_by_the_runner() -> None:
    from cudice.verifier.run.boundary import readable_by_runners

    cache = Path(tempfile.mkdtemp(prefix="cudice-test-cache-"))  # 0700, as the benchmark's
    try:
        lib_dir = cache / "libs" / "k"
        lib_dir.mkdir(parents=True)
        os.chmod(lib_dir, 0o700)
        lib = lib_dir / "m.so"
        lib.write_text("elf")
        os.chmod(lib, 0o600)

        def read_inside() -> str:
            spec = boundary.default_spec(cache, uid=boundary.UID_BASE + 97, report_fd=-1)
            code = (
                f"import sys\ntry:\n    print(open({str(lib)!r}).read())\nexcept OSError as e:\n    print(e)"
            )
            argv, _ = boundary.wrap([sys.executable, "-c", code], spec)
            return subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=120,
                env={"PATH": os.environ["PATH"], "HOME": "/tmp"},
            ).stdout.strip()

        assert "Permission denied" in read_inside()
        readable_by_runners(cache, lib)
        assert read_inside() == "elf"
        assert (cache.stat().st_mode & 0o777) == 0o711 and (
            lib.stat().st_mode & 0o777
        ) == 0o644  # group bits too (a runner may hold the group), nothing writable
        os.chmod(cache, 0o701)  # opened earlier for `other` only: the group bit is still added
        readable_by_runners(cache, lib)
        assert (cache.stat().st_mode & 0o777) == 0o711
    finally:
        subprocess.run(["rm", "-rf", str(cache)], check=False)


@needs_boundary
@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_self_contained_candidate_with_a_tmp_cache_is_correct() -> None:
    """Compile stage, then the judge: the runner's `load_inline` gets the compile stage's library."""
    folder = Path(tempfile.mkdtemp(prefix="cudice-test-kb-"))
    cache = Path(tempfile.mkdtemp(prefix="cudice-test-cache-"))
    try:
        path = folder / "selfc_relu.py"
        path.write_text(CANDIDATE)
        config = VerifyConfig(
            cache_dir=cache,
            timeout_s=600,
            num_trials=3,
            timing_num_trials=3,
            timing_warmup_ms=5.0,
            l2_flush_mib=0,
        )

        def child(job: dict[str, Any], **kw: Any) -> ChildOutcome:
            return run_in_child({**job, "device": "cpu"}, **kw)

        r = api.verify(path, config=config, gpu=True, run_child=child)
        detail = (r.verdict, [(d.code, d.message[:300]) for d in r.diagnostics], (r.error or "")[-2000:])
        assert r.verdict is Verdict.CORRECT, detail
        assert r.num_correct_trials == 3 and r.stage is Stage.TIMING, detail
        # timed: a speedup, or on this CPU's host clock often a time within its noise, said so
        timed = r.speedup is not None or any(d.code == "timing.unresolved" for d in r.diagnostics)
        assert timed, detail
        if os.geteuid() == 0:
            assert not [d for d in r.diagnostics if d.code.startswith("sandbox.")], detail
        # one library: the runner's request had the compile stage's build key (a cache hit, no rebuild)
        assert len(list((cache / "libs").iterdir())) == 1
        assert r.stage_wall_s["run.load"] < 30, r.stage_wall_s
        # where the repetitions' wall went, step by step, within the rounds' wall
        steps = [r.stage_wall_s[f"run.timing.rep_{step}"] for step in ("draw", "stage", "clocked", "check")]
        assert all(w > 0 for w in steps) and sum(steps) <= r.stage_wall_s["run.timing.rounds"], r.stage_wall_s
        # and the judge process's own start-up, outside its phases (a judge started for this job: in `run`)
        outside = r.stage_wall_s["run.judge_warm_up"] + r.stage_wall_s["run.judge_idle"]
        inside = sum(r.stage_wall_s[f"run.{phase}"] for phase in ("init", "load", "correctness", "timing"))
        assert r.stage_wall_s["run.judge_warm_up"] > 0 and outside + inside <= r.stage_wall_s["run"], (
            r.stage_wall_s
        )
    finally:
        subprocess.run(["rm", "-rf", str(folder), str(cache)], check=False)


def test_the_benchmark_says_why_a_candidate_was_not_correct(capsys: pytest.CaptureFixture[str]) -> None:
    from cudice.verifier.source.result import Diagnostic, Location, Severity, Stage, VerifyResult

    sys.path.insert(0, str(BENCH))
    try:
        import verify_speed
    finally:
        sys.path.remove(str(BENCH))
    diag = Diagnostic(
        Severity.ERROR,
        "Running kb0_relu.py failed: ImportError: Permission denied",
        "runtime.import_error",
        Stage.LOAD,
        Location("/tmp/kb0_relu.py", 48, 1),
    )
    bad = VerifyResult(
        Verdict.RUNTIME_ERROR, Stage.LOAD, "/tmp/kb0_relu.py", (diag,), error="Traceback ...\nEACCES"
    )
    got = verify_speed.why_not(bad, compile_only=False)
    assert got["diagnostics"] == ["runtime.import_error (line 48): " + diag.message]
    assert got["error_tail"] == "Traceback ...\nEACCES"
    err = capsys.readouterr().err
    assert "kb0_relu.py] verdict runtime_error" in err and "Permission denied" in err and "EACCES" in err
    ok = VerifyResult(Verdict.COMPILED, Stage.COMPILE, "/tmp/kb0_relu.py")
    assert verify_speed.why_not(ok, compile_only=True) == {}
    assert verify_speed.why_not(ok, compile_only=False) != {}
