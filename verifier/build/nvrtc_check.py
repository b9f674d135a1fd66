"""NVRTC diagnostics for device-only code (raw `.cu` documents): in-process, no GPU, no nvcc.

NVRTC is NVIDIA's runtime compiler (the same EDG front end as nvcc, so its messages have the
nvcc format and the same wording). It compiles device code only and cannot include the torch
headers, so it serves raw `extern "C" __global__` files; torch-extension candidates use the
clangd fast path (build/quick.py). Loaded through `cuda.bindings.nvrtc` (cuda-bindings wheel),
which finds libnvrtc of the installed CUDA toolkit.

Not covered: `#include` of headers outside the CUDA toolkit's include folder.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from cudice.verifier.build.messages import caret_column, parse_messages
from cudice.verifier.build.toolchain import cuda_home
from cudice.verifier.source.document import Document
from cudice.verifier.source.result import Diagnostic, Location, Severity, Stage


class NvrtcUnavailable(RuntimeError):
    """cuda-bindings or libnvrtc is missing."""


@dataclass(frozen=True, slots=True)
class NvrtcResult:
    ok: bool
    diagnostics: tuple[Diagnostic, ...]
    log: str
    wall_s: float


def nvrtc_available() -> bool:
    """Whether NVRTC can be loaded here (checked by compiling an empty program)."""
    from cudice.verifier.source.document import parse_document

    try:
        nvrtc_check(parse_document('extern "C" __global__ void k() {}\n', "probe.cu"))
    except NvrtcUnavailable:
        return False
    return True


def nvrtc_check(doc: Document, arch: str = "9.0") -> NvrtcResult:
    """Compile the document's text with NVRTC for `arch`; errors and warnings located in the file."""
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise NvrtcUnavailable("cuda-bindings is not installed: `pip install cuda-bindings`.") from exc
    t0 = time.perf_counter()
    name = Path(doc.path).name
    try:
        err, prog = nvrtc.nvrtcCreateProgram(doc.text.encode(), name.encode(), 0, [], [])
    except Exception as exc:  # cuda.pathfinder raises its own DynamicLibNotFoundError
        raise NvrtcUnavailable(
            f"libnvrtc not found ({type(exc).__name__}): install the CUDA toolkit's NVRTC "
            "or `pip install nvidia-cuda-nvrtc`."
        ) from exc
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise NvrtcUnavailable(f"nvrtcCreateProgram failed: {err}")
    sm = arch.split("+")[0].replace(".", "")
    opts = [
        f"--gpu-architecture=sm_{sm}".encode(),
        f"-I{Path(cuda_home()) / 'include'}".encode(),
        b"-std=c++17",
    ]
    try:
        (status,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)
        buf = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, buf)
        log = buf.decode(errors="replace").rstrip("\x00")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    lines = doc.text.split("\n")
    diags = []
    for msg in parse_messages(log):
        if msg.severity not in ("error", "warning") or msg.line is None:
            continue
        column = msg.column or 1
        if msg.caret_text is not None and msg.line <= len(lines):
            column = caret_column(*msg.caret_text, lines[msg.line - 1])
        sev = Severity.ERROR if msg.severity == "error" else Severity.WARNING
        diags.append(
            Diagnostic(
                sev,
                msg.message,
                f"fast.{msg.severity}",
                Stage.COMPILE,
                Location(doc.path, msg.line, column, msg.line, column + 1),
            )
        )
    ok = status == nvrtc.nvrtcResult.NVRTC_SUCCESS
    return NvrtcResult(ok, tuple(diags), log, time.perf_counter() - t0)
