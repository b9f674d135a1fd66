"""Load DICE/SDAR (or plain Qwen3) checkpoints into transformers' native `Qwen3ForCausalLM`.

DICE checkpoints are SDAR checkpoints and SDAR is Qwen3 (docs/model.md,
https://github.com/JetAstra/SDAR): their shipped remote code does not run on transformers >= 4.56,
so cudice builds a `Qwen3Config` from config.json itself and loads the safetensors key for key —
never `trust_remote_code`. The mask token, the stop tokens, the pad token and the block size come
from the checkpoint and its tokenizer.

Not covered: downloads (a hub id is resolved from the local Hugging Face cache only),
quantised or sharded-across-GPUs loading, and model types other than `qwen3`/`sdar`.
"""

from __future__ import annotations

import json
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SUPPORTED_MODEL_TYPES = ("sdar", "qwen3")
_DTYPES = {
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
    "float32": "float32",
    "fp32": "float32",
}
# Qwen3Config fields copied from the checkpoint's config.json when present.
_QWEN3_FIELDS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "max_position_embeddings",
    "rms_norm_eps",
    "tie_word_embeddings",
    "attention_bias",
    "attention_dropout",
    "hidden_act",
    "initializer_range",
    "use_sliding_window",
    "sliding_window",
    "max_window_layers",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
)


class ModelLoadError(RuntimeError):
    """A checkpoint could not be found or loaded; the message says what, why and how to fix."""


@dataclass(frozen=True, slots=True)
class TokenIds:
    """Token ids the sampler needs, all read from the checkpoint and its tokenizer."""

    mask: int | None  # None: not a block-diffusion checkpoint (AR baseline only)
    pad: int
    stop: tuple[int, ...]  # generation ends at the first of these


@dataclass(frozen=True, slots=True)
class LoadedModel:
    model: Any  # transformers Qwen3ForCausalLM, eval mode
    tokenizer: Any  # transformers tokenizer
    path: Path
    model_type: str  # "sdar" or "qwen3" as written in config.json
    block_size: int | None
    ids: TokenIds
    device: Any  # torch.device
    dtype: Any  # torch.dtype


def resolve_checkpoint(path_or_id: str) -> Path:
    """A local directory, or a hub id found in the local HF cache (never downloaded)."""
    if not path_or_id:
        raise ModelLoadError(
            "no model given: pass a checkpoint directory (or set cudice.model.path); "
            "`cudice model make-tiny DIR` writes a tiny random one for trying things out"
        )
    local = Path(path_or_id).expanduser()
    if local.is_dir():
        if not (local / "config.json").is_file():
            raise ModelLoadError(
                f"{local} is a directory but holds no config.json: it is not a Hugging Face "
                "checkpoint directory (expected config.json, *.safetensors and tokenizer files)"
            )
        return local
    looked = [str(local.resolve())]
    hub_like = path_or_id.count("/") == 1 and not path_or_id.startswith((".", "/", "~"))
    if hub_like:
        try:
            from huggingface_hub import constants, snapshot_download

            looked.append(f"the Hugging Face cache {constants.HF_HUB_CACHE} (repo {path_or_id})")
            return Path(snapshot_download(path_or_id, local_files_only=True))
        except Exception as exc:  # any miss in the offline cache lands here
            log.debug("hub cache lookup for %s failed: %s", path_or_id, exc)
    raise ModelLoadError(
        f"model {path_or_id!r} not found; looked in: {'; '.join(looked)}. cudice never downloads weights. "
        f"On a machine with internet run `huggingface-cli download {path_or_id if hub_like else 'ORG/NAME'} "
        "--local-dir DIR` (e.g. DeadlyKitt3n/DICE-1.7B), copy DIR here and pass its path."
    )


def read_config(directory: Path) -> dict[str, Any]:
    path = directory / "config.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelLoadError(f"cannot read {path}: {exc}; the checkpoint directory looks damaged") from exc
    if not isinstance(data, dict):
        raise ModelLoadError(f"{path} must hold a JSON object, got {type(data).__name__}")
    model_type = data.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ModelLoadError(
            f"{path}: model_type {model_type!r} is not supported; cudice loads Qwen3-architecture "
            f"checkpoints (model_type one of {', '.join(SUPPORTED_MODEL_TYPES)}: DICE, SDAR, TraDo, Qwen3)"
        )
    return data


