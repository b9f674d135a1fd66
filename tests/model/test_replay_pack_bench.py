"""bench/replay_pack.py on the CPU at a small size: both replay variants run forward and backward,
agree at the targets, and the ratios are of the figures measured in the same run.

Not covered: the figures themselves (a tiny rollout on a shared CPU), the GPU's peak memory.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_replay_bench_reports_agreeing_variants_and_their_ratios(
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec = importlib.util.spec_from_file_location("replay_pack_bench", ROOT / "bench" / "replay_pack.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    report = bench.main(["--device", "cpu", "--prompt", "7", "--response", "24", "--repeats", "1"])
    assert report["rows"] == 4 and report["max_abs_dlogp"] < 1e-5
    assert report["tokens"]["packed"] < report["tokens"]["rows"] == 2 * 4 * report["length"]
    assert report["time_ratio"] == pytest.approx(report["packed_s"] / report["rows_s"])
    assert report["token_ratio"] == pytest.approx(report["tokens"]["packed"] / report["tokens"]["rows"])
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("RESULT replay_pack: packed/rows time")
