"""Where a judged time's noise comes from: read the judge's per-call samples and print them by half.

The judge writes one JSON per timing when `CUDICE_TIMING_SAMPLES` names a folder
(verifier/run/judge_timing.py `dump_samples`; bench/timing_fidelity.py sets it, and
bench/gpu_judge.sh and bench/gpu_staging.sh return the folder as `samples_*.tar.gz`). For each
timing this prints, block by block (the order the judge ran them; files written before the judge
cut repetitions into blocks hold two halves per repetition), both runners' lower decile, lower
quartile and median per call (µs) and their differences; then the spread of those differences by
the block's place in its repetition (the runners swap cores every other pair) and in time (the
first against the last third: clocks or caches still settling), and inside a block; and last the
candidate's time per repetition as the judge estimates it (`judge_timing.estimate`: lower
quartiles of the calls pooled per repetition) beside the mean of per-block differences (the
judge's estimator before blocks); then each runner's calls by their place in a block and the
reference's event-timed calls by their place in a repetition (`by_position`); and, where the
samples carry them, the calls the scheduler held up and the estimate without them (`held_up`).
A difference that
moves from block to block, not inside a block, points to the ordering; one that moves inside a
block, to the calls; a first call far above the rest, to work inside the clock. Reads only.

Usage: `python bench/timing_samples.py FOLDER_OR_TAR [...]`.
"""

from __future__ import annotations

import io
import json
import statistics
import sys
import tarfile
from pathlib import Path
from typing import Any


def _q(xs: list[float], p: float) -> float:
    ys = sorted(xs)
    return ys[min(len(ys) - 1, int(p * len(ys)))]


