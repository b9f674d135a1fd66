"""The bodies of the Ray backend's tasks, as plain functions (no Ray needed to import or test them).

A job travels as a `ShippedJob`: the candidate's and the reference's *texts*, because a worker on
another node may not see the caller's files. On the worker, `compile_task`
1. puts the reference where `verify()` can read it: the caller's own path when that file exists
   there with the same content (then the result is byte-for-byte what a local `verify()` gives),
   else a temporary copy whose path is mapped back to the caller's in every diagnostic;
2. runs `verify()` (parse → static → compile on this CPU worker) with a `run_child` that sends
   the run stage to a GPU worker (`run_on_gpu`, one candidate per GPU, through `gpu_submit`);
3. returns a `TaskReport`: the `VerifyResult` plus where it ran (node, worker pid).
A cancel of the Ray task (KeyboardInterrupt in the worker) sets the cancel token that `verify()`
polls, so its compilers and sandboxed child are killed before the task ends.

Not covered: the build cache is per node — a run task that lands on another node than its
compile builds the module again inside the run child (docs/ray.md: share `CUDICE_CACHE_DIR`).
When a worker is killed outright (SIGKILL, node loss), its compilers die with it
(build/objects.py sets their parent-death signal) but a sandboxed run child does not: run/sandbox.py
starts it in its own session without one, so it runs until its kernel ends.
"""

from __future__ import annotations

import hashlib
import os
import signal
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from cudice.verifier.config import VerifyConfig
from cudice.verifier.run.sandbox import ChildOutcome, run_in_child
from cudice.verifier.source.result import VerifyResult

T = TypeVar("T")
VerifyFn = Callable[..., VerifyResult]
# (job dict, run_in_child keyword arguments, cancel token) -> the child's outcome, from a GPU worker
GpuSubmit = Callable[[dict[str, Any], dict[str, Any], Any], ChildOutcome]


@dataclass(frozen=True, slots=True)
class ShippedJob:
    """One verification as it travels to a worker: paths name things, texts carry them."""

    path: str  # the candidate's path as the caller named it (every location uses it)
    source: str  # the candidate's text
    reference: str | None  # the explicit reference argument, as the caller gave it
    reference_path: str | None  # the reference file's absolute path (explicit or from the comment)
    reference_text: str | None  # its text, when the caller could read it (or gave it)
    reference_is_text: bool = False  # the caller gave the text itself: no file anywhere


@dataclass(frozen=True, slots=True)
class TaskReport:
    """A task's answer: the result and where it was computed."""

    result: VerifyResult
    node_id: str
    worker_pid: int


def ship_job(
    path: str | Path, source: str | None, reference: str | Path | None, reference_source: str | None = None
) -> ShippedJob | None:
    """Read what the job needs on the caller's side; None when the candidate cannot be read here.
    With `reference_source` the reference travels as that text and no file is read or written.

    A candidate that cannot be read is a parse-stage verdict that costs nothing: the caller
    verifies it locally instead of shipping it.
    """
    from cudice.verifier.source.document import parse_document
    from cudice.verifier.source.reference import reference_path

    if source is None:
        try:
            source = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None
    ref_arg = str(reference) if reference is not None else None
    if reference_source is not None:
        return ShippedJob(str(path), source, ref_arg, None, reference_source, True)
    if ref_arg is not None:
        ref_file: Path | None = Path(ref_arg).resolve()
    else:
        doc = parse_document(source, str(path))
        ref_file = reference_path(doc) if doc.reference.origin == "comment" else None
    ref_text = None
    if ref_file is not None:
        try:
            ref_text = ref_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            ref_text = None  # the worker reports it missing, as a local run would
    return ShippedJob(str(path), source, ref_arg, str(ref_file) if ref_file else None, ref_text)


def place_reference(job: ShippedJob, scratch: Path) -> tuple[str | None, dict[str, str]]:
    """(reference argument for `verify()`, {path on this worker: caller's path}) for one job."""
    if job.reference_text is None or job.reference_path is None:
        return job.reference, {}
    here = Path(job.reference_path)
    if here.is_file() and _sha(here.read_bytes()) == _sha(job.reference_text.encode()):
        return job.reference, {}  # same file visible here: exactly the local behaviour
    copy = scratch / "reference" / here.name
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_text(job.reference_text, encoding="utf-8")
    return str(copy), {str(copy.resolve()): job.reference_path, str(copy): job.reference_path}


def replace_in_strings(value: Any, mapping: dict[str, str]) -> Any:
    """`value` (JSON-like: strings, lists, dicts) with every key of `mapping` replaced by its value
    in every string, longest key first (a path may prefix another); dict keys are kept."""
    pairs = sorted(mapping.items(), key=lambda kv: -len(kv[0]))

    def fix(value: Any) -> Any:
        if isinstance(value, str):
            for old, new in pairs:
                value = value.replace(old, new)
            return value
        if isinstance(value, list):
            return [fix(v) for v in value]
        if isinstance(value, dict):
            return {k: fix(v) for k, v in value.items()}
        return value

    return fix(value)