def qwen3_config(raw: dict[str, Any]) -> Any:
    """A native `Qwen3Config` built from an SDAR or Qwen3 config.json (unknown extras dropped)."""
    from transformers import Qwen3Config

    kwargs = {k: raw[k] for k in _QWEN3_FIELDS if k in raw and raw[k] is not None}
    if raw.get("rope_parameters"):
        kwargs["rope_parameters"] = dict(raw["rope_parameters"])
    else:  # transformers 4 style: rope_theta + optional rope_scaling
        rope = dict(raw.get("rope_scaling") or {})
        rope.setdefault("rope_type", rope.pop("type", "default"))
        rope["rope_theta"] = float(raw.get("rope_theta", 10_000.0))
        kwargs["rope_parameters"] = rope
    for extra in ("block_size", "mask_token_id"):
        if raw.get(extra) is not None:
            kwargs[extra] = raw[extra]
    config = Qwen3Config(**kwargs)
    config._attn_implementation = "sdpa"  # custom 4-D float masks need sdpa or eager (docs/model.md)
    return config


def pick_device_dtype(device: str = "auto", dtype: str = "auto") -> tuple[Any, Any]:
    """auto: CUDA with bfloat16 when a GPU is usable, else CPU with float32; explicit choices win."""
    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError(
            f"device {device!r} requested but torch sees no CUDA GPU "
            f"(torch {torch.__version__}); use device 'cpu' or 'auto'"
        )
    if device != "cpu" and not device.startswith("cuda"):
        raise ModelLoadError(f"device {device!r} is not supported; use 'auto', 'cpu', 'cuda' or 'cuda:N'")
    if dtype == "auto":
        dtype = "bfloat16" if device.startswith("cuda") else "float32"
    if dtype not in _DTYPES:
        raise ModelLoadError(f"dtype {dtype!r} is not supported; use auto, bfloat16, float16 or float32")
    return torch.device(device), getattr(torch, _DTYPES[dtype])


def _checkpoint_keys(directory: Path) -> set[str]:
    from safetensors import safe_open

    files = sorted(directory.glob("*.safetensors"))
    if not files:
        bins = sorted(p.name for p in directory.glob("*.bin"))
        hint = f" (found {', '.join(bins)}: convert them to safetensors)" if bins else ""
        raise ModelLoadError(f"no *.safetensors weights in {directory}{hint}")
    keys: set[str] = set()
    for f in files:
        with safe_open(str(f), framework="pt") as handle:
            keys.update(handle.keys())
    return keys


def check_keys(expected: set[str], found: set[str], tied: bool, where: Path) -> None:
    """Fail unless the checkpoint holds exactly the parameters `Qwen3ForCausalLM` expects."""
    missing = expected - found
    if tied:
        missing.discard("lm_head.weight")
    unused = found - expected
    if missing or unused:

        def show(keys: set[str]) -> str:
            items = sorted(keys)
            return ", ".join(items[:12]) + (f" … (+{len(items) - 12} more)" if len(items) > 12 else "")

        parts = []
        if missing:
            parts.append(f"{len(missing)} missing: {show(missing)}")
        if unused:
            parts.append(f"{len(unused)} unused: {show(unused)}")
        raise ModelLoadError(
            f"weights in {where} do not match Qwen3ForCausalLM ({'; '.join(parts)}). "
            "The config.json dimensions or parameter names differ from the weights: "
            "check that config.json belongs to these weights"
        )


def _stop_ids(directory: Path, raw: dict[str, Any], tokenizer: Any) -> tuple[int, ...]:
    """EOS ids of config.json and generation_config.json, the tokenizer's EOS and `<|im_end|>`."""
    ids: list[int] = []

    def add(value: Any) -> None:
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, int) and v not in ids:
                ids.append(v)

    add(raw.get("eos_token_id"))
    gen = directory / "generation_config.json"
    if gen.is_file():
        try:
            add(json.loads(gen.read_text()).get("eos_token_id"))
        except (OSError, json.JSONDecodeError, AttributeError):
            log.warning("ignoring unreadable %s", gen)
    add(tokenizer.eos_token_id)
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if im_end is not None and im_end != tokenizer.unk_token_id:
        add(im_end)  # chat models end their turn with it
    if not ids:
        raise ModelLoadError(
            f"{directory}: no EOS token in config.json, generation_config.json or the tokenizer"
        )
    return tuple(ids)


