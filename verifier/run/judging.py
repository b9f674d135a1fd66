"""Helpers shared by the judges and the runner: the stop exception, diagnostics, running user code, results.

Two processes judge or serve a model and share these: the judge (run/judge.py) and the runner
(run/runner.py: it runs the candidate's or the reference's model for the judge, inside the OS
boundary). What they share:

- `Stop`: ends a job (or, in the runner, a request) early with a verdict, a stage and diagnostics;
- `diag`: a `Diagnostic` in the argument order these modules use;
- `call_or_stop(fn, stage, where)` and `exec_module(name, source, path, stage)`: run user code
  (a model's method, a whole file) and turn any exception but `Stop` into a `Stop` with verdict
  `runtime_error`, located at the deepest line of the user's file in the traceback;
- `install_load_inline(build)` and `load_extension(name, library)`: torch's `load_inline`
  replaced by a given build, and the built extension loaded;
- `record_timing`: a timing comparison into the result fields and its diagnostics;
- `crash_result` and `write_result`: a judge process's last-resort outcome, and the outcome as
  JSON on the result pipe its parent (run/sandbox.py, run/warm.py) reads.

Contract: importing this module imports nothing heavy (no torch; `install_load_inline` imports
torch when called), so each process pays for torch where it chooses to. `Stop` is one class for
both: user code that imports it can raise it too, so a process that runs user code must
not take a verdict of `correct` from a `Stop` raised there. The judge never runs the candidate;
the runner turns every `Stop` into a reply whose verdict the judge filters (run/judge.py). Not
covered here: the comparison, the clock and the verdict logic (run/judge.py), the process limits
(run/sandbox.py).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import sys
import traceback
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cudice.verifier.source.result import Diagnostic, Location, Severity, Stage, Verdict


class Stop(Exception):
    """Ends the job early with a verdict."""

    def __init__(
        self, verdict: Verdict, stage: Stage, diagnostics: list[Diagnostic], error: str | None = None
    ) -> None:
        super().__init__(error or verdict.value)
        self.verdict, self.stage, self.diagnostics, self.error = verdict, stage, diagnostics, error


def diag(
    code: str, message: str, stage: Stage, where: Location | None, sev: Severity = Severity.ERROR
) -> Diagnostic:
    return Diagnostic(sev, message, code, stage, where)


def record_timing(
    cmp: Any, where: Location, out: dict[str, Any], diags: list[Diagnostic], how: str = ""
) -> None:
    """A `timing.TimingComparison` into the result fields and its diagnostics: the speed-up, and
    `timing.suspicious` when it is not counted; `how` ends the speed-up message (how it was timed).

    An unresolved comparison (`cmp.resolved` False: the candidate's time could not be told from the
    clock's noise) reports no speedup and no candidate time at all, only `timing.unresolved` with
    the reason and the reference's time: a ratio of noise is not a measurement, and a number
    shown beside a warning still gets read as one."""
    import dataclasses

    if not getattr(cmp, "resolved", True):
        out.update(
            candidate=None,
            reference=dataclasses.asdict(cmp.reference),
            speedup=None,
            speedup_min=None,
            speedup_max=None,
            is_suspicious=True,
        )
        diags.append(
            diag(
                "timing.unresolved",
                f"Speedup not measured: {cmp.reason}. The reference takes {cmp.reference.median_ms:.4f} ms "
                "per call; a kernel this short cannot be told apart from the clock's noise here. Time it "
                f"on a larger problem (from about 0.05 ms per call the clock resolves){how}.",
                Stage.TIMING,
                where,
                Severity.WARNING,
            )
        )
        return
    out.update(
        candidate=dataclasses.asdict(cmp.candidate),
        reference=dataclasses.asdict(cmp.reference),
        speedup=cmp.speedup,
        speedup_min=cmp.speedup_min,
        speedup_max=cmp.speedup_max,
        is_suspicious=cmp.is_suspicious,
    )
    if cmp.is_suspicious:
        diags.append(
            diag(
                "timing.suspicious",
                f"Speedup not counted: {cmp.reason}. If the kernel is honest, time it on a larger "
                "problem; otherwise check for work skipped or cached.",
                Stage.TIMING,
                where,
                Severity.WARNING,
            )
        )
    diags.append(
        diag(
            "timing.speedup",
            f"{cmp.speedup:.2f}x faster than the reference ({cmp.candidate.median_ms:.4f} "
            f"ms vs {cmp.reference.median_ms:.4f} ms; pessimistic {cmp.speedup_min:.2f}x{how}).",
            Stage.TIMING,
            where,
            Severity.INFORMATION,
        )
    )


def call_or_stop(fn: Any, stage: Stage, where: Location) -> Any:
    """`fn()`; an exception other than `Stop` becomes a `Stop` (`runtime_error`, `runtime.exception`)
    at the deepest line of `where.path` in its traceback (`where` itself when there is none)."""
    try:
        return fn()
    except Stop:
        raise
    except Exception as exc:
        tb = traceback.format_exc(limit=-3)
        line = _user_line(exc, where.path)  # the deepest line of the user's file in the traceback
        at = Location(where.path, line, 1) if line > 1 else where
        raise Stop(
            Verdict.RUNTIME_ERROR,
            stage,
            [diag("runtime.exception", f"{type(exc).__name__}: {exc}", stage, at)],
            tb,
        ) from None


def exec_module(name: str, source: str, path: str, stage: Stage) -> types.ModuleType:
    """Run `source` (the file `path`) as the module `name`, registered in `sys.modules` first; an
    exception other than `Stop` becomes a `Stop` (`runtime_error`, `runtime.import_error`)."""
    mod = types.ModuleType(name)
    mod.__file__ = path
    sys.modules[name] = mod
    try:
        exec(compile(source, path, "exec"), mod.__dict__)
    except Stop:
        raise
    except Exception as exc:
        line = _user_line(exc, path)
        raise Stop(
            Verdict.RUNTIME_ERROR,
            stage,
            [
                diag(
                    "runtime.import_error",
                    f"Running {Path(path).name} failed: {type(exc).__name__}: {exc}",
                    stage,
                    Location(path, line, 1),
                )
            ],
            traceback.format_exc(),
        ) from None
    return mod


def _user_line(exc: BaseException, path: str) -> int:
    tb = exc.__traceback__
    line = 1
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == path:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def install_load_inline(build: Callable[[str, Any, Any, Any], types.ModuleType]) -> None:
    """Replace torch's `load_inline` by `build(name, cpp_sources, cuda_sources, functions)`.

    torch's other arguments (flags, build folder, verbosity) are accepted and not used: the
    build takes torch's own flags (build/toolchain.py). Shared with run/runner.py's runner.
    """
    import torch.utils.cpp_extension as ce

    def load_inline(
        name: str,
        cpp_sources: Any,
        cuda_sources: Any = None,
        functions: Any = None,
        *args: Any,
        **kwargs: Any,
    ) -> types.ModuleType:
        return build(name, cpp_sources, cuda_sources, functions)

    ce.load_inline = load_inline  # type: ignore[assignment]


def load_extension(name: str, library: str) -> types.ModuleType:
    """Import the extension module `name` from the shared library `library` (runs its PyInit)."""
    loader = importlib.machinery.ExtensionFileLoader(name, library)
    spec = importlib.util.spec_from_file_location(name, library, loader=loader)
    assert spec is not None
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def crash_result(exc: BaseException, who: str = "") -> dict[str, Any]:
    """A judge process's last-resort outcome when its job raised (call it inside the `except`):
    verdict `crash` with the traceback, so the parent gets a report instead of a silent death."""
    message = f"{who}{type(exc).__name__}: {exc}"
    return {
        "verdict": Verdict.CRASH.value,
        "stage": Stage.LOAD.value,
        "error": traceback.format_exc(),
        "diagnostics": [diag("runtime.worker_error", message, Stage.LOAD, None).to_dict()],
    }


def write_result(fd: int, result: dict[str, Any]) -> None:
    """The outcome as JSON on the pipe the parent (run/sandbox.py, run/warm.py) reads; closes `fd`.
    The parent ends this process's group once the pipe closes, so whatever would explain a failure
    goes into the pipe: a result that is not JSON-serialisable is replaced by a crash record."""
    import os

    try:
        text = json.dumps(result)
    except (TypeError, ValueError) as exc:
        text = json.dumps(crash_result(exc, "judge: its result is not JSON: "))
    with os.fdopen(fd, "w") as f:
        f.write(text)
