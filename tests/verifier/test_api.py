"""verify()/quick_check(): stage order, the static hook, no-GPU behaviour, cancellation."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from cudice.verifier import api
from cudice.verifier.build.compile import BuildResult
from cudice.verifier.config import VerifyConfig
from cudice.verifier.source.result import Diagnostic, Location, Severity, Stage, Verdict, VerifyResult
from verifier_marks import needs_nvcc


def test_invalid_input_never_raises(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def broken(:\n")
    result = api.verify(bad, config=VerifyConfig(cache_dir=tmp_path))
    assert result.verdict is Verdict.INVALID_INPUT and result.stage is Stage.PARSE
    assert result.diagnostics[0].location is not None and result.diagnostics[0].location.line == 1
    missing = api.verify(tmp_path / "nope.py", config=VerifyConfig(cache_dir=tmp_path))
    assert missing.verdict is Verdict.INVALID_INPUT and missing.diagnostics[0].code == "parse.unreadable"


def test_missing_reference_is_a_warning_and_the_candidate_still_compiles(
    tmp_path: Path, examples_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cand = tmp_path / "cand.py"
    cand.write_text((examples_dir / "relu_cuda.py").read_text())  # its reference=relu.py is not next to it
    built: list[str] = []

    def fake_build(module: object, path: str, config: object, **kw: object) -> object:
        built.append(path)
        error = Diagnostic(Severity.ERROR, "boom", "compile.error", Stage.COMPILE, Location(path, 14, 5))
        return BuildResult(
            ok=False,
            build_dir=tmp_path,
            library=None,
            diagnostics=(error,),
            output="",
            wall_s=0.1,
            cached=False,
        )

    monkeypatch.setattr(api, "build_module", fake_build)
    monkeypatch.setattr(api, "gpu_available", lambda: True)  # a GPU does not help without a reference
    result = api.verify(cand, config=VerifyConfig(cache_dir=tmp_path))
    assert built == [str(cand)]
    assert result.verdict is Verdict.COMPILE_ERROR
    first, second = result.diagnostics[:2]
    assert first.code == "parse.reference_missing" and first.severity is Severity.WARNING
    assert second.code == "compile.error" and second.location is not None and second.location.line == 14
    monkeypatch.setattr(
        api,
        "build_module",
        lambda *a, **k: BuildResult(
            ok=True, build_dir=tmp_path, library=None, diagnostics=(), output="", wall_s=0.1, cached=False
        ),
    )
    clean = api.verify(cand, config=VerifyConfig(cache_dir=tmp_path))
    assert clean.verdict is Verdict.COMPILED and clean.compile_only  # compiled, not run: no reference


def test_runtime_built_sources_are_never_compiled_without_a_run(
    tmp_path: Path, examples_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = (examples_dir / "relu_cuda.py").read_text().replace('relu_source = """', 'relu_source = f"""')
    text = text.replace("{\n", "{{\n").replace("}\n", "}}\n").replace("threads = 256", "threads = {256}")
    cand = tmp_path / "relu_cuda.py"
    cand.write_text(text)
    (tmp_path / "relu.py").write_text((examples_dir / "relu.py").read_text())
    monkeypatch.setattr(api, "gpu_available", lambda: False)
    result = api.verify(cand, config=VerifyConfig(cache_dir=tmp_path))
    assert result.verdict is Verdict.CHECKED, result.verdict  # nvcc never saw the f-string's text
    (warning,) = [d for d in result.diagnostics if d.code == "verify.not_compiled"]
    assert warning.severity is Severity.WARNING and warning.location is not None
    assert "load_inline(" in text.splitlines()[warning.location.line - 1]


def _static_error(calls: list[str]) -> Callable[[object, object], list[Diagnostic]]:
    def fake_static(doc: object, config: object) -> list[Diagnostic]:
        calls.append("static")
        return [Diagnostic(Severity.ERROR, "cheat", "static.test", Stage.STATIC, Location("x.py", 3, 1))]

    return fake_static


def _build(ok: bool, links: list[bool]) -> Callable[..., object]:
    def build(*a: object, link: bool = True, **k: object) -> object:
        links.append(link)
        errors = (
            ()
            if ok
            else (
                Diagnostic(
                    Severity.ERROR, "expected ';'", "compile.error", Stage.COMPILE, Location("x.py", 9, 5)
                ),
            )
        )
        return SimpleNamespace(
            ok=ok,
            undecided=False,
            timed_out=False,
            cancelled=False,
            diagnostics=errors,
            step_wall_s={},
            violation=False,
        )

    return build


def test_a_static_violation_that_compiles_stays_a_violation(
    tmp_path: Path, examples_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    links: list[bool] = []
    monkeypatch.setattr("cudice.verifier.static.checks.check_document", _static_error(calls))
    monkeypatch.setattr(api, "build_module", _build(True, links))
    stages: list[str] = []
    result = api.verify(
        examples_dir / "relu_cuda.py",
        config=VerifyConfig(cache_dir=tmp_path),
        on_stage=lambda r: stages.append(r.stage.value),
    )
    assert calls == ["static"] and result.verdict is Verdict.STATIC_VIOLATION
    assert links == [False]  # built to see whether it compiles, never linked or run
    assert stages == ["parse", "static"] and result.stage is Stage.STATIC
    assert [(d.code, d.severity) for d in result.diagnostics] == [("static.test", Severity.ERROR)]


def test_compile_violations_off_stops_at_the_violation(
    tmp_path: Path, examples_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    links: list[bool] = []
    monkeypatch.setattr("cudice.verifier.static.checks.check_document", _static_error([]))
    monkeypatch.setattr(api, "build_module", _build(False, links))
    config = VerifyConfig(cache_dir=tmp_path, compile_violations=False)
    result = api.verify(examples_dir / "relu_cuda.py", config=config)
    assert result.verdict is Verdict.STATIC_VIOLATION and links == []  # nothing was compiled


def test_code_that_does_not_compile_gets_the_compiler_errors_and_the_static_ones_as_warnings(
    tmp_path: Path, examples_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    monkeypatch.setattr("cudice.verifier.static.checks.check_document", _static_error(calls))
    monkeypatch.setattr(api, "build_module", _build(False, []))
    result = api.verify(examples_dir / "relu_cuda.py", config=VerifyConfig(cache_dir=tmp_path))
    assert result.verdict is Verdict.COMPILE_ERROR and result.stage is Stage.COMPILE
    found = {d.code: d for d in result.diagnostics}
    assert found["compile.error"].severity is Severity.ERROR and found["compile.error"].location.line == 9
    assert found["static.test"].severity is Severity.WARNING and found["static.test"].message == "cheat"


def test_the_quick_check_shows_compiler_errors_despite_a_static_violation(
    examples_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    monkeypatch.setattr("cudice.verifier.static.checks.check_document", _static_error(calls))
    path = examples_dir / "relu_cuda.py"

    def checker(errors: tuple[Diagnostic, ...]) -> Any:
        return SimpleNamespace(available=True, check=lambda *a: SimpleNamespace(diagnostics=errors))

    error = Diagnostic(Severity.ERROR, "undeclared", "fast.error", Stage.COMPILE, Location(str(path), 9, 5))
    broken = api.quick_check(path, path.read_text(), checker((error,)))
    assert broken.verdict is Verdict.COMPILE_ERROR
    assert {(d.code, d.severity) for d in broken.diagnostics} == {
        ("fast.error", Severity.ERROR),
        ("static.test", Severity.WARNING),
    }
    clean = api.quick_check(path, path.read_text(), checker(()))
    assert clean.verdict is Verdict.STATIC_VIOLATION and clean.stage is Stage.STATIC
    assert [(d.code, d.severity) for d in clean.diagnostics] == [("static.test", Severity.ERROR)]
    assert calls == ["static", "static"]


def test_real_static_checks_run_on_the_example(examples_dir: Path) -> None:
    found = api.run_static_checks(api.read_document(examples_dir / "relu_cuda.py"), VerifyConfig())
    assert not [d for d in found if d.severity is Severity.ERROR]


@needs_nvcc
@pytest.mark.slow
def test_no_gpu_compiles_and_says_what_was_skipped(
    examples_dir: Path, build_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(api, "gpu_available", lambda: False)
    stages: list[tuple[str, str]] = []
    result = api.verify(
        examples_dir / "relu_cuda.py",
        config=VerifyConfig(cache_dir=build_cache),
        on_stage=lambda r: stages.append((r.stage.value, r.verdict.value)),
    )
    assert result.verdict is Verdict.COMPILED and result.compile_only
    assert [s for s, _ in stages] == ["parse", "static"]
    (note,) = [d for d in result.diagnostics if d.code == "verify.no_gpu"]
    assert "correctness and timing did not run" in note.message
    assert set(result.stage_wall_s) >= {"parse", "static", "compile"}


def test_a_compile_only_reference_probe_runs_beside_the_build_and_is_used_once(
    tmp_path: Path, examples_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cudice.verifier.run import reference_probe

    order: list[str] = []
    probed = threading.Event()

    def fake_probe(ref: object, config: object, **kw: object) -> object:
        order.append("probe")
        probed.set()
        why = Diagnostic(Severity.ERROR, "get_inputs raised", "reference.get_inputs_failed", Stage.LOAD, None)
        return reference_probe.InputsProbe((why,), "Traceback ...", False)

    compiles = _build(True, [])

    def build(*a: object, **k: object) -> object:
        assert probed.wait(120), "the probe did not start with the build"
        order.append("build")
        return compiles(*a, **k)

    monkeypatch.setattr(reference_probe, "probe_reference_inputs", fake_probe)
    monkeypatch.setattr(api, "build_module", build)
    monkeypatch.setattr(api, "gpu_available", lambda: False)
    result = api.verify(examples_dir / "relu_cuda.py", config=VerifyConfig(cache_dir=tmp_path))
    assert order == ["probe", "build"]  # started first, used once
    assert result.verdict is Verdict.RUNTIME_ERROR and result.stage is Stage.LOAD
    assert [d.code for d in result.diagnostics if d.severity is Severity.ERROR] == [
        "reference.get_inputs_failed"
    ]


def test_a_build_that_fails_stops_the_reference_probe_it_started(
    tmp_path: Path, examples_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cudice.verifier.run import reference_probe

    started, stopped = threading.Event(), threading.Event()

    def slow_probe(ref: object, config: object, *, cancel: Any = None, **kw: object) -> object:
        started.set()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not cancel.is_set():
            time.sleep(0.01)
        if cancel.is_set():
            stopped.set()
        return reference_probe.InputsProbe()

    fails = _build(False, [])

    def failing_build(*a: object, **k: object) -> object:
        assert started.wait(120)
        return fails(*a, **k)

    monkeypatch.setattr(reference_probe, "probe_reference_inputs", slow_probe)
    monkeypatch.setattr(api, "build_module", failing_build)
    monkeypatch.setattr(api, "gpu_available", lambda: False)
    result = api.verify(examples_dir / "relu_cuda.py", config=VerifyConfig(cache_dir=tmp_path))
    assert result.verdict is Verdict.COMPILE_ERROR
    assert stopped.is_set()  # verify returned only after the probe saw its cancel


@needs_nvcc
@pytest.mark.slow
def test_broken_generated_code_gets_the_compilers_errors_not_a_decoy_verdict(
    examples_dir: Path, build_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a model writes when it degrades: garbage inside the kernel and a misnamed launch. The
    static checks see a launch of an undefined kernel; the compiler sees both mistakes, on their
    lines, and its errors are the verdict."""
    monkeypatch.setattr(api, "gpu_available", lambda: False)
    source = (
        (examples_dir / "relu_cuda.py")
        .read_text()
        .replace("relu_kernel<<<blocks", "relu_kernl<<<blocks")
        .replace("float v = x[i];", "float v = x[i] likelikelike;")
    )
    lines = source.splitlines()
    garbage = next(i for i, t in enumerate(lines, 1) if "likelikelike" in t)
    launch = next(i for i, t in enumerate(lines, 1) if "relu_kernl<<<" in t)
    result = api.verify(
        examples_dir / "relu_cuda.py", source=source, config=VerifyConfig(cache_dir=build_cache)
    )
    assert result.verdict is Verdict.COMPILE_ERROR
    errors = {d.location.line for d in result.diagnostics if d.severity is Severity.ERROR and d.location}
    assert errors == {garbage, launch}
    statics = [d for d in result.diagnostics if d.stage is Stage.STATIC]
    assert statics and all(d.severity is not Severity.ERROR for d in statics)


