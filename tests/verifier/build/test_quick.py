"""The fast path (persistent clangd) against the full build: every fast error is a full-build error.

STYLE rule 7. The full build of `data/broken_multi.py` (several independent errors, one per
`// ERR` line) and of `examples/relu_broken.py` is the ground truth; clangd's errors must be a
subset of it by line. What the fast path misses is printed and recorded in docs/benchmarks.md.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cudice.verifier.api import quick_check
from cudice.verifier.build.compile import build_module
from cudice.verifier.build.generated import from_call
from cudice.verifier.build.quick import QuickChecker
from cudice.verifier.config import VerifyConfig
from cudice.verifier.source.document import parse_document, read_document
from cudice.verifier.source.result import Severity, Verdict
from verifier_marks import needs_clangd, needs_nvcc

pytestmark = [needs_clangd, pytest.mark.slow]


@pytest.fixture(scope="module")
def checker(session_config: VerifyConfig) -> Iterator[QuickChecker]:
    fc = QuickChecker(session_config)
    fc.warm()
    yield fc
    fc.close()


def error_lines(diags: object) -> set[int]:
    return {d.location.line for d in diags if d.severity is Severity.ERROR and d.location}  # type: ignore[attr-defined]


def test_relu_broken_fast_error_on_line_14_and_fast_after_an_edit(
    checker: QuickChecker, examples_dir: Path
) -> None:
    path = examples_dir / "relu_broken.py"
    text = path.read_text()
    first = quick_check(path, text, checker)
    assert first.verdict is Verdict.COMPILE_ERROR
    (err,) = [d for d in first.diagnostics if d.severity is Severity.ERROR]
    assert (
        err.code == "fast.error"
        and err.location is not None
        and (err.location.line, err.location.column) == (14, 18)
    )
    walls = []
    for name in ("ww", "www"):  # edits inside the kernel keep the preamble
        t0 = time.perf_counter()
        again = quick_check(path, text.replace("vv >", f"{name} >"), checker)
        walls.append(time.perf_counter() - t0)
        assert [d.message for d in again.diagnostics if d.severity is Severity.ERROR] == [
            f"Use of undeclared identifier '{name}'"
        ]
    print(f"fast re-check after edit: {[round(w, 3) for w in walls]} s")
    assert min(walls) < 5.0  # ≈0.2–0.6 s on an idle 2-core box; generous for a loaded CI machine
    fixed = quick_check(path, text.replace("vv >", "x[i] >"), checker)
    assert fixed.verdict is Verdict.CHECKED and not error_lines(fixed.diagnostics)


def test_correct_example_has_no_fast_errors(checker: QuickChecker, examples_dir: Path) -> None:
    # one correct file (each new include block costs a preamble build: keep CI time down)
    path = examples_dir / "relu_cuda.py"
    result = quick_check(path, path.read_text(), checker)
    assert result.verdict is Verdict.CHECKED, [d.message for d in result.diagnostics]


@needs_nvcc
def test_every_fast_error_is_a_full_build_error(
    checker: QuickChecker, data_dir: Path, examples_dir: Path, session_config: VerifyConfig
) -> None:
    missed_total = full_total = 0
    for path in (data_dir / "broken_multi.py", examples_dir / "relu_broken.py"):
        doc = read_document(path)
        module = from_call(doc, doc.load_inline_calls[0])
        assert module is not None
        full = error_lines(build_module(module, doc.path, session_config, link=False).diagnostics)
        fast = error_lines(checker.check(module, doc.path).diagnostics)
        assert fast <= full, f"{path.name}: fast-only error lines {sorted(fast - full)}"
        missed_total += len(full - fast)
        full_total += len(full)
        print(
            f"{path.name}: full-build error lines {sorted(full)}, fast {sorted(fast)}, "
            f"missed {sorted(full - fast)}"
        )
    print(f"fast path missed {missed_total} of {full_total} full-build error lines")


def test_unmappable_source_points_at_the_call(checker: QuickChecker) -> None:
    text = (
        "from torch.utils.cpp_extension import load_inline\n"
        "body = 'int y = undefined_thing;'\n"
        "m = load_inline(name='dyn', cpp_sources=f'int f() {{ {body} return 0; }}', functions=['f'])\n"
        "class ModelNew: pass\nclass Model: pass\ndef get_inputs(): return []\n"
    )
    doc = parse_document(text, "dyn.py")
    assert from_call(doc, doc.load_inline_calls[0]) is None  # dynamic: not built before run time
    infos = [d for d in doc.problems if d.code == "parse.unmappable_source"]
    assert infos and infos[0].location is not None and infos[0].location.line == 3