def remap_paths(result: VerifyResult, mapping: dict[str, str]) -> VerifyResult:
    """The result with every worker-side path (in locations and messages) replaced by the caller's."""
    if not mapping:
        return result
    return VerifyResult.from_dict(replace_in_strings(result.to_dict(), mapping))


def compile_task(
    job: ShippedJob,
    config: VerifyConfig,
    has_gpu: bool,
    gpu_submit: GpuSubmit | None,
    verify_fn: VerifyFn | None = None,
) -> TaskReport:
    """Verify one shipped job on this (CPU) worker; the run stage goes through `gpu_submit`."""
    from cudice.verifier.api import verify

    fn = verify_fn or verify
    cancel = threading.Event()

    def run_child(child_job: dict[str, Any], **kwargs: Any) -> ChildOutcome:
        token = kwargs.pop("cancel", None) or cancel
        if gpu_submit is None:
            return run_in_child(child_job, cancel=token, **kwargs)
        return gpu_submit(child_job, kwargs, token)

    with tempfile.TemporaryDirectory(prefix="cudice-ray-") as scratch:
        ref_arg, mapping = (
            (job.reference, {}) if job.reference_is_text else place_reference(job, Path(scratch))
        )
        result = interruptible(
            lambda: fn(
                job.path,
                source=job.source,
                reference=ref_arg,
                config=config,
                cancel=cancel,
                run_child=run_child,
                gpu=has_gpu,
                reference_source=job.reference_text if job.reference_is_text else None,
            ),
            cancel,
        )
    return TaskReport(remap_paths(result, mapping), _node_id(), os.getpid())


def run_on_gpu(child_job: dict[str, Any], kwargs: dict[str, Any]) -> ChildOutcome:
    """The run stage on a GPU worker: the sandboxed child sees only the GPU(s) given to this task.

    A cancel of this task (KeyboardInterrupt) kills the child's process group before the task
    ends, so a hung kernel never outlives its task on the GPU.
    """
    env = dict(kwargs.pop("env", None) or {})
    if "CUDA_VISIBLE_DEVICES" in os.environ:  # Ray sets it to the task's `num_gpus` share
        env.setdefault("CUDA_VISIBLE_DEVICES", os.environ["CUDA_VISIBLE_DEVICES"])
    given = kwargs.pop("cancel", None)
    cancel = threading.Event()
    if given is not None and given.is_set():
        cancel.set()
    return interruptible(lambda: run_in_child(child_job, env=env, cancel=cancel, **kwargs), cancel)


def interruptible(work: Callable[[], T], cancel: threading.Event) -> T:
    """`work()` on a helper thread; an exception in the calling thread (a Ray cancel) sets `cancel`.

    Ray cancels a running task by raising KeyboardInterrupt in the thread that runs it; the
    cudice stages stop their compilers and children when their cancel token is set, so the
    task waits for that (up to 60 s) before it ends.
    """
    _take_sigint()
    outcome: Future[T] = Future()

    def body() -> None:
        try:
            outcome.set_result(work())
        except BaseException as exc:  # re-raised in the calling thread below
            outcome.set_exception(exc)

    helper = threading.Thread(target=body, name="cudice-ray-work", daemon=True)
    try:
        helper.start()  # inside the try: a cancel that comes right after the start still stops the work
        while helper.is_alive():  # short waits, so a cancel gets in between
            helper.join(0.2)
    except BaseException:
        cancel.set()
        helper.join(60)
        raise
    return outcome.result(timeout=0)


def _take_sigint() -> None:
    """Make SIGINT raise KeyboardInterrupt in this (main) thread again if it was ignored.

    Ray delivers a cancel the way Ctrl-C arrives (`_thread.interrupt_main`), which does nothing while
    SIGINT is ignored, and a process started in the background by a shell without job control
    (`cmd &` in a script, nohup) inherits SIGINT ignored: its Ray workers then could never be
    cancelled. Only the main thread can set a handler; elsewhere this changes nothing.
    """
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) in (
        signal.SIG_IGN,
        signal.SIG_DFL,
    ):
        signal.signal(signal.SIGINT, signal.default_int_handler)


def cancelled_outcome() -> ChildOutcome:
    """What `run_child` returns when the caller cancelled while the GPU task was queued or running."""
    return ChildOutcome(None, None, "", "", 0.0, cancelled=True)


def _node_id() -> str:
    try:
        import ray

        if ray.is_initialized():
            return str(ray.get_runtime_context().get_node_id())
    except ImportError:
        pass
    return os.uname().nodename


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
