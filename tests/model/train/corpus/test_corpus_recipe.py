"""The demo recipe's pieces on CPU: the initial checkpoint, the one-file export, deadlines."""

from __future__ import annotations

import json
import sys
import tarfile
from pathlib import Path

import pytest
from cudice.model.train.corpus import recipe
from cudice.model.train.corpus.build import build_corpus
from cudice.model.train.corpus.init_model import DEMO_DIMS, SMOKE_DIMS, init_checkpoint, num_parameters


@pytest.fixture(scope="module")
def init_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    corpus = tmp_path_factory.mktemp("corpus")
    build_corpus(corpus, seed=1, train_per_family=3, heldout_per_family=1)
    out = tmp_path_factory.mktemp("init")
    init_checkpoint(out, corpus / "sft.jsonl", SMOKE_DIMS, seed=0)
    return out


def test_demo_size_fits_the_package_limit_in_bf16() -> None:
    # bf16 bytes with the full requested vocabulary; it comes back from the GPU in 15 MiB parts
    assert num_parameters(DEMO_DIMS) * 2 <= 64 * 2**20


def test_initial_checkpoint_loads_as_sdar_with_the_corpus_tokenizer(init_dir: Path) -> None:
    from cudice.model.loader import load_checkpoint

    loaded = load_checkpoint(str(init_dir), device="cpu")
    config = json.loads((init_dir / "config.json").read_text())
    assert loaded.model_type == "sdar" and loaded.block_size == 4
    assert loaded.ids.mask == loaded.tokenizer.convert_tokens_to_ids("<|MASK|>") == config["mask_token_id"]
    assert sum(p.numel() for p in loaded.model.parameters()) == num_parameters(
        {**SMOKE_DIMS, "vocab_size": config["vocab_size"]}
    )
    ids = loaded.tokenizer("__global__ void relu_kernel", add_special_tokens=False)["input_ids"]
    assert loaded.tokenizer.decode(ids) == "__global__ void relu_kernel"


def test_export_is_one_bf16_file_that_unpacks_into_a_loadable_checkpoint(
    init_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cudice.model.loader import load_checkpoint
    from safetensors import safe_open

    tar_path = recipe.export_tar(init_dir, tmp_path / "demo.tar")
    with tarfile.open(tar_path) as tar:
        names = set(tar.getnames())
    assert {"model.safetensors", "config.json", "tokenizer.json", "cudice_checkpoint.json"} <= names
    unpacked = recipe.unpack_tar(tar_path, tmp_path / "unpacked")
    with safe_open(str(unpacked / "model.safetensors"), "pt") as f:
        assert {str(f.get_tensor(k).dtype) for k in f.keys()} == {"torch.bfloat16"}
    assert load_checkpoint(str(unpacked), device="cpu").block_size == 4
    monkeypatch.setattr(recipe, "MAX_FILE_BYTES", 1024)
    with pytest.raises(RuntimeError, match="16 MiB"):
        recipe.export_tar(init_dir, tmp_path / "big.tar")


def test_newest_checkpoint_is_the_last_completed_one(tmp_path: Path) -> None:
    import os

    old, new, unfinished = tmp_path / "old", tmp_path / "new", tmp_path / "unfinished"
    for d in (old, new, unfinished):
        d.mkdir()
    (old / "cudice_checkpoint.json").write_text("{}")
    (new / "cudice_checkpoint.json").write_text("{}")
    os.utime(old / "cudice_checkpoint.json", (1, 1))
    assert recipe.newest_checkpoint(old, new, unfinished) == new
    assert recipe.newest_checkpoint(unfinished) is None


def test_a_phase_stops_a_command_at_its_deadline_and_lets_a_quick_one_finish(tmp_path: Path) -> None:
    phase = recipe.Phase("t", tmp_path, minutes=1.0)
    rc, stopped = phase.run([sys.executable, "-c", "import time; time.sleep(600)"], seconds=1.0)
    assert stopped and rc != 0
    rc, stopped = phase.run([sys.executable, "-c", "print('hello')"], seconds=120.0)
    assert (rc, stopped) == (0, False)
    assert "hello" in (tmp_path / "t.log").read_text()
