"""The KernelBench leak check: none of KernelBench's files, prompts or solutions in the training data.

The corpus is generated from cudice's own op tables and templates, never from KernelBench; this
module checks that claim on the written files (`sft.jsonl`, `rl_e2e.jsonl`, `rl_infill.jsonl`):

1. marker phrases: wording that KernelBench's level-1 files use in their docstrings and input
   generators (`KERNELBENCH_MARKERS`, read from https://github.com/ScalingIntelligence/KernelBench,
   `KernelBench/level1/*.py`) must not occur in any training text;
2. with a KernelBench checkout (`kernelbench_dir`), file overlap: for every `.py` file under it,
   its distinctive lines (stripped, at least `MIN_LINE_CHARS` long, not boilerplate such as
   imports or `def get_inputs():`) are looked up in each training text; a text holding
   `MAX_SHARED_FRACTION` or more of one file's distinctive lines counts as that file leaked.

A single shared line (`return torch.softmax(x, dim=1)`) is not a leak: the same computation is
spelled the same way. Not covered: paraphrases of a KernelBench file (renamed variables AND
reworded docstrings), which no text check can tell from an independent problem.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

KERNELBENCH_MARKERS = (
    "Simple model that performs",
    "A model that computes",
    "for regression tasks",
    "Pareto(",
    "Input tensor of any shape",
    "Output tensor with",
    "Parameters:\n        None",
    "Initializes the model",
)
MIN_LINE_CHARS = 20
MAX_SHARED_FRACTION = 0.5
_BOILERPLATE = (
    "import ",
    "from ",
    "class Model(",
    "class ModelNew(",
    "def __init__(",
    "super(",
    "def forward(",
    "def get_inputs(",
    "def get_init_inputs(",
    "return [",
    '"""',
)
TRAINING_FILES = ("sft.jsonl", "rl_e2e.jsonl", "rl_infill.jsonl")


@dataclass(frozen=True, slots=True)
class Leak:
    where: str  # "sft.jsonl:12"
    what: str  # the marker, or the KernelBench file
    shared: float  # fraction of the file's distinctive lines found (1.0 for a marker)


def distinctive_lines(source: str) -> set[str]:
    lines = (ln.strip() for ln in source.splitlines())
    return {ln for ln in lines if len(ln) >= MIN_LINE_CHARS and not ln.startswith(_BOILERPLATE)}


def training_texts(corpus_dir: str | Path) -> Iterator[tuple[str, str]]:
    """(where, text) of every string field of every training record."""
    for name in TRAINING_FILES:
        path = Path(corpus_dir) / name
        if not path.is_file():
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            record = json.loads(line)
            text = "\n".join(v for v in record.values() if isinstance(v, str))
            yield f"{name}:{number}", text


def find_leaks(texts: Iterable[tuple[str, str]], kernelbench_dir: str | Path | None = None) -> list[Leak]:
    """Every marker hit and every KernelBench file found in `texts` (empty: no leak)."""
    files = {}
    if kernelbench_dir is not None:
        files = {
            str(p): lines
            for p in sorted(Path(kernelbench_dir).rglob("*.py"))
            if (lines := distinctive_lines(p.read_text(encoding="utf-8", errors="replace")))
        }
    leaks: list[Leak] = []
    for where, text in texts:
        leaks += [Leak(where, m, 1.0) for m in KERNELBENCH_MARKERS if m in text]
        if files:
            mine = {ln.strip() for ln in text.splitlines()}
            for name, lines in files.items():
                shared = len(lines & mine) / len(lines)
                if shared >= MAX_SHARED_FRACTION:
                    leaks.append(Leak(where, name, shared))
    return leaks


def check_corpus(corpus_dir: str | Path, kernelbench_dir: str | Path | None = None) -> list[Leak]:
    """`find_leaks` over the corpus's training files."""
    return find_leaks(training_texts(corpus_dir), kernelbench_dir)
