"""A warm runner for the pool: every job gets fresh processes, started before the job arrives.

Starting Python, importing torch and creating CUDA contexts costs seconds per process. Reusing a
process that ran a candidate would carry the candidate's leftovers (dispatcher overrides,
patched modules, a poisoned CUDA context) into the next job, so `PersistentRunner` never reuses
one: it keeps a *spare* judge (judge.py, which starts its two runner processes at once) warmed
up and waiting for a job on stdin. A job takes the spare; when it ends, its whole process tree
is killed and a new spare starts, warming up while the pool compiles the next candidate.
Same contract as `sandbox.run_in_child` (it can be `verify()`'s `run_child`); the result comes
back on the spare's result pipe, never through a file.

Not covered: a job whose config names another build cache than the spare's gets its runners
restarted inside the judge (correct, only slower); GPU memory of the spare's idle CUDA contexts
(three per GPU while it waits) is not given back until it is used or closed.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from cudice.verifier.process import CancelToken, kill_group, wait_or_kill
from cudice.verifier.sandbox import ChildOutcome, ResultPipe, _limits, _tail, scrubbed_env, start_child

STARTUP_ALLOWANCE_S = 30.0  # a judge and its two runners import torch and create CUDA contexts in this time


@dataclass
class _Spare:
    proc: Any
    pipe: ResultPipe
    work: Path
    stdout: IO[bytes]
    stderr: IO[bytes]
    memory_limit_mib: int
    started: float = 0.0  # time.monotonic() at start

    def discard(self) -> None:
        kill_group(self.proc.pid)
        self.proc.wait()
        self.stdout.close()
        self.stderr.close()
        shutil.rmtree(self.work, ignore_errors=True)


class PersistentRunner:
    """Runs jobs one at a time, each in a fresh judge started ahead of time. Thread-safe."""

    def __init__(
        self,
        *,
        env: dict[str, str] | None = None,
        module: str = "cudice.verifier.judge",
        max_file_mib: int = 1024,
    ) -> None:
        self.env, self.module, self.max_file_mib = env or {}, module, max_file_mib
        self._lock = threading.Lock()
        self._spare: _Spare | None = None
        self._last_config: dict[str, Any] | None = None
        self.num_started = 0  # judge processes started so far (tests and benchmarks read it)

    def _spawn(self, memory_limit_mib: int, config: dict[str, Any] | None) -> _Spare:
        work = Path(tempfile.mkdtemp(prefix="cudice-runner-"))
        out, err = open(work / "stdout.txt", "wb"), open(work / "stderr.txt", "wb")
        proc, pipe = start_child(
            {"config": config} if config else None,
            module=self.module,
            cwd=work,
            stdout=out,
            stderr=err,
            env=scrubbed_env(self.env, home=str(work)),
            preexec_fn=_limits(memory_limit_mib, self.max_file_mib),
        )
        self.num_started += 1
        return _Spare(proc, pipe, work, out, err, memory_limit_mib, time.monotonic())

    def warm_up(self, memory_limit_mib: int, config: dict[str, Any] | None = None) -> None:
        """Start the spare now (the pool calls this when it starts)."""
        with self._lock:
            if self._spare is None:
                self._spare = self._spawn(memory_limit_mib, config)

    def close(self) -> None:
        with self._lock:
            if self._spare is not None:
                self._spare.discard()
                self._spare = None

    def __call__(
        self,
        job: dict[str, Any],
        *,
        timeout_s: float,
        memory_limit_mib: int,
        max_output_bytes: int = 65536,
        cancel: CancelToken | None = None,
        env: dict[str, str] | None = None,
    ) -> ChildOutcome:
        """Same contract as `sandbox.run_in_child`."""
        with self._lock:
            t0 = time.perf_counter()
            spare = self._spare
            self._spare = None
            if spare is None or spare.proc.poll() is not None or spare.memory_limit_mib != memory_limit_mib:
                if spare is not None:
                    spare.discard()
                spare = self._spawn(memory_limit_mib, job.get("config"))
            try:
                spare.pipe.send_job(job)
                # a spare still starting up does not eat the job's time: the one-shot path includes the
                # start-up in `timeout_s` only because it has nothing to warm up ahead
                allowance = max(0.0, STARTUP_ALLOWANCE_S - (time.monotonic() - spare.started))
                cancelled, timed_out = wait_or_kill(spare.proc, timeout_s + allowance, cancel)
                kill_group(spare.proc.pid)  # the judge's runners and anything they started end with the job
                result = spare.pipe.result()
                spare.stdout.flush()
                spare.stderr.flush()
                outcome = ChildOutcome(
                    result,
                    spare.proc.returncode,
                    _tail(spare.work / "stdout.txt", max_output_bytes),
                    _tail(spare.work / "stderr.txt", max_output_bytes),
                    time.perf_counter() - t0,
                    timed_out,
                    cancelled,
                )
            finally:
                spare.discard()
            self._spare = self._spawn(memory_limit_mib, job.get("config"))  # warms up while the pool compiles
            return outcome
