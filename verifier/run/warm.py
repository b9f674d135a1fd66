"""A warm runner for the pool: every job gets fresh processes, started before the job arrives.

Starting Python, importing torch and creating CUDA contexts costs seconds per process. Reusing a
process that ran a candidate would carry the candidate's leftovers (dispatcher overrides,
patched modules, a poisoned CUDA context) into the next job, so `PersistentRunner` never reuses
one: it keeps a *spare* judge (run/judge.py, which starts its two runner processes at once) warmed
up and waiting for a job on stdin. A job takes the spare; when it ends, its whole process tree
is killed and a new spare starts, warming up while the pool compiles the next candidate.
Same contract as `sandbox.run_in_child` (it can be `verify()`'s `run_child`); the result comes
back on the spare's result pipe, never through a file.

`spares` judges are kept warm (the pool keeps four per GPU: a judge takes several times longer to
warm up than a warm job takes, so with four a queue of compiled candidates rarely waits for one;
docs/benchmarks.md); new ones start after a job ends, never during its timing, but they warm up
during the next jobs' runs (CPU work and a CUDA context each, no kernels of note).

Not covered: a job whose config names another build cache than the spare's gets its runners
restarted inside the judge (correct, only slower). GPU memory of the spares' idle CUDA contexts
(three per spare while it waits) is given back only by `park()` (the pool's `idle()`) or
`close()`.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from cudice.verifier.config import VerifyConfig
from cudice.verifier.process import CancelToken, kill_group, wait_or_kill
from cudice.verifier.run.sandbox import (
    ChildOutcome,
    ResultPipe,
    child_limits,
    read_tail,
    scrubbed_env,
    start_child,
)

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
        module: str = "cudice.verifier.run.judge",
        max_file_mib: int = 1024,
        spares: int = 1,
        respawn: bool = True,
    ) -> None:
        """spares: judges kept warm at once (a pool whose jobs queue up takes the next one while the
        one it just replaced still warms up); respawn=False: none is started after a job (a process
        that serves a single job, such as the editor's verification worker)."""
        self.env, self.module, self.max_file_mib = env or {}, module, max_file_mib
        self.spares, self.respawn = max(1, spares), respawn
        self._lock = threading.Lock()
        self._spares: list[_Spare] = []  # oldest first
        self._parked = False  # `park()`ed: no spare is started until `warm_up()`
        self.num_started = 0  # judge processes started so far (tests and benchmarks read it)

    def _spawn(self, memory_limit_mib: int, config: dict[str, Any] | None) -> _Spare:
        if config and config.get("cache_dir"):
            # its runners see the cache only if the folder exists when they start (run/boundary.py binds
            # existing paths): a spare may start before the first build has made it
            Path(config["cache_dir"]).mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="cudice-runner-"))
        out, err = open(work / "stdout.txt", "wb"), open(work / "stderr.txt", "wb")
        proc, pipe = start_child(
            {"config": config} if config else None,
            module=self.module,
            cwd=work,
            stdout=out,
            stderr=err,
            env=scrubbed_env(self.env, home=str(work)),
            preexec_fn=child_limits(memory_limit_mib, self.max_file_mib),
        )
        self.num_started += 1
        return _Spare(proc, pipe, work, out, err, memory_limit_mib, time.monotonic())

    def warm_up(self, memory_limit_mib: int, config: dict[str, Any] | None = None) -> None:
        """Start the spares now (the pool calls this when it starts, and after `park()`)."""
        with self._lock:
            self._parked = False
            self._top_up(memory_limit_mib, config)

    def park(self) -> None:
        """Discard the spares and start none until `warm_up()`: their idle CUDA contexts give their
        GPU memory back (an RL update between reward batches needs it). A job meanwhile still runs,
        in a judge started for it. A job running now ends first (the lock: this call may wait for
        it), and starts no spare after it: the flag is set before the lock is taken."""
        self._parked = True
        with self._lock:
            while self._spares:
                self._spares.pop().discard()

    def _top_up(self, memory_limit_mib: int, config: dict[str, Any] | None) -> None:
        while not self._parked and len(self._spares) < self.spares:
            self._spares.append(self._spawn(memory_limit_mib, config))

    def _take(self, memory_limit_mib: int, config: dict[str, Any] | None) -> _Spare:
        """The oldest live spare with this memory limit (others are discarded), or a new judge."""
        while self._spares:
            spare = self._spares.pop(0)
            if spare.proc.poll() is None and spare.memory_limit_mib == memory_limit_mib:
                return spare
            spare.discard()
        return self._spawn(memory_limit_mib, config)

    def close(self) -> None:
        with self._lock:
            while self._spares:
                self._spares.pop().discard()

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
            spare = self._take(memory_limit_mib, job.get("config"))
            try:
                spare.pipe.send_job(job)
                # a spare still starting up does not eat the job's time: the one-shot path includes the
                # start-up in `timeout_s` only because it has nothing to warm up ahead
                allowance = max(0.0, STARTUP_ALLOWANCE_S - (time.monotonic() - spare.started))
                cancelled, timed_out = wait_or_kill(
                    spare.proc, timeout_s + allowance, cancel, finished=spare.pipe.done
                )
                kill_group(spare.proc.pid)  # the judge's runners and anything they started end with the job
                result = spare.pipe.result()
                spare.stdout.flush()
                spare.stderr.flush()
                outcome = ChildOutcome(
                    result,
                    spare.proc.returncode,
                    read_tail(spare.work / "stdout.txt", max_output_bytes),
                    read_tail(spare.work / "stderr.txt", max_output_bytes),
                    time.perf_counter() - t0,
                    timed_out,
                    cancelled,
                )
            finally:
                spare.discard()
            if self.respawn:  # started after the job, not during its timing; warms up while the pool compiles
                self._top_up(memory_limit_mib, job.get("config"))
            return outcome


def judge_ahead(config: VerifyConfig) -> PersistentRunner:
    """One judge started now, with `config`'s cache and memory limit, for the single job still to
    come (no spare follows it): `cudice verify` starts it with the build, the editor's spare
    verification worker before its request arrives."""
    runner = PersistentRunner(respawn=False)
    runner.warm_up(config.memory_limit_mib, {"cache_dir": str(config.cache_dir)})
    return runner
