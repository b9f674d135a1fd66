"""`RayBackend`: the verification pool on a Ray cluster — compiles on CPU workers, runs on GPU workers.

It satisfies `VerifyBackend` (backends.py), so `cudice eval --ray` and the RL reward use it
exactly like the local `VerifyPool`, and get the same `VerifyResult`s.

- A job is one Ray task (`tasks.compile_task`, `num_cpus=1`): parse, static checks
  and the full build on a CPU worker. When the candidate is to run, its run stage is a nested
  task (`run_on_gpu`, `num_gpus=1`): one candidate per GPU at a time, preferring the node that
  compiled it (its build cache is there). A compile task waiting for its GPU task gives its CPU
  back to Ray meanwhile (Ray releases the resources of a task blocked in `ray.get`/`ray.wait`).
- Fault tolerance is Ray's: a task whose worker process or node dies is re-queued, up to
  `max_retries` times (https://docs.ray.io/en/latest/ray-core/fault_tolerance/tasks.html).
  An exception inside `verify()` is a bug, not a node failure: it is not retried and the
  future raises it, as the local pool's does. A job whose retries ran out ends as verdict
  `crash` with diagnostic `dist.task_failed`.
- `address=None` starts a local instance (stopped again by `shutdown()`; Ray's reaper stops it
  if this process dies) with the GPUs Ray detects, or as many as `CUDICE_GPU` says when it is set
  (verifier/run/gpu_probe.py); `address="auto"`, `"HOST:6379"` or `"ray://HOST:10001"` joins a cluster
  that `ray start` made. A process where Ray is already initialised (the RL trainer) shares it.
- Ray is imported when a backend is made; without it `RayUnavailable` says how to install it.

Not covered: shipping build caches between nodes (share `CUDICE_CACHE_DIR`, docs/ray.md);
installing cudice on the nodes (every node needs the same cudice, torch and nvcc); actors that
keep torch warm per GPU (each run starts a fresh sandboxed child, as `persistent=False` does
in pool.py).
"""

from __future__ import annotations

import datetime as _dt
import functools
import logging
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from cudice.verifier.backend_base import JobTable, VerifyBackend, VerifyJob
from cudice.verifier.config import VerifyConfig
from cudice.verifier.dist.tasks import (
    ShippedJob,
    TaskReport,
    VerifyFn,
    cancelled_outcome,
    compile_task,
    run_on_gpu,
    ship_job,
)
from cudice.verifier.run.gpu_probe import probe
from cudice.verifier.run.sandbox import ChildOutcome
from cudice.verifier.source.result import Diagnostic, Location, Severity, Stage, Verdict, VerifyResult

RAY_VERSION = "2.60.0"  # the version cudice is tested with (pyproject's `dist` extra)
INSTALL_HINT = f'pip install "cudice[dist]"  (or: pip install "ray=={RAY_VERSION}")'


class RayUnavailable(RuntimeError):
    """Ray is not installed in this environment."""


def require_ray() -> Any:
    """The `ray` module, or `RayUnavailable` with the line that installs it."""
    try:
        import ray
    except ImportError as exc:
        raise RayUnavailable(
            f"The Ray backend needs Ray, which is not installed here ({exc}). Install it with "
            f"`{INSTALL_HINT}`, or run without --ray to use the local pool."
        ) from exc
    return ray


