"""A check's preprocessor steps through the prefix cache (verifier/build/ppcache.py) give the
front ends what nvcc's own steps give them.

Small sources over the CUDA runtime, the C++ library and a header folder of the test's own (a
second or two each): a check through the cache reports what the same check with nvcc's own
preprocessor steps reports, on good code, host and device errors, a warning, an `#error`,
`__FILE__`, `__LINE__` and `__COUNTER__` after headers that count, macros of plain, system and
C system headers expanded in the candidate's lines; the cache answered each of those steps (it
was not a fall-back). It refuses, and the steps run as nvcc's: an `#error` (any preprocessor message), an
`#pragma once` header read
again after the leading includes, a quoted include after them, a header whose `#pragma GCC
poison` names a word the rest spells; a header that changed is read again. The `slow` test does
the same on benchmark candidates over torch's slim headers, and compares the preprocessed text
itself line by line (file, line, system flags, text).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from cudice.verifier.build import nvcc_split, ppcache
from cudice.verifier.build.objects import compile_object
from verifier_marks import needs_nvcc

pytestmark = needs_nvcc

HEAD = (
    "#include <cuda_runtime.h>\n#include <vector>\n#include <cassert>\n#include <counts.h>\n"
    "#include <plain.h>\n\n"
)
KERNEL = """
__global__ void twice(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = PLAIN_SCALE * x[i];
}
int launch(const float* x, float* y, int n) {
    std::vector<int> sizes{n};
    assert(n > 0);
    twice<<<(n + 255) / 256, 256>>>(x, y, sizes.front());
    static_assert(__COUNTER__ == 2, "the headers counted twice");
    return __LINE__;
}
const char* where() { return __FILE__; }
"""
CASES = {
    "good": HEAD + KERNEL,
    "host_error": HEAD + KERNEL.replace("return __LINE__;", "return sizes;"),
    "device_error": HEAD + KERNEL.replace("PLAIN_SCALE * x[i];", "PLAIN_SCALE * x[i] + not_declared;"),
    "warning": HEAD + KERNEL.replace("int i =", "int never_used; int i ="),
    "hash_error": HEAD + "#error stop here\n" + KERNEL,
    "counter": HEAD + KERNEL.replace("__COUNTER__ == 2", "__COUNTER__ == 3"),
    "commented_head": "// twice, on the GPU\n"
    + HEAD.replace("#include <counts.h>", "// counts\n#include <counts.h>")
    + KERNEL,
    "more_includes": HEAD
    + KERNEL
    + '#include <string>\n#include <cstdio>\nstd::string s() { return "x"; }\n',
}
REFUSED = {
    "pragma_once_again": HEAD + "#include <once.h>\n" + KERNEL + "#include <once.h>\n",
    "quoted_include": HEAD + KERNEL + '#include "local.h"\n',
    "poisoned_word": HEAD + "#include <poisons.h>\n" + KERNEL + "int cudice_poisoned_word = 1;\n",
}


@pytest.fixture
def headers(tmp_path: Path) -> Path:
    d = tmp_path / "include"
    d.mkdir()
    (d / "counts.h").write_text("#pragma once\nenum { counted_a = __COUNTER__, counted_b = __COUNTER__ };\n")
    (d / "plain.h").write_text("#pragma once\n#define PLAIN_SCALE 2.0f\n")
    (d / "once.h").write_text("#pragma once\nint once_only(int);\n")
    (d / "poisons.h").write_text("#pragma once\n#if 0\n#pragma GCC poison cudice_poisoned_word\n#endif\n")
    (tmp_path / "objects").mkdir()
    return d


def _flags(headers: Path) -> str:
    return f"-gencode=arch=compute_90,code=sm_90 -std=c++20 -I{headers}"


def _text(output: str) -> str:
    return re.sub(r"\S*/objects/[0-9a-f]{32}/", "", output)


def _check(tmp_path: Path, headers: Path, text: str, name: str) -> tuple[int, str]:
    """The check's (returncode, output), in a build cache of its own (`name`)."""
    res = compile_object(tmp_path / name, "nvcc", _flags(headers), "k.cu", text, 300.0, check_only=True)
    return (0 if res.ok else 1), _text(res.output)


