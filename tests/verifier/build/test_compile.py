"""Full nvcc/g++ builds (real compilers, compile-only): diagnostics land on the right .py lines."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from cudice.verifier.build.compile import build_module, build_raw_cu
from cudice.verifier.build.generated import from_call
from cudice.verifier.config import VerifyConfig
from cudice.verifier.source.document import read_document
from cudice.verifier.source.result import Severity
from verifier_marks import needs_nvcc

pytestmark = [needs_nvcc, pytest.mark.slow]


def err_lines(path: Path) -> set[int]:
    return {
        i
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if "// ERR" in line and not line.startswith("#")
    }


def test_relu_broken_error_lands_on_line_14(examples_dir: Path, session_config: VerifyConfig) -> None:
    doc = read_document(examples_dir / "relu_broken.py")
    module = from_call(doc, doc.load_inline_calls[0])
    assert module is not None
    result = build_module(module, doc.path, session_config, link=False)
    assert not result.ok
    errors = [d for d in result.diagnostics if d.severity is Severity.ERROR]
    assert len(errors) == 1 and errors[0].location is not None
    assert (errors[0].location.line, errors[0].location.column) == (14, 18)
    assert '"vv"' in errors[0].message and errors[0].code == "compile.error"
    # unchanged source: served from the cache, same diagnostics, no compiler run
    t0 = time.perf_counter()
    again = build_module(module, doc.path, session_config, link=False)
    assert again.cached and again.diagnostics == result.diagnostics and time.perf_counter() - t0 < 5


def test_every_marked_error_is_reported_on_its_line(data_dir: Path, session_config: VerifyConfig) -> None:
    path = data_dir / "broken_multi.py"
    doc = read_document(path)
    module = from_call(doc, doc.load_inline_calls[0])
    assert module is not None
    result = build_module(module, doc.path, session_config, link=False)
    lines = {d.location.line for d in result.diagnostics if d.severity is Severity.ERROR and d.location}
    assert not result.ok
    assert err_lines(path) <= lines, result.output[-3000:]


def test_raw_cu_errors_map_one_to_one(tmp_path: Path) -> None:
    cu = tmp_path / "k.cu"
    cu.write_text('extern "C" __global__ void k(float* x) {\n\tx[0] = y;\n}\n')
    doc = read_document(cu)
    config = VerifyConfig(cache_dir=tmp_path / "cache")
    result = build_raw_cu(doc, config)
    (err,) = [d for d in result.diagnostics if d.severity is Severity.ERROR]
    # the tab is expanded in nvcc's echo; the column must still be the `y` in the real line
    assert err.location is not None and (err.location.line, err.location.column) == (2, 9)
    assert re.search(r'"y"', err.message)
    cu.write_text('extern "C" __global__ void k(float* x) { x[0] = 1.0f; }\n')
    assert build_raw_cu(read_document(cu), config).ok
