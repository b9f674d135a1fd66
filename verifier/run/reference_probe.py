"""Make the reference's inputs once, on the CPU, when the kernel will not run here (compile-only).

Without a GPU `verify()` stops after compiling, so a reference whose `get_inputs()` or
`get_init_inputs()` raises would look fine until the GPU run fails on it. Both functions build
their tensors on the CPU in KernelBench files, so `probe_reference_inputs()` calls them in a
child process (`sandbox.run_in_child`: own session, scrubbed environment, temporary working
directory, memory limit, killed with its parent and on timeout or cancel) and turns an
exception into a `reference.get_inputs_failed` error located on the reference's line that
raised (else on the function's `def`). The child execs the reference with the lines that build
or define a candidate blanked (`reference.reference_only_source`), so no extension is built.

Outcomes are cached by content (reference text, its path, torch's version) under
`VerifyConfig.cache_dir/reference-inputs/`, so an unchanged reference costs a file read.

Undecided, never reported: an exception that needs a GPU (its traceback passes through
`torch.cuda`, e.g. `.cuda()` on a CPU-only torch), an `ImportError` (the GPU machine may have
the package), a timeout, a crash or a missing result. Not covered: the GPU run's secret seed
and input distributions (run/inputs.py) — this calls the functions once, as written.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudice.verifier.config import VerifyConfig
from cudice.verifier.process import CancelToken
from cudice.verifier.run.sandbox import ChildOutcome, run_in_child
from cudice.verifier.source.document import Document
from cudice.verifier.source.reference import reference_only_source
from cudice.verifier.source.result import Diagnostic, Location, Severity, Stage

PROBE_TIMEOUT_S = 60.0  # far above torch's import plus KernelBench inputs, even on a loaded small box
CACHE_VERSION = "1"
MODULE_NAME = "cudice_reference"
RunChild = Callable[..., ChildOutcome]


@dataclass(frozen=True, slots=True)
class InputsProbe:
    """What calling the reference's input functions said: `failure` is empty when nothing raised
    (or when it could not be decided here); `traceback` is the child's text, for `VerifyResult.error`."""

    failure: tuple[Diagnostic, ...] = ()
    traceback: str = ""
    cached: bool = False


def probe_reference_inputs(
    ref: Document,
    config: VerifyConfig,
    *,
    torch_version: str = "",
    cancel: CancelToken | None = None,
    run_child: RunChild | None = None,
) -> InputsProbe:
    """Call `get_init_inputs()` and `get_inputs()` of `ref` in a child process (cached by content)."""
    key = hashlib.sha256(
        json.dumps([CACHE_VERSION, ref.path, ref.text, torch_version, sys.version]).encode()
    ).hexdigest()
    cache = Path(config.cache_dir) / "reference-inputs" / f"{key}.json"
    answer, cached = _read(cache), True
    if answer is None:
        cached = False
        job = {"reference_path": ref.path, "reference_source": ref.text}
        child = (run_child or run_in_child)(
            job,
            timeout_s=min(PROBE_TIMEOUT_S, config.timeout_s),
            memory_limit_mib=config.memory_limit_mib,
            max_output_bytes=config.max_output_bytes,
            cancel=cancel,
            module="cudice.verifier.run.reference_probe",
        )
        if child.result is None or "raised" not in child.result:
            return InputsProbe()  # a timeout, a cancel or a crash decides nothing about the reference
        answer = child.result
        _write(cache, answer)
    found = answer.get("raised")
    if not isinstance(found, dict):
        return InputsProbe(cached=cached)
    return InputsProbe((_diagnostic(ref, found),), str(found.get("traceback", "")), cached)


def _diagnostic(ref: Document, found: dict[str, Any]) -> Diagnostic:
    function = str(found.get("function", "get_inputs"))
    info = ref.get_init_inputs if function == "get_init_inputs" else ref.get_inputs
    line = found.get("line")
    if isinstance(line, int) and line >= 1:
        text = ref.index.line_text(line - 1) if line <= ref.index.num_lines else ""
        where = Location(ref.path, line, len(text) - len(text.lstrip()) + 1)
    elif info is not None:
        where = ref.location(info.span)
    else:
        where = Location(ref.path, 1, 1)
    call = "loading the reference" if function == "<module>" else f"`{function}()` of the reference"
    return Diagnostic(
        Severity.ERROR,
        f"{call} raised {found.get('type', 'an exception')}: {found.get('message', '')}. The GPU run "
        "calls it to make the inputs, so it would stop here with `runtime_error` before the kernel "
        f"runs; fix {Path(ref.path).name} (only compiling was checked here, on the CPU).",
        "reference.get_inputs_failed",
        Stage.LOAD,
        where,
    )


def _read(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) and "raised" in value else None


def _write(path: Path, value: dict[str, Any]) -> None:
    """Write to a temporary name, then rename (as every cache entry: docs/verifier.md)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "w") as f:
            json.dump(value, f)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache only costs the next probe


# -- the child -------------------------------------------------------------------------------------


def _probe(path: str, source: str) -> dict[str, Any]:
    """In the child: exec the reference, call its input functions; `raised` says what raised, or None."""
    import types

    text = reference_only_source(source)
    before, after = source.split("\n"), text.split("\n")  # ast.unparse may have moved the lines
    lines_kept = len(before) == len(after) and all(a in ("", b) for a, b in zip(after, before, strict=True))
    mod = types.ModuleType(MODULE_NAME)
    mod.__file__ = path
    sys.modules[MODULE_NAME] = mod
    function = "<module>"
    try:
        exec(compile(text, path, "exec"), mod.__dict__)
        for function in ("get_init_inputs", "get_inputs"):
            fn = getattr(mod, function, None)
            if callable(fn):
                fn()
    except Exception as exc:
        if isinstance(exc, ImportError) or _needs_gpu(exc):
            return {"raised": None, "undecided": f"{type(exc).__name__}: {exc}"}
        import traceback

        return {
            "raised": {
                "function": function,
                "type": type(exc).__name__,
                "message": str(exc).strip()[:500],
                "line": _raising_line(exc, path) if lines_kept else None,
                "traceback": traceback.format_exc(limit=-6)[-4000:],
            }
        }
    return {"raised": None}


def _needs_gpu(exc: BaseException) -> bool:
    """Whether `exc` came from asking a machine without a usable GPU for CUDA."""
    import torch

    if torch.cuda.is_available():
        return False
    tb = exc.__traceback__
    while tb is not None:
        if f"{os.sep}torch{os.sep}cuda{os.sep}" in tb.tb_frame.f_code.co_filename:
            return True
        tb = tb.tb_next
    return "cuda" in str(exc).lower()


def _raising_line(exc: BaseException, path: str) -> int | None:
    """The deepest line of the reference in the traceback (the user's line, not torch's)."""
    line, tb = None, exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == path:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def main(argv: list[str] | None = None) -> int:
    """`python -m cudice.verifier.run.reference_probe --result-fd FD`: the job on stdin, the answer on FD."""
    args = argv if argv is not None else sys.argv[1:]
    fd = int(args[args.index("--result-fd") + 1])
    job = json.loads(sys.stdin.read())
    answer = _probe(str(job["reference_path"]), str(job["reference_source"]))
    with os.fdopen(fd, "w") as f:
        json.dump(answer, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
