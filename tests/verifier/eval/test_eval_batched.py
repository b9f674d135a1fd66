"""`cudice eval` where its verdicts stop at the compile check (`--compile-only`, or no GPU): the
local pool's checks run many candidates to one nvcc pass (verifier/eval/cli.py `_prefill_checks`,
build/batch.py), and every record — verdict, stage and diagnostics — is the one that a check per
candidate gives (the baseline: the same run with batching off, in a cache of its own)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from verifier_marks import needs_nvcc

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
import kb_candidates  # bench/kb_candidates.py: files holding both Model and ModelNew

FILES = {
    "relu.py": kb_candidates.edited(0),
    "sigmoid.py": kb_candidates.edited(1),
    "softmax.py": kb_candidates.edited(15),
    "matmul.py": kb_candidates.edited(21),
    "clamp.py": kb_candidates.edited(5),
    # a device-side error in one candidate of the batch
    "broken.py": kb_candidates.edited(3, ("float v = x[i];", "float v = x[i]")),
}


def _eval(tmp: Path, monkeypatch: pytest.MonkeyPatch, cache: Path, batched: bool) -> dict[str, Any]:
    from cudice.verifier.build import batch
    from cudice.verifier.eval import cli as eval_cli

    monkeypatch.setenv("CUDICE_CACHE_DIR", str(cache))
    reports: list[Any] = []
    prefill = batch.prefill

    def spy(*args: Any, **kwargs: Any) -> Any:
        reports.append(prefill(*args, **kwargs))
        return reports[-1]

    monkeypatch.setattr(batch, "prefill", spy)
    if not batched:
        monkeypatch.setattr(eval_cli, "_batched_checks", lambda *a: 1)
    out = tmp / f"out-{batched}"
    result = CliRunner().invoke(
        eval_cli.eval_command,
        ["--compile-only", "--json", "--out", str(out), str(tmp / "problems"), str(tmp / "candidates")],
    )
    monkeypatch.undo()
    assert result.exit_code == 0, result.output
    records = {}
    for path in sorted((out / "problems").glob("*.json")):
        record = json.loads(path.read_text())
        text = re.sub(
            r"objects/[0-9a-f]{32}/", "objects/<key>/", json.dumps(record).replace(str(cache), "<cache>")
        )
        record = json.loads(text)
        for volatile in ("wall_s", "stage_wall_s", "cached", "compile_s", "measured_at"):
            record.pop(volatile, None)
            record.get("result", {}).pop(volatile, None)
        records[path.name] = record
    return {"records": records, "reports": reports}


@needs_nvcc
@pytest.mark.slow
def test_batched_checks_give_every_record_of_a_check_per_candidate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for folder in ("problems", "candidates"):
        (tmp_path / folder).mkdir()
        for name, text in FILES.items():
            (tmp_path / folder / name).write_text(text)
    batched = _eval(tmp_path, monkeypatch, tmp_path / "cache-batched", batched=True)
    single = _eval(tmp_path, monkeypatch, tmp_path / "cache-single", batched=False)
    assert single["reports"] == []  # the baseline checked each candidate alone
    (report,) = batched["reports"]
    assert sum(how == "batch" for how in report.how.values()) >= 4, report
    assert batched["records"].keys() == single["records"].keys() and len(single["records"]) == len(FILES)
    for name, record in single["records"].items():
        got = batched["records"][name]
        differ = {
            k: (got["result"].get(k), record["result"].get(k))
            for k in record["result"].keys() | got["result"].keys()
            if got["result"].get(k) != record["result"].get(k)
        }
        assert not differ and got == record, (name, differ)
    verdicts = {name: json.dumps(r) for name, r in single["records"].items()}
    assert '"compile_error"' in verdicts["broken.json"] and '"compile_error"' not in verdicts["relu.json"]
