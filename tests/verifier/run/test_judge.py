"""The judge (run/judge.py) against the `runtime` corpus, on the CPU: the real judge process, the real
runner processes inside the real OS boundary, PyTorch stand-ins for the kernels.

Each case runs through `api._run_stage` (the verdict mapping `cudice verify` uses) with the job
sent to the judge with `device=cpu`. Afterwards nothing a case wrote may be left in
site-packages, the build cache, the home directory or the temporary directories, and no process
it started may be alive. Cases marked `# runtime-device: gpu` run in the `gpu` test.

The `gpu` test runs the first corpus (`adv_rt_*`) on the GPU through the same run stage. The
second (`adv_rt2_*`) is verified end to end there by test_adversarial_gpu.py: several of its
attacks are stopped by the static checks, which the run stage alone does not apply. A stand-in
case (no `__global__` kernel of its own) cannot be `correct` on a GPU: the evidence that the
candidate's own kernels did the work fails closed there (`dynamic.torch_kernels_did_work`), before
the later checks a case may aim at.
"""

from __future__ import annotations

import os
import site
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from corpus.manifest import Case, accepts, load_corpus
from cudice.verifier import api
from cudice.verifier.config import VerifyConfig
from cudice.verifier.run.sandbox import ChildOutcome, run_in_child
from cudice.verifier.source.document import read_document
from cudice.verifier.source.reference import resolve_reference
from cudice.verifier.source.result import Severity, Stage, Verdict, VerifyResult

pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the OS boundary is Linux's")

RUNTIME = load_corpus("runtime")
CPU_CASES = [c for c in RUNTIME if "# runtime-device: gpu" not in c.path.read_text()]
TIMED = {
    "adv_rt_honest_first_calls",
    "adv_rt_patch_timer_late",
    "adv_rt_inplace_after_checks",
    "adv_rt_lazy_container_precision",
    "adv_rt_honest_split_k_timed",
    "adv_rt_honest_log_relu_timed",
    "honest_argmax_last_on_made_ties",  # every timed set ties: each call's output is compared in full
}  # caught only in (or after) timing
DAMAGE_MARK = "cudice_damage_mark"
SURVIVOR = b"CUDICE_SURVIVOR="


def judge_case(case: Case, cache_dir: Path, *, device: str = "cpu") -> tuple[VerifyResult, ChildOutcome]:
    doc = read_document(case.path)
    ref = resolve_reference(doc).document
    assert ref is not None
    config = VerifyConfig(
        cache_dir=cache_dir,
        timeout_s=600,
        num_trials=6,  # one per input distribution: each case meets every one
        # the CPU cases that reach timing (TIMED) cheat from their first timed calls on: the fewest
        # repetitions VerifyConfig allows catch them (7 such cases: 47 s against 67 s with 6)
        timing_num_trials=3 if device == "cpu" else 6,
        timing_warmup_ms=5.0,
        l2_flush_mib=0 if device == "cpu" else 256,
    )
    outcomes: list[ChildOutcome] = []

    def child(job: dict[str, Any], **kw: Any) -> ChildOutcome:
        job = {**job, "device": device, "skip_timing": case.name not in TIMED and device == "cpu"}
        outcomes.append(run_in_child(job, **kw))
        return outcomes[0]

    return api._run_stage(api._Run(doc, config, None), ref, config, None, child), outcomes[0]


@pytest.fixture(scope="module")
def corpus_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[VerifyResult, ChildOutcome]]:
    cache = tmp_path_factory.mktemp("judge-cache")
    os.environ["CUDICE_TEST_SECRET_TOKEN"] = "s3cr3t"  # adv_rt_read_parent_environ looks for it
    try:
        with ThreadPoolExecutor(max_workers=3) as pool:
            futures = {c.name: pool.submit(judge_case, c, cache) for c in CPU_CASES}
            results = {name: f.result(timeout=1800) for name, f in futures.items()}
    finally:
        del os.environ["CUDICE_TEST_SECRET_TOKEN"]
    results["__cache__"] = (cache, None)  # type: ignore[assignment]
    return results


def test_the_runtime_corpus_is_big_enough_and_covers_every_class() -> None:
    assert len(RUNTIME) >= 15
    classes = {e.split(" - ")[0] for e in (c.exploit for c in RUNTIME)}
    assert {f"class {k}" for k in (1, 2, 3, 4, 5, 6, 7)} <= classes, classes


