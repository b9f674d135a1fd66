"""Run-stage pieces that need no GPU: timing statistics, the judge's last-resort result, the
timing record, and where a NaN output may pass."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from cudice.verifier.run.timing import summarize  # noqa: E402
from cudice.verifier.run.tolerance import compare_outputs  # noqa: E402


def test_nan_passes_only_where_the_reference_has_nan_and_never_for_an_all_nan_reference() -> None:
    ref = torch.tensor([float("nan"), 1.0])
    assert compare_outputs(ref, ref.clone(), 1e-2, 1e-2).ok
    for wrong in (
        torch.tensor([0.0, 1.0]),
        torch.tensor([float("nan"), 5.0]),
        torch.tensor([1.0, float("nan")]),
    ):
        got = compare_outputs(ref, wrong, 1e-2, 1e-2)
        assert not got.ok and got.rule in ("non_finite", "element"), got
    all_nan = torch.full((4,), float("nan"))
    got = compare_outputs(all_nan, all_nan.clone(), 1e-2, 1e-2)
    assert not got.ok and got.rule == "non_finite" and "nothing to compare" in got.why


def test_summarize_quartiles_and_median() -> None:
    t = summarize([4.0, 1.0, 3.0, 2.0, 5.0])
    assert (t.median_ms, t.min_ms, t.max_ms, t.q1_ms, t.q3_ms, t.num_trials) == (3.0, 1.0, 5.0, 2.0, 4.0, 5)


def test_a_job_that_raises_is_reported_as_a_crash_on_the_result_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib
    import io
    import json
    import os

    main = importlib.import_module("cudice.verifier.run.judge").main
    monkeypatch.setattr("sys.stdin", io.StringIO("this is not a JSON job"))
    read_fd, write_fd = os.pipe()
    assert main(["--result-fd", str(write_fd)]) == 0
    with os.fdopen(read_fd) as pipe:
        out = json.loads(pipe.read())
    assert (out["verdict"], out["stage"]) == ("crash", "load")
    assert "JSONDecodeError" in out["error"] and "Traceback" in out["error"]
    (d,) = out["diagnostics"]
    assert d["code"] == "runtime.worker_error" and d["message"].startswith("judge: JSONDecodeError: ")


@pytest.mark.parametrize(("cand_ms", "suspicious"), [([1.0, 1.0, 1.0], False), ([0.01, 0.01, 0.01], True)])
def test_record_timing_fills_the_figures_and_flags_a_suspicious_speedup(
    cand_ms: list[float], suspicious: bool
) -> None:
    from cudice.verifier.run.judging import record_timing
    from cudice.verifier.run.timing import from_samples
    from cudice.verifier.source.result import Location

    cmp = from_samples([2.0, 2.0, 2.0], cand_ms, input_bytes=0, output_bytes=0)
    out: dict[str, object] = {}
    diags: list = []
    where = Location("c.py", 7)
    record_timing(cmp, where, out, diags, "; timed here")
    assert out["speedup"] == pytest.approx(2.0 / cand_ms[0]) and out["is_suspicious"] is suspicious
    assert out["candidate"] == {
        "median_ms": cand_ms[0],
        "min_ms": cand_ms[0],
        "max_ms": cand_ms[0],
        "q1_ms": cand_ms[0],
        "q3_ms": cand_ms[0],
        "num_trials": 3,
    }
    codes = [d.code for d in diags]
    assert codes == (["timing.suspicious", "timing.speedup"] if suspicious else ["timing.speedup"])
    assert all(d.location == where for d in diags) and diags[-1].message.endswith("; timed here).")


def test_an_unresolved_timing_reports_no_speedup_and_no_candidate_time() -> None:
    """A candidate time the judge's clock could not resolve (here floored from a negative estimate)
    gives no ratio anywhere: not in the fields, not in a message, and fast_p does not count it."""
    from cudice.verifier.run.judging import record_timing
    from cudice.verifier.run.timing import from_samples
    from cudice.verifier.source.result import Location, Stage, Verdict, VerifyResult

    noise = "the candidate's time per call is below half the cost of launching one kernel"
    cmp = from_samples(
        [0.02, 0.02, 0.02], [1e-6, 1e-6, 1e-6], input_bytes=0, output_bytes=0, extra_reasons=[noise]
    )
    assert not cmp.resolved and cmp.is_suspicious and cmp.speedup > 10_000  # the raw ratio is noise
    out: dict[str, object] = {}
    diags: list = []
    record_timing(cmp, Location("c.py", 3), out, diags, "; timed here")
    assert out["speedup"] is None and out["speedup_min"] is None and out["speedup_max"] is None
    assert out["candidate"] is None and out["reference"]["median_ms"] == pytest.approx(0.02)
    assert [d.code for d in diags] == ["timing.unresolved"]
    assert noise in diags[0].message and "x faster" not in diags[0].message
    assert "20000" not in diags[0].message and "larger problem" in diags[0].message
    result = VerifyResult(
        Verdict.CORRECT, Stage.TIMING, "c.py", tuple(diags), speedup=None, is_suspicious=True
    )
    assert not result.is_fast(1.0) and result.runtime_ms is None
    resolved = from_samples([2.0] * 3, [1.0] * 3, input_bytes=0, output_bytes=0)
    assert resolved.resolved and not resolved.is_suspicious
