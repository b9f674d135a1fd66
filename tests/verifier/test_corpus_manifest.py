"""The corpus manifest's header parsing (corpus/manifest.py): `verdict=not_correct` accepts every
verdict but `correct`, and every other header keeps the plain string it always had."""

from __future__ import annotations

from pathlib import Path

import pytest
from corpus.manifest import NOT_CORRECT, AnyButCorrect, load_corpus, parse_case
from cudice.verifier.source.result import Verdict


def _case(tmp_path: Path, header: str) -> Path:
    path = tmp_path / "case.py"
    path.write_text(f"# cudice: reference=references/relu.py\n{header}\n# exploit: weakness 9 - test\n")
    return path


def test_not_correct_accepts_every_verdict_but_correct(tmp_path: Path) -> None:
    case = parse_case(_case(tmp_path, "# corpus: kind=runtime verdict=not_correct"))
    assert isinstance(case.verdict, AnyButCorrect) and str(case.verdict) == NOT_CORRECT
    for v in Verdict:
        assert case.accepts(v.value) is (v is not Verdict.CORRECT), v
        # the form older tests use: `result.verdict.value == case.verdict`
        assert (v.value == case.verdict) is (v is not Verdict.CORRECT), v
        assert (case.verdict != v.value) is (v is Verdict.CORRECT), v
    assert case.verdict != "correct" and case.kind == "runtime" and case.codes == ()


@pytest.mark.parametrize(
    ("verdict", "accepted", "refused"),
    [
        ("incorrect", "incorrect", "correct"),
        ("crash|timeout", "timeout", "incorrect"),
        ("correct", "correct", "crash"),
    ],
)
def test_plain_verdicts_are_unchanged(tmp_path: Path, verdict: str, accepted: str, refused: str) -> None:
    case = parse_case(_case(tmp_path, f"# corpus: kind=runtime verdict={verdict} codes=a.b,c.d"))
    assert type(case.verdict) is str and case.verdict == verdict and case.codes == ("a.b", "c.d")
    assert case.accepts(accepted) and not case.accepts(refused)


def test_only_not_correct_headers_parse_to_the_pattern() -> None:
    for case in load_corpus():
        text = case.path.read_text(encoding="utf-8")
        assert isinstance(case.verdict, AnyButCorrect) is (f"verdict={NOT_CORRECT}" in text), case.name
        if not isinstance(case.verdict, AnyButCorrect):
            assert type(case.verdict) is str, case.name


@pytest.mark.parametrize(
    ("header", "verdict", "speedup", "suspicious", "codes", "gained_nothing"),
    [
        # a speed-only attack, correct at its honest speed: below the cap, flagged, or unresolved
        ("max_speedup=0.5", "correct", 0.3, False, (), True),
        ("max_speedup=0.5", "correct", 3.0, True, (), True),
        ("max_speedup=0.5", "correct", None, False, ("timing.unresolved",), True),
        # a forged speed-up, or no speedup without the clock saying why
        ("max_speedup=0.5", "correct", 0.9, False, (), False),
        ("max_speedup=0.5", "correct", None, False, (), False),
        # rejections are for `accepts`; a case without a cap never gains nothing by being correct
        ("max_speedup=0.5", "incorrect", None, False, (), False),
        ("", "correct", 0.1, False, ("timing.unresolved",), False),
    ],
)
def test_a_speed_only_attack_may_be_correct_only_at_its_honest_speed(
    tmp_path: Path,
    header: str,
    verdict: str,
    speedup: float | None,
    suspicious: bool,
    codes: tuple[str, ...],
    gained_nothing: bool,
) -> None:
    from types import SimpleNamespace

    case = parse_case(_case(tmp_path, f"# corpus: kind=runtime verdict=not_correct {header}"))
    result = SimpleNamespace(
        verdict=Verdict(verdict),
        speedup=speedup,
        is_suspicious=suspicious,
        diagnostics=[SimpleNamespace(code=c) for c in codes],
    )
    assert case.gained_nothing(result) is gained_nothing
    assert not case.accepts("correct")  # a correct run counts only through gained_nothing