@dataclass(frozen=True, slots=True)
class RayOptions:
    """Where and how the tasks run. CPU/GPU counts apply only to a local instance this backend starts."""

    address: str | None = None  # None: start a local instance; else "auto", "HOST:PORT" or "ray://HOST:PORT"
    num_cpus: int | None = None  # CPUs of a local instance (None: Ray counts the cores)
    num_gpus: int | None = None  # GPUs of a local instance (None: Ray detects them)
    compile_num_cpus: float = 1.0  # CPUs one compile task reserves
    max_retries: int = 3  # re-queues of a task whose worker or node died

    def __post_init__(self) -> None:
        if self.address is not None and (self.num_cpus is not None or self.num_gpus is not None):
            raise ValueError(
                f"RayOptions: num_cpus/num_gpus ({self.num_cpus}, {self.num_gpus}) only size a local "
                f"instance, but address={self.address!r} joins a cluster; drop them (the cluster's "
                "`ray start --num-cpus/--num-gpus` decides)."
            )
        for name in ("num_cpus", "num_gpus"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"RayOptions.{name}={value} must be ≥ 0; leave it None to let Ray count.")
        if self.compile_num_cpus <= 0:
            raise ValueError(f"RayOptions.compile_num_cpus={self.compile_num_cpus} must be > 0; use 1.")
        if self.max_retries < 0:
            raise ValueError(f"RayOptions.max_retries={self.max_retries} must be ≥ 0; use 3 (Ray's default).")


@dataclass
class _Entry:
    key: str
    path: str
    ref: Any
    future: Future[VerifyResult]


class RayBackend(VerifyBackend):
    """Verify candidates as Ray tasks. Use as a context manager or call `shutdown()`."""

    def __init__(
        self,
        config: VerifyConfig | None = None,
        *,
        address: str | None = None,
        num_cpus: int | None = None,
        num_gpus: int | None = None,
        compile_num_cpus: float = 1.0,
        max_retries: int = 3,
        verify_fn: VerifyFn | None = None,
        runtime_env: dict[str, Any] | None = None,
    ) -> None:
        ray = require_ray()
        self.config = config or VerifyConfig()
        self.options = RayOptions(address, num_cpus, num_gpus, compile_num_cpus, max_retries)
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            init: dict[str, Any] = {
                # "local": always a new instance, even where `ray start` left one running (that is "auto")
                "address": address or "local",
                "log_to_driver": False,
                "logging_level": logging.WARNING,
                "runtime_env": runtime_env,
            }
            if address is None:
                found = probe()
                if num_gpus is None and found.source == "CUDICE_GPU":  # the override decides, as everywhere
                    num_gpus = found.num_gpus
                init.update(num_cpus=num_cpus, num_gpus=num_gpus, include_dashboard=False)
            ray.init(**init)
        self.num_gpus = int(ray.cluster_resources().get("GPU", 0))
        self._verify_fn = verify_fn
        self._gpu_submit = RayGpuSubmit(max_retries) if self.num_gpus else None
        self._compile = ray.remote(compile_task).options(
            num_cpus=compile_num_cpus, max_retries=max_retries, retry_exceptions=False
        )
        self._lock = threading.Lock()  # guards `placements`
        self._jobs: JobTable[_Entry] = JobTable()
        self.placements: dict[str, tuple[str, int]] = {}  # key -> (node id, worker pid) of the finished task

    def cancel(self, key: str) -> bool:
        """Cancel the job with this key (its build or run is stopped); True if there was one."""
        return self._jobs.cancel(key, _stop)

    def shutdown(self, *, cancel_pending: bool = True) -> None:
        pending = self._jobs.items()
        if cancel_pending:
            for key, _ in pending:
                self.cancel(key)
        else:
            for _, entry in pending:
                entry.future.exception()  # wait; failures are already results
        if self._owns_ray:
            require_ray().shutdown()
            self._owns_ray = False

    # -- internals --------------------------------------------------------------------------------
    def _submit(self, job: VerifyJob, config: VerifyConfig) -> Future[VerifyResult]:
        """The job as a Ray task (a pending job with the same key is cancelled first)."""
        assert job.key is not None  # VerifyBackend.submit sets it
        self.cancel(job.key)
        fut: Future[VerifyResult] = Future()
        shipped = ship_job(job.path, job.source, job.reference, job.reference_source)
        if shipped is None:  # unreadable here: a parse-stage verdict, computed locally
            from cudice.verifier.api import verify

            fut.set_result(
                verify(
                    job.path,
                    source=job.source,
                    reference=job.reference,
                    reference_source=job.reference_source,
                    config=config,
                )
            )
            return fut
        ref = self._compile.remote(shipped, config, self.num_gpus > 0, self._gpu_submit, self._verify_fn)
        entry = _Entry(job.key, shipped.path, ref, fut)
        self._jobs.put(job.key, entry)
        ref.future().add_done_callback(functools.partial(self._finish, entry))
        return fut

    def _finish(self, entry: _Entry, done: Future[TaskReport]) -> None:
        self._jobs.discard(entry.key, entry)
        ray = require_ray()
        try:
            report = done.result()
        except ray.exceptions.TaskCancelledError:
            _settle(entry.future, _cancelled(entry.path))
            return
        except (
            ray.exceptions.RayTaskError
        ) as exc:  # raised inside verify(): a bug, as the local pool raises it
            if not entry.future.done():
                entry.future.set_exception(exc.as_instanceof_cause())
            return
        except Exception as exc:  # a system failure that outlived the retries (worker or node lost)
            _settle(entry.future, _failed(entry.path, exc))
            return
        with self._lock:
            self.placements[entry.key] = (report.node_id, report.worker_pid)
        _settle(entry.future, report.result)


