"""The engine API the language server uses: e2e generation, prefix-forced infilling, progress, cancel.

A stub runner (scripted logits) makes the tiny checkpoint "write" a chosen answer, so extraction
and splicing are checked on exact text; one test runs the real tiny model end to end.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cudice.model.config import SamplerConfig
from cudice.model.engine import Engine, GenerationError
from cudice.model.generation import Progress
from cudice.model.prompts import chat_prompt, e2e_prompt, infill_answer_start, infill_prompt
from cudice.model.scaffold import split_scaffold
from model_stub import StubRunner

CFG = SamplerConfig(strategy="low_confidence_dynamic", threshold=0.9, max_new_tokens=400)


def scripted_engine(
    tiny_engine: Engine, prompt: str, answer: str, confidence: float = 0.99
) -> tuple[Engine, int]:
    """An engine over the tiny checkpoint whose model writes `answer` after `prompt` (then EOS)."""
    prompt_len = len(tiny_engine.encode(prompt))
    ids = [*tiny_engine.encode(answer), tiny_engine.loaded.ids.stop[0]]
    filler = tiny_engine.encode("x")[0]

    def target(p: int) -> int:
        k = p - prompt_len
        return ids[k] if 0 <= k < len(ids) else filler

    runner = StubRunner(len(tiny_engine.tokenizer), target, lambda p: confidence)
    return Engine(tiny_engine.loaded, runner=runner), len(ids) - 1


def test_generate_kernel_returns_the_first_code_block(tiny_engine: Engine, examples_dir: Path) -> None:
    reference = (examples_dir / "relu.py").read_text()
    code = "import torch\nclass ModelNew:\n    pass\n"
    answer = f"<think>\n\n</think>\n\n```python\n{code}```\nSome words after."
    engine, n_answer = scripted_engine(tiny_engine, chat_prompt(e2e_prompt(reference)), answer)
    progress: list[Progress] = []
    gen = engine.generate_kernel(reference, CFG, on_progress=progress.append)
    assert gen.text == code
    assert gen.raw_text == answer and gen.finish_reason == "eos"
    assert gen.num_tokens == n_answer and gen.middle is None and not gen.cancelled
    assert len(gen.step_map) == gen.num_tokens
    # a confident model reveals each block in one step: ~2 forwards per block plus the prefill
    assert gen.tokens_per_forward > 1.5
    assert [p.num_tokens for p in progress] == sorted(p.num_tokens for p in progress)
    assert progress[-1].text_so_far.startswith(answer)
    assert all(p.tokens_per_forward > 0 and p.seconds >= 0 for p in progress)


def test_infill_splices_the_middle_between_the_original_prefix_and_suffix(
    tiny_engine: Engine, examples_dir: Path
) -> None:
    source = (examples_dir / "relu_cuda.py").read_text()
    reference = (examples_dir / "relu.py").read_text()
    sc = split_scaffold(source)
    new_middle = "\n__global__ void relu_kernel(float* x) { }\n"
    # the model writes the middle, then starts re-writing the suffix; decoding must stop there
    rewrite = '"""\n\nrelu_cpp_source = "torch::Tensor relu_cuda(torch::Tensor x);"\n' * 5
    prompt = chat_prompt(infill_prompt(reference, sc.prefix, sc.suffix)) + infill_answer_start(sc.prefix)
    engine, n_answer = scripted_engine(tiny_engine, prompt, new_middle + rewrite)
    gen = engine.infill(sc.prefix, sc.suffix, reference, CFG)
    assert gen.middle == new_middle
    assert gen.text == sc.prefix + new_middle + sc.suffix
    assert gen.finish_reason == "stop_string"
    assert gen.num_tokens < n_answer // 2  # stopped at the suffix's first line, not at EOS


def test_cancellation_returns_committed_work(tiny_engine: Engine, examples_dir: Path) -> None:
    reference = (examples_dir / "relu.py").read_text()
    answer = "```python\n" + "x = 1\n" * 40 + "```"
    engine, _ = scripted_engine(tiny_engine, chat_prompt(e2e_prompt(reference)), answer)
    progress: list[Progress] = []
    gen = engine.generate_kernel(
        reference, CFG, on_progress=progress.append, should_stop=lambda: len(progress) >= 3
    )
    assert gen.cancelled and gen.finish_reason == "cancelled"
    assert gen.num_tokens == progress[-1].num_tokens
    assert gen.num_forwards == progress[-1].num_forwards


def test_real_tiny_model_end_to_end(tiny_engine: Engine, examples_dir: Path) -> None:
    source = (examples_dir / "relu_cuda.py").read_text()
    sc = split_scaffold(source)
    gen = tiny_engine.infill(
        sc.prefix, sc.suffix, (examples_dir / "relu.py").read_text(), SamplerConfig(max_new_tokens=16)
    )
    assert gen.text.startswith(sc.prefix) and gen.text.endswith(sc.suffix)
    assert gen.num_tokens <= 16 and gen.num_forwards >= gen.num_tokens / 4
    assert 0 < gen.tokens_per_forward <= 4


def test_block_length_must_come_from_somewhere(tiny_engine: Engine) -> None:
    import dataclasses

    engine = Engine(dataclasses.replace(tiny_engine.loaded, block_size=None))
    with pytest.raises(GenerationError, match="no block_size"):
        engine.generate_kernel("class Model: pass", SamplerConfig())
    assert engine.block_length(SamplerConfig(block_length=8)) == 8


def test_too_long_a_request_is_refused_before_decoding(tiny_engine: Engine) -> None:
    with pytest.raises(GenerationError, match="exceeds the model's 8192 positions"):
        tiny_engine.generate_kernel("class Model: pass", SamplerConfig(max_new_tokens=9000))
