"""`VerifyPool`: many verifications at once — CPU compile workers, one runner per GPU, cancellation.

Each submitted job runs `verify()` on a thread of the pool (the heavy work happens in child
processes: nvcc/g++ for the build, the sandboxed worker for the run, so threads suffice). Compiles
run concurrently up to `num_compile_workers` (default: one per two cores); the run stage takes a
GPU lease — one job per GPU at a time, placed with `CUDA_VISIBLE_DEVICES`, in that GPU's warm
runner (run/warm.py: a fresh judge and runner processes per job, started ahead of it, so no process
that ran a candidate serves another) or, with `persistent=False`, in a child started for the job.
`submit(..., key=)` cancels the previous job with the same key (the editor's document changed):
its build or child process is killed and its future resolves to a result with verdict `timeout`
and error "cancelled" (or is cancelled outright if it had not started). A crashed or hung child
only fails its own job.
`prefill(jobs)` checks many jobs' sources in one nvcc pass before they are submitted
(build/batch.py): the pass stands for each job's own slim compile where it failed, whether the
job's build is a check or links (build/objects.py reads a failed check for a build), and for its
slim check where it passed (only a build that stops at the check gains there);
`verify_all(pool, jobs, prefill=batch.MAX_BATCH)` does it chunk by chunk, each chunk just before it
is submitted (the RL reward; `cudice eval` calls it per chunk the same way).

Not covered: several machines (dist/ray_backend.py's RayBackend, the same `VerifyBackend` interface, see
backends.py), fairness between keys.
"""

from __future__ import annotations

import functools
import logging
import os
import queue
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cudice.verifier.api import candidate_modules, verify
from cudice.verifier.backend_base import JobTable, VerifyBackend, VerifyJob
from cudice.verifier.config import VerifyConfig
from cudice.verifier.run.gpu_probe import count_gpus as count_gpus  # the pool's default size; re-exported
from cudice.verifier.run.sandbox import ChildOutcome, run_in_child
from cudice.verifier.run.warm import PersistentRunner
from cudice.verifier.source.result import VerifyResult

if TYPE_CHECKING:
    from cudice.verifier.build.batch import BatchReport

log = logging.getLogger(__name__)


