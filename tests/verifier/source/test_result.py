from __future__ import annotations

from cudice.verifier.source.result import Diagnostic, Location, Severity, Stage, Timing, Verdict, VerifyResult


def _timing(median: float, q1: float, q3: float) -> Timing:
    return Timing(median_ms=median, min_ms=q1 * 0.9, max_ms=q3 * 1.1, q1_ms=q1, q3_ms=q3, num_trials=20)


def test_json_round_trip_keeps_everything() -> None:
    diag = Diagnostic(
        Severity.ERROR,
        "boom",
        "compile.error",
        Stage.COMPILE,
        Location("a.py", 3, 5),
        related=((Location("a.py", 1, 1), "declared here"),),
    )
    r = VerifyResult(
        Verdict.CORRECT,
        Stage.TIMING,
        "a.py",
        (diag,),
        candidate=_timing(1.0, 0.95, 1.05),
        reference=_timing(2.0, 1.9, 2.1),
        speedup=2.0,
        speedup_min=1.9 / 1.05,
        versions={"torch": "x"},
        stage_wall_s={"compile": 1.5},
    )
    back = VerifyResult.from_json(r.to_json())
    assert back == r
    d = r.to_dict()
    assert d["verdict"] == "correct" and d["runtime_ms"] == 1.0 and d["reference_runtime_ms"] == 2.0
    assert d["diagnostics"][0]["line"] == 3


def test_fast_p_needs_correctness_and_a_margin_beyond_spread() -> None:
    fast = VerifyResult(Verdict.CORRECT, Stage.TIMING, "a.py", speedup=1.05, speedup_min=0.98)
    assert fast.is_fast(0.9) and not fast.is_fast(1.0)
    wrong = VerifyResult(Verdict.INCORRECT, Stage.CORRECTNESS, "a.py", speedup=5.0, speedup_min=5.0)
    assert not wrong.is_fast(1.0)
    suspicious = VerifyResult(
        Verdict.CORRECT, Stage.TIMING, "a.py", speedup=50.0, speedup_min=49.0, is_suspicious=True
    )
    assert not suspicious.is_fast(1.0)