def _with_spy(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    seen: list[object] = []
    real = ppcache.run_step

    def spy(*args: object, **kwargs: object) -> object:
        out = real(*args, **kwargs)  # type: ignore[arg-type]
        seen.append(out)
        return out

    monkeypatch.setattr(ppcache, "run_step", spy)
    return seen


def _without_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    real = nvcc_split.plan

    def plan(*args: object, **kwargs: object) -> object:
        return real(*args[:4], None)  # type: ignore[arg-type]

    monkeypatch.setattr(nvcc_split, "plan", plan)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_check_through_the_cache_reports_what_nvccs_steps_report(
    case: str, tmp_path: Path, headers: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as m:
        _without_cache(m)
        plain = _check(tmp_path, headers, CASES[case], "plain")
    seen = _with_spy(monkeypatch)
    _check(tmp_path, headers, CASES["good"].replace("twice", "fill_the_cache"), "cached")
    seen.clear()
    cached = _check(tmp_path, headers, CASES[case], "cached")
    assert cached == plain
    # the cache answered every step that ran, but for a preprocessor's own message (it comes from the step)
    assert seen and all((s is None) == (case == "hash_error") for s in seen), seen
    assert (case in ("good", "warning", "more_includes", "commented_head")) == (plain[0] == 0), plain


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_what_the_cache_cannot_show_equivalent_runs_as_nvccs_steps(
    case: str, tmp_path: Path, headers: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "objects").mkdir(exist_ok=True)
    with monkeypatch.context() as m:
        _without_cache(m)
        plain = _check(tmp_path, headers, REFUSED[case], "plain")
    seen = _with_spy(monkeypatch)
    cached = _check(tmp_path, headers, REFUSED[case], "cached")
    assert cached == plain
    assert seen and all(s is None for s in seen), seen


def test_a_changed_header_is_read_again(
    tmp_path: Path, headers: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _with_spy(monkeypatch)
    first = _check(tmp_path, headers, CASES["good"], "cached")
    assert first[0] == 0 and all(s is not None for s in seen)
    (headers / "plain.h").write_text("#pragma once\n#define PLAIN_SCALE undeclared_scale\n")
    again = _check(tmp_path, headers, CASES["good"].replace("twice", "twice_again"), "cached")
    assert again[0] != 0 and "undeclared_scale" in again[1], again


# --- over torch's slim headers (the benchmark's candidates) ---------------------------------------

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))

_MARK = re.compile(r'^# (\d+) "((?:[^"\\]|\\.)*)"((?: \d)*)$')


def _lines(ii: str) -> list[tuple[str | None, int, str, str]]:
    """(file, line, system-header flags, text) of every line of preprocessed text that has a token."""
    out: list[tuple[str | None, int, str, str]] = []
    where: str | None = None
    line = 0
    flags = ""
    for text in ii.split("\n"):
        m = _MARK.match(text)
        if m is not None:
            where, line = m.group(2), int(m.group(1))
            flags = " ".join(f for f in m.group(3).split() if f in ("3", "4"))
            continue
        if text.strip():
            out.append((where, line, flags, text))
        line += 1
    return out


def _candidate_cu(text: str, name: str) -> tuple[str, str]:
    """(module name, `cuda.cu` text) of a candidate as the C-ABI check compiles it."""
    from cudice.verifier.build.compile import cabi_module
    from cudice.verifier.build.generated import from_call
    from cudice.verifier.source.document import parse_document

    doc = parse_document(text, f"/virtual/{name}.py")
    module = from_call(doc, doc.load_inline_calls[0])
    assert module is not None and module.binding is not None
    cu = cabi_module(module).file("cuda.cu")
    assert cu is not None
    return module.name, cu.text


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_torch_candidates_preprocess_and_check_alike(tmp_path: Path, session_config: object) -> None:
    import shlex

    import kb_candidates
    from cudice.verifier.build.headers import ensure_overlay
    from cudice.verifier.build.toolchain import probe_toolchain
    from cudice.verifier.config import VerifyConfig

    assert isinstance(session_config, VerifyConfig)
    tc = probe_toolchain(session_config.cache_dir, session_config.arch_list_env)
    overlay = ensure_overlay(session_config.cache_dir, tc.cflags)
    good = kb_candidates.candidate(0)
    texts = {
        "good": good.source,
        "host_error": good.source.replace("auto xc = x.contiguous();", "auto xc = x.contiguous(1);"),
        "device_error": good.source.replace("float v = x[i];", "float v = x;"),
        "other_category": kb_candidates.candidate(12).source,
    }
    for case, text in texts.items():
        name, cu = _candidate_cu(text, f"ppcache_{case}")
        _, cuda_cflags = tc.flags_for(name)
        flags = (
            f"-I{shlex.quote(str(overlay.device))} {cuda_cflags} "
            f"-Xcompiler -idirafter,{shlex.quote(str(overlay.standins))}"
        )
        # the preprocessed text, line by line, both ways
        d = tmp_path / case
        d.mkdir()
        src = d / "cuda.cu"
        src.write_text(cu)
        cmd = [*shlex.split(tc.nvcc), *shlex.split(flags), "-c", str(src), "-o", str(d / "cuda.o")]
        plan = nvcc_split.plan(
            cmd, d / "steps", "0123456789abcdef", nvcc_split.environment(), tmp_path / "pp"
        )
        assert plan is not None
        for step, out in ((plan.host_front[0], "cuda.cpp4.ii"), (plan.device[0], "cuda.cpp1.ii")):
            res = ppcache.run_step(step, src, tmp_path / "pp", plan.env, d, 600.0, None)
            assert res is not None and res[0] == 0, res
            cached = (d / "steps" / out).read_text()
            from cudice.verifier.build.objects import run_process

            assert run_process(["sh", "-c", step], 600.0, None, d, env=plan.env)[0] == 0
            assert _lines(cached) == _lines((d / "steps" / out).read_text()), (case, out)
        # and the check's outcome, both ways
        results = []
        for through_cache in (False, True):
            with pytest.MonkeyPatch.context() as m:
                if not through_cache:
                    _without_cache(m)
                res = compile_object(
                    tmp_path / f"check-{through_cache}", tc.nvcc, flags, "cuda.cu", cu, 600.0, check_only=True
                )
            results.append((res.ok, _text(res.output)))
        assert results[0] == results[1], (case, results)
        assert results[0][0] == (case in ("good", "other_category")), (case, results[0])
