"""Loading SDAR/DICE-layout and plain Qwen3 checkpoints into native Qwen3ForCausalLM."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from cudice.model.loader import ModelLoadError, load_checkpoint, pick_device_dtype, resolve_checkpoint


def copy_checkpoint(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_sdar_layout_loads_as_native_qwen3_with_the_same_logits(tiny_sdar_dir: Path) -> None:
    from safetensors.torch import load_file
    from transformers import Qwen3ForCausalLM

    raw = json.loads((tiny_sdar_dir / "config.json").read_text())
    assert raw["model_type"] == "sdar" and "auto_map" in raw  # loaded exactly as a DICE checkpoint would be
    lm = load_checkpoint(str(tiny_sdar_dir), device="cpu")
    assert type(lm.model) is Qwen3ForCausalLM
    assert lm.model.config._attn_implementation == "sdpa"
    assert lm.model_type == "sdar" and lm.block_size == raw["block_size"]
    assert lm.ids.mask == raw["mask_token_id"] == lm.tokenizer.convert_tokens_to_ids("<|MASK|>")
    assert lm.ids.stop[0] == raw["eos_token_id"]
    assert lm.tokenizer.convert_tokens_to_ids("<|im_end|>") in lm.ids.stop
    assert lm.device == torch.device("cpu") and lm.dtype == torch.float32

    state = load_file(str(tiny_sdar_dir / "model.safetensors"))
    for name, tensor in lm.model.state_dict().items():
        assert torch.equal(tensor, state[name]), name
    reference = Qwen3ForCausalLM(lm.model.config).eval()
    reference.load_state_dict(state)
    ids = torch.tensor([[5, 9, 30, 2, 77, 100, 8]])
    with torch.no_grad():
        assert torch.allclose(lm.model(input_ids=ids).logits, reference(input_ids=ids).logits, atol=1e-5)


def test_plain_qwen3_layout_loads(tiny_qwen3_dir: Path) -> None:
    lm = load_checkpoint(str(tiny_qwen3_dir), device="cpu", dtype="bfloat16")
    assert lm.model_type == "qwen3" and lm.dtype == torch.bfloat16
    assert next(lm.model.parameters()).dtype == torch.bfloat16
    assert lm.model.model.rotary_emb.inv_freq.dtype == torch.float32


def test_ids_come_from_the_checkpoint_not_constants(tiny_sdar_dir: Path, tmp_path: Path) -> None:
    ckpt = copy_checkpoint(tiny_sdar_dir, tmp_path / "ck")
    raw = json.loads((ckpt / "config.json").read_text())
    raw.update(mask_token_id=7, block_size=8, eos_token_id=11)
    (ckpt / "config.json").write_text(json.dumps(raw))
    lm = load_checkpoint(str(ckpt), device="cpu")
    assert (lm.ids.mask, lm.block_size, lm.ids.stop[0]) == (7, 8, 11)


def test_missing_and_unused_weights_are_listed(tiny_sdar_dir: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    ckpt = copy_checkpoint(tiny_sdar_dir, tmp_path / "ck")
    state = load_file(str(ckpt / "model.safetensors"))
    state["model.layers.0.self_attn.q_proj.weight_renamed"] = state.pop(
        "model.layers.0.self_attn.q_proj.weight"
    )
    save_file(state, str(ckpt / "model.safetensors"))
    with pytest.raises(ModelLoadError) as err:
        load_checkpoint(str(ckpt), device="cpu")
    message = str(err.value)
    assert "1 missing: model.layers.0.self_attn.q_proj.weight" in message
    assert "1 unused: model.layers.0.self_attn.q_proj.weight_renamed" in message


def test_wrong_model_type_is_refused(tiny_sdar_dir: Path, tmp_path: Path) -> None:
    ckpt = copy_checkpoint(tiny_sdar_dir, tmp_path / "ck")
    raw = json.loads((ckpt / "config.json").read_text())
    raw["model_type"] = "llama"
    (ckpt / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ModelLoadError, match=r"model_type .llama. is not supported"):
        load_checkpoint(str(ckpt), device="cpu")


def test_missing_model_says_where_it_looked_and_how_to_fetch(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError) as err:
        resolve_checkpoint("DeadlyKitt3n/DICE-not-here")
    message = str(err.value)
    assert "looked in" in message and "Hugging Face cache" in message
    assert "huggingface-cli download DeadlyKitt3n/DICE-not-here" in message
    with pytest.raises(ModelLoadError, match=r"no config\.json"):
        resolve_checkpoint(str(tmp_path))


def test_explicit_cuda_without_gpu_is_a_clear_error() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(ModelLoadError, match="no CUDA GPU"):
        pick_device_dtype("cuda", "auto")
    assert pick_device_dtype("auto", "auto") == (torch.device("cpu"), torch.float32)
    assert pick_device_dtype("cpu", "float16")[1] == torch.float16
