"""A persistent sandboxed runner: one long-lived worker process that serves many jobs.

Starting Python, importing torch and creating a CUDA context costs ~5–8 s per candidate;
`PersistentRunner` pays it once. The child is the same `cudice.verifier.worker` (in `--serve`
mode) under the same isolation as sandbox.py (own session, scrubbed environment, temporary
working directory, RLIMIT_DATA, no core dumps). Jobs go in as `job<TAB>result` file paths on
its stdin; the result is the JSON file the worker renames into place.

The process is **replaced** (killed and started fresh on the next job) after every job whose
verdict is not `correct`/`compiled`, after a timeout, cancel or crash, when the timer/compare
functions were found patched, and after `max_jobs` jobs — so a poisoned CUDA context or a
candidate that tampered with the process never serves the next candidate.

Not covered: a correct-looking candidate that tampers with state the guarded-function check
does not see can affect the next job in the same process (use `VerifyPool(persistent=False)`
for one process per candidate when that matters more than throughput).
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
from pathlib import Path
from typing import IO, Any, Protocol

from cudice.verifier.process import kill_group
from cudice.verifier.sandbox import ChildOutcome, scrubbed_env

KEEP_AFTER = ("correct", "compiled")


class CancelToken(Protocol):
    def is_set(self) -> bool: ...


def _preexec(memory_limit_mib: int) -> Callable[[], None]:
    def apply() -> None:
        limit = memory_limit_mib * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        # as sandbox.py: a stdout/stderr flood stops at 1 GiB per file instead of filling the disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 30, 1 << 30))

    return apply


class PersistentRunner:
    """Runs jobs one at a time in a reused worker process. Thread-safe (one job at a time)."""

    def __init__(self, *, env: dict[str, str] | None = None, max_jobs: int = 100,
                 module: str = "cudice.verifier.worker") -> None:
        self.env, self.max_jobs, self.module = env or {}, max_jobs, module
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._work: Path | None = None
        self._jobs_served = 0
        self._memory_limit_mib = 0
        self.num_started = 0  # processes started so far (tests and benchmarks read it)

    def _start(self, memory_limit_mib: int) -> subprocess.Popen[bytes]:
        self._work = Path(tempfile.mkdtemp(prefix="cudice-runner-"))
        self._stdout: IO[bytes] = open(self._work / "stdout.txt", "wb")
        self._stderr: IO[bytes] = open(self._work / "stderr.txt", "wb")
        self._proc = subprocess.Popen(
            [sys.executable, "-m", self.module, "--serve"], cwd=self._work, stdin=subprocess.PIPE,
            stdout=self._stdout, stderr=self._stderr, env=scrubbed_env(self.env, home=str(self._work)),
            start_new_session=True, preexec_fn=_preexec(memory_limit_mib))
        self._jobs_served = 0
        self._memory_limit_mib = memory_limit_mib
        self.num_started += 1
        return self._proc

    def close(self) -> None:
        with self._lock:
            self._stop()

    def _stop(self) -> None:
        if self._proc is not None:
            kill_group(self._proc.pid)
            self._proc.wait()
            self._proc = None
            self._stdout.close()
            self._stderr.close()
        if self._work is not None:
            shutil.rmtree(self._work, ignore_errors=True)
            self._work = None

    def __call__(self, job: dict[str, Any], *, timeout_s: float, memory_limit_mib: int,
                 max_output_bytes: int = 65536, cancel: CancelToken | None = None,
                 env: dict[str, str] | None = None) -> ChildOutcome:
        """Same contract as `sandbox.run_in_child` (so it can be verify()'s `run_child`)."""
        with self._lock:
            return self._run(job, timeout_s, memory_limit_mib, max_output_bytes, cancel)

    def _run(self, job: dict[str, Any], timeout_s: float, memory_limit_mib: int, max_output_bytes: int,
             cancel: CancelToken | None) -> ChildOutcome:
        proc = self._proc
        if proc is None or proc.poll() is not None or memory_limit_mib != self._memory_limit_mib:
            self._stop()
            proc = self._start(memory_limit_mib)
        assert self._work is not None and proc.stdin is not None
        t0 = time.perf_counter()
        n = self._jobs_served
        job_path, res_path = self._work / f"job{n}.json", self._work / f"result{n}.json"
        job_path.write_text(json.dumps(job))
        out_mark, err_mark = (self._work / "stdout.txt").stat().st_size, (self._work / "stderr.txt").stat().st_size
        try:
            proc.stdin.write(f"{job_path}\t{res_path}\n".encode())
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the process died; reported below as a crash
        deadline = time.monotonic() + timeout_s
        timed_out = cancelled = False
        while not res_path.exists() and proc.poll() is None:
            cancelled = cancel is not None and cancel.is_set()
            timed_out = time.monotonic() > deadline
            if cancelled or timed_out:
                break
            time.sleep(0.01)
        result = None
        if res_path.exists():
            try:
                result = json.loads(res_path.read_text())
            except ValueError:
                result = None
        out = _tail_from(self._work / "stdout.txt", out_mark, max_output_bytes)
        err = _tail_from(self._work / "stderr.txt", err_mark, max_output_bytes)
        returncode = proc.poll()
        self._jobs_served += 1
        verdict = (result or {}).get("verdict")
        patched = any(d.get("code") == "dynamic.timer_patched" for d in (result or {}).get("diagnostics", []))
        if result is None or verdict not in KEEP_AFTER or patched or self._jobs_served >= self.max_jobs:
            self._stop()  # never reuse a process after a failure (a CUDA error poisons the context)
            returncode = returncode if returncode is not None else -signal.SIGKILL
        return ChildOutcome(result, returncode if result is None else 0, out, err, time.perf_counter() - t0,
                            timed_out and result is None, cancelled and result is None)


def _tail_from(path: Path, start: int, limit: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(start, f.seek(0, os.SEEK_END) - limit))
            data = f.read()
    except OSError:
        return ""
    return data.decode(errors="replace")
