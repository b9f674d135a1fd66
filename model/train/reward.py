"""BiC-RL rewards: each rollout's code through the verifier's one backend interface.

`verifier_reward_fn(backend)` verifies every rollout's candidate against its task's reference on
a `cudice.verifier.backends.VerifyBackend` — the local `VerifyPool` (`reward_pool(...)`: compiles
on CPU workers, correctness and timing on the GPUs it is given, meant to be GPUs the policy does
not use, so kernels are timed without the trainer's contention) or the Ray backend — so a reward
is the same `VerifyResult` the editor and `cudice eval` get, read by `reward_from_result`.
`verify_texts(backend, jobs)` is the step in between: one batch, results in job order. Candidate
and reference both go to the backend as text (`source=`, `reference_source=`); the paths are only
names the diagnostics carry, and no file is written.

Anti-cheat stays on: the backend runs the verifier's static checks and its runtime checks (the
same verdicts the editor shows); a backend configured with the lenient static policy or
compile-only is refused, since either would pay rewards for kernels that only look fast.

Each distinct (candidate, reference) pair, as normalised text, is verified once per
`verifier_reward_fn`: repeats within a batch and across steps reuse the first verdict (rollouts
of a peaked policy repeat often). A verdict's speedup is then measured once per distinct kernel.
The distinct candidates (and the canary) go to `backend.prefill` `batch.MAX_BATCH` at a time
before they are submitted (`verify_all(prefill=)`): the local pool checks each chunk's sources in
one nvcc pass (build/batch.py), and for a rollout that does not compile (most do not) that pass
stands for its own slim compile, on a GPU box too (build/objects.py): a slim error that stands is
its `compile_error` with nothing compiled for it alone, any other still gets the full-header
rebuild; verdicts and diagnostics are those of a build of its own. The Ray backend ignores it.

Shaping (`reward_from_result`): 0 for a kernel that is not correct; with `required_speedup`
set, `correct_reward` (RLConfig, default 0.5) for a correct kernel and 1 for one that also clears
the speed bound beyond its spread. A correct kernel whose timing is suspicious (above 10x, faster
than moving the data once, or unresolved: below half a launch, spread over half its median, GPU
busy) keeps the correctness reward and only loses the speed bonus: the timing is not evidence of
a cheat. Evidence of a cheat (a `static.*`/`dynamic.*` error, a timed call that came back wrong)
makes the verdict not correct, and scores 0; a correct verdict that still carries one (it should
not) scores 0 too.

Infrastructure failures are not scored: `infrastructure_failure(result)` names the verdicts that
say "the verifier failed", not "the kernel failed" (cancelled jobs, a missing toolchain or GPU, a
run that never ran, the judge's or the reference runner's crash or hang, a lost Ray task, an
internal worker error, a sandbox that shut the GPU out, anti-cheat checks that could not run).
Such a rollout's reward is None: the PPO step leaves it out of its group's advantages (a group
with fewer than two scored samples contributes nothing), and the verdict is not cached, so a
repeat is verified again. A candidate that crashes or hangs its own runner, or whose build runs
past `compile_timeout_s` (the build process's own clock, not a queue's), is the kernel's fault
and scores 0.

The canary: `verifier_reward_fn(backend, canary=default_canary())` adds a known-good kernel to
every batch (never served from the cache). If its verdict is not the expected one (`correct`, or
for `expect=None` the verdict its first run got, which must be `correct` or, on a backend
without a GPU, `compiled`), the step stops with `RewardCanaryError`: a verifier that fails a
good kernel would silently zero every reward. `default_canary()` reads examples/relu_cuda.py
against examples/relu.py from the source checkout; the examples are not packaged, so an
installed cudice must pass its own `Canary`.

Not covered: partial credit for compiling; a verdict cache shared between reward functions or runs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cudice.model.prompts import extract_first_code_block
from cudice.model.train.config import RLConfig
from cudice.model.train.types import RewardFn, Rollout

if TYPE_CHECKING:
    from cudice.verifier.backends import VerifyBackend
    from cudice.verifier.pool import VerifyPool
    from cudice.verifier.source.result import VerifyResult

log = logging.getLogger(__name__)


CHEAT_PREFIXES = ("static.", "dynamic.", "correctness.timed_call_")


def cheat_evidence(result: Any) -> list[str]:
    """The codes of `result`'s error diagnostics that are evidence of a cheat (static and dynamic
    anti-cheat errors, a timed call whose output was wrong)."""
    return [
        d.code
        for d in getattr(result, "diagnostics", ())
        if d.code.startswith(CHEAT_PREFIXES) and getattr(d.severity, "value", d.severity) == "error"
    ]


def reward_from_result(result: Any, required_speedup: float | None, correct_reward: float = 0.5) -> float:
    """Execution reward from a `cudice.verifier.source.result.VerifyResult`.

    Correctness only when `required_speedup` is None (DICE's released reward: 1 if correct).
    Otherwise `correct_reward` for a correct kernel, 1 when its speedup also clears the bound
    beyond its measured spread (`VerifyResult.is_fast`, the benchmark's fast_p). A suspicious
    timing (above 10x, or unresolved) is not counted as fast, but it is no evidence of a cheat:
    the kernel keeps `correct_reward`. Evidence of a cheat (`cheat_evidence`) scores 0.
    """
    if not result.is_correct or cheat_evidence(result):
        return 0.0
    if required_speedup is None:
        return 1.0
    return 1.0 if result.is_fast(required_speedup) else correct_reward


# Codes that say the verifier, not the kernel, failed (docs/diagnostics.md).
INFRA_CODES = frozenset(
    {
        "compile.cancelled",  # the build was cancelled (pool shutdown, a key resubmitted)
        "compile.toolchain",  # nvcc, ninja, a C++ compiler or torch missing on the worker
        "compile.headers_unavailable",  # the worker lacks headers: undecided, not a compile error
        "verify.no_gpu",  # the run stage did not run: no GPU on the worker
        "verify.not_compiled",  # a compile-only end: nvcc never saw the sources
        "runtime.worker_error",  # an internal error of the worker
        "dist.task_failed",  # the Ray task was lost more often than its retries
        "sandbox.gpu_group_root",  # the runner could not reach the GPU
        "dynamic.profiler_unavailable",  # the kernel checks did not run: a verdict without anti-cheat
    }
)
# Codes that are the verifier's fault only when their message names trusted code: the judge
# ("worker process crashed"), the reference's runner ("The reference did not answer" / "process
# ended"), or a cancelled run; the same codes for the candidate's runner are the kernel's fault.
_INFRA_MESSAGES = {
    "runtime.crash": ("The worker process crashed", "The reference process"),  # judge.py's judge
    "runtime.timeout": ("The reference did not answer", "The kernel run was cancelled"),
    "runtime.exception": ("The reference process reported",),
}


def infrastructure_failure(result: Any) -> str | None:
    """Why `result` says the verifier failed rather than the kernel (then it must not be scored),
    or None when the verdict is the kernel's. Conservative: only the causes listed in
    `INFRA_CODES` and `_INFRA_MESSAGES`, a cancelled job, a run that ended at `compiled` or
    `checked` (no correctness run on a backend configured for one), and a sandbox that could not
    keep the runner's paths readable when the verdict is not correct."""
    if getattr(result, "error", None) == "cancelled":
        return "the job was cancelled"
    verdict = getattr(result.verdict, "value", result.verdict)
    for d in getattr(result, "diagnostics", ()):
        if d.code in INFRA_CODES:
            return f"{d.code}: {d.message}"
        if any(d.message.startswith(m) for m in _INFRA_MESSAGES.get(d.code, ())):
            return f"{d.code}: {d.message}"
        if d.code == "sandbox.unreadable" and verdict != "correct":
            return f"{d.code}: {d.message}"
    if verdict in ("compiled", "checked"):
        return f"verdict {verdict}: no correctness run"
    return None


@dataclass(frozen=True, slots=True)
class RewardJob:
    key: str  # unique within one call
    candidate: str  # the candidate file's text (class ModelNew + load_inline sources)
    reference: str  # the KernelBench reference file's text (class Model, get_inputs, ...)


def check_reward_config(config: Any) -> None:
    """Refuse verifier settings under which a reward could be earned by cheating."""
    if config.static_policy == "lenient":
        raise ValueError(
            "RL rewards need the verifier's anti-cheat: static_policy='lenient' lets PyTorch "
            "fallbacks pass; use 'default' or 'strict' (docs/anticheat.md)"
        )
    if config.compile_only:
        raise ValueError(
            "RL rewards need correctness runs: compile_only=True rewards nothing; run on a GPU box"
        )


def reward_pool(
    config: Any = None, *, gpus: list[int] | None = None, num_compile_workers: int = 4
) -> VerifyPool:
    """A local `VerifyPool` for rewards (one runner per GPU in `gpus`); close it, or use `with`."""
    from cudice.verifier.config import VerifyConfig
    from cudice.verifier.pool import VerifyPool

    config = config or VerifyConfig(compile_violations=False)  # a violation scores 0 without a compile
    check_reward_config(config)
    return VerifyPool(config, num_compile_workers=num_compile_workers, gpus=gpus)


def verify_texts(
    backend: VerifyBackend,
    jobs: Sequence[RewardJob],
    cache: dict[tuple[str, str], VerifyResult] | None = None,
) -> list[VerifyResult]:
    """One `VerifyResult` per job, in the order of `jobs`: candidate and reference as text, no
    file written (the paths are names the diagnostics carry). Each distinct (candidate, reference)
    pair, compared as `normalised` text, is verified once; `cache` (updated here) carries the
    verdicts of earlier batches, so a rollout repeated across steps is not verified again. The
    jobs left go to `backend.prefill` `batch.MAX_BATCH` at a time, each chunk just before it is
    submitted (module docstring). An infrastructure failure (`infrastructure_failure`) is returned
    but not cached."""
    return _verify_batch(backend, jobs, cache, None)[0]


def _verify_batch(
    backend: VerifyBackend,
    jobs: Sequence[RewardJob],
    cache: dict[tuple[str, str], VerifyResult] | None,
    canary: RewardJob | None,
) -> tuple[list[VerifyResult], VerifyResult | None]:
    """`verify_texts`, with `canary` verified in the same batch (never from or into the cache)."""
    from cudice.verifier.backends import VerifyJob, verify_all
    from cudice.verifier.build.batch import MAX_BATCH

    cache = {} if cache is None else cache
    names: dict[str, str] = {}  # one name per distinct reference
    pairs = [(normalised(job.candidate), normalised(job.reference)) for job in jobs]
    todo: dict[tuple[str, str], VerifyJob] = {}
    for i, (job, pair) in enumerate(zip(jobs, pairs, strict=True)):
        if pair in cache or pair in todo:
            continue
        todo[pair] = VerifyJob(
            f"cand_{i}.py",
            source=as_read_back(job.candidate),
            reference=names.setdefault(pair[1], f"<reference {len(names)}>"),
            key=f"{job.key}#{i}",
            reference_source=as_read_back(job.reference),
        )
    extra = []
    if canary is not None:
        extra.append(
            VerifyJob(
                "canary.py",
                source=as_read_back(canary.candidate),
                reference="<canary reference>",
                key=canary.key,
                reference_source=as_read_back(canary.reference),
            )
        )
    # the checks of MAX_BATCH jobs at a time in one nvcc pass, each chunk before it is submitted
    results = verify_all(backend, [*todo.values(), *extra], prefill=MAX_BATCH)
    if len(results) != len(todo) + len(extra):
        raise RuntimeError(
            f"verify backend returned {len(results)} results for {len(todo) + len(extra)} jobs"
        )
    fresh = dict(zip(todo, results, strict=False))
    out = [fresh[pair] if pair in fresh else cache[pair] for pair in pairs]
    for pair, result in fresh.items():
        if infrastructure_failure(result) is None:
            cache[pair] = result
    return out, (results[-1] if extra else None)


def normalised(text: str) -> str:
    """`text` with what cannot change a verdict removed: line endings made `\n`, trailing
    whitespace of each line and trailing blank lines dropped (comments stay: `# cudice:` lines
    name references)."""
    lines = [line.rstrip() for line in as_read_back(text).split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def as_read_back(text: str) -> str:
    """`text` as reading it from a file gives it: newlines made `\\n` (the universal-newline
    read), so a text passed to the backend is verified as the same text in a file would be."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def candidate_code(rollout: Rollout) -> str:
    """The file a rollout proposes: its first fenced code block, else its whole text."""
    code = extract_first_code_block(rollout.text)
    return code if code is not None else rollout.text


@dataclass(frozen=True, slots=True)
class Canary:
    """A known-good (candidate, reference) pair verified with every reward batch.

    `expect`: the verdict a good kernel gets on the backend (`"correct"` on GPUs); None takes the
    verdict of its first run, which must be `correct` or `compiled` (a backend without a GPU)."""

    candidate: str
    reference: str
    name: str = "canary"
    expect: str | None = "correct"


def default_canary(expect: str | None = "correct") -> Canary:
    """examples/relu_cuda.py against examples/relu.py, read from the source checkout (the
    examples are not packaged: an installed cudice raises FileNotFoundError; pass a `Canary`)."""
    examples = Path(__file__).resolve().parents[2] / "examples"
    cand, ref = examples / "relu_cuda.py", examples / "relu.py"
    if not (cand.is_file() and ref.is_file()):
        raise FileNotFoundError(
            f"the default reward canary reads {cand} and {ref}, which only a source checkout has; "
            "pass verifier_reward_fn(backend, canary=Canary(candidate_text, reference_text)) with a "
            "kernel known to be correct"
        )
    return Canary(
        cand.read_text(encoding="utf-8"),
        ref.read_text(encoding="utf-8"),
        name="examples/relu_cuda.py against examples/relu.py",
        expect=expect,
    )


class RewardCanaryError(RuntimeError):
    """The canary, a known-good kernel, did not get its expected verdict: the verifier is broken."""


def _check_canary(canary: Canary, result: VerifyResult, expect: str) -> None:
    verdict = result.verdict.value
    infra = infrastructure_failure(result) if expect == "correct" else None
    if verdict == expect and infra is None:
        return
    codes = ", ".join(f"{d.code}: {d.message}" for d in result.diagnostics[:6]) or "none"
    raise RewardCanaryError(
        f"reward canary ({canary.name}, a kernel known to be good) got verdict {verdict!r}, "
        f"expected {expect!r}"
        + (f" ({infra})" if infra else "")
        + f"; diagnostics: {codes}"
        + (f"; error: {result.error[-500:]}" if result.error else "")
        + ". The verifier is failing a good kernel, so it would score every rollout of this step "
        "wrong (a broken verifier zeroes every reward, and the policy would learn from noise): the "
        "step was stopped before the update. Fix the verify backend (its GPUs, toolchain, sandbox) "
        "and resume."
    )


def verifier_reward_fn(
    backend: VerifyBackend, canary: Canary | None = None, *, idle_between: bool = True
) -> RewardFn:
    """A `RewardFn`: every rollout's code verified against its task's reference by `backend`
    (refused when the backend's config turns anti-cheat or the correctness runs off).
    With `idle_between`, the backend is warmed at the start of each batch and idled at its end
    (`VerifyBackend.idle`): between reward batches the policy's rollouts and update have the GPU
    to themselves (a pool's spare judges held 8.6 GiB of an 80 GB H100 through a 1.7B update).

    Rewards follow `reward_from_result` with the step's `required_speedup` and `correct_reward`;
    an infrastructure failure gives None (not scored). With `canary`, its kernel is verified in
    every batch and a verdict other than its expected one raises `RewardCanaryError`."""
    check_reward_config(backend.config)

    verdicts: dict[tuple[str, str], VerifyResult] = {}  # every step's, by normalised text
    expected: list[str] = [canary.expect] if canary is not None and canary.expect else []
    batches = [0]

    def reward(rollouts: Sequence[Rollout], config: RLConfig) -> list[float | None]:
        jobs = [
            RewardJob(f"{r.task.task_id or 'task'}-{i}", candidate_code(r), r.task.pytorch_code)
            for i, r in enumerate(rollouts)
        ]
        probe = None
        if canary is not None:
            probe = RewardJob(f"{canary.name}#batch{batches[0]}", canary.candidate, canary.reference)
        batches[0] += 1
        if idle_between:
            backend.warm()
        try:
            results, canary_result = _verify_batch(backend, jobs, verdicts, probe)
        finally:
            if idle_between:
                backend.idle()
        if canary is not None and canary_result is not None:
            if not expected:  # learn what a good kernel gets here, once
                got = canary_result.verdict.value
                expected.append(got if got in ("correct", "compiled") else "correct")
            _check_canary(canary, canary_result, expected[0])
        out: list[float | None] = []
        dropped: dict[str, int] = {}
        for res in results:
            why = infrastructure_failure(res)
            if why is not None:
                dropped[why.split(":")[0]] = dropped.get(why.split(":")[0], 0) + 1
                out.append(None)
            else:
                out.append(reward_from_result(res, config.required_speedup, config.correct_reward))
        if dropped:
            log.warning(
                "rewards: %d of %d rollouts not scored (the verifier failed, not the kernel): %s",
                sum(dropped.values()),
                len(results),
                ", ".join(f"{k} x{v}" for k, v in sorted(dropped.items())),
            )
        return out

    return reward
