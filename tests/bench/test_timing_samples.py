"""bench/timing_samples.py reads a timing's samples and shows where its time went, by call place."""

from __future__ import annotations

import importlib.util
import json
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _module():
    spec = importlib.util.spec_from_file_location("timing_samples", ROOT / "bench" / "timing_samples.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_slow_first_call_per_block_and_per_repetition_is_shown_by_place(tmp_path: Path) -> None:
    """Two repetitions of two blocks; every block's first call 0.16 s (a collection inside the
    clock) and each repetition's first event-timed call slow: both show by place, from a tar."""
    block_c = [0.16, 0.0012, 0.0011, 0.0011]
    block_r = [0.15, 0.0008, 0.0008, 0.0008]
    row = {
        "per_call": {"candidate": [block_c] * 4, "reference": [block_r] * 4},
        "ref_events": [0.27, 0.22, 0.22, 0.22, 0.28, 0.22, 0.22, 0.22],
        "blocks_per_repetition": 2,
        "candidate_by_repetition_ms": [0.62, 0.63],
        "candidate_by_medians_ms": 0.62,
    }
    folder = tmp_path / "samples"
    folder.mkdir()
    (folder / "relu-1-2.json").write_text(json.dumps(row))
    archive = tmp_path / "samples.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname="samples")
    mod = _module()
    [(name, read)] = mod.load(archive)
    lines = mod.report(name, read)
    place = "calls by place in their block (median µs)"
    assert f"candidate's {place}: 1st 160000.0, 2nd 1200.0, later 1100.0" in lines
    assert f"reference's {place}: 1st 150000.0, 2nd 800.0, later 800.0" in lines
    assert any(line.endswith("1st 275.0, later 220.0") for line in lines), lines


def test_calls_the_scheduler_held_up_are_counted_and_left_out_of_a_second_estimate(tmp_path: Path) -> None:
    """Samples with per-call run-queue waits: each runner's held-up calls are counted with their
    median wait, and the candidate's estimate is shown with every call and without those."""
    ms = 1e-3
    row = {
        "per_call": {"candidate": [[2 * ms] * 4 + [9 * ms] * 12], "reference": [[1 * ms] * 16]},
        "waits": {"candidate": [[0] * 4 + [500_000] * 12], "reference": [[0] * 16]},
        "ref_events": [0.5],
        "blocks_per_repetition": 1,
    }
    lines = _module().held_up(row, 1)
    assert "candidate's calls held up by the scheduler: 12 of 16, median wait 500.0 µs" in lines
    assert "reference's calls held up by the scheduler: 0 of 16" in lines
    # every call: 0.5 ms + (7.25 - 1) ms, the lower quartile among the held-up calls; without: 0.5 + (2 - 1)
    assert lines[-1] == "candidate by repetition (ms), every call: [6.75]; without the held-up ones: [1.5]"
    assert _module().held_up({"per_call": row["per_call"]}, 1) == []  # samples from before waits