@pytest.mark.parametrize("case", CPU_CASES, ids=lambda c: c.name)
def test_runtime_case_gets_its_verdict(case: Case, corpus_results: dict[str, Any]) -> None:
    result, outcome = corpus_results[case.name]
    found = {d.code for d in result.diagnostics}
    detail = (result.verdict, sorted(found), (result.error or "")[-1500:], outcome.stderr_tail[-1500:])
    assert result.verdict.value == case.verdict, detail
    assert set(case.codes) <= found, detail
    # the boundary was complete: no sandbox.* warning (this machine runs the tests as root with unshare)
    if os.geteuid() == 0:
        assert not [d for d in result.diagnostics if d.code.startswith("sandbox.")], detail


def test_a_timed_run_gives_its_memory_back(corpus_results: dict[str, Any]) -> None:
    """After correctness (and after each timing repetition while the GPU's memory is short) the
    runners and the judge drop what the phase left and empty their allocators' caches
    (`release_memory`): its wall is there in a run that reached timing (this case is caught there)."""
    result, _ = corpus_results["adv_rt_honest_first_calls"]
    assert result.stage is Stage.TIMING and result.stage_wall_s.get("run.release_memory", 0.0) > 0.0


def test_the_runners_say_where_their_start_went(corpus_results: dict[str, Any]) -> None:
    """Each runner's `ready` carries its start's steps, measured before any candidate code ran in
    it; the judge reports them as load walls (the import, and the process's age at `ready`)."""
    walls = corpus_results["adv_rt_honest_first_calls"][0].stage_wall_s
    for role in ("candidate", "reference"):
        assert 0.0 <= walls[f"run.load.{role}_runner_import"] < walls[f"run.load.{role}_runner_age"]


def test_no_claimed_verdict_and_no_forged_record_reaches_the_parent(corpus_results: dict[str, Any]) -> None:
    forged = [
        name
        for name in (
            "adv_rt_forge_cmdline",
            "adv_rt_atexit_forge",
            "adv_rt_raise_stop_correct",
            "adv_rt_patch_compare",
        )
        if corpus_results[name][0].verdict is Verdict.CORRECT
    ]
    assert forged == []
    result, _ = corpus_results["adv_rt_forge_cmdline"]
    assert result.speedup is None  # the forged record carried speedup 3.0


def test_a_reply_the_candidate_forged_is_never_the_verifier_s_failure(corpus_results: dict[str, Any]) -> None:
    """The candidate answered the judge itself with the verifier's failure codes, messages and
    error text: the verdict is the kernel's, and the RL reward scores it (0), never leaves it out."""
    from cudice.model.train.reward import infrastructure_failure, reward_from_result

    result, _ = corpus_results["adv_rt_forged_infra_reply"]
    assert result.verdict is Verdict.RUNTIME_ERROR
    assert infrastructure_failure(result) is None, [(d.code, d.message) for d in result.diagnostics]
    assert reward_from_result(result, None) == 0.0
    assert result.error != "cancelled"
    claimed = [d for d in result.diagnostics if d.message.startswith("The candidate's process reported: ")]
    assert len(claimed) >= 4  # each forged diagnostic is kept, as the candidate's claim


def test_nothing_is_left_behind(corpus_results: dict[str, Any]) -> None:
    cache, _ = corpus_results["__cache__"]
    dirs = [Path(p) for p in {*site.getsitepackages(), *(p for p in sys.path if p.endswith("site-packages"))}]
    dirs += [cache, cache / "objects", Path.home(), Path("/tmp"), Path("/var/tmp"), Path("/dev/shm")]
    left = [
        str(d / name)
        for d in dirs
        for name in (f"{DAMAGE_MARK}.pth", f"objects/{DAMAGE_MARK}.o")
        if (d / name).exists()
    ]
    assert left == []
    deadline = time.monotonic() + 30
    while _survivors() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _survivors() == []


def _survivors() -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if SURVIVOR in Path(f"/proc/{pid}/environ").read_bytes():
                    found.append(int(pid))
            except OSError:
                continue
    return found


