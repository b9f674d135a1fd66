"""Tiny offline checkpoints for tests and for trying the workflow without real weights.

`make_tiny(directory, sdar_layout=...)` writes:
- a byte-level BPE tokenizer trained with `tokenizers` on a few bundled code strings, with the
  ChatML specials and `<|MASK|>` (`tokenizer.json`, `tokenizer_config.json`, ChatML chat
  template), loadable offline with `AutoTokenizer.from_pretrained(directory)`;
- a tiny random Qwen3 (hidden 64, 2 layers, 4 heads / 2 KV heads, head_dim 16; < 1 MB) as
  `model.safetensors` with transformers' Qwen3 parameter names, and `config.json` either in
  plain Qwen3 layout or in SDAR/DICE layout (`model_type: "sdar"`, `auto_map`, `block_size`,
  `mask_token_id`), so tests load it exactly as a real DICE checkpoint is loaded.

Not covered: the weights are random, so the model writes gibberish; nothing here is trained.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# Special tokens in Qwen's order: <|endoftext|> is pad/bos/eos of the base model, <|im_end|>
# ends a chat turn, <|MASK|> is SDAR's mask token.
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|MASK|>")
CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TINY_DIMS: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 8192,
    "rope_theta": 1_000_000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
}
TINY_BLOCK_SIZE = 4

_CORPUS = [
    "import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n",
    "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n\n"
    "    def forward(self, a, b):\n        return a + b\n",
    "class ModelNew(nn.Module):\n    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
    "        return self.op.relu_cuda(x)\n",
    'source = """\n#include <torch/extension.h>\n#include <cuda_runtime.h>\n\n'
    "__global__ void add_kernel(const float* a, const float* b, float* out, int size) {\n"
    "    int idx = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (idx < size) { out[idx] = a[idx] + b[idx]; }\n}\n"
    "torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b) {\n    auto out = torch::zeros_like(a);\n"
    "    const int block_size = 256;\n    add_kernel<<<num_blocks, block_size>>>(a.data_ptr<float>());\n"
    '    return out;\n}\n"""\n',
    "op = load_inline(name='op', cpp_sources=cpp_src, cuda_sources=source, functions=['add_cuda'])\n",
    "def get_inputs():\n    return [torch.randn(16, 16384)]\n\ndef get_init_inputs():\n    return []\n",
    "You write custom CUDA kernels to replace the pytorch operators in the given architecture. "
    "Output the new code in codeblocks. Name it ModelNew. ```python\n```\n",
]


def build_tokenizer(vocab_size: int = 512) -> Any:
    """A byte-level BPE `PreTrainedTokenizerFast` with ChatML specials, `<|MASK|>` and a chat template."""
    return bpe_tokenizer(_CORPUS * 4, vocab_size)


def bpe_tokenizer(texts: Iterable[str], vocab_size: int, pre_tokenizer: Any = None) -> Any:
    """A byte-level BPE `PreTrainedTokenizerFast` trained on `texts`, with ChatML specials, `<|MASK|>`
    and the ChatML chat template (also the demo checkpoint's tokenizer, trained on its corpus).

    `pre_tokenizer` (a `tokenizers` pre-tokenizer) replaces the default split before training,
    byte-level with GPT-2's regex and no prefix space (`init_model.line_bpe_tokenizer` passes its own)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    if pre_tokenizer is None:
        pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    # transformers' TokenizersBackend.__init__ (*args, **kwargs) carries no annotations
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        mask_token="<|MASK|>",
        additional_special_tokens=["<|im_start|>"],
    )
    fast.chat_template = CHATML_TEMPLATE
    return fast


def tiny_config_dict(vocab_size: int, ids: dict[str, int], sdar_layout: bool) -> dict[str, Any]:
    """The tiny checkpoint's config.json fields (SDAR's layout or plain Qwen3's)."""
    base: dict[str, Any] = {
        **TINY_DIMS,
        "vocab_size": vocab_size,
        "hidden_act": "silu",
        "attention_bias": False,
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|endoftext|>"],
        "pad_token_id": ids["<|endoftext|>"],
        "block_size": TINY_BLOCK_SIZE,
        "mask_token_id": ids["<|MASK|>"],
    }
    if sdar_layout:
        # Field for field what SDAR-1.7B-Chat's config.json holds (https://huggingface.co/JetLM/SDAR-1.7B-Chat/blob/main/config.json).
        return {
            "architectures": ["SDARForCausalLM"],
            "auto_map": {
                "AutoConfig": "configuration_sdar.SDARConfig",
                "AutoModel": "modeling_sdar.SDARModel",
                "AutoModelForCausalLM": "modeling_sdar.SDARForCausalLM",
            },
            "model_type": "sdar",
            "attn_implementation": "flex_attention",
            "attention_dropout": 0.0,
            "initializer_range": 0.02,
            "rope_scaling": None,
            "use_cache": False,
            "use_sliding_window": False,
            "sliding_window": None,
            "max_window_layers": TINY_DIMS["num_hidden_layers"],
            "fuse_cross_entropy": True,
            "torch_dtype": "float32",
            "transformers_version": "4.52.4",
            **base,
        }
    return {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", **base}


def random_qwen3(config: dict[str, Any], seed: int) -> Any:
    """A `Qwen3ForCausalLM` with seeded random weights for a `config.json` dict (Qwen3 or SDAR layout)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    qwen_kwargs = {k: v for k, v in config.items() if k not in ("architectures", "auto_map", "model_type")}
    return Qwen3ForCausalLM(Qwen3Config(**qwen_kwargs))


def save_checkpoint(out: Path, config: dict[str, Any], model: Any, ids: dict[str, int]) -> dict[str, Any]:
    """Write `model.safetensors` (a tied `lm_head` stored once, as the embedding), `config.json` and
    `generation_config.json` (EOS `<|im_end|>` and `<|endoftext|>`) to `out`; return the saved tensors."""
    from safetensors.torch import save_file

    tensors = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    if config.get("tie_word_embeddings"):
        tensors.pop("lm_head.weight", None)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    stop_ids = [ids["<|im_end|>"], ids["<|endoftext|>"]]
    (out / "generation_config.json").write_text(
        json.dumps({"bos_token_id": ids["<|endoftext|>"], "eos_token_id": stop_ids}, indent=2) + "\n"
    )
    return tensors


def make_tiny(directory: str | Path, sdar_layout: bool = False, seed: int = 0) -> Path:
    """Write a tiny random checkpoint + tokenizer to `directory` (created); return its path."""
    import torch

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    tokenizer.save_pretrained(out)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    config_dict = tiny_config_dict(len(tokenizer), ids, sdar_layout)
    model = random_qwen3(config_dict, seed)
    # Larger-than-default init so a random model has peaked, tie-free logits (tests use greedy).
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() == 2:
                param.normal_(0.0, 0.2 if name.endswith(("embed_tokens.weight", "lm_head.weight")) else 0.08)
    save_checkpoint(out, config_dict, model, ids)
    return out