@needs_nvcc
def test_cancel_kills_the_build_quickly(tmp_path: Path, examples_dir: Path) -> None:
    source = (examples_dir / "relu_cuda.py").read_text().replace("relu_kernel", "relu_kernel_cancel_test")
    cancel = threading.Event()
    threading.Timer(1.0, cancel.set).start()
    t0 = time.perf_counter()
    result = api.verify(
        examples_dir / "relu_cuda.py",
        source=source,
        cancel=cancel,
        config=VerifyConfig(cache_dir=tmp_path, compile_only=True),
    )
    assert time.perf_counter() - t0 < 20
    assert result.verdict is Verdict.TIMEOUT and result.error == "cancelled"


def test_run_stage_maps_a_crashed_child(tmp_path: Path, examples_dir: Path) -> None:
    from cudice.verifier.run.sandbox import ChildOutcome
    from cudice.verifier.source.document import read_document

    doc = read_document(examples_dir / "relu_cuda.py")
    ref = read_document(examples_dir / "relu.py", require_candidate=False)
    run = api._Run(doc, VerifyConfig(cache_dir=tmp_path), None)

    def crashed(job: dict[str, object], **kw: object) -> ChildOutcome:
        assert job["reference_source"] == ref.text
        return ChildOutcome(None, -11, "", "Segmentation fault", 0.1)

    result = api._run_stage(run, ref, VerifyConfig(cache_dir=tmp_path), None, crashed)
    assert result.verdict is Verdict.CRASH and "SIGSEGV" in result.diagnostics[-1].message

    def hung(job: dict[str, object], **kw: object) -> ChildOutcome:
        return ChildOutcome(None, -9, "", "", 5.0, timed_out=True)

    assert api._run_stage(run, ref, VerifyConfig(cache_dir=tmp_path), None, hung).verdict is Verdict.TIMEOUT

    def worked(job: dict[str, object], **kw: object) -> ChildOutcome:
        res = {
            "verdict": "correct",
            "stage": "timing",
            "speedup": 2.0,
            "speedup_min": 1.8,
            "gpu_name": "H200",
            "candidate": {
                "median_ms": 1.0,
                "min_ms": 0.9,
                "max_ms": 1.2,
                "q1_ms": 0.95,
                "q3_ms": 1.05,
                "num_trials": 30,
            },
            "diagnostics": [],
            "stage_wall_s": {"timing": 1.5},
        }
        return ChildOutcome(res, 0, "", "", 3.0)

    ok = api._run_stage(run, ref, VerifyConfig(cache_dir=tmp_path), None, worked)
    assert isinstance(ok, VerifyResult) and ok.verdict is Verdict.CORRECT and ok.runtime_ms == 1.0
    assert ok.stage_wall_s["run.timing"] == 1.5 and ok.is_fast(1.5)


