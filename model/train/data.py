"""Training data: CuKe SFT pairs, BiC-RL task files, and easy→hard scheduling.

Formats (JSON Lines, or one JSON list):
- SFT (CuKe): `{"prompt": str, "response": str}`.
- RL end-to-end: `{"idx": int, "level": int, "pytorch_code": str}`.
- RL infilling: `{"pytorch_code", "cuda_code", "prefix", "middle", "suffix"}` (+ optional `level`).
A malformed record raises `ValueError` naming the file, the line and the missing field.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SFT_FIELDS = ("prompt", "response")
E2E_FIELDS = ("pytorch_code",)
INFILL_FIELDS = ("pytorch_code", "prefix", "middle", "suffix")


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """Read a `.jsonl` file (one object per line) or a `.json` list of objects."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"data file {path} does not exist")
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not valid JSON ({exc})") from exc
        if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
            raise ValueError(f"{path}: expected a JSON list of objects")
        return data
    records = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from exc
        if not isinstance(obj, dict):
            raise ValueError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
        obj.setdefault("_line", lineno)
        records.append(obj)
    return records


def _require(records: list[dict[str, Any]], fields: Sequence[str], path: str | Path, kind: str) -> None:
    for i, rec in enumerate(records):
        missing = [f for f in fields if not isinstance(rec.get(f), str)]
        if missing:
            where = f"line {rec['_line']}" if "_line" in rec else f"record {i}"
            raise ValueError(f"{path} {where}: {kind} record lacks string field(s) {', '.join(missing)}")


def load_sft(path: str | Path) -> list[dict[str, Any]]:
    records = read_records(path)
    _require(records, SFT_FIELDS, path, "SFT (CuKe)")
    return records


@dataclass(frozen=True, slots=True)
class RLTask:
    """One BiC-RL task. `kind` is 'e2e' or 'infill'; `level` orders the curriculum."""

    kind: str
    level: int
    pytorch_code: str
    prefix: str = ""
    suffix: str = ""
    reference_middle: str = ""
    task_id: str = ""


def load_rl_tasks(path: str | Path, kind: str) -> list[RLTask]:
    """Load RL tasks and order them easy → hard (stable sort by `level`; missing level = 1)."""
    if kind not in ("e2e", "infill"):
        raise ValueError(f"task kind {kind!r} must be 'e2e' or 'infill'")
    records = read_records(path)
    _require(records, E2E_FIELDS if kind == "e2e" else INFILL_FIELDS, path, f"RL {kind}")
    tasks = [
        RLTask(
            kind=kind,
            level=int(rec.get("level", 1)),
            pytorch_code=rec["pytorch_code"],
            prefix=rec.get("prefix", ""),
            suffix=rec.get("suffix", ""),
            reference_middle=rec.get("middle", ""),
            task_id=str(rec.get("idx", i)),
        )
        for i, rec in enumerate(records)
    ]
    return sorted(tasks, key=lambda t: t.level)


def schedule(tasks: Sequence[RLTask], step: int, tasks_per_step: int) -> list[RLTask]:
    """Tasks for RL step `step` (0-based): items [step·n, (step+1)·n) modulo N of the sorted list."""
    if not tasks:
        raise ValueError("no RL tasks to schedule")
    start = step * tasks_per_step
    return [tasks[(start + k) % len(tasks)] for k in range(tasks_per_step)]
