"""The model runtime's public API for the language server and the CLI.

    engine = load_engine("path/to/DICE-1.7B")           # device/dtype "auto"
    gen = engine.generate_kernel(reference_source, SamplerConfig(), on_progress, should_stop)
    gen = engine.infill(prefix, suffix, pytorch_code, SamplerConfig())
    gen.text, gen.middle, gen.tokens_per_forward, gen.step_map

`generate_kernel` asks for a whole `ModelNew` file (KernelBench one-shot prompt) and returns the
first fenced code block of the answer. `infill` forces the answer to start with the scaffold's
prefix and stops when the suffix's first line appears; `.middle` is the new CUDA source and
`.text` is the ORIGINAL prefix + middle + ORIGINAL suffix. The forced opening is tokenised apart
from the chat turn before it (`infill_ids`), as training tokenises a prompt and its answer
(`cudice.model.train.sft.encode_pair`): tokenised together, a tokenizer may merge across the turn's
end (the demo model's line-level BPE makes one token of "\n```python" there, a sequence its
training never had, and its infilling became word salad).

`on_progress` is called after every committed block (from the calling thread); `should_stop` is
polled before every forward, and a stopped generation returns what was committed with
`cancelled=True`. Not covered: running in another process (the server's worker does that) and
thread safety — one generation at a time per engine.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from cudice.model.config import SamplerConfig
from cudice.model.generation import Generation, Progress
from cudice.model.loader import LoadedModel, load_checkpoint
from cudice.model.prompt_styles import CUDICE_STYLE, PromptStyle, inference_style
from cudice.model.prompts import (
    extract_first_code_block,
    infill_stop_marker,
    splice_middle,
)
from cudice.model.runner import HFRunner, Runner
from cudice.model.sampler import BatchResult, BlockDiffusionSampler


class GenerationError(ValueError):
    """A generation request that cannot run (e.g. no mask token, no block length); says how to fix."""


class Engine:
    """A loaded block-diffusion checkpoint plus its sampler."""

    def __init__(
        self,
        loaded: LoadedModel,
        runner: Runner | None = None,
        fast: bool | None = None,
        style: PromptStyle = CUDICE_STYLE,
    ) -> None:
        """`runner` replaces the model forwards (tests pass a stub with scripted logits). `fast` uses the
        static-cache runner (`cudice.model.fastpath`: on CUDA, torch.compile'd layers under CUDA-graph
        block forwards; same tokens); None (the default) means fast where the model sits on a GPU.
        `style`: the wording of the prompts (`cudice.model.prompt_styles`; `load_engine` picks the
        checkpoint's)."""
        self.loaded = loaded
        self.style = style
        self.style_warning = ""  # set by load_engine when the style is not the one it was trained on
        self.tokenizer = loaded.tokenizer
        if runner is None:
            on_gpu = str(loaded.device).startswith("cuda")
            if fast or (fast is None and on_gpu):
                from cudice.model.fastpath import StaticRunner

                runner = StaticRunner(loaded.model, use_graphs=True, compile=on_gpu)
            else:
                runner = HFRunner(loaded.model)
        self.runner = runner
        self._sampler: BlockDiffusionSampler | None = None
        if loaded.ids.mask is not None:
            self._sampler = BlockDiffusionSampler(
                runner, loaded.ids.mask, loaded.ids.pad, loaded.ids.stop, self.decode
            )

    # --- helpers -------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=False))

    def block_length(self, config: SamplerConfig) -> int:
        block = config.block_length or self.loaded.block_size
        if block is None:
            raise GenerationError(
                f"{self.loaded.path}: config.json has no block_size and the sampler config sets "
                "no block_length; set cudice.sampler.blockLength (DICE checkpoints use 4)"
            )
        return block

    @property
    def sampler(self) -> BlockDiffusionSampler:
        if self._sampler is None:
            raise GenerationError(
                f"{self.loaded.path} has no mask token (no mask_token_id in config.json, no "
                "<|MASK|> in the tokenizer): it is not a block-diffusion checkpoint. Use a "
                "DICE/SDAR checkpoint; plain Qwen3 weights only run the AR baseline"
            )
        return self._sampler

    def warm_up(self) -> None:
        """Compile the fast path's layers now (tens of seconds on a GPU) rather than in the first request:
        two short generations, with and without the fused commit. No-op unless the runner compiles."""
        if not getattr(self.runner, "compiled", False) or self._sampler is None:
            return
        block = self.loaded.block_size or 4
        prompt = self.encode("warm up") or [self.loaded.ids.pad]
        for fuse in (False, True):
            config = SamplerConfig(max_new_tokens=2 * block, threshold=0.0, fuse_commit=fuse)
            self._sampler.generate([prompt * (block + 1)], config, block)

    # --- prompts -------------------------------------------------------------------------
    def kernel_prompt(self, reference_source: str) -> str:
        """The end-to-end prompt for a reference, chat turn included, in this engine's style."""
        return self.style.chat(self.style.e2e(reference_source))

    def _infill_parts(self, prefix: str, suffix: str, pytorch_code: str) -> tuple[str, str]:
        """The infilling task's chat turn in this engine's style, and the forced opening of the
        answer (`PromptStyle.infill_answer`: it ends with the scaffold's prefix)."""
        task = self.style.infill(pytorch_code, prefix, suffix)
        return self.style.chat(task), self.style.infill_answer(prefix)

    def infill_prompt(self, prefix: str, suffix: str, pytorch_code: str) -> str:
        """The infilling prompt as text: the chat turn followed by the forced opening of the answer;
        the model is given `infill_ids`."""
        return "".join(self._infill_parts(prefix, suffix, pytorch_code))

    def infill_ids(self, prefix: str, suffix: str, pytorch_code: str) -> list[int]:
        """`infill_prompt`'s token ids: the chat turn and the forced opening tokenised apart, as
        training tokenises a prompt and its answer (module docstring)."""
        turn, opening = self._infill_parts(prefix, suffix, pytorch_code)
        return self.encode(turn) + self.encode(opening)

    # --- generation ----------------------------------------------------------------------
    def generate_texts(
        self,
        prompts: Sequence[str],
        config: SamplerConfig,
        on_block: Callable[[Sequence[Sequence[int]], int], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> BatchResult:
        """Decode raw prompt strings (already chat-formatted) as one batch."""
        return self.generate_ids([self.encode(p) for p in prompts], config, on_block, should_stop)

    def generate_ids(
        self,
        encoded: Sequence[Sequence[int]],
        config: SamplerConfig,
        on_block: Callable[[Sequence[Sequence[int]], int], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> BatchResult:
        """Decode token-id prompts as one batch (`generate_texts` after tokenising)."""
        encoded = [list(e) for e in encoded]
        block = self.block_length(config)
        limit = int(getattr(self.loaded.model.config, "max_position_embeddings", 0) or 0)
        longest = max(len(e) for e in encoded) + config.max_new_tokens + block
        if limit and longest > limit:
            raise GenerationError(
                f"the prompt ({max(len(e) for e in encoded)} tokens) plus max_new_tokens "
                f"({config.max_new_tokens}) exceeds the model's {limit} positions; lower "
                "max_new_tokens (cudice.sampler.maxNewTokens) or shorten the file"
            )
        return self.sampler.generate(encoded, config, block, on_block=on_block, should_stop=should_stop)

    def _generate_one(
        self,
        prompt: Sequence[int],
        config: SamplerConfig,
        on_progress: Callable[[Progress], None] | None,
        should_stop: Callable[[], bool] | None,
    ) -> tuple[BatchResult, float]:
        start = time.perf_counter()

        def on_block(tokens: Sequence[Sequence[int]], num_forwards: int) -> None:
            if on_progress is None:
                return
            seconds = time.perf_counter() - start
            n = len(tokens[0])
            on_progress(Progress(n, num_forwards, seconds, self.decode(tokens[0])))

        result = self.generate_ids([prompt], config, on_block=on_block, should_stop=should_stop)
        return result, time.perf_counter() - start

    def generate_kernel(
        self,
        reference_source: str,
        config: SamplerConfig,
        on_progress: Callable[[Progress], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> Generation:
        """End-to-end: a full candidate file (`class ModelNew`) for the KernelBench reference."""
        result, seconds = self._generate_one(
            self.encode(self.kernel_prompt(reference_source)), config, on_progress, should_stop
        )
        row = result.rows[0]
        code = extract_first_code_block(row.text)
        return _generation(result, seconds, text=code if code is not None else row.text, middle=None)

    def infill(
        self,
        prefix: str,
        suffix: str,
        pytorch_code: str,
        config: SamplerConfig,
        on_progress: Callable[[Progress], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> Generation:
        """Write the CUDA source between `prefix` and `suffix` (prefix-forced DICE stage-1 prompt)."""
        marker = infill_stop_marker(suffix)
        prompt = self.infill_ids(prefix, suffix, pytorch_code)
        config = config.replace(stop_strings=(*config.stop_strings, marker))
        result, seconds = self._generate_one(prompt, config, on_progress, should_stop)
        middle = splice_middle(result.rows[0].text, suffix)
        return _generation(result, seconds, text=prefix + middle + suffix, middle=middle)


def _generation(result: BatchResult, seconds: float, text: str, middle: str | None) -> Generation:
    row = result.rows[0]
    n = len(row.tokens)
    return Generation(
        text=text,
        middle=middle,
        num_tokens=n,
        num_forwards=result.num_forwards,
        tokens_per_forward=n / result.num_forwards if result.num_forwards else 0.0,
        seconds=seconds,
        cancelled=row.finish_reason == "cancelled",
        step_map=row.step_map,
        finish_reason=row.finish_reason,
        raw_text=row.text,
    )


def load_engine(
    path: str,
    device: str = "auto",
    dtype: str = "auto",
    fast: bool | None = None,
    freeze: bool = False,
    prompt_style: str | None = None,
    prompt_templates: str | None = None,
) -> Engine:
    """Load a checkpoint directory (or a locally cached hub id) into an `Engine`.

    fast: static KV cache, compiled layers and CUDA graphs (same tokens as the HF path; see
    fastpath.py); None = on where the model sits on a GPU, False forces the eager HF path.
    freeze: `requires_grad_(False)` before the engine is built, for callers that only generate (the
    editor's model worker, `cudice generate`): the fast path then packs each layer's projections
    into single GEMMs (fastpath.StaticRunner's `pack`); a model that will be trained stays as loaded.
    prompt_style / prompt_templates: the prompts' wording (`prompt_styles.inference_style`: the
    checkpoint's default unless given; the templates default to `CUDICE_PROMPT_TEMPLATES`). A
    checkpoint served in a wording it was not trained on gets `engine.style_warning` (the caller
    shows it: `cudice generate` on stderr, the server in its log and model status).
    Raises `cudice.model.loader.ModelLoadError` with what/why/how-to-fix on a bad path or checkpoint,
    and `prompt_styles.PromptTemplateError` on an explicit style that cannot be honoured.
    """
    loaded = load_checkpoint(path, device=device, dtype=dtype)
    style, warning = inference_style(loaded.path, prompt_style, prompt_templates)
    if freeze:
        loaded.model.requires_grad_(False)
    engine = Engine(loaded, fast=fast, style=style)
    engine.style_warning = warning
    engine.warm_up()
    return engine


def engine_info(engine: Engine) -> dict[str, Any]:
    """A JSON-able description (for `cudice model info` and the server's status)."""
    lm = engine.loaded
    return {
        "path": str(lm.path),
        "model_type": lm.model_type,
        "device": str(lm.device),
        "dtype": str(lm.dtype),
        "block_size": lm.block_size,
        "mask_token_id": lm.ids.mask,
        "stop_token_ids": list(lm.ids.stop),
        "pad_token_id": lm.ids.pad,
        "num_parameters": sum(p.numel() for p in lm.model.parameters()),
        "prompt_style": engine.style.name,
    }
