"""Prompts for DICE's tasks in cudice's own wording, answer extraction, and prefix-forced infilling.

- `chat_prompt`: Qwen ChatML, one user turn, no system prompt, generation prompt
  `<|im_start|>assistant\\n` (as DICE's evaluation and RL rollouts build it).
- `e2e_prompt`: KernelBench's one-shot task (problem statement, an elementwise-add example pair,
  the target `Model`, "name it ModelNew, output code only"), worded by us.
- `infill_prompt`: DICE's stage-1 task (a worked example, `pytorch_code`, prefix, suffix).
- `extract_first_code_block`: the answer is the first fenced code block.
- Prefix-forced infilling for the editor: the answer is forced to start with a fence and the
  scaffold's prefix, decoding stops when the suffix's first line appears, and `splice_middle`
  cuts the middle out of the generated text; the caller joins ORIGINAL prefix + middle + suffix.

These are the `cudice` prompt style's texts. DICE's and KernelBench's own wording (the `dice`
style training can use) is not in this repository: `cudice.model.prompt_styles` reads it from
template files the maintainer writes.

Not covered: multi-turn chat, system prompts, the `<think>` blocks a Qwen3 reasoning template adds
(the answer extraction skips anything before the first fence), and splitting a file into
prefix/middle/suffix (that is `cudice.model.scaffold`).
"""

from __future__ import annotations

import re

CODE_FENCE = "```"

EXAMPLE_MODEL = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Adds two tensors element by element."""

    def __init__(self) -> None:
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b


def get_inputs():
    return [torch.randn(1, 128).cuda(), torch.randn(1, 128).cuda()]


def get_init_inputs():
    return []
'''

EXAMPLE_PREFIX = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

add_source = """'''

EXAMPLE_MIDDLE = """
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void add_kernel(const float* a, const float* b, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = a[i] + b[i];
    }
}

torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b) {
    auto out = torch::empty_like(a);
    int n = a.numel();
    const int threads = 256;
    const int blocks = (n + threads - 1) / threads;
    add_kernel<<<blocks, threads>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""

EXAMPLE_SUFFIX = '''"""

add_cpp_source = "torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b);"

add_ext = load_inline(
    name="add_ext",
    cpp_sources=add_cpp_source,
    cuda_sources=add_source,
    functions=["add_cuda"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.add_ext = add_ext

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self.add_ext.add_cuda(a, b)
'''

EXAMPLE_MODEL_NEW = EXAMPLE_PREFIX + EXAMPLE_MIDDLE + EXAMPLE_SUFFIX


def chat_prompt(user_message: str) -> str:
    """One ChatML user turn followed by the assistant generation prompt."""
    return f"<|im_start|>user\n{user_message}<|im_end|>\n<|im_start|>assistant\n"


def _fenced(code: str) -> str:
    return f"{CODE_FENCE}python\n{code.rstrip()}\n{CODE_FENCE}"


def e2e_prompt(reference_source: str) -> str:
    """KernelBench one-shot task: replace the operators of `reference_source` with custom CUDA kernels."""
    return (
        "You write custom CUDA kernels that replace PyTorch operators in a given architecture to make it "
        "faster. You may replace any operators you like, fuse several into one kernel (for example a "
        "matmul followed by an activation), or change the algorithm (for example an online softmax). "
        "Keep whatever you do not replace.\n\n"
        "Here is an example architecture:\n\n"
        f"{_fenced(EXAMPLE_MODEL)}\n\n"
        "Its version with a custom CUDA kernel, compiled inline, looks like this:\n\n"
        f"{_fenced(EXAMPLE_MODEL_NEW)}\n\n"
        "Now optimise this architecture:\n\n"
        f"{_fenced(reference_source)}\n\n"
        "Write the optimised architecture with custom CUDA operators and name it ModelNew. Output only the "
        "new code, in a code block; it must be real, compilable code. Do not write tests or usage examples."
    )


def infill_prompt(pytorch_code: str, prefix: str, suffix: str) -> str:
    """DICE stage 1: write the CUDA source between a fixed prefix and suffix, output the whole file."""
    return (
        "You write custom CUDA kernels that replace PyTorch operators to make an architecture faster. "
        "The file around the kernels is already written: you get its beginning (prefix) and its end "
        "(suffix), and you write the C++/CUDA source that goes between them (kernels and host wrappers).\n\n"
        "Example. The PyTorch architecture:\n\n"
        f"{_fenced(EXAMPLE_MODEL)}\n\n"
        f"Prefix:\n\n{_fenced(EXAMPLE_PREFIX)}\n\n"
        f"Suffix:\n\n{_fenced(EXAMPLE_SUFFIX)}\n\n"
        f"The complete file:\n\n{_fenced(EXAMPLE_MODEL_NEW)}\n\n"
        "Your task. The PyTorch architecture:\n\n"
        f"{_fenced(pytorch_code)}\n\n"
        f"Prefix:\n\n{_fenced(prefix)}\n\n"
        f"Suffix:\n\n{_fenced(suffix)}\n\n"
        "Write the core C++/CUDA code between the prefix and the suffix. Output the whole new "
        "architecture (prefix, your code, suffix) in one code block."
    )


_FENCE_OPEN = re.compile(r"```[ \t]*([A-Za-z0-9_+\-]*)[ \t]*\n")


def extract_first_code_block(text: str) -> str | None:
    """The body of the first fenced code block (language tag dropped), or None without a fence.

    An unclosed block (generation stopped early) yields everything after its opening fence.
    """
    opening = _FENCE_OPEN.search(text)
    if opening is None:
        return None
    body_start = opening.end()
    close = text.find(CODE_FENCE, body_start)
    return text[body_start:] if close < 0 else text[body_start:close]


def infill_answer_start(prefix: str) -> str:
    """The forced beginning of the assistant's answer: an opening fence and the prefix, verbatim."""
    return f"{CODE_FENCE}python\n{prefix}"


def infill_stop_marker(suffix: str) -> str:
    """The suffix's first non-blank line, stripped: decoding stops once the model writes it."""
    for line in suffix.splitlines():
        if line.strip():
            return line.strip()
    raise ValueError(
        "the suffix is blank: infilling needs a suffix whose first line marks the end of the middle"
    )


def splice_middle(generated: str, suffix: str) -> str:
    """The middle inside `generated` (the text the model wrote after the forced prefix).

    Cut before the suffix's first line, then drop any copy of the suffix's leading characters
    before that line (e.g. a newline), so prefix + middle + suffix reads as the model wrote it.
    Without the marker (EOS or token limit first) the middle is everything up to a closing fence.
    """
    marker = infill_stop_marker(suffix)
    cut = generated.find(marker)
    if cut < 0:
        cut = generated.find(CODE_FENCE)
    middle = generated if cut < 0 else generated[:cut]
    lead = suffix[: suffix.find(marker)]
    if lead and middle.endswith(lead):
        middle = middle[: len(middle) - len(lead)]
    return middle
