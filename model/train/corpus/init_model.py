"""The demo model before training: a BPE tokenizer trained on the corpus and a random SDAR checkpoint.

`init_checkpoint(out_dir, sft_path, dims)` writes a directory that `cudice.model.loader` loads
exactly like a DICE checkpoint: `config.json` in SDAR layout (the fields of
`cudice.model.tiny`'s SDAR config: `model_type: "sdar"`, `block_size` 4, `mask_token_id`),
`model.safetensors` with Qwen3 parameter names, a byte-level BPE `tokenizer.json` fitted to the
corpus with merges up to whole lines (`line_bpe_tokenizer`), the ChatML specials and `<|MASK|>`,
and `generation_config.json` whose EOS are `<|im_end|>` and
`<|endoftext|>`.

Sizing (`DEMO_DIMS`): the checkpoint ships inside the package (at most 64 MiB), stored in
bfloat16; it comes back from the GPU box in parts of at most 16 MiB (`recipe_fit.py`). The
model has ~20M parameters (~39 MiB): vocabulary 8192 (BPE fitted to the corpus, so the fixed
prompt text and the CUDA idioms are few tokens each), hidden 384, 10 layers of 6 query / 2 KV
heads of 64, MLP 1152. Enough capacity to learn the op-to-CUDA rules instead of reciting
answers, small enough that a 600-token kernel decodes in seconds on 2 CPU cores.
`SMOKE_DIMS` is a ~0.2M model for CPU tests.

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
    bpe_tokenizer,
    random_qwen3,
    save_checkpoint,
    tiny_config_dict,
)

DEMO_DIMS: dict[str, Any] = {
    "vocab_size": 8192,
    "hidden_size": 384,
    "intermediate_size": 1152,
    "num_hidden_layers": 10,
    "num_attention_heads": 6,
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
PACKAGE_WEIGHTS_MIB = 60.0  # the bundled bf16 weights' share of the package's 64 MiB (tokenizer, code)


def shape_overrides(text: str, base: dict[str, Any]) -> dict[str, Any]:
    """`base` with `KEY=INT,...` applied (keys of `base` with integer values; e.g.
    `hidden_size=448,num_hidden_layers=12`). Raises ValueError saying what is wrong: an unknown or
    non-integer key, a value that is not a positive integer, query heads not a multiple of the KV
    heads, or bf16 weights over `PACKAGE_WEIGHTS_MIB`."""
    dims = dict(base)
    for item in (part.strip() for part in text.split(",") if part.strip()):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or key not in base or isinstance(base[key], bool) or not isinstance(base[key], int):
            known = ", ".join(k for k, v in base.items() if isinstance(v, int) and not isinstance(v, bool))
            raise ValueError(f"{item!r} is not KEY=INT with KEY one of: {known}")
        try:
            dims[key] = int(value)
        except ValueError:
            raise ValueError(f"{key}={value!r}: the value must be an integer") from None
        if dims[key] <= 0:
            raise ValueError(f"{key}={dims[key]}: the value must be positive")
    if dims["num_attention_heads"] % dims["num_key_value_heads"]:
        raise ValueError(
            f"num_attention_heads={dims['num_attention_heads']} is not a multiple of "
            f"num_key_value_heads={dims['num_key_value_heads']} (grouped-query attention needs it)"
        )
    count = num_parameters(dims)
    mib = count * 2 / 2**20
    if mib > PACKAGE_WEIGHTS_MIB:
        raise ValueError(
            f"{count / 1e6:.1f}M parameters are {mib:.1f} MiB in bf16, over the "
            f"{PACKAGE_WEIGHTS_MIB:g} MiB the package leaves the bundled weights: make it smaller"
        )
    return dims


SNAKE_CASE = r"[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+"
TOKENIZER_SAMPLE_PAIRS = 3000  # pairs the BPE is trained on (all pairs share their fixed prompt text)


def _texts(sft_path: Path, seed: int) -> Iterator[str]:
    lines = sft_path.read_text(encoding="utf-8").splitlines()
    rng = random.Random(seed)
    for line in rng.sample(lines, min(TOKENIZER_SAMPLE_PAIRS, len(lines))):
        rec = json.loads(line)
        yield chat_prompt(rec["prompt"]) + rec["response"] + "<|im_end|>"


def line_bpe_tokenizer(texts: Iterator[str], vocab_size: int) -> Any:
    """A byte-level BPE whose merges may cross spaces but not line ends, with `bpe_tokenizer`'s
    specials, `<|MASK|>` and chat template.

    The corpus is code in a narrow dialect: whole lines that recur (an op's CUDA statement, a
    loop header, `auto out = torch::empty_like(xc);`) become single tokens, so an answer is a
    few dozen meaningful tokens instead of ~900 word pieces; the parts that vary between
    problems (kernel names such as `abs_sum_reduce_sqrt`) are cut out first (`SNAKE_CASE`: a
    snake_case identifier is a piece of its own), so the surrounding line's token is the same
    whatever the problem's name, and a new composition's name is spelled from learned pieces.
    A token starts at a line end ("merged_with_next"), so a text cut just before a newline — the
    editor's infill prefix, which ends with the source string's opening quotes, tokenises as in training.
    """
    from tokenizers import Regex, pre_tokenizers

    split = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split("\n", behavior="merged_with_next"),
            pre_tokenizers.Split(Regex(SNAKE_CASE), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    return bpe_tokenizer(texts, vocab_size, pre_tokenizer=split)


def train_tokenizer(sft_path: str | Path, vocab_size: int, seed: int = 0) -> Any:
    """The line-level BPE (`line_bpe_tokenizer`) trained on the corpus's chat-formatted pairs."""
    return line_bpe_tokenizer(_texts(Path(sft_path), seed), vocab_size)


def num_parameters(dims: dict[str, Any]) -> int:
    """Parameters of a Qwen3 of these dims (tied embedding counted once)."""
    h, i, n = dims["hidden_size"], dims["intermediate_size"], dims["num_hidden_layers"]
    q, kv = dims["num_attention_heads"] * dims["head_dim"], dims["num_key_value_heads"] * dims["head_dim"]
    layer = h * q + 2 * h * kv + q * h + 3 * h * i + 2 * h + 2 * dims["head_dim"]
    embed = dims["vocab_size"] * h * (1 if dims["tie_word_embeddings"] else 2)
    return int(n * layer + embed + h)


def init_checkpoint(
    out_dir: str | Path,
    sft_path: str | Path,
    dims: dict[str, Any],
    seed: int = 0,
    dtype: str = "bfloat16",
    tokenizer_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Write tokenizer + random SDAR-layout checkpoint to `out_dir`; return a summary (sizes, ids).

    `tokenizer_dir` reuses a tokenizer trained earlier (e.g. on a CPU box) instead of training one.
    """
    import torch

    sft_path = Path(sft_path)
    if not sft_path.is_file():
        raise ValueError(
            f"{sft_path} does not exist: build the corpus first "
            "(`python -m cudice.model.train.corpus build DIR`)"
        )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if tokenizer_dir is not None:
        from transformers import PreTrainedTokenizerFast

        tokenizer = PreTrainedTokenizerFast.from_pretrained(str(tokenizer_dir))
    else:
        tokenizer = train_tokenizer(sft_path, dims["vocab_size"], seed)
    tokenizer.save_pretrained(out)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    # SDAR layout as cudice.model.tiny writes it, with the demo dims (the vocabulary is the
    # tokenizer's real size, which BPE may leave below the requested one).
    config = {
        **tiny_config_dict(len(tokenizer), ids, sdar_layout=True),
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