def load(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """Every sample file under a folder or inside a .tar.gz, as (name, row), sorted by name."""
    rows: list[tuple[str, dict[str, Any]]] = []
    if path.is_dir():
        for f in sorted(path.rglob("*.json")):
            rows.append((f.name, json.loads(f.read_text())))
    else:
        with tarfile.open(path) as tar:
            for m in sorted(tar.getmembers(), key=lambda m: m.name):
                if m.isfile() and m.name.endswith(".json"):
                    data = tar.extractfile(m)
                    if data is not None:
                        rows.append((Path(m.name).name, json.load(io.TextIOWrapper(data))))
    return rows


def _spread(xs: list[float]) -> str:
    if not xs:
        return "-"
    if len(xs) == 1:
        return f"{xs[0]:+.1f}"
    return f"median {statistics.median(xs):+.1f}, sd {statistics.stdev(xs):.1f} (n {len(xs)})"


def report(name: str, row: dict[str, Any]) -> list[str]:
    """Lines describing one timing's samples."""
    from cudice.verifier.run.judge_timing import TimingSamples, estimate

    cand = row["per_call"]["candidate"]
    ref = row["per_call"]["reference"]
    events = row.get("ref_events") or []
    lines = [
        f"## {name}",
        f"reference by events: median {1e3 * statistics.median(events):.1f} µs over {len(events)}"
        if events
        else "reference by events: none",
        f"candidate by repetition (ms): {[round(x, 4) for x in row.get('candidate_by_repetition_ms', [])]}; "
        f"by medians {row.get('candidate_by_medians_ms')}",
        "| block | calls | cand q10 / q25 / med µs | ref q10 / q25 / med µs | Δq25 µs | Δmed µs |",
        "|---|---|---|---|---|---|",
    ]
    d_q25: list[float] = []
    d_med: list[float] = []
    for k, (c, r) in enumerate(zip(cand, ref, strict=False)):
        cq = [1e6 * _q(c, p) for p in (0.1, 0.25, 0.5)]
        rq = [1e6 * _q(r, p) for p in (0.1, 0.25, 0.5)]
        d_q25.append(cq[1] - rq[1])
        d_med.append(cq[2] - rq[2])
        lines.append(
            f"| {k} | {len(c)}/{len(r)} | {cq[0]:.1f} / {cq[1]:.1f} / {cq[2]:.1f} | "
            f"{rq[0]:.1f} / {rq[1]:.1f} / {rq[2]:.1f} | {d_q25[-1]:+.1f} | {d_med[-1]:+.1f} |"
        )
    per = int(row.get("blocks_per_repetition") or 2)
    third = max(1, len(d_q25) // 3)
    lines += [f"Δq25 over all blocks: {_spread(d_q25)}"]
    lines += [f"Δq25, block {j} of a repetition: {_spread(d_q25[j::per])}" for j in range(per)]
    lines += [
        f"Δq25, first third in time: {_spread(d_q25[:third])}; last third: {_spread(d_q25[-third:])}",
        f"Δmed over all blocks: {_spread(d_med)}",
    ]
    inside = []  # spread inside a half: the two quarters of each half against each other
    for c, r in zip(cand, ref, strict=False):
        h = min(len(c), len(r)) // 2
        if h >= 4:
            inside.append(1e6 * ((_q(c[h:], 0.25) - _q(r[h:], 0.25)) - (_q(c[:h], 0.25) - _q(r[:h], 0.25))))
    lines.append(f"Δq25 second minus first part of the same block: {_spread(inside)}")
    samples = TimingSamples(per_call={"candidate": cand, "reference": ref}, blocks_per_repetition=per)
    pooled, _ = estimate(samples)
    mean_of_blocks = [statistics.fmean(d_q25[k : k + per]) for k in range(0, len(d_q25), per)]
    lines += [
        f"Δ per repetition, pooled lower quartiles (µs): {[round(1e6 * d, 1) for d in pooled]}; "
        f"{_spread([1e6 * d for d in pooled])}",
        f"Δ per repetition, mean of per-block Δq25 (µs): {[round(d, 1) for d in mean_of_blocks]}; "
        f"{_spread(mean_of_blocks)}",
    ]
    lines += by_position(cand, ref, events, per)
    lines += held_up(row, per)
    busy = row.get("busy") or []
    if busy:
        lines.append(f"busy: {busy}")
    return lines


def by_position(
    cand: list[list[float]], ref: list[list[float]], events: list[float], blocks_per_repetition: int
) -> list[str]:
    """Median per call by its place: the first, second and later calls of a block in each runner,
    and the first and later event-timed reference calls of a repetition. A first call far above
    the rest is work done before the clock should have started (a runner's collection once cost
    every block's first call 0.16 s) or a GPU coming back from idle."""
    lines = []
    for role, bs in (("candidate", cand), ("reference", ref)):
        at = [[b[j] for b in bs if len(b) > j] for j in (0, 1)]
        rest = [x for b in bs for x in b[2:]]
        parts = [
            f"{label} {1e6 * statistics.median(xs):.1f}"
            for label, xs in zip(("1st", "2nd"), at, strict=True)
            if xs
        ]
        if rest:
            parts.append(f"later {1e6 * statistics.median(rest):.1f}")
        lines.append(f"{role}'s calls by place in their block (median µs): {', '.join(parts) or '-'}")
    reps = len(cand) // max(1, blocks_per_repetition) if cand else 0
    each = len(events) // reps if reps else 0
    if each >= 2:
        first = [events[k * each] for k in range(reps)]
        later = [x for k in range(reps) for x in events[k * each + 1 : (k + 1) * each]]
        lines.append(
            f"reference's event-timed calls by place in their repetition (median µs): 1st "
            f"{1e3 * statistics.median(first):.1f}, later {1e3 * statistics.median(later):.1f}"
        )
    return lines


def held_up(row: dict[str, Any], blocks_per_repetition: int) -> list[str]:
    """Where the samples carry each call's run-queue wait (`waits`, ns, the kernel's count for the
    runner's main thread): per runner, the share of calls the scheduler held up and their median
    wait; the candidate's time per repetition by lower quartiles with and without those calls
    (`judge_timing.unpreempted`; without them it is reported, never used)."""
    from cudice.verifier.run.judge_timing import TimingSamples, candidate_times, unpreempted

    waits = row.get("waits") or {}
    if not waits.get("candidate"):
        return []
    lines = []
    for role in ("candidate", "reference"):
        flat = [w for ws in waits.get(role, []) for w in ws]
        held = [w for w in flat if w > 0]
        median = f", median wait {statistics.median(held) / 1e3:.1f} µs" if held else ""
        lines.append(f"{role}'s calls held up by the scheduler: {len(held)} of {len(flat)}{median}")
    samples = TimingSamples(
        ref_events=row.get("ref_events") or [],
        per_call=row["per_call"],
        waits=waits,
        blocks_per_repetition=blocks_per_repetition,
    )
    if not samples.ref_events:
        return lines
    kept = unpreempted(samples)
    every = [round(x, 4) for x in candidate_times(samples)[1]]
    without = [round(x, 4) for x in candidate_times(kept)[1]] if kept is not None else "too few calls left"
    lines.append(f"candidate by repetition (ms), every call: {every}; without the held-up ones: {without}")
    return lines


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    for arg in argv:
        path = Path(arg)
        if not path.exists():
            print(f"timing_samples: {path} does not exist", file=sys.stderr)
            return 2
        for name, row in load(path):
            print("\n".join(report(name, row)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