def default_compile_workers() -> int:
    """Builds at once that keep every core busy: one per two cores (each build runs two compilers)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 2)
    return max(1, cores // 2)


@dataclass
class _Job:
    key: str
    cancel: threading.Event = field(default_factory=threading.Event)
    future: Future[VerifyResult] | None = None


class VerifyPool(VerifyBackend):
    """A pool of verifications. Use as a context manager or call `shutdown()`."""

    def __init__(
        self,
        config: VerifyConfig | None = None,
        *,
        num_compile_workers: int | None = None,
        gpus: list[int] | None = None,
        persistent: bool = True,
        spares_per_gpu: int = 4,
    ) -> None:
        """spares_per_gpu: judges kept warm per GPU (run/warm.py). A judge and its runners take ~11 s
        to warm up on the H200 box (Python, torch and a CUDA context in three processes, the
        profiler's first session) and a warm job ~2.5 s, so two spares capped the pool near 10
        verdicts a minute; each spare holds three idle CUDA contexts (~2.1 GiB of GPU memory on an
        H100: 0.71–0.72 GiB a process); `idle()` gives them back."""
        self.config = config or VerifyConfig()
        if num_compile_workers is None:  # a build runs two compilers (main.cpp, cuda.cu) side by side
            num_compile_workers = default_compile_workers()
        self.gpus = gpus if gpus is not None else list(range(count_gpus()))
        # one long-lived runner per GPU (run/warm.py) unless each candidate must get a fresh process
        self._runners = (
            {
                g: PersistentRunner(env={"CUDA_VISIBLE_DEVICES": str(g)}, spares=spares_per_gpu)
                for g in self.gpus
            }
            if persistent
            else {}
        )
        for (
            runner
        ) in self._runners.values():  # a judge and its runner processes warm up while the first builds run
            runner.warm_up(self.config.memory_limit_mib, {"cache_dir": str(self.config.cache_dir)})
        self._leases: queue.Queue[int] = queue.Queue()
        for g in self.gpus:
            self._leases.put(g)
        self._executor = ThreadPoolExecutor(
            max_workers=max(1, num_compile_workers) + len(self.gpus), thread_name_prefix="cudice-verify"
        )
        self._jobs: JobTable[_Job] = JobTable()

    def cancel(self, key: str) -> bool:
        """Cancel the job with this key; True if there was one."""
        return self._jobs.cancel(key, self._cancel_job)

    def shutdown(self, *, cancel_pending: bool = True) -> None:
        if cancel_pending:
            for _, job in self._jobs.items():
                self._cancel_job(job)
        self._executor.shutdown(wait=True)
        for runner in self._runners.values():
            runner.close()

    def cancel_submitted(self, key: str, future: Future[VerifyResult]) -> bool:
        return self._jobs.cancel_if(key, lambda job: job.future is future, self._cancel_job)

    def prefill(self, jobs: Sequence[VerifyJob], config: VerifyConfig | None = None) -> BatchReport | None:
        """The compile checks of `jobs` (files or texts, as `submit` takes them) in one nvcc pass per
        up to `batch.MAX_BATCH` candidates, before they are submitted (build/batch.py `prefill`):
        each candidate's outcome goes into the object cache under its own check's key, where its
        job's build reads it: a compile-only check takes it as is, and a build that links takes a
        failed one as its slim compile's failure without compiling (build/objects.py); the rest of
        the build (a slim error that stands, or the full-header rebuild) runs as always, so the
        verdicts and diagnostics are those of the jobs alone. Runs in the
        caller's thread and returns the batch's report (None when fewer than two modules could be
        read). Best effort: a failure is logged and the jobs check alone, as without it."""
        from cudice.verifier.build import batch

        modules = [
            m
            for j in jobs
            for m in candidate_modules(
                j.path, source=j.source, reference=j.reference, reference_source=j.reference_source
            )
        ]
        if len(modules) < 2:
            return None
        stop = threading.Event()  # set when an exception unwinds through here: the batch's compilers die
        try:
            return batch.prefill(modules, config or self.config, cancel=stop)
        except Exception as exc:  # never a verdict: the jobs check alone
            log.warning("batched checks skipped (%s: %s)", type(exc).__name__, exc)
            return None
        except BaseException:
            stop.set()
            raise

    def idle(self) -> None:
        """Discard every GPU's spare judges (three idle CUDA contexts each, ~0.7 GiB apiece on an
        H100) and start none until `warm()`; a job meanwhile starts its own judge."""
        for runner in self._runners.values():
            runner.park()

    def warm(self) -> None:
        """Start every GPU's spare judges again (they warm up while the first builds run)."""
        for runner in self._runners.values():
            runner.warm_up(self.config.memory_limit_mib, {"cache_dir": str(self.config.cache_dir)})

    # -- internals --------------------------------------------------------------------------------
    def _submit(self, request: VerifyJob, config: VerifyConfig) -> Future[VerifyResult]:
        assert request.key is not None  # VerifyBackend.submit sets it
        job = _Job(request.key)
        old = self._jobs.put(job.key, job)
        if old is not None:
            self._cancel_job(old)
        fut = self._executor.submit(self._work, job, request, config)
        job.future = fut
        fut.add_done_callback(functools.partial(self._forget, job))
        return fut

    @staticmethod
    def _cancel_job(job: _Job) -> None:
        job.cancel.set()
        if job.future is not None:
            job.future.cancel()  # only succeeds if it has not started; otherwise the event stops it

    def _forget(self, job: _Job, _future: object = None) -> None:
        self._jobs.discard(job.key, job)

    def _work(self, job: _Job, request: VerifyJob, config: VerifyConfig) -> VerifyResult:
        return verify(
            request.path,
            source=request.source,
            reference=request.reference,
            reference_source=request.reference_source,
            config=config,
            cancel=job.cancel,
            run_child=self._run_on_gpu,
        )

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
