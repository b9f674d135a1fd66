"""`VerifyPool`: many verifications at once — CPU compile workers, one runner per GPU, cancellation.

Each submitted job runs `verify()` on a thread of the pool (the heavy work happens in child
processes: nvcc/g++ for the build, the sandboxed worker for the run, so threads suffice).
Compiles run concurrently up to `num_compile_workers` (default: one per two cores); the run stage takes a GPU lease — one
job per GPU at a time, placed with `CUDA_VISIBLE_DEVICES`, in that GPU's warm runner
(runner.py: a fresh judge and runner processes per job, started ahead of it, so no process that
ran a candidate serves another) or, with `persistent=False`, in a child started for the job. `submit(..., key=)` cancels the
previous job with the same key (the editor's document changed): its build or child process is
killed and its future resolves to a result with verdict `timeout` and error "cancelled" (or is
cancelled outright if it had not started). A crashed or hung child only fails its own job.

Not covered: several machines (distributed.py's RayBackend, the same `VerifyBackend` interface, see
backends.py), fairness between keys.
"""

from __future__ import annotations

import functools
import os
import queue
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudice.verifier.api import verify
from cudice.verifier.config import VerifyConfig
from cudice.verifier.gpu_probe import count_gpus as count_gpus  # the pool's default size; re-exported
from cudice.verifier.result import VerifyResult
from cudice.verifier.runner import PersistentRunner
from cudice.verifier.sandbox import ChildOutcome, run_in_child


def default_compile_workers() -> int:
    """Builds at once that keep every core busy: one per two cores (each build runs two compilers)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 2)
    return max(1, cores // 2)


@dataclass
class _Job:
    key: str
    cancel: threading.Event = field(default_factory=threading.Event)
    future: Future[VerifyResult] | None = None


class VerifyPool:
    """A pool of verifications. Use as a context manager or call `shutdown()`."""

    def __init__(self, config: VerifyConfig | None = None, *, num_compile_workers: int | None = None,
                 gpus: list[int] | None = None, persistent: bool = True) -> None:
        self.config = config or VerifyConfig()
        if num_compile_workers is None:  # a build runs two compilers (main.cpp, cuda.cu) side by side
            num_compile_workers = default_compile_workers()
        self.gpus = gpus if gpus is not None else list(range(count_gpus()))
        # one long-lived runner per GPU (runner.py) unless each candidate must get a fresh process
        self._runners = {g: PersistentRunner(env={"CUDA_VISIBLE_DEVICES": str(g)}) for g in self.gpus} \
            if persistent else {}
        for runner in self._runners.values():  # a judge and its runner processes warm up while the first builds run
            runner.warm_up(self.config.memory_limit_mib, {"cache_dir": str(self.config.cache_dir)})
        self._leases: queue.Queue[int] = queue.Queue()
        for g in self.gpus:
            self._leases.put(g)
        self._executor = ThreadPoolExecutor(max_workers=max(1, num_compile_workers) + len(self.gpus),
                                            thread_name_prefix="cudice-verify")
        self._lock = threading.Lock()
        self._jobs: dict[str, _Job] = {}

    def submit(self, path: str | Path, *, source: str | None = None, reference: str | Path | None = None,
               config: VerifyConfig | None = None, key: str | None = None) -> Future[VerifyResult]:
        """Queue a verification; a pending job with the same `key` (default: the path) is cancelled."""
        job = _Job(key or str(path))
        with self._lock:
            old = self._jobs.get(job.key)
            if old is not None:
                self._cancel_job(old)
            self._jobs[job.key] = job
        fut = self._executor.submit(self._work, job, path, source, reference, config or self.config)
        job.future = fut
        fut.add_done_callback(functools.partial(self._forget, job))
        return fut

    def cancel(self, key: str) -> bool:
        """Cancel the job with this key; True if there was one."""
        with self._lock:
            job = self._jobs.pop(key, None)
        if job is None:
            return False
        self._cancel_job(job)
        return True

    def shutdown(self, *, cancel_pending: bool = True) -> None:
        with self._lock:
            jobs = list(self._jobs.values())
        if cancel_pending:
            for job in jobs:
                self._cancel_job(job)
        self._executor.shutdown(wait=True)
        for runner in self._runners.values():
            runner.close()

    def __enter__(self) -> VerifyPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- internals --------------------------------------------------------------------------------
    @staticmethod
    def _cancel_job(job: _Job) -> None:
        job.cancel.set()
        if job.future is not None:
            job.future.cancel()  # only succeeds if it has not started; otherwise the event stops it

    def _forget(self, job: _Job, _future: object = None) -> None:
        with self._lock:
            if self._jobs.get(job.key) is job:
                del self._jobs[job.key]

    def _work(self, job: _Job, path: str | Path, source: str | None, reference: str | Path | None,
              config: VerifyConfig) -> VerifyResult:
        return verify(path, source=source, reference=reference, config=config, cancel=job.cancel,
                      run_child=self._run_on_gpu)

    def _run_on_gpu(self, job: dict[str, Any], **kwargs: Any) -> ChildOutcome:
        gpu = self._leases.get()  # one child per GPU at a time
        try:
            if gpu in self._runners:
                return self._runners[gpu](job, **kwargs)
            env = dict(kwargs.pop("env", None) or {})
            env["CUDA_VISIBLE_DEVICES"] = str(gpu)
            return run_in_child(job, env=env, **kwargs)
        finally:
            self._leases.put(gpu)
