"""Build steps with an object-level cache: compile `main.cpp` / `cuda.cu` to objects, link a module.

Each object is cached under `cache_dir/objects/<sha256(tool, flags, text)>/` together with the
compiler's output and exit status, so
- an edit of the CUDA string recompiles only `cuda.cu` (the pybind `main.cpp`, ~40 s of g++
  parsing torch/extension.h, comes from the cache), and
- candidates that share a module name and C++ declarations (common in KernelBench batches)
  share `main.o`.
Failures are cached too (same text and flags, same errors), and a build reads a failed check's
outcome: a check (`check_only`) runs the very steps of the build that read the source and prints
what they print (build/nvcc_split.py, tests/verifier/build/test_check_only.py), so a split nvcc
build of a text whose check failed fails with the check's output (its folder named as the
build's) without compiling; that is how the failed checks build/batch.py decides many at once
also stand for the slim compiles of builds that link. A passed check decides nothing (the build
needs the object); a host compiler's `-fsyntax-only` check or a plain nvcc is never read for a
build.
The two objects compile in parallel as child processes in their own session; a cancel or timeout
kills both, and each compiler gets SIGKILL when the thread that started it dies
(`PR_SET_PDEATHSIG`, Linux), so a killed worker leaves no compiler behind (the language server
also kills the worker's whole family: `kill_family` in verifier/process.py).
The commands are torch's own (build/toolchain.py), as `load_inline`'s ninja file would run them.
Every compiler runs through `run_process` (verifier/process.py, re-exported here for the build steps
that import it from this module).

Not covered: eviction of the cache (delete `cache_dir` to reclaim space), ccache.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shlex
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cudice.verifier.process import CancelToken
from cudice.verifier.process import run_process as run_process  # imported from here too


@dataclass(frozen=True, slots=True)
class StepResult:
    ok: bool
    output: str
    path: Path | None  # the object or library produced
    cached: bool
    cancelled: bool = False
    timed_out: bool = False


def cache_key(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() + b"\0")
    return h.hexdigest()


def compile_object(
    cache_dir: Path,
    compiler: str,
    flags: str,
    file_name: str,
    text: str,
    timeout_s: float,
    cancel: CancelToken | None = None,
    on_output: Callable[[str], None] | None = None,
    split_nvcc: bool = False,
    check_only: bool = False,
) -> StepResult:
    """Compile `text` saved as `file_name` with `compiler flags -c`; cached by content.

    `split_nvcc`: an nvcc compile runs nvcc's own steps with the two front ends side by side
    (build/nvcc_split.py), or plain nvcc when its dry run has another shape.
    `check_only`: only the steps that read the source, for a verdict when nothing will be linked
    (compile-only): a split nvcc stops before the host compiler's pass over the front end's output,
    a host compiler runs with `-fsyntax-only`; no object is written (`path` is None) and the
    outcome is cached apart from the object's. A plain nvcc (no split) still builds the object.
    A split nvcc build whose check is cached as failed fails as it did, without a compile
    (`_failed_check`); the returned step says `cached`.
    """
    key = cache_key(compiler, flags, file_name, text, *(("check-only",) if check_only else ()))
    d = cache_dir / "objects" / key[:32]
    d.mkdir(parents=True, exist_ok=True)
    obj = d / (Path(file_name).stem + ".o")
    with open(d / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second builder of the same object waits, then hits the cache
        outcome = read_outcome(d)
        if outcome is not None and (not outcome[0] or check_only or obj.is_file()):
            return StepResult(outcome[0], outcome[1], obj if outcome[0] and not check_only else None, True)
        if not check_only and split_nvcc and Path(shlex.split(compiler)[0]).name == "nvcc":
            failed = _failed_check(cache_dir, compiler, flags, file_name, text, d)
            if failed is not None:  # the build would fail as its check did (module docstring)
                write_outcome(d, False, failed)
                return StepResult(False, failed, None, True)
        src = d / file_name
        src.write_text(text)
        cmd = [*shlex.split(compiler), *shlex.split(flags), "-c", str(src), "-o", str(obj)]
        nvcc = Path(cmd[0]).name == "nvcc"
        if check_only and not nvcc:
            cmd = [*shlex.split(compiler), *shlex.split(flags), "-fsyntax-only", str(src)]
        steps = None
        if (split_nvcc or check_only) and nvcc:
            from cudice.verifier.build import nvcc_split

            steps = nvcc_split.plan(
                cmd, d / "steps", key, nvcc_split.environment(), cache_dir if check_only else None
            )
            if steps is None:
                shutil.rmtree(d / "steps", ignore_errors=True)
        if steps is not None:
            rc, output, cancelled, timed_out = nvcc_split.run(
                steps, timeout_s, cancel, d, on_output, host_compile=not check_only
            )
        else:
            rc, output, cancelled, timed_out = run_process(cmd, timeout_s, cancel, d, on_output)
        if cancelled or timed_out:
            return StepResult(False, output, None, False, cancelled, timed_out)
        write_outcome(d, rc == 0, output)
    return StepResult(rc == 0, output, obj if rc == 0 and obj.is_file() else None, False)


def _failed_check(
    cache_dir: Path, compiler: str, flags: str, file_name: str, text: str, build_dir: Path
) -> str | None:
    """The output of the failed check of this compile (`check_only`, cached, by build/batch.py or a
    compile-only build), its folder named as the build's `build_dir`; None if none is cached, or it
    passed (a build still needs the object)."""
    d = cache_dir / "objects" / cache_key(compiler, flags, file_name, text, "check-only")[:32]
    outcome = read_outcome(d)
    if outcome is None or outcome[0]:
        return None
    return outcome[1].replace(f"{d}/", f"{build_dir}/")


def link_library(
    cache_dir: Path,
    cxx: str,
    ldflags: str,
    objects: list[Path],
    name: str,
    timeout_s: float,
    cancel: CancelToken | None = None,
) -> StepResult:
    """Link objects into `<name>.so` (cached by the objects' identities and flags)."""
    d = cache_dir / "libs" / cache_key(cxx, ldflags, name, *(str(o) for o in objects))[:32]
    d.mkdir(parents=True, exist_ok=True)
    lib = d / f"{name}.so"
    with open(d / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        outcome = read_outcome(d)
        if outcome is not None and (not outcome[0] or lib.is_file()):
            return StepResult(outcome[0], outcome[1], lib if outcome[0] else None, True)
        cmd = [*shlex.split(cxx), *(str(o) for o in objects), *shlex.split(ldflags), "-o", str(lib)]
        rc, output, cancelled, timed_out = run_process(cmd, timeout_s, cancel, d)
        if cancelled or timed_out:
            return StepResult(False, output, None, False, cancelled, timed_out)
        write_outcome(d, rc == 0, output)
    return StepResult(rc == 0, output, lib if rc == 0 else None, False)


def read_outcome(d: Path) -> tuple[bool, str] | None:
    try:
        data = json.loads((d / "outcome.json").read_text())
        return bool(data["ok"]), str(data["output"])
    except (OSError, ValueError, KeyError):
        return None


def write_outcome(d: Path, ok: bool, output: str) -> None:
    tmp = d / "outcome.json.tmp"
    tmp.write_text(json.dumps({"ok": ok, "output": output}))
    tmp.replace(d / "outcome.json")


def remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
