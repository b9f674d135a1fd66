"""The static verdicts of every corpus and example file stay what they were.

`tests/verifier/data/static_verdicts.json` holds, per file, every diagnostic the parse and static
stages give (code, severity, line, message) with the default policy. It was written by the code
before the verifier moved into stage subpackages, so a move or a refactor that changes a single
message, line or verdict fails here. A deliberate change of a check regenerates the file:
`python tests/verifier/static/test_static_golden.py --write`, and the diff is reviewed with the change.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from cudice.verifier.api import run_static_checks
from cudice.verifier.config import VerifyConfig
from cudice.verifier.source.document import read_document

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = Path(__file__).resolve().parents[1] / "data" / "static_verdicts.json"


def static_verdicts() -> dict[str, list[list[object]]]:
    files = sorted(
        [*(ROOT / "tests" / "verifier" / "corpus").rglob("*.py"), *(ROOT / "examples").rglob("*.py")]
    )
    out: dict[str, list[list[object]]] = {}
    for f in files:
        doc = read_document(str(f))
        diags = [*doc.problems, *run_static_checks(doc, VerifyConfig())]
        out[str(f.relative_to(ROOT))] = [
            [d.code, d.severity.value, d.location.line if d.location else None, d.message] for d in diags
        ]
    return out


def test_every_file_gets_the_recorded_static_verdict() -> None:
    want = json.loads(GOLDEN.read_text())
    got = static_verdicts()
    assert sorted(got) == sorted(want), "corpus or example files were added or removed: regenerate"
    changed = {name: (want[name], got[name]) for name in want if want[name] != got[name]}
    assert not changed, "static diagnostics changed:\n" + "\n".join(
        f"{name}\n  was {was}\n  now {now}" for name, (was, now) in changed.items()
    )


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        GOLDEN.write_text(json.dumps(static_verdicts(), indent=1, sort_keys=True) + "\n")
