"""The second red-team corpus on a GPU, end to end through `cudice.verifier.api.verify`.

Every `adv_rt2_*` case attacks a weakness of a judge whose runner shares the candidate's Python
(patched server methods and sync builtins, replayed inputs, lazy outputs, forged kernel evidence,
reduced precision, threads that launch after the timed call) and must end with any verdict but
`correct`; every `honest2_*` case is an honest kernel with something unusual about it (structured
inputs, a template launch helper, CUB compiled in, a host-side scalar division) and must end
`correct`. Each file's header says which weakness it attacks (docs/anticheat.md, corpus/manifest.py).

All cases are verified at once in one thread pool sharing the default build cache (the builds run
in parallel on the GPU box's cores, and `test_gpu.py` reuses them); each outcome is printed and
`record()`ed for docs/benchmarks.md. Skips cleanly without a CUDA GPU (tests/conftest.py).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from corpus.manifest import CORPUS_DIR, Case, parse_case, record
from cudice.verifier.api import verify
from cudice.verifier.config import VerifyConfig
from cudice.verifier.source.result import Severity, Verdict, VerifyResult

pytestmark = pytest.mark.gpu

ATTACKS = [parse_case(p) for p in sorted(CORPUS_DIR.glob("adv_rt2_*.py"))]
HONEST = [parse_case(p) for p in sorted(CORPUS_DIR.glob("honest2_*.py"))]
NUM_WORKERS = 6  # builds on the box's cores while earlier cases hold the GPU


def _summary(result: VerifyResult) -> dict[str, Any]:
    return {
        "verdict": result.verdict.value,
        "stage": result.stage.value,
        "codes": sorted({d.code for d in result.diagnostics}),
        "errors": [d.message[:300] for d in result.diagnostics if d.severity is Severity.ERROR][:4],
        "speedup": result.speedup,
        "max_rel_err": result.max_rel_err,
        "error": (result.error or "")[-600:],
    }


@pytest.fixture(scope="module")
def results() -> dict[str, VerifyResult]:
    config = VerifyConfig(timeout_s=300.0)
    cases = ATTACKS + HONEST
    with ThreadPoolExecutor(max_workers=min(NUM_WORKERS, os.cpu_count() or 2)) as pool:
        futures = {c.name: pool.submit(verify, c.path, config=config) for c in cases}
        found = {name: f.result(timeout=3600) for name, f in futures.items()}
    for c in cases:
        expected = {"correct"} if c in HONEST else {f"not {Verdict.CORRECT.value}"}
        record("adversarial2", c.name, found[c.name], expected, set(c.codes))
        print(f"{c.name}: {_summary(found[c.name])}")
    return found


def test_the_corpus_covers_every_weakness() -> None:
    weaknesses = {c.exploit.split(" - ")[0] for c in ATTACKS}
    covered = {int(n) for w in weaknesses for n in w.removeprefix("weakness ").split("+")}
    assert {1, 2, 3, 5, 6} <= covered, weaknesses
    assert all(c.accepts("incorrect") and not c.accepts("correct") for c in ATTACKS)
    assert len(HONEST) >= 6 and all(c.accepts("correct") for c in HONEST)


@pytest.mark.parametrize("case", ATTACKS, ids=lambda c: c.name)
def test_attack_is_not_correct(case: Case, results: dict[str, VerifyResult]) -> None:
    result = results[case.name]
    if case.max_speedup is not None and result.verdict is Verdict.CORRECT:  # the attack gained nothing
        assert case.gained_nothing(result), (case.exploit, _summary(result))
        return
    assert result.verdict is not Verdict.CORRECT, (case.exploit, _summary(result))
    assert case.accepts(result.verdict.value)


@pytest.mark.parametrize("case", HONEST, ids=lambda c: c.name)
def test_honest_kernel_is_correct(case: Case, results: dict[str, VerifyResult]) -> None:
    result = results[case.name]
    assert result.verdict is Verdict.CORRECT, (case.exploit, _summary(result))
    assert result.num_correct_trials >= 1 and result.stage.value == "timing", _summary(result)
    # timed: a speedup, or a time within the clock's noise that says so and shows no number
    assert result.speedup is not None or any(d.code == "timing.unresolved" for d in result.diagnostics)
