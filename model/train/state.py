"""Resume state of a training run: model, optimizer, scheduler, RNG and data position.

`save_train_state(accelerator, out_dir, position)` calls `accelerator.save_state` on **every**
rank (under FSDP each rank writes its own shards; under DDP rank 0 writes the weights and each
rank its RNG state), into `out_dir/.train_state.next`, then rank 0 adds `position.json` and
swaps the directory into `out_dir/train_state` (the previous one is removed only after the new
one is complete). `load_train_state` restores everything `accelerator.prepare` registered and
returns the position. SFT's position is (epoch, micro-batch, step): the loop skips the batches
already consumed (`accelerator.skip_first_batches`), so a resumed run sees the same batches in
the same order. BiC-RL's is (stage, step), one state per stage directory (`rl.py`).

The hot-reload checkpoint (`checkpoint.py`, the marker file) is separate: the server reads that
one; this directory only serves `--resume`. Not covered: resuming with a different number of
processes (the data shards and the RNG files are per rank).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

STATE_DIR = "train_state"
POSITION = "position.json"


def state_dir(out_dir: str | Path) -> Path:
    return Path(out_dir) / STATE_DIR


def save_train_state(accelerator: Any, out_dir: str | Path, position: dict[str, Any]) -> Path:
    """Write the resume state (collective: every rank must call it). Returns `out_dir/train_state`."""
    out = Path(out_dir)
    final, fresh, old = out / STATE_DIR, out / f".{STATE_DIR}.next", out / f".{STATE_DIR}.old"
    if accelerator.is_main_process:
        out.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(fresh, ignore_errors=True)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(fresh), safe_serialization=True)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        (fresh / POSITION).write_text(json.dumps({**position, "num_processes": accelerator.num_processes}))
        shutil.rmtree(old, ignore_errors=True)
        if final.exists():
            final.rename(old)
        fresh.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()
    return final


def load_train_state(accelerator: Any, out_dir: str | Path) -> dict[str, Any]:
    """Restore the state saved under `out_dir/train_state`; returns its position record."""
    path = state_dir(out_dir)
    if not (path / POSITION).is_file():
        raise ValueError(
            f"--resume: {path} holds no saved training state ({POSITION} missing); run without "
            "--resume, or point --out at the directory of the run to continue"
        )
    position: dict[str, Any] = json.loads((path / POSITION).read_text())
    saved = int(position.get("num_processes", 1))
    if saved != accelerator.num_processes:
        raise ValueError(
            f"--resume: {path} was written by {saved} process(es), this run has "
            f"{accelerator.num_processes}; resume with the same number of processes"
        )
    accelerator.load_state(str(path))
    return position