def _mask_id(raw: dict[str, Any], tokenizer: Any) -> int | None:
    if isinstance(raw.get("mask_token_id"), int):
        return int(raw["mask_token_id"])
    if tokenizer.mask_token_id is not None:
        return int(tokenizer.mask_token_id)
    tid = tokenizer.convert_tokens_to_ids("<|MASK|>")
    return int(tid) if isinstance(tid, int) and tid != tokenizer.unk_token_id else None


def load_tokenizer(directory: Path) -> Any:
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    # AutoTokenizer peeks at config.json and warns about `model_type: sdar`: expected, it is not used.
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]  # transformers leaves it unannotated
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return AutoTokenizer.from_pretrained(
                str(directory), trust_remote_code=False, local_files_only=True
            )
    except Exception as exc:
        raise ModelLoadError(
            f"cannot load the tokenizer from {directory}: {exc}; the directory needs "
            "tokenizer.json (or vocab/merges files) and tokenizer_config.json"
        ) from exc
    finally:
        hf_logging.set_verbosity(level)


def load_checkpoint(path_or_id: str, device: str = "auto", dtype: str = "auto") -> LoadedModel:
    """Load weights, tokenizer and decoding ids; see the module docstring."""
    import torch
    from safetensors.torch import load_file
    from transformers import Qwen3ForCausalLM

    directory = resolve_checkpoint(path_or_id)
    raw = read_config(directory)
    config = qwen3_config(raw)
    torch_device, torch_dtype = pick_device_dtype(device, dtype)
    tokenizer = load_tokenizer(directory)
    if len(tokenizer) > config.vocab_size:
        raise ModelLoadError(
            f"{directory}: the tokenizer has {len(tokenizer)} tokens but the model's vocab_size is "
            f"{config.vocab_size}; the tokenizer does not belong to these weights"
        )

    # 1. build on the meta device (no memory), compare names before touching any weights
    with torch.device("meta"):
        model = Qwen3ForCausalLM(config)
    check_keys(
        set(model.state_dict().keys()),
        _checkpoint_keys(directory),
        bool(config.tie_word_embeddings),
        directory,
    )
    # 2. materialise on the target device and copy the tensors in, key for key
    model = model.to(torch_dtype).to_empty(device=torch_device)
    state: dict[str, Any] = {}
    for f in sorted(directory.glob("*.safetensors")):
        state.update(load_file(str(f), device=str(torch_device)))
    result = model.load_state_dict({k: v.to(torch_dtype) for k, v in state.items()}, strict=False)
    assert not result.unexpected_keys, result.unexpected_keys  # check_keys already guaranteed it
    del state
    if config.tie_word_embeddings:
        model.tie_weights()
    # 3. non-persistent buffers (RoPE inverse frequencies, float32) are not in the file and were left
    #    uninitialised by to_empty: rebuild that module off the meta device
    model.model.rotary_emb = type(model.model.rotary_emb)(config=config).to(torch_device)
    model.eval()

    mask = _mask_id(raw, tokenizer)
    pad = raw.get("pad_token_id") if isinstance(raw.get("pad_token_id"), int) else tokenizer.pad_token_id
    stop = _stop_ids(directory, raw, tokenizer)
    if pad is None:
        pad = stop[0]
    block = raw.get("block_size") if isinstance(raw.get("block_size"), int) else None
    log.info(
        "loaded %s (%s layout) on %s/%s: %d parameters, mask=%s, stop=%s, block=%s",
        directory,
        raw["model_type"],
        torch_device,
        torch_dtype,
        sum(p.numel() for p in model.parameters()),
        mask,
        stop,
        block,
    )
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        path=directory,
        model_type=str(raw["model_type"]),
        block_size=block,
        ids=TokenIds(mask=mask, pad=int(pad), stop=stop),
        device=torch_device,
        dtype=torch_dtype,
    )
