"""Held-out scoring of demo checkpoints without a build: does the answer parse, and is it right by text.

`generate(checkpoint, references, max_new_tokens, deadline)` writes one greedy end-to-end answer
per reference (the runtime's prompt, `Engine.generate_texts` in batches, the first code block
extracted), stopping at the wall-clock `deadline` (a batch in flight stops too, its rows cut
short); unanswered problems stay `None` and count as failures. The eager HF runner decodes (no
compile time inside a fixed budget; the fast path gives the same tokens,
tests/model/test_fastpath.py). `score(answer, solution, kernel_name, names)` says, for one answer:

- `parses`: valid Python that defines a class `ModelNew` (the rate the issue's "valid Python"
  target is about);
- `exact`: the answer equals the corpus's template solution (whitespace at the ends aside); the
  templates are verified on the GPU (`verify_templates`), so an exact answer is correct by
  identity — a lower bound on the correct rate, since a different kernel can be correct too;
- `same_kernel`: the answer equals the template up to names and constants
  (`split.answer_signature`);
- `same_compute`: the answer's compute lines (`compute_lines`: the statements that set the value
  register `v`, in order, comments dropped) equal the template's — what a composition decides,
  whatever the variant (plain or fast), the names and the notes;
- `consistent`: the answer's names agree with each other (`names_agree`): the function in
  `functions=[...]` is defined in the CUDA source and called by `ModelNew`, every launched kernel
  is defined, the sources `load_inline` reads exist — a file that fails this cannot load.

`generate_infill(checkpoint, tasks, ...)` does the same for the infilling of scaffolds (the
editor's infill: a template's wrapper with its CUDA source string to fill).

`wilson(k, n)` is the 95 % Wilson score interval of a rate. Not covered: compiling or running an
answer (that is `cudice eval`, which costs about a minute of CPU per kernel).
"""

from __future__ import annotations

