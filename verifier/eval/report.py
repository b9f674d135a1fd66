"""The files `cudice eval --out DIR` writes: per-problem JSON, a Markdown summary, the fast_p curve.

- `DIR/problems/<problem>.json` — `{"problem", "verdict", "result"}` with the full
  `VerifyResult.to_dict()` (`result` is null for a missing candidate). `cudice eval` writes each
  one the moment its verdict arrives (`write_problem`, atomically), so a run that is killed keeps
  every verdict it reached; the other files are written at the end. Each record also keeps the
  key of what its verdict was computed from (candidate, reference, settings, GPU or not), which
  `cudice eval --resume` compares before reusing it;
- `DIR/scores.json` — the scores `cudice eval --json` prints;
- `DIR/fast_p.svg` always (written here, no dependency) and `DIR/fast_p.png` when matplotlib
  is importable — the curve KernelBench reports: for each threshold p, the share of **all**
  problems whose candidate is correct and faster than p (`VerifyResult.is_fast`, which also
  asks the pessimistic speedup to clear p); at p = 0 it is the correctness rate (fast_0);
- `DIR/summary.md` — scores, the plot, and one row per problem.

Not covered: several samples per problem (pass@k); this reads one candidate per problem.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from cudice.verifier.source.result import VerifyResult

P_STEP = 0.05  # resolution of the curve's thresholds


def fast_p_curve(
    problems: Sequence[str], results: Mapping[str, VerifyResult], p_max: float | None = None
) -> list[tuple[float, float]]:
    """[(p, fast_p)] from p = 0 to `p_max` (default: past the best counted speedup, at least 2)."""
    n = len(problems)
    counted = [r for p in problems if (r := results.get(p)) is not None and r.is_fast(0.0)]
    if p_max is None:
        best = (
            max((r.speedup_min if r.speedup_min is not None else r.speedup or 0.0) for r in counted)
            if counted
            else 0.0
        )
        p_max = max(2.0, math.ceil(best * 1.1 / 0.5) * 0.5)
    steps = round(p_max / P_STEP)
    curve = []
    for i in range(steps + 1):
        p = round(i * P_STEP, 6)
        if i == 0:
            hits = sum(1 for name in problems if (r := results.get(name)) is not None and r.is_correct)
        else:
            hits = sum(1 for r in counted if r.is_fast(p))
        curve.append((p, hits / n if n else 0.0))
    return curve


def fast_p_svg(curve: Sequence[tuple[float, float]], title: str) -> str:
    """A step plot of the curve as a standalone SVG document (axes 0..p_max × 0..1)."""
    w, h, left, right, top, bottom = 560, 340, 60, 20, 40, 50
    pw, ph = w - left - right, h - top - bottom
    p_max = curve[-1][0] if curve and curve[-1][0] > 0 else 1.0

    def xy(p: float, f: float) -> tuple[float, float]:
        return left + pw * p / p_max, top + ph * (1.0 - f)

    points: list[str] = []
    for i, (p, f) in enumerate(curve):
        x, y = xy(p, f)
        if i:  # a step: fast_p drops at the threshold a speedup stops clearing
            points.append(f"{x:.1f},{xy(curve[i - 1][0], curve[i - 1][1])[1]:.1f}")
        points.append(f"{x:.1f},{y:.1f}")
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
        'font-family="sans-serif" font-size="12">',
        f'<rect width="{w}" height="{h}" fill="white"/>',
        f'<text x="{w / 2}" y="22" text-anchor="middle" font-size="14">{_escape(title)}</text>',
        f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" stroke="black"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}" stroke="black"/>',
    ]
    for k in range(6):  # y ticks 0, 0.2, ..., 1
        f = k / 5
        _, y = xy(0, f)
        parts.append(f'<line x1="{left - 4}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" stroke="#ddd"/>')
        parts.append(f'<text x="{left - 8}" y="{y + 4:.1f}" text-anchor="end">{f:.1f}</text>')
    tick = 0.5 if p_max <= 4 else 1.0
    for k in range(int(p_max / tick + 1e-9) + 1):
        p = k * tick
        x, _ = xy(p, 0)
        parts.append(f'<line x1="{x:.1f}" y1="{top + ph}" x2="{x:.1f}" y2="{top + ph + 4}" stroke="black"/>')
        parts.append(f'<text x="{x:.1f}" y="{top + ph + 18}" text-anchor="middle">{p:g}</text>')
    parts.append(f'<text x="{left + pw / 2}" y="{h - 10}" text-anchor="middle">speedup threshold p</text>')
    parts.append(
        f'<text x="16" y="{top + ph / 2}" text-anchor="middle" '
        f'transform="rotate(-90 16 {top + ph / 2})">fast_p</text>'
    )
    parts.append(f'<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="{" ".join(points)}"/>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def fast_p_png(curve: Sequence[tuple[float, float]], title: str, path: Path) -> bool:
    """Draw the curve with matplotlib (Agg) into `path`; False when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=120)
    ax.step([p for p, _ in curve], [f for _, f in curve], where="post")
    ax.set(xlabel="speedup threshold p", ylabel="fast_p", ylim=(0, 1.02), title=title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def write_report(
    out: Path,
    problems: Sequence[str],
    results: Mapping[str, VerifyResult],
    scores: Mapping[str, Any],
    *,
    title: str = "cudice eval",
    unfinished: Collection[str] = (),
    keys: Mapping[str, str | None] | None = None,
) -> list[Path]:
    """Write every file listed in the module docstring under `out`; returns their paths. A problem
    in `unfinished` (a stopped run never reached it) gets no per-problem record; `keys`: each
    problem's inputs key, kept in its record (`write_problem`)."""
    out.mkdir(parents=True, exist_ok=True)
    keys = keys or {}
    written = [
        write_problem(out, name, results.get(name), keys.get(name))
        for name in problems
        if name not in unfinished
    ]
    (out / "scores.json").write_text(json.dumps(dict(scores), indent=1) + "\n")
    curve = fast_p_curve(problems, results)
    plot_title = f"fast_p over {len(problems)} problems"
    (out / "fast_p.svg").write_text(fast_p_svg(curve, plot_title))
    has_png = fast_p_png(curve, plot_title, out / "fast_p.png")
    (out / "summary.md").write_text(
        summary_markdown(
            problems, results, scores, curve, "fast_p.png" if has_png else "fast_p.svg", title, unfinished
        )
    )
    written += [out / "scores.json", out / "fast_p.svg", out / "summary.md"] + (
        [out / "fast_p.png"] if has_png else []
    )
    return written


def problem_path(out: Path, name: str) -> Path:
    """Where `write_problem` puts the record of problem file `name`."""
    return out / "problems" / f"{Path(name).stem}.json"


def write_problem(out: Path, name: str, result: VerifyResult | None, key: str | None = None) -> Path:
    """Write `out/problems/<stem>.json` for one problem (None: no candidate) through a temporary
    file and a rename, so a reader never sees half a record; returns its path. `key` (the digest of
    what the verdict was computed from, `cudice eval`'s `inputs_key`) is kept in the record, so a
    later `cudice eval --resume` can tell whether the verdict still holds."""
    row = {"problem": name, "verdict": result.verdict.value if result else "missing",
           "result": result.to_dict() if result else None, "key": key}  # fmt: skip
    path = problem_path(out, name)
    folder = path.parent
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{path.name}.part"
    tmp.write_text(json.dumps(row, indent=1) + "\n")
    tmp.replace(path)
    return path


def summary_markdown(
    problems: Sequence[str],
    results: Mapping[str, VerifyResult],
    scores: Mapping[str, Any],
    curve: Sequence[tuple[float, float]],
    image: str,
    title: str,
    unfinished: Collection[str] = (),
) -> str:
    n = len(problems)
    lines = [
        f"# {title}",
        "",
        f"{n} problems, {scores.get('num_candidates', len(results))} candidates; rates are over **all** "
        "problems (a missing or failed candidate counts as 0), as KernelBench defines fast_p.",
        "",
        "| metric | value |",
        "|---|---|",
        f"| correct (fast_0) | {scores.get('correct', 0.0):.1%} |",
        f"| fast_1 | {scores.get('fast_1', 0.0):.1%} |",
        f"| fast_2 | {scores.get('fast_2', 0.0):.1%} |",
        "",
    ]
    if scores.get("interrupted"):
        lines += ["Interrupted: a problem marked `interrupted` was never reached and counts as 0.", ""]
    if not scores.get("gpu", True) or scores.get("compile_only"):
        lines += [
            "Compiled only (no GPU or `--compile-only`): nothing can be correct, so the curve is 0.",
            "",
        ]
    lines += [f"![fast_p over p]({image})", "", "| p | fast_p |", "|---|---|"]
    marks = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0}
    lines += [f"| {p:g} | {f:.1%} |" for p, f in curve if p in marks]
    lines += [
        "",
        "| problem | verdict | speedup | pessimistic | candidate ms | reference ms |",
        "|---|---|---|---|---|---|",
    ]
    for name in problems:
        r = results.get(name)
        if r is None:
            lines.append(f"| {name} | {'interrupted' if name in unfinished else 'missing'} | - | - | - | - |")
            continue
        lines.append(
            f"| {name} | {r.verdict.value} | {_num(r.speedup, 'x')} | {_num(r.speedup_min, 'x')} | "
            f"{_num(r.runtime_ms)} | {_num(r.reference_runtime_ms)} |"
        )
    return "\n".join(lines) + "\n"


def _num(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:.4g}{unit}"


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
