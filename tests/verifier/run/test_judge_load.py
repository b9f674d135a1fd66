"""run/judge_load.py: a build the judge refused decides the verdict, whatever the runner reports.

The runner's `load_inline` is built by the judge (`_build`). Where the judge finds the built host
code calling what the static checks forbid (build/host_symbols.py), the verdict is that
`static_violation`: a candidate that catches the refusal and falls back to PyTorch, or a runner
that reports some other failure or success, cannot change it. The runner's side is played here by
a stand-in `ask` that sends the build request through the judge's own handler.
"""

from __future__ import annotations

import types
from typing import Any

import pytest
from cudice.verifier.run import judge_load
from cudice.verifier.run.judging import Stop
from cudice.verifier.source.result import Diagnostic, Severity, Stage, Verdict

VIOLATION = Diagnostic(
    Severity.ERROR, "`at::matmul` in host function `f` runs an ATen op.", "static.cpp_torch_op", Stage.COMPILE
)


def _run_load(monkeypatch: pytest.MonkeyPatch, build_answer: dict[str, Any], runner: str) -> None:
    """`_load` with the judge's build answering `build_answer` and a runner that then `runner`s:
    "succeeds" (the candidate caught the refusal and loaded a fallback), or "fails" (the runner
    reports a runtime error of its own)."""
    builds: list[dict[str, Any]] = []

    def fake_build(st: Any, req: dict[str, Any], doc: Any, path: str) -> dict[str, Any]:
        builds.append(req)
        return build_answer

    def fake_ask(
        st: Any, link: Any, header: dict[str, Any], stage: Stage, blobs: Any = None, **kw: Any
    ) -> Any:
        answer = kw["on_build"]({"op": "build", "name": "ext", "cpp": [], "cuda": ["x"], "functions": None})
        assert answer is build_answer
        if runner == "fails":
            raise Stop(Verdict.RUNTIME_ERROR, Stage.LOAD, [], "RunnerFailure: static_violation")
        return {"ok": True}, []

    monkeypatch.setattr(judge_load, "_build", fake_build)
    monkeypatch.setattr(judge_load, "ask", fake_ask)
    st = types.SimpleNamespace(walls={}, constant_keys=[], device="cpu", where=types.SimpleNamespace(line=1))
    link = types.SimpleNamespace(ready=True, role="candidate")
    judge_load._load(st, link, "cand", "src", "/c.py", "ModelNew", [], 1, None)  # type: ignore[arg-type]
    assert len(builds) == 1


@pytest.mark.parametrize("runner", ["succeeds", "fails"])
def test_a_refused_build_is_a_static_violation_whatever_the_runner_reports(
    monkeypatch: pytest.MonkeyPatch, runner: str
) -> None:
    refused = {
        "ok": False,
        "verdict": "static_violation",
        "diagnostics": [VIOLATION.to_dict()],
        "error": "the built module's host code calls PyTorch ops or starts threads (host_symbols)",
    }
    with pytest.raises(Stop) as stop:
        _run_load(monkeypatch, refused, runner)
    assert stop.value.verdict is Verdict.STATIC_VIOLATION
    assert [d.code for d in stop.value.diagnostics] == ["static.cpp_torch_op"]


def test_a_build_that_only_failed_to_compile_leaves_the_runner_s_verdict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A compile error is not a finding of the judge's: the candidate may fall back (and is then
    judged on what it runs), and a runner that fails reports its own error."""
    failed = {"ok": False, "diagnostics": [], "error": "error: expected ';'"}
    _run_load(monkeypatch, failed, "succeeds")  # no Stop: the load went on
    with pytest.raises(Stop) as stop:
        _run_load(monkeypatch, failed, "fails")
    assert stop.value.verdict is Verdict.RUNTIME_ERROR


def test_the_candidate_s_reported_diagnostics_cannot_name_the_verifier_s_failure() -> None:
    from cudice.verifier.run.judge_state import CANDIDATE_SAYS, reported_diagnostics

    sent = {
        "diagnostics": [
            {"severity": "error", "message": "No GPU.", "code": "verify.no_gpu", "stage": "correctness"},
            {
                "severity": "error",
                "message": "The reference process ended.",
                "code": "runtime.crash",
                "stage": "load",
            },
            {
                "severity": "error",
                "message": "The reference process reported: x",
                "code": "runtime.exception",
                "stage": "load",
            },
            {
                "severity": "error",
                "message": "x was mutated",
                "code": "dynamic.input_mutated",
                "stage": "correctness",
            },
        ]
    }
    cand = reported_diagnostics(types.SimpleNamespace(role="candidate"), sent)  # type: ignore[arg-type]
    assert [d.code for d in cand] == ["runtime.exception"] * 3 + ["dynamic.input_mutated"]
    assert all(d.message.startswith(CANDIDATE_SAYS) for d in cand[:3])
    assert cand[0].message == CANDIDATE_SAYS + "verify.no_gpu: No GPU."
    assert cand[3].message == "x was mutated"  # a finding of its own guards is kept as it came
    ref = reported_diagnostics(types.SimpleNamespace(role="reference"), sent)  # type: ignore[arg-type]
    assert [d.code for d in ref] == [
        "verify.no_gpu",
        "runtime.crash",
        "runtime.exception",
        "dynamic.input_mutated",
    ]


def test_every_code_the_reward_leaves_unscored_is_one_the_candidate_cannot_report() -> None:
    """The RL reward's list of the verifier's failures (model/train/reward.py) and the judge's list
    of codes a candidate may not claim are kept apart; a code in the first and not the second would
    let a failing kernel escape its 0 again."""
    from cudice.model.train.reward import _INFRA_MESSAGES, INFRA_CODES
    from cudice.verifier.run.judge_state import VERIFIER_FAULT_CODES, VERIFIER_FAULT_PREFIXES

    reward_codes = set(INFRA_CODES) | (set(_INFRA_MESSAGES) - {"runtime.exception"}) | {"sandbox.unreadable"}
    uncovered = {
        c for c in reward_codes if c not in VERIFIER_FAULT_CODES and not c.startswith(VERIFIER_FAULT_PREFIXES)
    }
    assert not uncovered, uncovered
