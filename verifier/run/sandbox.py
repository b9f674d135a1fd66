"""Start the run stage's child process: timeout, memory limit, scrubbed env, temp working dir.

`run_in_child(job, ...)` starts `python -m cudice.verifier.run.judge --result-fd FD` in a fresh
temporary directory, in its own session (so a timeout or a cancel kills the whole process
group), with an environment reduced to what CUDA and the toolchain need, `RLIMIT_DATA` set
to the memory limit, `RLIMIT_FSIZE` bounding every file and core dumps off. The job goes to its
stdin; the result comes back on a pipe created here, whose write end only that child holds —
never through a file. stdout/stderr go to files and only their last `max_output_bytes` are
kept. A crash (signal, abort after an illegal address, `os._exit`), a hang or a missing result
ends only that child. `start_child`, `child_limits`, `scrubbed_env` and `read_tail` are the parts
run/warm.py reuses for its warm spares.

The candidate's code never runs in this child: the judge (run/judge.py) starts runner processes
inside the OS boundary (run/boundary.py) for it. Not covered here: GPU
memory limits (another process on the same GPU can be starved); `RLIMIT_DATA` does not bound
pinned or device memory.
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
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudice.verifier.process import CancelToken, die_with_parent, kill_group, wait_or_kill

KEEP_ENV = (
    "PATH",
    "LANG",
    "LC_ALL",
    "CUDA_HOME",
    "CUDA_PATH",
    "CUDA_VISIBLE_DEVICES",
    "LD_LIBRARY_PATH",
    "TORCH_CUDA_ARCH_LIST",
    "PYTHONPATH",
    "CUDICE_CACHE_DIR",
    "NVIDIA_VISIBLE_DEVICES",
    "TMPDIR",
    "VIRTUAL_ENV",
    "CUDA_DEVICE_ORDER",
    "CUDICE_TIMING_TRACE",  # the judge's per-phase breakdown of timed calls (bench/timing_fidelity.py)
    "CUDICE_TIMING_SAMPLES",  # a folder for the judge's per-call timing samples (bench/timing_fidelity.py)
)


@dataclass(frozen=True, slots=True)
class ChildOutcome:
    result: dict[str, Any] | None  # None when the child wrote no result
    returncode: int | None  # -SIGKILL also when the child was ended after its result was complete
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


def child_limits(memory_limit_mib: int, max_file_mib: int) -> Callable[[], None]:
    """The `preexec_fn` of a judge child (also run/warm.py's spares): it dies with its parent, its data
    segment is bounded by the memory limit, core dumps are off and no file grows past `max_file_mib`."""

    def apply() -> None:
        # a judge whose starter died (a killed CLI, worker or pool thread) must not live on: it has no
        # clock of its own and would wait forever on a hung candidate
        die_with_parent()
        limit = memory_limit_mib * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        # an stdout/stderr flood (or any file) stops at this size: SIGXFSZ ends the child, the disk stays free
        file_limit = max_file_mib * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_limit, file_limit))

    return apply


def run_in_child(
    job: dict[str, Any],
    *,
    timeout_s: float,
    memory_limit_mib: int,
    max_output_bytes: int = 65536,
    cancel: CancelToken | None = None,
    env: dict[str, str] | None = None,
    module: str = "cudice.verifier.run.judge",
    max_file_mib: int = 1024,
) -> ChildOutcome:
    """Run `python -m module --result-fd FD` under the limits above; never raises for child failures.

    The job goes to the child's stdin; the result comes back on a pipe this function created
    (`FD` is its write end, inherited by the child only). The default module is the judge
    (run/judge.py), which keeps the candidate in runner processes of its own.
    """
    work = Path(tempfile.mkdtemp(prefix="cudice-run-"))
    t0 = time.perf_counter()
    try:
        out_path, err_path = work / "stdout.txt", work / "stderr.txt"
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc, reader = start_child(
                job,
                module=module,
                cwd=work,
                stdout=out,
                stderr=err,
                env=scrubbed_env(env, home=str(work)),
                preexec_fn=child_limits(memory_limit_mib, max_file_mib),
            )
            reader.send_job(job)
            cancelled, timed_out = wait_or_kill(proc, timeout_s, cancel, finished=reader.done)
            kill_group(proc.pid)  # also after a normal exit: a forked grandchild must not outlive the job
        return ChildOutcome(
            reader.result(),
            proc.returncode,
            read_tail(out_path, max_output_bytes),
            read_tail(err_path, max_output_bytes),
            time.perf_counter() - t0,
            timed_out,
            cancelled,
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


class ResultPipe:
    """The parent's end of a child's result channel: a pipe only the parent and that child hold."""

    def __init__(self, proc: subprocess.Popen[bytes], read_fd: int) -> None:
        self.proc = proc
        self._chunks: list[bytes] = []
        self._thread = threading.Thread(target=self._read, args=(read_fd,), daemon=True)
        self._thread.start()

    def _read(self, fd: int) -> None:
        with os.fdopen(fd, "rb") as f:
            while chunk := f.read(1 << 16):
                self._chunks.append(chunk)

    def send_job(self, job: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(job).encode())
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass  # the child died first: reported as a crash

    def done(self) -> bool:
        return not self._thread.is_alive()

    def result(self, wait_s: float = 10.0) -> dict[str, Any] | None:
        """The child's result once the pipe closed (it closes when the child and its fork are gone)."""
        self._thread.join(wait_s)
        try:
            value = json.loads(b"".join(self._chunks)) if self._chunks and self.done() else None
        except ValueError:
            return None
        return value if isinstance(value, dict) else None


def start_child(
    job: dict[str, Any] | None,
    *,
    module: str,
    cwd: Path,
    stdout: Any,
    stderr: Any,
    env: dict[str, str],
    preexec_fn: Callable[[], None],
) -> tuple[subprocess.Popen[bytes], ResultPipe]:
    """Start `python -m module --result-fd FD [--cache-dir DIR]` in its own session, stdin a pipe."""
    read_fd, write_fd = os.pipe()
    argv = [sys.executable, "-m", module, "--result-fd", str(write_fd)]
    cache = ((job or {}).get("config") or {}).get("cache_dir") or env.get("CUDICE_CACHE_DIR")
    if cache:
        argv += ["--cache-dir", str(cache)]
    if (job or {}).get("skip_timing"):
        argv.append("--no-timing")  # the judge need not start the reference's runner
    try:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=stdout,
            stderr=stderr,
            env=env,
            start_new_session=True,
            preexec_fn=preexec_fn,
            pass_fds=(write_fd,),
        )
    finally:
        os.close(write_fd)  # from here on only the child holds the write end
    return proc, ResultPipe(proc, read_fd)


def read_tail(path: Path, limit: int) -> str:
    """The last `limit` bytes of the file `path` as text (marked when cut), "" if it cannot be read."""
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
