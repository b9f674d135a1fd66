"""GPU verification end to end: correct, wrong, crashing, hanging and illegal-address kernels.

All candidates share one extension (data/gpu/kernels_template.txt), so the module builds once.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cudice.verifier.api import verify
from cudice.verifier.config import VerifyConfig
from cudice.verifier.result import Stage, Verdict

pytestmark = pytest.mark.gpu

GPU_DATA = Path(__file__).parent / "data" / "gpu"


def candidate(tmp_path: Path, which: int, reference: Path) -> Path:
    text = (GPU_DATA / "kernels_template.txt").read_text()
    text = text.replace("REFERENCE", str(reference)).replace("WHICH", str(which))
    path = tmp_path / f"cand_{which}.py"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def gpu_config(tmp_path_factory: pytest.TempPathFactory) -> VerifyConfig:
    return VerifyConfig(cache_dir=tmp_path_factory.mktemp("gpu-cache"), timeout_s=120, timing_num_trials=10)


def test_correct_kernel_is_correct_and_timed(tmp_path: Path, gpu_config: VerifyConfig, examples_dir: Path) -> None:
    r = verify(candidate(tmp_path, 0, examples_dir / "relu.py"), config=gpu_config)
    assert r.verdict is Verdict.CORRECT, [d.message for d in r.diagnostics]
    assert r.stage is Stage.TIMING and r.num_correct_trials == 5 and r.max_abs_err == 0.0
    assert r.candidate is not None and r.reference is not None and r.speedup is not None
    assert r.candidate.min_ms <= r.candidate.median_ms <= r.candidate.max_ms
    assert r.speedup_min is not None and r.speedup_min <= r.speedup and r.gpu_name


@pytest.mark.parametrize(("which", "ref"), [(1, "relu"), (6, "rowsum")])
def test_wrong_kernels_are_incorrect(tmp_path: Path, gpu_config: VerifyConfig, examples_dir: Path,
                                     which: int, ref: str) -> None:
    reference = examples_dir / "relu.py" if ref == "relu" else GPU_DATA / "rowsum_ref.py"
    r = verify(candidate(tmp_path, which, reference), config=gpu_config)
    assert r.verdict is Verdict.INCORRECT and r.stage is Stage.CORRECTNESS
    assert any(d.code == "correctness.mismatch" for d in r.diagnostics)


def test_rowsum_correct_axis_passes(tmp_path: Path, gpu_config: VerifyConfig) -> None:
    r = verify(candidate(tmp_path, 5, GPU_DATA / "rowsum_ref.py"), config=gpu_config.with_(atol=1e-3, rtol=1e-3))
    assert r.verdict is Verdict.CORRECT, [d.message for d in r.diagnostics]


@pytest.mark.parametrize("which", [2, 3])
def test_illegal_address_and_trap_end_only_the_child(tmp_path: Path, gpu_config: VerifyConfig,
                                                     examples_dir: Path, which: int) -> None:
    r = verify(candidate(tmp_path, which, examples_dir / "relu.py"), config=gpu_config)
    assert r.verdict in (Verdict.RUNTIME_ERROR, Verdict.CRASH), (r.verdict, r.error, [d.message for d in r.diagnostics])
    # the parent is fine: the next verification works
    ok = verify(candidate(tmp_path, 0, examples_dir / "relu.py"), config=gpu_config.with_(timing_num_trials=3))
    assert ok.verdict is Verdict.CORRECT


def test_hang_is_a_timeout(tmp_path: Path, gpu_config: VerifyConfig, examples_dir: Path) -> None:
    r = verify(candidate(tmp_path, 4, examples_dir / "relu.py"), config=gpu_config.with_(timeout_s=20))
    assert r.verdict is Verdict.TIMEOUT, (r.verdict, [d.message for d in r.diagnostics])
