"""Prompts, answer extraction, scaffold splitting and the infill splice."""

from __future__ import annotations

from pathlib import Path

import pytest
from cudice.model.prompts import (
    EXAMPLE_MODEL_NEW,
    EXAMPLE_PREFIX,
    EXAMPLE_SUFFIX,
    chat_prompt,
    e2e_prompt,
    extract_first_code_block,
    infill_answer_start,
    infill_prompt,
    infill_stop_marker,
    splice_middle,
)
from cudice.model.scaffold import ScaffoldError, split_scaffold


def test_chatml_single_user_turn_with_generation_prompt() -> None:
    assert chat_prompt("hi") == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_chatml_matches_the_tiny_tokenizer_template(tiny_engine) -> None:
    rendered = tiny_engine.tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert rendered == chat_prompt("hi")


def test_e2e_prompt_holds_example_pair_target_and_instructions(examples_dir: Path) -> None:
    reference = (examples_dir / "relu.py").read_text()
    prompt = e2e_prompt(reference)
    assert reference.rstrip() in prompt
    assert EXAMPLE_MODEL_NEW.rstrip() in prompt and "return a + b" in prompt
    assert "ModelNew" in prompt and "Do not write tests" in prompt
    assert prompt.index("return a + b") < prompt.index(reference.rstrip())


def test_infill_prompt_holds_example_code_prefix_and_suffix() -> None:
    prompt = infill_prompt("class Model: pass", "PREFIX_TEXT", "SUFFIX_TEXT")
    assert EXAMPLE_PREFIX in prompt and EXAMPLE_SUFFIX.rstrip() in prompt
    order = [prompt.index(s) for s in ("class Model: pass", "PREFIX_TEXT", "SUFFIX_TEXT")]
    assert order == sorted(order)


@pytest.mark.parametrize(
    ("answer", "code"),
    [
        ("<think>\n\n</think>\n\n```python\nx = 1\n```\ntrailing ```cpp\ny\n```", "x = 1\n"),
        ("Here:\n```\nplain\n```", "plain\n"),
        ("```cpp\nint a;\n```", "int a;\n"),
        ("```python\nunclosed = True\n", "unclosed = True\n"),
        ("no code at all", None),
    ],
)
def test_first_code_block_extraction(answer: str, code: str | None) -> None:
    assert extract_first_code_block(answer) == code


def test_example_pair_round_trips_through_extraction() -> None:
    answer = f"```python\n{EXAMPLE_MODEL_NEW}```\n"
    assert extract_first_code_block(answer) == EXAMPLE_MODEL_NEW


def test_scaffold_split_is_at_the_cuda_string_and_rejoins_exactly(examples_dir: Path) -> None:
    source = (examples_dir / "relu_cuda.py").read_text()
    sc = split_scaffold(source, "relu_cuda.py")
    assert sc.text == source
    assert sc.prefix.endswith('relu_source = """')
    assert sc.middle.lstrip().startswith("#include <torch/extension.h>")
    assert sc.suffix.startswith('"""\n\nrelu_cpp_source')


def test_scaffold_with_empty_cuda_string() -> None:
    source = (
        'from torch.utils.cpp_extension import load_inline\nsrc = """"""\n'
        'ext = load_inline(name="e", cpp_sources="", cuda_sources=src, functions=[])\n'
    )
    sc = split_scaffold(source)
    assert sc.prefix.endswith('src = """') and sc.middle == "" and sc.suffix.startswith('"""\next')


def test_scaffold_errors_say_why(examples_dir: Path) -> None:
    with pytest.raises(ScaffoldError, match="no `load_inline"):
        split_scaffold((examples_dir / "relu.py").read_text(), "relu.py")
    dynamic = (
        'from torch.utils.cpp_extension import load_inline\nK = "k"\nsrc = f"{K}"\n'
        'ext = load_inline(name="e", cpp_sources="", cuda_sources=src, functions=[])\n'
    )
    with pytest.raises(ScaffoldError, match="built dynamically"):
        split_scaffold(dynamic)


def test_infill_splice_keeps_prefix_and_suffix_byte_identical(examples_dir: Path) -> None:
    source = (examples_dir / "relu_cuda.py").read_text()
    sc = split_scaffold(source)
    new_middle = "\n__global__ void k() {}\n"
    # the model continues after the forced prefix, then re-writes the suffix (slightly differently)
    generated = new_middle + '"""\n\nrelu_cpp_source = "something else entirely"\n```'
    middle = splice_middle(generated, sc.suffix)
    assert middle == new_middle
    assert (sc.prefix + middle + sc.suffix).startswith(sc.prefix)
    assert (sc.prefix + middle + sc.suffix).endswith(sc.suffix)
    assert infill_answer_start(sc.prefix).endswith(sc.prefix)
    assert infill_stop_marker(sc.suffix) == '"""'


def test_splice_drops_suffix_lead_and_stops_at_fence_without_marker() -> None:
    suffix = "\n\nMARK line\nrest"
    assert splice_middle("body\n\nMARK line\n", suffix) == "body"
    assert splice_middle("body only\n```\nnoise", suffix) == "body only\n"
    with pytest.raises(ValueError, match="blank"):
        infill_stop_marker("  \n\n")
