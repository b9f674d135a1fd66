"""The exact compiler flags torch's `load_inline` would use, probed once per toolchain and cached.

The probe runs in a child Python (the calling process — e.g. the language server — never
imports torch): it asks torch's own `_write_ninja_file_to_build_library` to emit a build file
for a dummy extension with `TORCH_CUDA_ARCH_LIST` set, and reads `cflags`, `cuda_cflags` and
`ldflags` back from it. So cudice's build uses torch's flags for whatever torch is installed.
A CPU-only torch has no CUDA_HOME; the probe points it at the CUDA toolkit (`CUDA_HOME`, else
`/usr/local/cuda`) so compile-only builds work on GPU-less CI machines.

Not covered: ROCm/SYCL builds, MSVC; link flags of a CPU-only torch name CUDA libraries it
lacks, so such a machine can compile but not link (compile-only mode).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudice.verifier.process import CancelToken

PROBE_NAME = "cudice_probe_ext"
_PROBE = r"""
import json, os, sys, tempfile
import torch, torch.utils.cpp_extension as ce
if ce.CUDA_HOME is None:
    ce.CUDA_HOME = sys.argv[1]
d = tempfile.mkdtemp()
for f in ("main.cpp", "cuda.cu"):
    open(os.path.join(d, f), "w").close()
ld = ce._prepare_ldflags([], True, False, False, False)
ce._write_ninja_file_to_build_library(
    path=os.path.join(d, "build.ninja"), name=sys.argv[2],
    sources=[os.path.join(d, "main.cpp"), os.path.join(d, "cuda.cu")], extra_cflags=[], extra_cuda_cflags=[],
    extra_sycl_cflags=[], extra_ldflags=ld, extra_include_paths=[], with_cuda=True, with_sycl=False,
    is_standalone=False)
vars = {}
for line in open(os.path.join(d, "build.ninja")):
    if " = " in line and not line.startswith(" "):
        k, v = line.rstrip("\n").split(" = ", 1)
        vars[k.strip()] = v
print(json.dumps({"torch": torch.__version__, "cuda_available": torch.cuda.is_available(),
                  "vars": vars, "cuda_home": ce.CUDA_HOME}))
"""


class ToolchainError(RuntimeError):
    """torch, nvcc, ninja or a C++ compiler is missing or broken; the message says which and how to fix."""


@dataclass(frozen=True, slots=True)
class Toolchain:
    python: str
    torch_version: str
    cuda_home: str
    nvcc: str
    cxx: str
    cflags: str  # with TORCH_EXTENSION_NAME=<probe name>; see flags_for()
    cuda_cflags: str
    ldflags: str
    arch_list: str

    def flags_for(self, name: str) -> tuple[str, str]:
        """(cflags, cuda_cflags) for an extension called `name`; raises ValueError unless `name` is a C
        identifier (the flags are split like a shell's: any other name would add options)."""
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(
                f"extension name {name!r} is not a C identifier; it cannot become a compiler flag"
            )
        probe = f"-DTORCH_EXTENSION_NAME={PROBE_NAME}"
        return (
            self.cflags.replace(probe, f"-DTORCH_EXTENSION_NAME={name}"),
            self.cuda_cflags.replace(probe, f"-DTORCH_EXTENSION_NAME={name}"),
        )

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(
            json.dumps(
                [
                    self.torch_version,
                    self.nvcc,
                    self.cxx,
                    self.cflags,
                    self.cuda_cflags,
                    self.ldflags,
                    self.arch_list,
                ]
            ).encode()
        ).hexdigest()[:16]


def cuda_home() -> str:
    env = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if env:
        return env
    if Path("/usr/local/cuda/bin/nvcc").exists():
        return "/usr/local/cuda"
    nvcc = shutil.which("nvcc")
    if nvcc:
        return str(Path(nvcc).resolve().parent.parent)
    return "/usr/local/cuda"


def probe_toolchain(
    cache_dir: Path,
    arch_list: str,
    python: str | None = None,
    timeout_s: float = 180.0,
    cancel: CancelToken | None = None,
) -> Toolchain:
    """torch's extension flags for this machine (cached in `cache_dir` per python + arch list).

    The probe (a Python child that imports torch, seconds) runs through `objects.run_process`: it
    dies with the calling thread, and with its family on `cancel` (a ToolchainError then, nothing
    cached)."""
    python = python or sys.executable
    home = cuda_home()
    key = hashlib.sha256(f"{python}\0{arch_list}\0{home}\0{_torch_stamp()}".encode()).hexdigest()[:16]
    cache = cache_dir / f"toolchain-{key}.json"
    if cache.is_file():
        try:
            return Toolchain(**json.loads(cache.read_text()))
        except (ValueError, TypeError):
            pass  # stale or corrupt cache: probe again
    nvcc = str(Path(home) / "bin" / "nvcc")
    if not Path(nvcc).exists():
        raise ToolchainError(f"nvcc not found at {nvcc}: install the CUDA toolkit or set CUDA_HOME.")
    env = {**os.environ, "TORCH_CUDA_ARCH_LIST": arch_list, "CUDA_HOME": home}
    from cudice.verifier.build.objects import run_process

    try:
        rc, out, cancelled, timed_out = run_process(
            [python, "-c", _PROBE, home, PROBE_NAME], timeout_s, cancel, env=env
        )
    except OSError as exc:
        raise ToolchainError(f"Probing torch's extension flags failed: {exc}") from exc
    if cancelled or timed_out:
        raise ToolchainError(
            "Probing torch's extension flags was cancelled"
            if cancelled
            else f"Probing torch's extension flags took over {timeout_s:.0f} s (a busy machine?); try again"
        )
    info = _probe_record(out)  # stdout and stderr are merged: the record is the last JSON line
    if rc != 0 or info is None:
        tail = out.strip().splitlines()[-1:] or ["(no output)"]
        raise ToolchainError(
            f"Probing torch's extension flags failed ({tail[0]}); is torch installed for {python}?"
        )
    v = info["vars"]
    tc = Toolchain(
        python,
        info["torch"],
        home,
        v.get("nvcc", nvcc),
        v.get("cxx", "c++"),
        v.get("cflags", ""),
        v.get("cuda_cflags", ""),
        v.get("ldflags", ""),
        arch_list,
    )
    cache_dir.mkdir(parents=True, exist_ok=True)
    # unique per process *and* thread: a pool's threads probe concurrently on a cold cache
    tmp = cache.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(_asdict(tc)))
    tmp.replace(cache)
    return tc


def _probe_record(output: str) -> dict[str, Any] | None:
    """The probe's record: the last output line that is a JSON object with "vars" and "torch"."""
    for line in reversed(output.strip().splitlines()):
        try:
            info = json.loads(line)
        except ValueError:
            continue
        if isinstance(info, dict) and isinstance(info.get("vars"), dict) and "torch" in info:
            return info
    return None


def _asdict(tc: Toolchain) -> dict[str, str]:
    return {f: getattr(tc, f) for f in Toolchain.__slots__}


def _torch_stamp() -> str:
    """Changes when torch is reinstalled (its package folder's mtime), without importing it."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return "no-torch"
    p = Path(next(iter(spec.submodule_search_locations)))
    try:
        return f"{p}:{(p / 'version.py').stat().st_mtime_ns}"
    except OSError:
        return str(p)
