"""Run untrusted work in a child process: timeout, memory limit, scrubbed env, temp working dir.

`run_in_child(job, ...)` starts `python -m cudice.verifier.worker job.json result.json` in a
fresh temporary directory, in its own session (so a timeout or a cancel kills the whole process
group), with an environment reduced to what CUDA and the toolchain need, `RLIMIT_DATA` set
to the memory limit and core dumps off. stdout/stderr go to files and only their last
`max_output_bytes` are kept. The result comes back as JSON in a file. A crash (signal, abort
after an illegal address, `os._exit`), a hang or a missing result ends only that child.

What the isolation does NOT cover: it is not a security sandbox — the child runs as the same
user, can read files the user can read, and can use the network; GPU memory is not limited
(another process on the same GPU can be starved); `RLIMIT_DATA` does not bound pinned or
device memory. Run untrusted candidates on a machine (or container) you can afford to lose.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudice.verifier.process import CancelToken, kill_group, wait_or_kill

KEEP_ENV = ("PATH", "LANG", "LC_ALL", "CUDA_HOME", "CUDA_PATH", "CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH",
            "TORCH_CUDA_ARCH_LIST", "PYTHONPATH", "CUDICE_CACHE_DIR", "NVIDIA_VISIBLE_DEVICES", "TMPDIR",
            "VIRTUAL_ENV", "CUDA_DEVICE_ORDER")


@dataclass(frozen=True, slots=True)
class ChildOutcome:
    result: dict[str, Any] | None  # None when the child wrote no result
    returncode: int | None
    stdout_tail: str
    stderr_tail: str
    wall_s: float
    timed_out: bool = False
    cancelled: bool = False

    @property
    def signal_name(self) -> str | None:
        if self.returncode is not None and self.returncode < 0:
            try:
                return signal.Signals(-self.returncode).name
            except ValueError:
                return f"signal {-self.returncode}"
        return None


def scrubbed_env(extra: dict[str, str] | None = None, home: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in KEEP_ENV}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if home is not None:
        env["HOME"] = home
        env["TORCH_EXTENSIONS_DIR"] = str(Path(home) / "torch_extensions")
    env.update(extra or {})
    return env


def _limits(memory_limit_mib: int, max_file_mib: int) -> Callable[[], None]:
    def apply() -> None:
        limit = memory_limit_mib * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        # an stdout/stderr flood (or any file) stops at this size: SIGXFSZ ends the child, the disk stays free
        file_limit = max_file_mib * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_limit, file_limit))

    return apply


def run_in_child(job: dict[str, Any], *, timeout_s: float, memory_limit_mib: int, max_output_bytes: int = 65536,
                 cancel: CancelToken | None = None, env: dict[str, str] | None = None,
                 module: str = "cudice.verifier.worker", max_file_mib: int = 1024) -> ChildOutcome:
    """Run `python -m module job.json result.json` under the limits above; never raises for child failures."""
    work = Path(tempfile.mkdtemp(prefix="cudice-run-"))
    t0 = time.perf_counter()
    try:
        (work / "job.json").write_text(json.dumps(job))
        out_path, err_path, res_path = work / "stdout.txt", work / "stderr.txt", work / "result.json"
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen([sys.executable, "-m", module, str(work / "job.json"), str(res_path)],
                                    cwd=work, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                    env=scrubbed_env(env, home=str(work)), start_new_session=True,
                                    preexec_fn=_limits(memory_limit_mib, max_file_mib))
            cancelled, timed_out = wait_or_kill(proc, timeout_s, cancel)
            kill_group(proc.pid)  # also after a normal exit: a forked grandchild must not outlive the job
        result = None
        if res_path.is_file():
            try:
                result = json.loads(res_path.read_text())
            except ValueError:
                result = None
        return ChildOutcome(result, proc.returncode, _tail(out_path, max_output_bytes), _tail(err_path, max_output_bytes),
                            time.perf_counter() - t0, timed_out, cancelled)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _tail(path: Path, limit: int) -> str:
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            if size > limit:
                f.seek(size - limit)
            data = f.read()
    except OSError:
        return ""
    text = data.decode(errors="replace")
    return ("…[truncated]\n" + text) if size > limit else text