@needs_nvcc
def test_raw_cu_file_is_compiled_only_with_located_errors(tmp_path: Path) -> None:
    cu = tmp_path / "k.cu"
    cu.write_text('extern "C" __global__ void scale(float* x, int n) {\n  x[0] = 2.0f * missing;\n}\n')
    config = VerifyConfig(cache_dir=tmp_path / "cache")
    bad = api.verify(cu, config=config)
    assert bad.verdict is Verdict.COMPILE_ERROR
    (err,) = [d for d in bad.diagnostics if d.severity is Severity.ERROR]
    assert err.location is not None and (err.location.line, err.location.column) == (2, 17)
    cu.write_text('extern "C" __global__ void scale(float* x, int n) {\n  x[0] = 2.0f * x[0];\n}\n')
    ok = api.verify(cu, config=config)
    assert ok.verdict is Verdict.COMPILED and ok.compile_only
    assert any(d.code == "verify.raw_cu_compile_only" for d in ok.diagnostics)


@pytest.mark.gpu
def test_runtime_built_sources_are_built_and_judged_on_a_gpu(tmp_path: Path, examples_dir: Path) -> None:
    """The counterpart of the compile-only case: with a GPU the run stage compiles the f-string's
    text, so the candidate gets a real verdict (and no `verify.not_compiled`)."""
    text = (examples_dir / "relu_cuda.py").read_text().replace('relu_source = """', 'relu_source = f"""')
    text = text.replace("{\n", "{{\n").replace("}\n", "}}\n").replace("threads = 256", "threads = {256}")
    cand = tmp_path / "relu_cuda.py"
    cand.write_text(text)
    (tmp_path / "relu.py").write_text((examples_dir / "relu.py").read_text())
    result = api.verify(cand, config=VerifyConfig(cache_dir=tmp_path, timeout_s=300))
    assert result.verdict is Verdict.CORRECT, [d.message for d in result.diagnostics]
    assert not [d for d in result.diagnostics if d.code == "verify.not_compiled"]


