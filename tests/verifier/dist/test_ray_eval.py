"""`cudice eval --ray` and its report: same verdicts as the local pool, fast_p curve, output files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from cudice.verifier.eval.cli import score
from cudice.verifier.eval.report import fast_p_curve, fast_p_svg, write_report
from cudice.verifier.source.result import Stage, Verdict, VerifyResult

CORPUS = Path(__file__).resolve().parents[1] / "corpus"


def res(verdict: Verdict, speedup: float | None = None, low: float | None = None) -> VerifyResult:
    return VerifyResult(verdict, Stage.TIMING, "c.py", speedup=speedup, speedup_min=low)


RESULTS = {
    "a.py": res(Verdict.CORRECT, 2.5, 2.2),
    "b.py": res(Verdict.CORRECT, 1.5, 1.2),
    "c.py": res(Verdict.CORRECT, 0.8, 0.7),
    "d.py": res(Verdict.INCORRECT, 9.0, 9.0),
}
PROBLEMS = ["a.py", "b.py", "c.py", "d.py", "e.py"]  # e.py has no candidate


def test_fast_p_curve_is_over_all_problems_and_agrees_with_the_scores() -> None:
    curve = dict(fast_p_curve(PROBLEMS, RESULTS))
    assert curve[0.0] == 3 / 5  # fast_0 = correct, over all five problems
    assert (curve[0.5], curve[1.0], curve[1.5], curve[2.0]) == (3 / 5, 2 / 5, 1 / 5, 1 / 5)
    assert curve[2.2] == 0.0  # the pessimistic speedup must clear p strictly
    assert max(curve) == 2.5  # past the best speedup (2.2 x 1.1, rounded up to 0.5)
    scores = score(PROBLEMS, RESULTS)
    assert (curve[0.0], curve[1.0], curve[2.0]) == (scores.correct, scores.fast_1, scores.fast_2)


def test_svg_plot_is_well_formed_with_one_step_per_threshold() -> None:
    curve = fast_p_curve(PROBLEMS, RESULTS)
    root = ET.fromstring(fast_p_svg(curve, "fast_p <test>"))
    ns = "{http://www.w3.org/2000/svg}"
    assert root.tag == f"{ns}svg"
    (line,) = root.iter(f"{ns}polyline")
    points = [tuple(map(float, p.split(","))) for p in line.attrib["points"].split()]
    assert len(points) == 2 * len(curve) - 1
    ys = [y for _, y in points]
    assert ys == sorted(ys)  # fast_p never rises with p: y (downwards in SVG) never decreases
    assert any(t.text == "fast_p <test>" for t in root.iter(f"{ns}text"))


def test_write_report_files(tmp_path: Path) -> None:
    scores = {**score(PROBLEMS, RESULTS).to_dict(), "gpu": True, "compile_only": False}
    write_report(tmp_path, PROBLEMS, RESULTS, scores, title="t")
    rows = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "problems").glob("*.json")}
    assert {k: v["verdict"] for k, v in rows.items()} == {
        "a": "correct",
        "b": "correct",
        "c": "correct",
        "d": "incorrect",
        "e": "missing",
    }
    assert rows["a"]["result"]["speedup"] == 2.5 and rows["e"]["result"] is None
    assert json.loads((tmp_path / "scores.json").read_text())["fast_1"] == 0.4
    md = (tmp_path / "summary.md").read_text()
    image = "fast_p.png" if (tmp_path / "fast_p.png").exists() else "fast_p.svg"
    assert f"![fast_p over p]({image})" in md and "| fast_1 | 40.0% |" in md
    assert "| e.py | missing |" in md and "| a.py | correct | 2.5x | 2.2x |" in md
    assert (tmp_path / "fast_p.svg").is_file()


def test_png_when_matplotlib_is_installed(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    write_report(tmp_path, PROBLEMS, RESULTS, score(PROBLEMS, RESULTS).to_dict())
    assert (tmp_path / "fast_p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _folder(tmp_path: Path) -> tuple[Path, Path]:
    probs, cands = tmp_path / "problems", tmp_path / "candidates"
    probs.mkdir()
    cands.mkdir()
    for name in ("relu.py", "matmul.py", "add.py", "softmax.py"):
        (probs / name).write_text((CORPUS / "references" / name).read_text())
    (cands / "relu.py").write_text((CORPUS / "try_except_fallback.py").read_text())
    (cands / "matmul.py").write_text((CORPUS / "matmul_operator.py").read_text())
    (cands / "add.py").write_text("def broken(:\n")
    return probs, cands  # softmax.py has no candidate


def cudice(*args: str, tmp_path: Path, prelude: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CUDICE_CACHE_DIR": str(tmp_path / "cache"), "RAY_AUTH_MODE": "disabled"}
    code = f"import sys; {prelude}from cudice.server.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=600
    )


@pytest.mark.e2e
def test_eval_with_ray_prints_the_same_verdicts_as_without(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    probs, cands = _folder(tmp_path)
    plain = cudice("eval", "--json", str(probs), str(cands), tmp_path=tmp_path)
    assert plain.returncode == 0, plain.stderr
    out = tmp_path / "report"
    dist = cudice("eval", "--json", str(probs), str(cands), "--out", str(out), "--ray", tmp_path=tmp_path)
    assert dist.returncode == 0, dist.stderr
    a, b = json.loads(plain.stdout), json.loads(dist.stdout)  # stdout: exactly one JSON object each
    verdicts = {r["problem"]: r["verdict"] for r in a["per_problem"]}
    assert verdicts == {
        "add.py": "invalid_input",
        "matmul.py": "static_violation",
        "relu.py": "static_violation",
        "softmax.py": "missing",
    }
    assert b["per_problem"] == a["per_problem"]
    assert (b["backend"], a["backend"]) == ("ray:local", "local")
    assert "verifying" in dist.stderr and "3/3" in dist.stderr  # the progress bar covered every candidate
    saved = json.loads((out / "problems" / "relu.json").read_text())
    codes = {d["code"] for d in saved["result"]["diagnostics"]}
    assert saved["verdict"] == "static_violation" and "static.fallback_to_reference" in codes


def test_eval_ray_without_ray_says_how_to_install_it(tmp_path: Path) -> None:
    probs, cands = _folder(tmp_path)
    proc = cudice(
        "eval", str(probs), str(cands), "--ray", tmp_path=tmp_path, prelude="sys.modules['ray'] = None; "
    )
    assert proc.returncode == 1
    assert 'pip install "cudice[dist]"' in proc.stderr and "Traceback" not in proc.stderr
