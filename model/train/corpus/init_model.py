"""The demo model before training: a BPE tokenizer trained on the corpus and a random SDAR checkpoint.

`init_checkpoint(out_dir, sft_path, dims)` writes a directory that `cudice.model.loader` loads
exactly like a DICE checkpoint: `config.json` in SDAR layout (the fields of
`cudice.model.tiny`'s SDAR config: `model_type: "sdar"`, `block_size` 4, `mask_token_id`),
`model.safetensors` with Qwen3 parameter names, a byte-level BPE `tokenizer.json` with the
ChatML specials and `<|MASK|>`, and `generation_config.json` whose EOS are `<|im_end|>` and
`<|endoftext|>`.

Sizing (`DEMO_DIMS`): the checkpoint ships inside the package and must come back from the GPU
box as one file of at most 16 MiB, so the weights are stored in bfloat16 and the model has
~7.4M parameters (14.0 MiB): vocabulary 4096 (the corpus is one narrow dialect of Python and
CUDA; a small vocabulary keeps the tied embedding at 1M parameters), hidden 256, 8 layers of
4 query / 2 KV heads of 64, MLP 768. Depth over width, because the task is mostly copying
names from the prompt into a template. On 2 CPU cores one forward is a few milliseconds, which
keeps a whole generation under the 30 s goal. `SMOKE_DIMS` is a ~0.2M model for CPU tests.

Not covered: training (that is `cudice train sft`); a tokenizer trained on anything but the
corpus, so out-of-distribution text tokenises poorly (bytes always work).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cudice.model.prompts import chat_prompt
from cudice.model.tiny import (
    SPECIAL_TOKENS,
    TINY_DIMS,
    _config_dict,
    bpe_tokenizer,
    random_qwen3,
    save_checkpoint,
)

DEMO_DIMS: dict[str, Any] = {
    "vocab_size": 4096,
    "hidden_size": 256,
    "intermediate_size": 768,
    "num_hidden_layers": 8,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": True,
}
# the tiny test model's shape (cudice.model.tiny) with a corpus vocabulary and tied embeddings
SMOKE_DIMS: dict[str, Any] = {
    **TINY_DIMS,
    "vocab_size": 1024,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": True,
}
TOKENIZER_SAMPLE_PAIRS = 1200  # pairs the BPE is trained on (all pairs share their fixed prompt text)


def _texts(sft_path: Path, seed: int) -> Iterator[str]:
    lines = sft_path.read_text(encoding="utf-8").splitlines()
    rng = random.Random(seed)
    for line in rng.sample(lines, min(TOKENIZER_SAMPLE_PAIRS, len(lines))):
        rec = json.loads(line)
        yield chat_prompt(rec["prompt"]) + rec["response"] + "<|im_end|>"


def train_tokenizer(sft_path: str | Path, vocab_size: int, seed: int = 0) -> Any:
    """A byte-level BPE `PreTrainedTokenizerFast` trained on the corpus's chat-formatted pairs."""
    return bpe_tokenizer(_texts(Path(sft_path), seed), vocab_size)


def num_parameters(dims: dict[str, Any]) -> int:
    """Parameters of a Qwen3 of these dims (tied embedding counted once)."""
    h, i, n = dims["hidden_size"], dims["intermediate_size"], dims["num_hidden_layers"]
    q, kv = dims["num_attention_heads"] * dims["head_dim"], dims["num_key_value_heads"] * dims["head_dim"]
    layer = h * q + 2 * h * kv + q * h + 3 * h * i + 2 * h + 2 * dims["head_dim"]
    embed = dims["vocab_size"] * h * (1 if dims["tie_word_embeddings"] else 2)
    return int(n * layer + embed + h)


def init_checkpoint(
    out_dir: str | Path, sft_path: str | Path, dims: dict[str, Any], seed: int = 0, dtype: str = "bfloat16"
) -> dict[str, Any]:
    """Write tokenizer + random SDAR-layout checkpoint to `out_dir`; return a summary (sizes, ids)."""
    import torch

    sft_path = Path(sft_path)
    if not sft_path.is_file():
        raise ValueError(
            f"{sft_path} does not exist: build the corpus first "
            "(`python -m cudice.model.train.corpus build DIR`)"
        )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(sft_path, dims["vocab_size"], seed)
    tokenizer.save_pretrained(out)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    # SDAR layout as cudice.model.tiny writes it, with the demo dims (the vocabulary is the
    # tokenizer's real size, which BPE may leave below the requested one).
    config = {
        **_config_dict(len(tokenizer), ids, sdar_layout=True),
        **{k: v for k, v in dims.items() if k != "vocab_size"},
        "max_window_layers": dims["num_hidden_layers"],
        "torch_dtype": dtype,
    }
    model = random_qwen3(config, seed).to(getattr(torch, dtype))
    tensors = save_checkpoint(out, config, model, ids)
    return {
        "dir": str(out),
        "vocab_size": len(tokenizer),
        "num_parameters": sum(t.numel() for t in tensors.values()),
        "weights_mib": (out / "model.safetensors").stat().st_size / 2**20,
        "mask_token_id": ids["<|MASK|>"],
    }