def test_build_only_links_what_a_run_loads_and_runs_nothing(
    tmp_path: Path, examples_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`build_only` (the editor's build of unsaved text): on a GPU box the module is built and linked
    exactly as for a run, and the run stage is never entered."""
    for name in ("relu.py", "relu_cuda.py"):
        (tmp_path / name).write_text((examples_dir / name).read_text())
    linked: list[bool] = []

    def fake_build(module: object, path: str, config: object, *, link: bool = False, **kw: object) -> object:
        linked.append(link)
        return BuildResult(
            ok=True, build_dir=tmp_path, library=None, diagnostics=(), output="", wall_s=0.1, cached=False
        )

    def no_run(*a: object, **k: object) -> object:
        raise AssertionError("the run stage started")

    monkeypatch.setattr(api, "build_module", fake_build)
    monkeypatch.setattr(api, "gpu_available", lambda: True)
    config = VerifyConfig(cache_dir=tmp_path / "cache", build_only=True)
    result = api.verify(tmp_path / "relu_cuda.py", config=config, run_child=no_run)
    assert linked == [True]  # linked as the run would load it
    assert result.verdict is Verdict.COMPILED and result.compile_only


@pytest.mark.parametrize("build_ok", [True, False])
def test_a_warm_judge_starts_with_the_build_and_ends_with_the_verification(
    tmp_path: Path, examples_dir: Path, monkeypatch: pytest.MonkeyPatch, build_ok: bool
) -> None:
    """`cudice verify` (`warm_judge=True`): the run stage's judge starts before the build, serves the
    run, and is closed when the verification ends, also when it ends at a compile error."""
    from cudice.verifier.run import warm as runner_module
    from cudice.verifier.run.sandbox import ChildOutcome

    for name in ("relu.py", "relu_cuda.py"):
        (tmp_path / name).write_text((examples_dir / name).read_text())
    events: list[str] = []

    class FakeRunner:
        def __init__(self, **kw: object) -> None:
            events.append("judge started")

        def warm_up(self, memory_limit_mib: int, config: dict[str, object]) -> None:
            events.append(f"warm {config['cache_dir']}")

        def __call__(self, job: dict[str, object], **kw: object) -> ChildOutcome:
            events.append("run")
            result = {"verdict": "correct", "stage": "timing", "diagnostics": [], "stage_wall_s": {}}
            return ChildOutcome(result, 0, "", "", 0.1)

        def close(self) -> None:
            events.append("closed")

    def fake_build(*a: object, **k: object) -> BuildResult:
        events.append("build")
        error = Diagnostic(Severity.ERROR, "boom", "compile.error", Stage.COMPILE, Location("x", 1, 1))
        return BuildResult(
            ok=build_ok,
            build_dir=tmp_path,
            library=None,
            diagnostics=() if build_ok else (error,),
            output="",
            wall_s=0.1,
            cached=False,
        )

    monkeypatch.setattr(runner_module, "PersistentRunner", FakeRunner)
    monkeypatch.setattr(api, "build_module", fake_build)
    monkeypatch.setattr(api, "gpu_available", lambda: True)
    config = VerifyConfig(cache_dir=tmp_path / "cache")
    result = api.verify(tmp_path / "relu_cuda.py", config=config, warm_judge=True)
    warm = f"warm {tmp_path / 'cache'}"
    if build_ok:
        assert result.verdict is Verdict.CORRECT
        assert events == ["judge started", warm, "build", "run", "closed"]
    else:
        assert result.verdict is Verdict.COMPILE_ERROR
        assert events == ["judge started", warm, "build", "closed"]
    events.clear()
    api.verify(tmp_path / "relu_cuda.py", config=config)  # without it: no judge ahead of the build
    assert "judge started" not in events


def _no_reference(text: str) -> str:
    """`text` without its `# cudice: reference=` comment, every other line where it was."""
    return "\n".join("# (no reference)" if "cudice: reference=" in t else t for t in text.split("\n"))


def _clean_build(tmp_path: Path) -> Callable[..., BuildResult]:
    def build(*a: object, **k: object) -> BuildResult:
        return BuildResult(
            ok=True, build_dir=tmp_path, library=None, diagnostics=(), output="", wall_s=0.1, cached=False
        )

    return build


@needs_nvcc
@pytest.mark.slow
def test_a_candidate_without_reference_is_compiled_and_says_what_was_not_checked(
    tmp_path: Path, examples_dir: Path, build_cache: Path
) -> None:
    """No `--reference`, no comment, no `Model`: the compile still runs (the session's relu_broken and
    relu_cuda builds), its error lands on line 14, and a clean build says correctness was not checked."""
    broken, good = tmp_path / "broken.py", tmp_path / "good.py"
    broken.write_text(_no_reference((examples_dir / "relu_broken.py").read_text()))
    good.write_text(_no_reference((examples_dir / "relu_cuda.py").read_text()))
    config = VerifyConfig(cache_dir=build_cache)
    stages: list[list[str]] = []
    bad = api.verify(broken, config=config, on_stage=lambda r: stages.append([d.code for d in r.diagnostics]))
    assert bad.verdict is Verdict.COMPILE_ERROR, [d.message for d in bad.diagnostics]
    errors = [d for d in bad.diagnostics if d.severity is Severity.ERROR]
    assert [(d.location.line, d.location.column) for d in errors if d.location] == [(14, 18)]
    assert stages and all(
        codes[:1] == ["parse.no_reference"] for codes in stages
    )  # the editor sees it at once
    ok = api.verify(good, config=config)
    assert ok.verdict is Verdict.COMPILED and ok.compile_only and ok.stage is Stage.COMPILE
    (warning,) = [d for d in ok.diagnostics if d.code == "parse.no_reference"]
    assert warning.severity is Severity.WARNING and "not checked" in warning.message
    assert "--reference PATH" in warning.message and "# cudice: reference=" in warning.message
    assert not [d for d in ok.diagnostics if d.code == "verify.no_gpu"]  # the reference is why, not the GPU


def test_quick_check_without_reference_still_gives_compile_diagnostics(
    tmp_path: Path, examples_dir: Path
) -> None:
    cand = tmp_path / "cand.py"
    text = _no_reference((examples_dir / "relu_broken.py").read_text())

    class StubChecker:  # stands in for clangd: one error where nvcc puts it
        available = True

        def check(self, module: object, path: str, timeout_s: float) -> SimpleNamespace:
            error = Diagnostic(
                Severity.ERROR, "undefined", "fast.error", Stage.COMPILE, Location(path, 14, 18)
            )
            return SimpleNamespace(diagnostics=(error,))

    result = api.quick_check(cand, text, cast(Any, StubChecker()))
    assert result.verdict is Verdict.COMPILE_ERROR
    assert [(d.code, d.severity) for d in result.diagnostics] == [
        ("parse.no_reference", Severity.WARNING),
        ("fast.error", Severity.ERROR),
    ]
    plain = api.verify(cand, source="import torch\n", config=VerifyConfig(cache_dir=tmp_path))
    assert plain.verdict is Verdict.INVALID_INPUT  # not a candidate: stops at parse, listing both problems
    assert {d.code for d in plain.diagnostics} == {"parse.no_model_new", "parse.no_reference"}


RAISING = {  # case -> (text of examples/relu.py, its replacement)
    "get_inputs": ("x = torch.randn(batch_size, dim)", "x = torch.randn(batch_size, dimm)"),
    "get_init_inputs": (  # raised inside torch: located on the reference's own line
        "def get_init_inputs():\n    return []",
        "def get_init_inputs():\n    return [torch.zeros(-1)]",
    ),
    "needs_gpu": ("x = torch.randn(batch_size, dim)", "x = torch.randn(batch_size, dim).cuda()"),
}


@pytest.mark.parametrize("case", sorted(RAISING))
def test_a_reference_whose_inputs_raise_is_reported_on_its_line_without_a_gpu(
    tmp_path: Path, examples_dir: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """Compile-only: the reference's input functions run once in a child; a raise is a located
    `reference.get_inputs_failed` and `runtime_error` at `load`; a CUDA-only input is not a failure
    on a machine without one. The answer is cached by the reference's content."""
    from cudice.verifier.run import reference_probe

    old, new = RAISING[case]
    ref_text = (examples_dir / "relu.py").read_text()
    assert old in ref_text
    ref = tmp_path / "relu.py"
    ref.write_text(ref_text.replace(old, new))
    (tmp_path / "relu_cuda.py").write_text((examples_dir / "relu_cuda.py").read_text())
    monkeypatch.setattr(api, "build_module", _clean_build(tmp_path))
    monkeypatch.setattr(api, "gpu_available", lambda: False)
    config = VerifyConfig(cache_dir=tmp_path / "cache")
    result = api.verify(tmp_path / "relu_cuda.py", config=config)
    found = [d for d in result.diagnostics if d.code == "reference.get_inputs_failed"]
    if case == "needs_gpu":
        import torch

        if torch.cuda.is_available():
            pytest.skip("this torch has a GPU: `.cuda()` works here")
        assert result.verdict is Verdict.COMPILED and not found
        return
    assert result.verdict is Verdict.RUNTIME_ERROR and result.stage is Stage.LOAD and result.compile_only
    (diag,) = found
    line = next(i for i, t in enumerate(ref.read_text().split("\n"), 1) if new.split("\n")[-1] in t)
    assert diag.severity is Severity.ERROR and diag.location is not None
    assert (diag.location.path, diag.location.line) == (str(ref.resolve()), line)
    assert ("NameError" if case == "get_inputs" else "RuntimeError") in diag.message
    assert "runtime_error" in diag.message and result.error
    assert result.stage_wall_s["reference_inputs"] > 0

    def no_child(*a: object, **k: object) -> object:
        raise AssertionError("an unchanged reference is answered from the cache")

    monkeypatch.setattr(reference_probe, "run_in_child", no_child)
    again = api.verify(tmp_path / "relu_cuda.py", config=config)
    assert again.verdict is Verdict.RUNTIME_ERROR and again.diagnostics == result.diagnostics


def test_the_reference_may_be_given_as_text(
    tmp_path: Path, examples_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`reference_source=`: no reference file anywhere (the RL reward's case); the judge gets the
    text, and locations name `reference` (default `<reference>`)."""
    from cudice.verifier.run.sandbox import ChildOutcome

    cand = tmp_path / "nowhere" / "cand_0.py"  # never written: the candidate comes as text too
    cand_text = (examples_dir / "relu_cuda.py").read_text()  # its comment names a relu.py that is not there
    ref_text = (examples_dir / "relu.py").read_text()
    monkeypatch.setattr(api, "build_module", _clean_build(tmp_path))
    jobs: list[dict[str, object]] = []

    def judged(job: dict[str, object], **kw: object) -> ChildOutcome:
        jobs.append(job)
        return ChildOutcome({"verdict": "correct", "stage": "timing", "diagnostics": []}, 0, "", "", 0.1)

    config = VerifyConfig(cache_dir=tmp_path / "cache")
    run = api.verify(
        cand, source=cand_text, reference_source=ref_text, config=config, gpu=True, run_child=judged
    )
    assert run.verdict is Verdict.CORRECT, [d.message for d in run.diagnostics]
    assert jobs[0]["reference_source"] == ref_text and jobs[0]["reference_path"] == "<reference>"
    broken = ref_text.replace("torch.randn(batch_size, dim)", "torch.randn(batch_size, dimm)")
    named = api.verify(
        cand, source=cand_text, reference="problem_19.py", reference_source=broken, config=config, gpu=False
    )
    (diag,) = [d for d in named.diagnostics if d.code == "reference.get_inputs_failed"]
    assert diag.location is not None and diag.location.path == "problem_19.py"
    assert broken.split("\n")[diag.location.line - 1].strip().startswith("x = torch.randn")
    not_a_reference = api.verify(cand, source=cand_text, reference_source="x = 1\n", config=config, gpu=False)
    assert {"parse.reference_invalid", "parse.reference_no_model"} <= {
        d.code for d in not_a_reference.diagnostics
    }
    assert not_a_reference.verdict is Verdict.COMPILED  # still compiled; nothing to compare with
    assert not cand.parent.exists()


def _oom_judged(outcomes: list[dict[str, object]], jobs: list[dict[str, object]]) -> Callable[..., object]:
    from cudice.verifier.run.sandbox import ChildOutcome

    def judged(job: dict[str, object], **kw: object) -> ChildOutcome:
        jobs.append(job)
        return ChildOutcome(outcomes[len(jobs) - 1], 0, "", "", 0.1)

    return judged


_RUNNER_OOM = {
    "verdict": "runtime_error",
    "stage": "correctness",
    "diagnostics": [
        {
            "severity": "error",
            "message": "the runner could not serve 'call': OutOfMemoryError: CUDA out of memory. "
            "Tried to allocate 4.00 GiB.",
            "code": "runtime.exception",
            "stage": "correctness",
        }
    ],
}
_JUDGE_OOM = {
    "verdict": "crash",
    "stage": "load",
    "diagnostics": [
        {
            "severity": "error",
            "message": "judge: OutOfMemoryError: CUDA out of memory.",
            "code": "runtime.worker_error",
            "stage": "load",
        }
    ],
}
_CORRECT = {"verdict": "correct", "stage": "timing", "diagnostics": [], "speedup": 1.5}


@pytest.mark.parametrize("first", [_RUNNER_OOM, _JUDGE_OOM])
def test_a_run_that_ran_out_of_gpu_memory_beside_others_is_run_again_alone(
    tmp_path: Path, examples_dir: Path, monkeypatch: pytest.MonkeyPatch, first: dict[str, object]
) -> None:
    """Twelve verifications at once can exhaust a GPU's memory together: a kernel that fits alone
    then fails for what the others hold. Such a failure (the runner's or the judge's) is no verdict:
    the run is repeated once holding the GPU alone (`run_alone`), and that run's verdict stands,
    with an information diagnostic that says so; the first failure's error is gone."""
    for name in ("relu.py", "relu_cuda.py"):
        (tmp_path / name).write_text((examples_dir / name).read_text())
    monkeypatch.setattr(api, "build_module", _clean_build(tmp_path))
    jobs: list[dict[str, object]] = []
    config = VerifyConfig(cache_dir=tmp_path / "cache")
    run_child = _oom_judged([first, _CORRECT], jobs)
    result = api.verify(tmp_path / "relu_cuda.py", config=config, gpu=True, run_child=run_child)
    assert result.verdict is Verdict.CORRECT and result.speedup == 1.5
    assert [job["config"]["run_alone"] for job in jobs] == [False, True]  # type: ignore[index]
    (note,) = [d for d in result.diagnostics if d.code == "runtime.retried_alone"]
    assert note.severity is Severity.INFORMATION and "out of memory" in note.message.lower()
    assert not [d for d in result.diagnostics if d.severity is Severity.ERROR]
    assert "first_attempt_s" in result.stage_wall_s
    assert not [k for k in result.stage_wall_s if k.startswith("run.timing")]  # the first run's walls gone


@pytest.mark.parametrize(
    ("outcomes", "runs"),
    [
        ([_RUNNER_OOM, _RUNNER_OOM], 2),  # out of memory alone too: the kernel's verdict, once retried
        ([{**_RUNNER_OOM, "verdict": "incorrect"}], 1),  # a wrong kernel whose text names OOM
        (
            [{**_RUNNER_OOM, "diagnostics": [{**_RUNNER_OOM["diagnostics"][0], "message": "IndexError: 3"}]}],  # type: ignore[index]
            1,
        ),
        (  # out of memory only in the output the candidate's process printed: not the run's error
            [
                {
                    **_RUNNER_OOM,
                    "diagnostics": [{**_RUNNER_OOM["diagnostics"][0], "message": "IndexError: 3"}],  # type: ignore[index]
                    "error": "RuntimeError: CUDA out of memory",
                }
            ],
            1,
        ),
    ],
)
def test_a_run_is_repeated_alone_only_for_memory_and_only_once(
    tmp_path: Path,
    examples_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    outcomes: list[dict[str, object]],
    runs: int,
) -> None:
    """Only an out-of-memory `crash` or `runtime_error` is repeated, and only once: a kernel that
    runs out of memory alone keeps its verdict; another error, a wrong kernel, or an out-of-memory
    text in the output tails (the candidate's to print) is not repeated."""
    for name in ("relu.py", "relu_cuda.py"):
        (tmp_path / name).write_text((examples_dir / name).read_text())
    monkeypatch.setattr(api, "build_module", _clean_build(tmp_path))
    jobs: list[dict[str, object]] = []
    config = VerifyConfig(cache_dir=tmp_path / "cache")
    result = api.verify(
        tmp_path / "relu_cuda.py", config=config, gpu=True, run_child=_oom_judged(outcomes, jobs)
    )
    assert len(jobs) == runs
    assert result.verdict.value == outcomes[-1]["verdict"]
    assert [d for d in result.diagnostics if d.severity is Severity.ERROR]
    assert bool([d for d in result.diagnostics if d.code == "runtime.retried_alone"]) == (runs == 2)
