"""VerifyPool: results come back, a changed document cancels its earlier job."""

from __future__ import annotations

from pathlib import Path

from cudice.verifier.config import VerifyConfig
from cudice.verifier.pool import VerifyPool
from cudice.verifier.source.result import Verdict
from verifier_marks import needs_nvcc


def test_pool_serves_many_jobs_and_survives_bad_ones(tmp_path: Path) -> None:
    files = []
    for i in range(4):
        f = tmp_path / f"c{i}.py"
        f.write_text("def broken(:\n" if i % 2 else "import torch\n")
        files.append(f)
    with VerifyPool(VerifyConfig(cache_dir=tmp_path), num_compile_workers=2, gpus=[]) as pool:
        results = [pool.submit(f).result(timeout=60) for f in files]
    assert [r.verdict for r in results] == [Verdict.INVALID_INPUT] * 4
    assert [r.diagnostics[0].code for r in results][:2] == ["parse.no_model_new", "parse.syntax_error"]


@needs_nvcc
def test_resubmitting_a_key_cancels_the_running_build(tmp_path: Path, examples_dir: Path) -> None:
    src = (examples_dir / "relu_cuda.py").read_text().replace("relu_kernel", "relu_kernel_pool_test")
    with VerifyPool(
        VerifyConfig(cache_dir=tmp_path, compile_only=True), num_compile_workers=2, gpus=[]
    ) as pool:
        first = pool.submit(examples_dir / "relu_cuda.py", source=src, key="doc")
        import time

        time.sleep(1.5)  # let the first build start
        second = pool.submit(examples_dir / "relu_cuda.py", source="def broken(:\n", key="doc")
        r2 = second.result(timeout=60)
        r1 = first.result(timeout=60)
    assert r2.verdict is Verdict.INVALID_INPUT
    assert r1.verdict is Verdict.TIMEOUT and r1.error == "cancelled"
