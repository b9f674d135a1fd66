"""NVRTC fast path for raw .cu files agrees with nvcc (skips where libnvrtc is absent)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cudice.verifier.api import quick_check
from cudice.verifier.build.compile import build_raw_cu
from cudice.verifier.build.nvrtc_check import nvrtc_available
from cudice.verifier.config import VerifyConfig
from cudice.verifier.source.document import read_document
from cudice.verifier.source.result import Severity, Verdict
from verifier_marks import needs_nvcc

pytestmark = [needs_nvcc, pytest.mark.skipif(not nvrtc_available(), reason="libnvrtc not installed here")]

BROKEN = 'extern "C" __global__ void k(float* x, int n) {\n\tx[0] = y;\n\tint z = x;\n}\n'


def test_nvrtc_errors_equal_nvcc_errors(tmp_path: Path) -> None:
    cu = tmp_path / "k.cu"
    cu.write_text(BROKEN)
    doc = read_document(cu)
    fast = quick_check(cu, BROKEN)
    full = build_raw_cu(doc, VerifyConfig(cache_dir=tmp_path / "c"))

    def key(diags: object) -> set[tuple[int, int]]:
        return {(d.location.line, d.location.column) for d in diags if d.severity is Severity.ERROR}  # type: ignore[attr-defined]

    assert fast.verdict is Verdict.COMPILE_ERROR
    assert key(fast.diagnostics) == key(full.diagnostics) == {(2, 9), (3, 10)}
    assert (
        quick_check(cu, 'extern "C" __global__ void k(float* x) { x[0] = 1.0f; }\n').verdict
        is Verdict.CHECKED
    )
