"""Check the corpus's template solutions with cudice's verifier, per family.

`verify_templates(corpus_dir, per_family, say)` picks `per_family` training problems of every
family (different compositions, dtypes and answer variants — plain or fast — where the corpus
has them) plus one held-out problem,
and verifies each template `ModelNew` against its reference with `VerifyPool` — the same
verifier, static anti-cheat checks included, that scores the model's own kernels. Without a
GPU it runs only the parse and static anti-cheat stages (compiling every family costs minutes
on a small CPU): the rows then say `static_ok` / `static_violation`, never `correct`.

Problems whose files the corpus folder lacks (a copy carried with the held-out files only) are
left out of the sample, and the count is said.

Not covered: every problem of the corpus (a sample per family; the templates are the same code
with other constants, so a family's sample exercises its kernel).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def pick_sample(manifest: dict[str, Any], per_family: int) -> list[dict[str, Any]]:
    """`per_family` training problems per family (new compositions/dtypes/answer variants first)
    + one held-out each."""
    chosen: list[dict[str, Any]] = []
    families = sorted({p["family"] for p in manifest["problems"]})
    for family in families:
        rows = [p for p in manifest["problems"] if p["family"] == family]
        seen: set[tuple[str, str, str]] = set()
        picked: list[dict[str, Any]] = []
        for p in (p for p in rows if p["split"] == "train"):
            kind = (p["composition"].split(":")[1].split(">")[0], p["dtype"], p.get("variant", "plain"))
            if kind not in seen and len(picked) < per_family:
                seen.add(kind)
                picked.append(p)
        held = [p for p in rows if p["split"] == "heldout"]
        chosen += picked + held[:1]
    return chosen


def _static_verdict(solution: Path, reference: Path) -> dict[str, Any]:
    from cudice.verifier.api import run_static_checks
    from cudice.verifier.config import VerifyConfig
    from cudice.verifier.source.document import read_document
    from cudice.verifier.source.result import Severity

    doc = read_document(solution, reference=str(reference))
    errors = [d.message for d in run_static_checks(doc, VerifyConfig()) if d.severity is Severity.ERROR]
    if doc.invalid_result() is not None:
        return {"verdict": "invalid_input", "error": str(doc.invalid_result())}
    return {"verdict": "static_violation" if errors else "static_ok", "error": "; ".join(errors)}


def verify_templates(
    corpus_dir: str | Path, per_family: int, say: Callable[[str], None], num_compile_workers: int = 8
) -> dict[str, Any]:
    """Verify a sample of every family; returns {"gpu", "rows", "all_correct"} and prints a table."""
    from cudice.verifier.api import gpu_available

    corpus = Path(corpus_dir)
    manifest = json.loads((corpus / "manifest.json").read_text())
    # a corpus carried to the GPU box may hold only the held-out files (docs/training.md): pick among
    # the problems whose files are here, and say how many were not
    present = [
        p for p in manifest["problems"]
        if (corpus / "solutions" / p["split"] / p["file"]).is_file()
        and (corpus / "problems" / p["split"] / p["file"]).is_file()
    ]  # fmt: skip
    if len(present) < len(manifest["problems"]):
        say(
            f"template verification: {len(manifest['problems']) - len(present)} of "
            f"{len(manifest['problems'])} problems have no files in {corpus}; sampling the others"
        )
    sample = pick_sample({**manifest, "problems": present}, per_family)
    gpu = gpu_available()
    rows: list[dict[str, Any]] = []
    paths = [
        (p, corpus / "solutions" / p["split"] / p["file"], corpus / "problems" / p["split"] / p["file"])
        for p in sample
    ]
    if gpu:
        from cudice.verifier.pool import VerifyPool

        with VerifyPool(num_compile_workers=num_compile_workers) as pool:
            futures = [(p, pool.submit(sol, reference=ref, key=p["file"])) for p, sol, ref in paths]
            for p, fut in futures:
                result = fut.result()
                errors = [d.message for d in result.diagnostics if d.severity.value == "error"]
                rows.append(
                    {
                        **p,
                        "verdict": result.verdict.value,
                        "speedup": result.speedup,
                        "error": result.error or "",
                        "diagnostics": errors[:3],
                    }
                )
    else:
        rows = [{**p, **_static_verdict(sol, ref)} for p, sol, ref in paths]
    good = "correct" if gpu else "static_ok"
    say(f"template verification ({'GPU: full verify' if gpu else 'no GPU: static stage only'}):")
    say(f"{'family':<10} {'composition':<40} {'dtype':<9} {'verdict':<17} speedup")
    for r in rows:
        speed = f"{r['speedup']:.2f}x" if r.get("speedup") else "-"
        say(f"{r['family']:<10} {r['composition']:<40} {r['dtype']:<9} {r['verdict']:<17} {speed}")
        if r["verdict"] != good:
            say(f"    !! {r.get('error') or r.get('diagnostics')}")
    all_good = all(r["verdict"] == good for r in rows)
    say(f"templates: {sum(r['verdict'] == good for r in rows)}/{len(rows)} {good}")
    return {
        "gpu": gpu,
        "rows": rows,
        "all_correct": all_good if gpu else False,
        "all_static_ok": all(r["verdict"] in (good, "correct") for r in rows),
    }