def test_a_hang_is_a_timeout_within_the_per_call_limit(corpus_results: dict[str, Any]) -> None:
    """A forward that never returns ends as `timeout` once max(10 s, 100x the reference) passed, with
    the limit in the message, long before the run's own limit (600 s here)."""
    result, outcome = corpus_results["adv_rt_hang_forward"]
    assert result.verdict is Verdict.TIMEOUT
    message = next(d.message for d in result.diagnostics if d.code == "runtime.timeout")
    assert "max(10 s, 100 x the reference's" in message
    assert outcome.wall_s < 120, outcome.wall_s


def test_honest_stand_in_is_timed_by_the_judge(corpus_results: dict[str, Any]) -> None:
    """The persistent-damage case computes honestly: it is `correct`, with the judge's figures."""
    result, _ = corpus_results["adv_rt_persistent_damage"]
    assert result.verdict is Verdict.CORRECT and result.num_correct_trials >= 4
    assert not [d for d in result.diagnostics if d.severity is Severity.ERROR]


# -- GPU: the same corpus with real kernels, twelve judges at once on the GPU ------------------------------


GPU_CASES = [c for c in RUNTIME if not c.name.startswith("adv_rt2_")]


def gpu_expectations(case: Case) -> list[tuple[str, set[str]]]:
    """The (verdict, codes) a first-corpus case may get on the GPU: a case with a kernel of its own
    gets its own. A stand-in without one (plain PyTorch doing the work) is rejected by whichever
    check reaches it first: the ATen rule's profiled call, or, for an attack, the check it declares
    (a mismatch, the time limit, a crash come before the profiled call). A stand-in declared
    `correct` can only get the ATen rule's rejection."""
    if "__global__" in case.path.read_text():
        return [(case.verdict, set(case.codes))]
    aten = (Verdict.INCORRECT.value, {"dynamic.torch_kernels_did_work"})
    return [aten] if case.accepts(Verdict.CORRECT.value) else [aten, (case.verdict, set(case.codes))]


@pytest.fixture(scope="module")
def gpu_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[VerifyResult, ChildOutcome]]:
    cache = tmp_path_factory.mktemp("judge-gpu-cache")
    with ThreadPoolExecutor(max_workers=12) as pool:
        futures = {c.name: pool.submit(judge_case, c, cache, device="cuda") for c in GPU_CASES}
        return {name: f.result(timeout=1800) for name, f in futures.items()}


def test_the_gpu_run_keeps_the_first_corpus_and_its_kernel_cases() -> None:
    kernels = [c for c in GPU_CASES if gpu_expectations(c) == [(c.verdict, set(c.codes))]]
    assert len(GPU_CASES) >= 20 and not any(c.name.startswith("adv_rt2_") for c in GPU_CASES)
    assert {"adv_rt_spin_padding", "adv_rt_honest_busy_host"} <= {c.name for c in kernels}
    by_name = {c.name: c for c in GPU_CASES}
    aten = ("incorrect", {"dynamic.torch_kernels_did_work"})
    assert gpu_expectations(by_name["adv_rt_persistent_damage"]) == [aten]  # honest PyTorch: never correct
    hang = gpu_expectations(by_name["adv_rt_hang_forward"])
    assert hang == [aten, ("timeout", {"runtime.timeout"})]
    # a stand-in may never end `correct`; of the kernel cases only the honest ones may
    stand_ins = [e for c in GPU_CASES if c not in kernels for e in gpu_expectations(c)]
    assert not any(accepts(v, "correct") for v, _ in stand_ins)
    assert all("honest" in c.name for c in kernels if accepts(c.verdict, "correct"))
    assert all(codes for _, codes in stand_ins)  # a rejection for its reason, never a bare verdict


@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=lambda c: c.name)
def test_runtime_case_on_the_gpu(case: Case, gpu_results: dict[str, Any]) -> None:
    from corpus.manifest import record

    result, outcome = gpu_results[case.name]
    found = {d.code for d in result.diagnostics}
    allowed = gpu_expectations(case)
    got = result.verdict.value
    met = [(v, codes) for v, codes in allowed if accepts(v, got) and codes <= found]
    verdict, codes = met[0] if met else allowed[0]
    record("runtime", case.name, result, {verdict}, codes)
    detail = (result.verdict, sorted(found), (result.error or "")[-1500:], outcome.stderr_tail[-1500:])
    assert met, (allowed, detail)