import ast
import math
import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from cudice.model.train.corpus.split import answer_signature
from cudice.verifier.source.pyparse import parse


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95 % Wilson score interval of k successes in n trials; (0, 1) when n is 0."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def paired_difference(
    after: Sequence[bool], before: Sequence[bool], z: float = 1.96
) -> tuple[float, float, float]:
    """Difference of two success rates measured on the same problems (`after[i]` and `before[i]`
    are problem i's outcomes, e.g. RL's and SFT's), with its 95 % interval: Newcombe's hybrid
    score interval for paired proportions (Newcombe, Statistics in Medicine 17:2635, 1998, method
    10), which uses both rates' Wilson intervals and the correlation of the pairs. Returns
    (difference, low, high); (0, -1, 1) for no problems."""
    if len(after) != len(before):
        raise ValueError(f"paired outcomes need equal lengths, got {len(after)} and {len(before)}")
    n = len(after)
    if n == 0:
        return 0.0, -1.0, 1.0
    pairs = Counter((bool(a), bool(b)) for a, b in zip(after, before, strict=True))
    both, only_after = pairs[True, True], pairs[True, False]
    only_before, neither = pairs[False, True], pairs[False, False]
    p1, p2 = (both + only_after) / n, (both + only_before) / n
    (l1, u1), (l2, u2) = wilson(both + only_after, n, z), wilson(both + only_before, n, z)
    margins = (both + only_after) * (only_before + neither) * (both + only_before) * (only_after + neither)
    phi = (both * neither - only_after * only_before) / math.sqrt(margins) if margins else 0.0
    d = p1 - p2
    low = d - math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    high = d + math.sqrt(max(0.0, (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    return d, max(-1.0, low), min(1.0, high)


def defines_model_new(code: str) -> bool:
    try:
        tree = parse(code)
    except (SyntaxError, ValueError):
        return False
    return any(isinstance(node, ast.ClassDef) and node.name == "ModelNew" for node in tree.body)


def names_agree(code: str) -> bool:
    """The answer's extension is wired up: functions=[f] defined and called, kernels and sources defined."""
    if not defines_model_new(code):
        return False
    wanted = re.search(r'functions=\["(\w+)"\]', code)
    if wanted is None or not re.search(rf"torch::Tensor {wanted.group(1)}\(", code):
        return False
    for launched in re.findall(r"(\w+)(?:<scalar_t>)?<<<", code):
        if not re.search(rf"__global__ void {launched}\(", code):
            return False
    for source in re.findall(r"(?:cpp_sources|cuda_sources)=(\w+)", code):
        if not re.search(rf"^{source} = ", code, re.M):
            return False
    return bool(re.search(rf"\.{wanted.group(1)}\(", code.split("class ModelNew", 1)[1]))


_VALUE_LINE = re.compile(r"^\s*(?:float\s+)?v\s*=\s*(.*?)\s*(?://.*)?$")
# statements on `v` every template of a kind writes, whatever its ops: loads and block reductions
_PLUMBING = ("static_cast<float>", "__shfl_down_sync", "warp_", "sh[lane]", "pre(", "acc;")


def compute_lines(code: str) -> list[str]:
    """The statements that compute the value register `v` (`v = fmaxf(v, 0.0f);`, `float v = x *
    y;`), in order, without comments, loads and block-reduction steps: the lines in which two
    compositions' answers differ, the same in a template's plain and fast variants."""
    out = []
    for line in code.splitlines():
        m = _VALUE_LINE.match(line)
        if m and not any(p in line for p in _PLUMBING):
            out.append(" ".join(m.group(1).split()))
    return out


def score(answer: str | None, solution: str, kernel_name: str, names: Sequence[str]) -> dict[str, bool]:
    if answer is None:
        return {
            "answered": False,
            "parses": False,
            "exact": False,
            "same_kernel": False,
            "same_compute": False,
            "consistent": False,
        }
    exact = answer.strip() == solution.strip()
    same = exact or answer_signature(answer, kernel_name, names) == answer_signature(
        solution, kernel_name, names
    )
    return {
        "answered": True,
        "parses": defines_model_new(answer),
        "exact": exact,
        "same_kernel": same,
        "same_compute": compute_lines(answer) == compute_lines(solution),
        "consistent": names_agree(answer),
    }


def generate(
    checkpoint: str,
    references: Sequence[str],
    max_new_tokens: int,
    deadline: float,
    say: Callable[[str], None],
    batch_size: int = 64,
) -> tuple[list[str | None], dict[str, Any]]:
    """One greedy answer per reference, in batches, until `deadline` (time.monotonic())."""
    from cudice.model.engine import load_engine
    from cudice.model.prompts import chat_prompt, e2e_prompt, extract_first_code_block

    engine = load_engine(checkpoint, fast=False, freeze=True)

    def answer(k: int, text: str) -> str:
        code = extract_first_code_block(text)
        return code if code is not None else text

    prompts = [engine.encode(chat_prompt(e2e_prompt(r))) for r in references]
    return _batched(engine, prompts, (), answer, max_new_tokens, deadline, say, batch_size, "generate")


def generate_infill(
    checkpoint: str,
    tasks: Sequence[tuple[str, str, str]],
    max_new_tokens: int,
    deadline: float,
    say: Callable[[str], None],
    batch_size: int = 64,
) -> tuple[list[str | None], dict[str, Any]]:
    """One greedy infilling per `(reference, prefix, suffix)` task, in batches, until `deadline`:
    the whole file `prefix + middle + suffix`, the middle cut as the editor's infill cuts it
    (`Engine.infill`: the prompt in the checkpoint's style, decoding stopped at the suffix's first
    line; one batch stops at any of its tasks' markers, each row is cut at its own)."""
    from cudice.model.engine import load_engine
    from cudice.model.prompts import infill_stop_marker, splice_middle

    engine = load_engine(checkpoint, fast=False, freeze=True)
    prompts = [engine.infill_ids(prefix, suffix, ref) for ref, prefix, suffix in tasks]
    markers = tuple(sorted({infill_stop_marker(suffix) for _, _, suffix in tasks}))

    def answer(k: int, text: str) -> str:
        _, prefix, suffix = tasks[k]
        return prefix + splice_middle(text, suffix) + suffix

    return _batched(engine, prompts, markers, answer, max_new_tokens, deadline, say, batch_size, "infill")


def _batched(
    engine: Any,
    prompts: Sequence[Sequence[int]],
    stop_strings: tuple[str, ...],
    answer: Callable[[int, str], str],
    max_new_tokens: int,
    deadline: float,
    say: Callable[[str], None],
    batch_size: int,
    what: str,
) -> tuple[list[str | None], dict[str, Any]]:
    """Greedy decoding of `prompts` (token ids) in batches until `deadline`; `answer(k, text)` makes
    row k's answer."""
    from cudice.model.config import SamplerConfig

    config = SamplerConfig(max_new_tokens=max_new_tokens, temperature=0.0, stop_strings=stop_strings)
    answers: list[str | None] = [None] * len(prompts)
    tokens, seconds, forwards = 0, 0.0, 0
    for first in range(0, len(prompts), batch_size):
        if time.monotonic() > deadline:
            say(f"{what}: deadline reached after {first} of {len(prompts)} answers")
            break
        chunk = prompts[first : first + batch_size]
        start = time.monotonic()
        result = engine.generate_ids(chunk, config, should_stop=lambda: time.monotonic() > deadline)
        seconds += time.monotonic() - start
        tokens += result.num_tokens
        forwards += getattr(result, "num_forwards", 0)
        for k, row in enumerate(result.rows):
            answers[first + k] = answer(first + k, row.text)
        say(f"{what}: {first + len(chunk)}/{len(prompts)} answers, {time.monotonic() - start:.1f} s")
    return answers, {"tokens": tokens, "seconds": seconds, "forwards": forwards}


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Rates with 95 % Wilson intervals, overall and per family/style, of `score` rows."""

    def rates(part: list[dict[str, Any]]) -> dict[str, Any]:
        n = len(part)
        out: dict[str, Any] = {"n": n}
        for key in ("parses", "consistent", "exact", "same_kernel", "same_compute"):
            k = sum(r[key] for r in part)
            lo, hi = wilson(k, n)
            out[key] = {"k": k, "rate": k / n if n else 0.0, "ci95": [lo, hi]}
        return out

    summary: dict[str, Any] = {"all": rates(rows)}
    for field in ("family", "style"):
        groups = sorted({r[field] for r in rows})
        summary[field] = {g: rates([r for r in rows if r[field] == g]) for g in groups}
    return summary
