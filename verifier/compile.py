"""The full build: what `load_inline` does, with torch's own flags, but faster and cancellable.

Levers (DESIGN §4): an explicit arch list (`-gencode arch=compute_90,code=sm_90` via
TORCH_CUDA_ARCH_LIST); one directory per content hash (no shared build directory to race on,
pytorch #155344); an object-level cache (buildsteps.py) so an unchanged source never rebuilds,
an edit of the CUDA string recompiles only `cuda.cu`, and candidates sharing a module name and
C++ declarations share `main.o` (errors are cached too: same text, same errors); the C++ and
CUDA objects compile in parallel and both report their errors; compile-only mode stops before
linking (machines without a CUDA torch).

Compiler messages are parsed (compiler_messages.py) and mapped through the generated files'
line map (generated.py) into the `.py` document; messages on lines cudice wrote (implicit
headers, pybind glue) or in unmappable sources point at the `load_inline` call.

Not covered: ccache/sccache, precompiled headers (gcc's PCH of torch/extension.h is 755 MB and
still 10 s per check here), `extra_cflags` given in the call (not read from the document).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cudice.verifier.buildsteps import StepResult, compile_object, link_library, run_process
from cudice.verifier.compiler_messages import CompilerMessage, caret_column, parse_messages
from cudice.verifier.config import VerifyConfig
from cudice.verifier.document import Document
from cudice.verifier.generated import CUDA_CU, MAIN_CPP, GeneratedModule
from cudice.verifier.process import CancelToken
from cudice.verifier.result import Diagnostic, Location, Severity, Stage
from cudice.verifier.toolchain import ToolchainError, probe_toolchain

OUTCOME = "cudice_outcome.json"


@dataclass(frozen=True, slots=True)
class BuildResult:
    """Outcome of building one generated module."""

    ok: bool
    build_dir: Path
    library: Path | None  # the linked .so (None in compile-only mode or on failure)
    diagnostics: tuple[Diagnostic, ...]
    output: str  # raw compiler output (full precision, for logs)
    wall_s: float
    cached: bool
    cancelled: bool = False
    timed_out: bool = False


def build_module(module: GeneratedModule, path: str, config: VerifyConfig, *, link: bool,
                 cancel: CancelToken | None = None, on_output: Callable[[str], None] | None = None) -> BuildResult:
    """Compile (and with `link`, link) `module`; diagnostics are located in the document at `path`.

    `main.cpp` and `cuda.cu` compile in parallel, each through the object cache (buildsteps.py).
    Blocks until done; `cancel.is_set()` is polled and kills the compilers.
    """
    t0 = time.perf_counter()
    try:
        tc = probe_toolchain(config.cache_dir, config.arch_list_env)
    except ToolchainError as exc:
        diag = Diagnostic(Severity.ERROR, str(exc), "compile.toolchain", Stage.COMPILE, _call_location(module, path))
        return BuildResult(False, config.cache_dir, None, (diag,), str(exc), time.perf_counter() - t0, False)
    cflags, cuda_cflags = tc.flags_for(module.name)
    jobs = [(tc.cxx, cflags, MAIN_CPP)]
    if module.has_cuda:
        jobs.append((tc.nvcc, cuda_cflags, CUDA_CU))
    results: dict[str, StepResult] = {}

    def one(compiler: str, flags: str, name: str) -> None:
        f = module.file(name)
        assert f is not None
        results[name] = compile_object(config.cache_dir, compiler, flags, name, f.text, config.compile_timeout_s,
                                       cancel, on_output)

    threads = [threading.Thread(target=one, args=j, daemon=True) for j in jobs]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    steps = [results[name] for _, _, name in jobs]
    output = "".join(s.output for s in steps)
    ok = all(s.ok for s in steps)
    lib: Path | None = None
    build_dir = config.cache_dir / "objects"
    if ok and link:
        linked = link_library(config.cache_dir, tc.cxx, tc.ldflags, [s.path for s in steps if s.path], module.name,
                              config.compile_timeout_s, cancel)
        steps.append(linked)
        output += linked.output
        ok, lib = linked.ok, linked.path
        build_dir = lib.parent if lib else build_dir
    wall = time.perf_counter() - t0
    cancelled = any(s.cancelled for s in steps)
    timed_out = any(s.timed_out for s in steps)
    if cancelled or timed_out:
        what = "cancelled" if cancelled else f"timed out after {config.compile_timeout_s:.0f} s"
        diag = Diagnostic(Severity.ERROR, f"The build {what}.", "compile.timeout" if timed_out else "compile.cancelled",
                          Stage.COMPILE, _call_location(module, path))
        return BuildResult(False, build_dir, None, (diag,), output, wall, False, cancelled, timed_out)
    diags = map_messages(module, path, parse_messages(output))
    if not ok and not any(d.severity is Severity.ERROR for d in diags):
        tail = "\n".join(output.strip().splitlines()[-15:])
        diags += (Diagnostic(Severity.ERROR, f"The build failed without a compiler message cudice understands:\n{tail}",
                             "compile.failed", Stage.COMPILE, _call_location(module, path)),)
    return BuildResult(ok, build_dir, lib, diags, output, wall, all(s.cached for s in steps))


def map_messages(module: GeneratedModule, path: str, messages: list[CompilerMessage]) -> tuple[Diagnostic, ...]:
    """Turn compiler messages into document diagnostics (errors and warnings; notes become related info)."""
    out: list[Diagnostic] = []
    seen: set[tuple[object, ...]] = set()
    for msg in messages:
        if msg.severity not in ("error", "warning"):
            continue
        loc, where = _locate(module, path, msg)
        if loc is None and msg.severity == "warning":
            continue  # warnings inside torch/CUDA headers are not the user's business
        related = []
        for note in msg.notes:
            nloc, _ = _locate(module, path, note)
            if nloc is not None:
                related.append((nloc, note.message))
        text = msg.message if where == "" else f"{msg.message} ({where})"
        code = f"compile.{msg.severity}"
        if msg.tool == "other":
            code = "compile.link_error" if "undefined" in msg.message or "ld returned" in msg.message else code
        final = loc or _call_location(module, path)
        key = (final.line, final.column, text)
        if key in seen:
            continue
        seen.add(key)
        sev = Severity.ERROR if msg.severity == "error" else Severity.WARNING
        out.append(Diagnostic(sev, text, code, Stage.COMPILE, final, tuple(related)))
    return tuple(out)


def _locate(module: GeneratedModule, path: str, msg: CompilerMessage) -> tuple[Location | None, str]:
    """(location in the document, or None; a note on where the compiler saw it when not user text)."""
    if msg.file is None or msg.line is None:
        return None, ""
    base = Path(msg.file).name
    if base in (MAIN_CPP, CUDA_CU) and module.file(base) is not None:
        column = msg.column or 1
        if msg.caret_text is not None:
            column = caret_column(*msg.caret_text, module.line_text(base, msg.line))
        pos = module.locate(base, msg.line, column)
        if pos is not None:
            return Location(path, pos[0], pos[1], pos[0], pos[1] + 1), ""
        return None, f"generated {base} line {msg.line}: `{module.line_text(base, msg.line).strip()[:80]}`"
    for inc_file, inc_line in reversed(msg.include_chain):
        if Path(inc_file).name in (MAIN_CPP, CUDA_CU):
            pos = module.locate(Path(inc_file).name, inc_line)
            if pos is not None:
                return Location(path, pos[0], pos[1]), f"in {msg.file}:{msg.line}"
    return None, f"in {msg.file}:{msg.line}"


def _call_location(module: GeneratedModule, path: str) -> Location:
    span = module.call_span
    return span.location(path) if span else Location(path, 1, 1)


def _read_outcome(build_dir: Path, link: bool) -> tuple[bool, str] | None:
    """A finished earlier build of the same content that answers this request, if any."""
    try:
        data = json.loads((build_dir / OUTCOME).read_text())
    except (OSError, ValueError):
        return None
    ok, was_link = bool(data.get("ok")), bool(data.get("link"))
    if link:
        usable = (was_link and (not ok or (build_dir / str(data.get("library", ""))).is_file())) or (not was_link and not ok)
    else:
        usable = not was_link or ok
    return (ok, str(data.get("output", ""))) if usable else None


def _write_outcome(build_dir: Path, ok: bool, output: str, link: bool) -> None:
    lib = next((p.name for p in build_dir.glob("*.so")), "") if link else ""
    tmp = build_dir / f"{OUTCOME}.tmp"
    tmp.write_text(json.dumps({"ok": ok, "output": output, "link": link, "library": lib}))
    tmp.replace(build_dir / OUTCOME)


def build_raw_cu(doc: Document, config: VerifyConfig, *, cancel: CancelToken | None = None) -> BuildResult:
    """Compile a raw `.cu` document (extern "C" kernels, no torch) to a cubin with nvcc.

    Its lines are the document's lines, so messages map one to one. Cached by content hash.
    """
    import hashlib

    from cudice.verifier.toolchain import cuda_home

    t0 = time.perf_counter()
    nvcc = str(Path(cuda_home()) / "bin" / "nvcc")
    arch = config.arch_list[0].split("+")[0].replace(".", "")
    key = hashlib.sha256(f"{doc.text}\0{arch}\0{nvcc}".encode()).hexdigest()[:20]
    build_dir = config.cache_dir / f"rawcu-{key}"
    build_dir.mkdir(parents=True, exist_ok=True)
    cached = _read_outcome(build_dir, False)
    if cached is not None:
        ok, output = cached
        cached_hit = True
    else:
        src = build_dir / "kernel.cu"
        src.write_text(doc.text)
        cmd = [nvcc, f"-gencode=arch=compute_{arch},code=sm_{arch}", "-cubin", "-o", str(build_dir / "kernel.cubin"),
               str(src)]
        rc, output, cancelled, timed_out = run_process(cmd, config.compile_timeout_s, cancel)
        if cancelled or timed_out:
            diag = Diagnostic(Severity.ERROR, "The build was cancelled or timed out.", "compile.timeout",
                              Stage.COMPILE, Location(doc.path, 1, 1))
            return BuildResult(False, build_dir, None, (diag,), output, time.perf_counter() - t0, False, cancelled,
                               timed_out)
        ok, cached_hit = rc == 0, False
        _write_outcome(build_dir, ok, output, False)
    diags: list[Diagnostic] = []
    lines = doc.text.split("\n")
    for msg in parse_messages(output):
        if msg.severity not in ("error", "warning"):
            continue
        line = msg.line if msg.file and Path(msg.file).name == "kernel.cu" and msg.line else None
        column = msg.column or 1
        if line is not None and msg.caret_text is not None and line <= len(lines):
            column = caret_column(*msg.caret_text, lines[line - 1])
        loc = Location(doc.path, line, column, line, column + 1) if line else Location(doc.path, 1, 1)
        sev = Severity.ERROR if msg.severity == "error" else Severity.WARNING
        diags.append(Diagnostic(sev, msg.message, f"compile.{msg.severity}", Stage.COMPILE, loc))
    if not ok and not any(d.severity is Severity.ERROR for d in diags):
        diags.append(Diagnostic(Severity.ERROR, f"nvcc failed:\n{output.strip()[-1500:]}", "compile.failed",
                                Stage.COMPILE, Location(doc.path, 1, 1)))
    return BuildResult(ok, build_dir, None, tuple(diags), output, time.perf_counter() - t0, cached_hit)