def _stop(entry: _Entry) -> None:
    require_ray().cancel(entry.ref, recursive=True)
    _settle(entry.future, _cancelled(entry.path))


class RayGpuSubmit:
    """`run_child` for a compile task: the run stage as a `num_gpus=1` task, cancellable while it waits."""

    def __init__(self, max_retries: int) -> None:
        self.max_retries = max_retries

    def __call__(self, child_job: dict[str, Any], kwargs: dict[str, Any], cancel: Any) -> ChildOutcome:
        ray = require_ray()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = ray.get_runtime_context().get_node_id()
        ref = (
            _gpu_task(self.max_retries)
            .options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=True))
            .remote(child_job, kwargs)
        )
        while True:
            ready, _ = ray.wait([ref], timeout=0.5)
            if ready:
                outcome: ChildOutcome = ray.get(ref)
                return outcome
            if cancel is not None and cancel.is_set():
                ray.cancel(ref)  # run_on_gpu kills the sandboxed child's group, then the task ends
                return cancelled_outcome()


@functools.cache
def _gpu_task(max_retries: int) -> Any:
    # max_calls=0: keep the worker between runs (Ray's default of 1 for GPU tasks restarts it per
    # task to free CUDA memory, but CUDA is used only by the sandboxed child, which always exits)
    return require_ray().remote(num_gpus=1, num_cpus=0, max_retries=max_retries, max_calls=0)(run_on_gpu)


def _settle(future: Future[VerifyResult], result: VerifyResult) -> None:
    if not future.done():
        future.set_result(result)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _cancelled(path: str) -> VerifyResult:
    """What the local pool gives a cancelled job: verdict `timeout`, error "cancelled"."""
    return VerifyResult(Verdict.TIMEOUT, Stage.PARSE, path, error="cancelled", measured_at=_now())


def _failed(path: str, exc: BaseException) -> VerifyResult:
    diag = Diagnostic(
        Severity.ERROR,
        f"The Ray task verifying this file failed ({type(exc).__name__}), after "
        "any retries: see the error text. Check `ray status` and the workers' logs, and that every "
        "node has the same cudice installed.",
        "dist.task_failed",
        Stage.PARSE,
        Location(path, 1, 1),
    )
    return VerifyResult(Verdict.CRASH, Stage.PARSE, path, (diag,), error=str(exc)[-4000:], measured_at=_now())


__all__ = [
    "INSTALL_HINT",
    "RAY_VERSION",
    "RayBackend",
    "RayOptions",
    "RayUnavailable",
    "ShippedJob",
    "require_ray",
]
