"""Write trained weights as a checkpoint the server can hot-reload, never half-written.

The checkpoint keeps the layout of the one training started from: its `config.json`,
tokenizer and other small files are copied unchanged (an SDAR/DICE checkpoint stays in SDAR
layout), and the weights are written as one `model.safetensors` with the native Qwen3
parameter names. Every file is first written under a temporary name in the same directory
and moved into place with `os.replace`; the marker `cudice_checkpoint.json` is written last.
A watcher should act on the marker only: when it changes, the directory is complete.

Weights wider than the dtype the source's `config.json` declares (`torch_dtype`/`dtype`; DICE
checkpoints say bfloat16) are stored in that dtype: the fp32 master copy of a bf16 checkpoint
is saved as bf16. Nothing is ever widened.
Resume state (optimizer, scheduler, RNG, data position) lives apart, in `train_state/`
(`cudice.model.train.state`); the watcher ignores it.

Not covered: sharded weights (one file, fine up to a few GB).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import torch

MARKER = "cudice_checkpoint.json"
WEIGHTS = "model.safetensors"
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt")
_SKIP = {MARKER, "model.safetensors.index.json"}


def _tmp_name(name: str) -> str:
    """Hidden and ending in `.tmp`: the server's checkpoint watcher treats the directory as
    incomplete while such a file exists (`cudice.server.watch.checkpoint_signature`)."""
    return f".{name}.{os.getpid()}.tmp"


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(_tmp_name(path.name))
    tmp.write_bytes(data)
    os.replace(tmp, path)


def source_dtype(source_dir: str | Path) -> torch.dtype | None:
    """The weight dtype `source_dir/config.json` declares, or None when it names none."""
    try:
        config = json.loads((Path(source_dir) / "config.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    name = config.get("torch_dtype") or config.get("dtype")
    dtype = getattr(torch, name, None) if isinstance(name, str) else None
    return dtype if isinstance(dtype, torch.dtype) and dtype.is_floating_point else None


def save_checkpoint(
    model: torch.nn.Module,
    source_dir: str | Path,
    out_dir: str | Path,
    *,
    step: int,
    metrics: dict[str, Any] | None = None,
    state_dict: dict[str, torch.Tensor] | None = None,
) -> Path:
    """Write `model`'s weights plus `source_dir`'s config/tokenizer files to `out_dir`.

    `state_dict` replaces `model.state_dict()` (merged LoRA weights, an FSDP-gathered dict).
    Returns the path of the marker file. `out_dir` may equal a directory the server is
    watching; it may also be `source_dir` itself (weights are replaced in place, atomically).
    """
    from safetensors.torch import save_file

    source, out = Path(source_dir), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # 1. small files (config, tokenizer, generation config) unchanged, unless writing in place
    if source.resolve() != out.resolve():
        for item in source.iterdir():
            if item.is_file() and item.name not in _SKIP and not item.name.endswith(_WEIGHT_SUFFIXES):
                tmp = out / _tmp_name(item.name)
                shutil.copyfile(item, tmp)
                os.replace(tmp, out / item.name)
    # 2. weights: contiguous CPU tensors with the native names; tied weights stored once
    state: dict[str, torch.Tensor] = {}
    seen: dict[int, str] = {}
    dtype = source_dtype(source)
    for name, tensor in (state_dict if state_dict is not None else model.state_dict()).items():
        ptr = tensor.data_ptr()
        if ptr in seen and getattr(getattr(model, "config", None), "tie_word_embeddings", False):
            continue
        seen[ptr] = name
        tensor = tensor.detach().to("cpu")
        if dtype is not None and tensor.is_floating_point() and dtype.itemsize < tensor.dtype.itemsize:
            tensor = tensor.to(dtype)
        state[name] = tensor.contiguous()
    tmp_weights = out / _tmp_name(WEIGHTS)
    save_file(state, str(tmp_weights), metadata={"format": "pt"})
    digest = hashlib.sha256(tmp_weights.read_bytes()).hexdigest()
    os.replace(tmp_weights, out / WEIGHTS)
    for stale in out.glob("model-*.safetensors"):  # a sharded set from the source would shadow ours
        stale.unlink()
    # 3. the marker, last: its appearance or change means "complete"
    marker = out / MARKER
    payload = {"step": step, "created_unix": time.time(), "weights_sha256": digest, "metrics": metrics or {}}
    _atomic_write_bytes(marker, json.dumps(payload, indent=2).encode())
    return marker


def read_marker(checkpoint_dir: str | Path) -> dict[str, Any] | None:
    """The marker of a complete cudice-written checkpoint, or None if there is none yet."""
    path = Path(checkpoint_dir) / MARKER
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None
