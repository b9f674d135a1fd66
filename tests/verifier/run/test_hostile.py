"""Hostile candidates against the real sandbox (`verifier/run/sandbox.py`): each gets a typed verdict
within its timeout, leaves nothing running, floods and memory bombs are bounded, `~` stays
the sandbox's — and the same machinery then serves a good candidate.

Without a GPU the real worker stops before running candidate code, so the CPU tests run the
corpus through `sandbox_stand_in` (the judges' own `judging.exec_module`, torch stubbed) and the
verdict mapping of `api._run_stage`. The `gpu` tests drive the real `VerifyPool`.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest
from corpus.manifest import Case, load_corpus
from cudice.verifier import api
from cudice.verifier.config import VerifyConfig
from cudice.verifier.run.sandbox import ChildOutcome, run_in_child
from cudice.verifier.source.document import read_document
from cudice.verifier.source.reference import resolve_reference
from cudice.verifier.source.result import Verdict, VerifyResult

HERE = Path(__file__).resolve().parents[1]  # tests/verifier: the stand-ins and the corpus
AT_IMPORT = [c for c in load_corpus("hostile") if "before load_inline" in c.exploit]
HONEST = next(c for c in load_corpus("honest") if c.name == "honest_relu_empty_like")


def _child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, **(extra or {})}


def _through_sandbox(
    case: Case, *, timeout_s: float = 60.0, env: dict[str, str] | None = None, max_file_mib: int = 1024
) -> tuple[VerifyResult, ChildOutcome]:
    doc = read_document(case.path)
    ref = resolve_reference(doc).document
    assert ref is not None
    config = VerifyConfig(timeout_s=timeout_s, memory_limit_mib=2048)
    outcomes: list[ChildOutcome] = []

    def child(job: dict, **kw: object) -> ChildOutcome:
        outcome = run_in_child(
            job, module="sandbox_stand_in", env=_child_env(env), max_file_mib=max_file_mib, **kw
        )  # type: ignore[arg-type]
        outcomes.append(outcome)
        return outcome

    result = api._run_stage(api._Run(doc, config, None), ref, config, None, child)
    return result, outcomes[0]


def _expected(case: Case) -> set[str]:
    return set(case.verdict.split("|")) - {"static_violation"}


@pytest.mark.parametrize("case", AT_IMPORT, ids=lambda c: c.name)
def test_hostile_candidate_gets_its_verdict_in_time(case: Case) -> None:
    timeout_s = 3.0 if "timeout" in case.verdict else 60.0
    t0 = time.monotonic()
    result, _ = _through_sandbox(case, timeout_s=timeout_s)
    assert result.verdict.value in _expected(case), (result.verdict, result.error)
    assert time.monotonic() - t0 < timeout_s + 15
    assert result.diagnostics and all(
        d.location is not None for d in result.diagnostics if d.code.startswith("runtime")
    )


def test_sandbox_serves_a_good_candidate_after_the_hostile_corpus() -> None:
    verdicts = {
        c.name: _through_sandbox(c, timeout_s=3.0 if "timeout" in c.verdict else 60.0)[0].verdict
        for c in AT_IMPORT
    }
    assert all(v.value in _expected(c) for c, v in zip(AT_IMPORT, verdicts.values(), strict=True)), verdicts
    result, outcome = _through_sandbox(HONEST)
    # the judge's stand-in exits by itself (0), or is ended once its result is complete (SIGKILL)
    assert result.verdict is Verdict.COMPILED and outcome.returncode in (0, -9), result.error


def test_a_forked_child_does_not_outlive_the_job() -> None:
    marker = f"cudice-test-{uuid.uuid4().hex}"
    case = next(c for c in AT_IMPORT if c.name == "hostile_fork_at_import")
    result, _ = _through_sandbox(case, env={"CUDICE_HOSTILE_MARKER": marker})
    assert result.verdict is Verdict.CRASH
    deadline = time.monotonic() + 5
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _processes_with(marker) == []


def _processes_with(marker: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if marker.encode() in Path(f"/proc/{pid}/environ").read_bytes():
                found.append(int(pid))
        except OSError:
            continue
    return found


def test_output_flood_is_truncated_and_a_bigger_one_is_cut_off() -> None:
    case = next(c for c in AT_IMPORT if c.name == "hostile_output_flood")
    result, outcome = _through_sandbox(case)
    assert result.verdict is Verdict.RUNTIME_ERROR
    limit = VerifyConfig().max_output_bytes
    assert len(outcome.stdout_tail.encode()) <= limit + 64 and outcome.stdout_tail.startswith("…[truncated]")
    # 64 MiB per stream against an 8 MiB file-size limit: the write fails (Python ignores SIGXFSZ and
    # gets EFBIG; native code would be killed by the signal), so the disk use is bounded either way
    result, outcome = _through_sandbox(case, max_file_mib=8)
    assert result.verdict in (Verdict.RUNTIME_ERROR, Verdict.CRASH)
    assert "File too large" in (result.error or "") or outcome.signal_name == "SIGXFSZ"


def test_memory_bomb_is_refused_by_the_memory_limit() -> None:
    case = next(c for c in AT_IMPORT if c.name == "hostile_memory_bomb")
    result, _ = _through_sandbox(case)
    assert result.verdict is Verdict.RUNTIME_ERROR
    assert any("MemoryError" in d.message for d in result.diagnostics)


def test_home_is_the_sandbox_and_secrets_are_not_inherited(monkeypatch: pytest.MonkeyPatch) -> None:
    marker = Path.home() / "cudice_hostile_marker"
    if marker.exists():
        pytest.skip(f"{marker} exists already; cannot tell whose it is")
    monkeypatch.setenv("CUDICE_TEST_SECRET_TOKEN", "s3cr3t")
    case = next(c for c in AT_IMPORT if c.name == "hostile_write_outside")
    outside = Path(os.environ.get("TMPDIR", "/tmp")) / "cudice_hostile_marker"
    try:
        result, _ = _through_sandbox(case)
        assert result.verdict is Verdict.RUNTIME_ERROR
        assert not marker.exists(), "the candidate wrote into the real home directory"
    finally:
        outside.unlink(missing_ok=True)  # `../` escapes the work dir: a documented gap (docs/anticheat.md §4)
    job = {"candidate_source": "import os\nprint(sorted(os.environ))\n", "candidate_path": "env.py"}
    outcome = run_in_child(
        job, timeout_s=60, memory_limit_mib=2048, module="sandbox_stand_in", env=_child_env()
    )
    assert outcome.returncode in (0, -9) and "PATH" in outcome.stdout_tail  # -9: ended after its result
    assert "CUDICE_TEST_SECRET_TOKEN" not in outcome.stdout_tail


# -- GPU: the real pool through the whole hostile corpus, then a good kernel ----------------------------


@pytest.mark.gpu
@pytest.mark.slow
def test_pool_survives_the_hostile_corpus_and_then_verifies_a_good_kernel() -> None:
    from corpus.manifest import gpu_corpus_results

    results = gpu_corpus_results()  # one pool for the dynamic, honest and hostile corpus
    cases = load_corpus("hostile")
    bad = {
        c.name: (results[c.name].verdict.value, (results[c.name].error or "")[-200:])
        for c in cases
        if results[c.name].verdict.value not in c.verdict.split("|")
    }
    good = results["good_after_hostile"]
    print(
        f"hostile corpus: {len(cases) - len(bad)}/{len(cases)} expected typed verdicts "
        f"(whole corpus {results['wall_s']:.0f} s); good kernel afterwards: {good.verdict.value}"
    )
    assert not bad, bad
    assert good.verdict is Verdict.CORRECT, (good.verdict, good.error, [d.message for d in good.diagnostics])


def test_gpu_corpus_plumbing_with_a_fake_pool(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The GPU corpus run happens once, on a lent machine: prove its plumbing here — every case
    submitted with its config, the good kernel only after all hostile verdicts, every row recorded."""
    import json
    from concurrent.futures import Future

    import cudice.verifier.pool as pool_mod
    from corpus import manifest

    order: list[str] = []

    class FakePool:
        def __init__(self, config: VerifyConfig, **kw: object) -> None:
            self.config = config

        def __enter__(self) -> FakePool:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def submit(self, path: Path, *, key: str, config: VerifyConfig | None = None) -> Future[VerifyResult]:
            order.append(key)
            fut: Future[VerifyResult] = Future()
            cfg = config or self.config
            fut.set_result(
                VerifyResult(Verdict.CORRECT, api.Stage.TIMING, str(path), error=f"timeout={cfg.timeout_s}")
            )
            return fut

    monkeypatch.setattr(pool_mod, "VerifyPool", FakePool)
    report = tmp_path / "anticheat.jsonl"
    monkeypatch.setenv("CUDICE_ANTICHEAT_REPORT", str(report))
    results = manifest.gpu_corpus_results.__wrapped__()
    cases = load_corpus("dynamic", "honest", "hostile")
    assert order == [c.name for c in cases] + ["good_after_hostile"]
    assert all(
        results[c.name].error == ("timeout=15.0" if c.kind == "hostile" else "timeout=120.0") for c in cases
    )
    rows = [json.loads(line) for line in report.read_text().splitlines()]
    assert len(rows) == len(cases) + 1 and rows[-1]["case"] == "good_after_hostile"
