"""Prompt styles for training: cudice's own wording, or DICE's texts read from template files.

A `PromptStyle` builds the three prompts training needs: the end-to-end task (`e2e`), the
kernel-infilling task (`infill`) and the chat turn around either (`chat`).

- `cudice` (`CUDICE_STYLE`): `cudice.model.prompts` unchanged (`e2e_prompt`, `infill_prompt`,
  `chat_prompt`). The default for cudice's own models.
- `dice`: the texts DICE was sampled, rewarded and trained on (KernelBench's generation prompt for
  the end-to-end task, DICE's infilling prompt). This repository does not ship them (it never
  copies others' text): the maintainer writes them into a template directory
  (`--prompt-templates DIR`, or the environment variable `CUDICE_PROMPT_TEMPLATES`) and
  `load_dice_style` reads it. Files, each optional until a command needs it:
  `e2e.txt` (placeholder `<<reference>>`), `infill.txt` (`<<pytorch_code>>`, `<<prefix>>`,
  `<<suffix>>`), `chat.txt` (`<<message>>`: the whole chat-formatted prompt around a user
  message; without it the chat turn is `chat_prompt`'s) and `infill_answer.txt` (`<<prefix>>`: how
  the editor's infilling opens the model's answer before it writes the middle; without it,
  `infill_answer_start`: a Python fence and the prefix). A template that already holds a chat
  turn (`<|im_start|>`, as DICE's rollout texts do) needs a `chat.txt` holding just `<<message>>`;
  without one it is refused (it would be wrapped twice).

Placeholder syntax: `<<name>>`, an identifier (a letter or underscore, then letters, digits and
underscores) right between `<<` and `>>`. Braces (Python f-strings, C++ blocks, Jinja) are plain
text, and so are kernel launches `<<<grid, block>>>` and shifts such as `a << b >> c` or
`1<<2>>3`; only a shift written `x<<n>>y`, with no spaces around one bare name, reads as one. Every
`<<name>>` in a template must be one of that file's placeholders, and each of them must appear
(repeats are fine): anything else is a `PromptTemplateError` naming the file and the placeholder.
Substitution is byte-exact and one pass: the file's bytes are decoded as UTF-8 with no newline
translation (CRLF, trailing spaces, blank lines and the final newline, if any, are kept), each
placeholder is replaced by its value verbatim, and a value's own text is never searched for
placeholders. A UTF-8 byte-order mark or invalid UTF-8 is refused.

The default style of a checkpoint (`default_style`): the bundled demo model is `cudice`; a
checkpoint cudice trained carries the style it was trained with in `cudice_prompt_style.json`
(`write_record`, which `cudice train` writes into its output); a checkpoint with
`cudice_checkpoint.json` but no record was trained by cudice before styles were recorded, i.e. on
cudice's prompts: `cudice`; a checkpoint initialised by cudice (`cudice model make-tiny`, the demo
corpus's `init_checkpoint`) carries cudice's own ChatML template (`cudice.model.tiny`) byte for
byte: `cudice`; any other DICE/SDAR checkpoint (a released DICE model): `dice`. `resolve_style`
applies an explicit choice or that default and, for `dice` without a template directory where the
command needs one, raises with where to get the texts and how to write the files.

Generation (`cudice generate`, the language server) prompts through `inference_style`: the same
default, except that a DICE/SDAR checkpoint without templates is still served, in cudice's wording
and with a warning that says so (a training run refuses instead: it would learn the wrong text).

The editor's infilling forces the opening of the answer (`PromptStyle.infill_answer`) so that the
model writes only the middle: `infill_answer.txt` where the style has one, else a Python fence
and the scaffold's prefix, the opening a model asked to "output the whole new architecture in one
code block" writes itself.

Not covered: templates in encodings other than UTF-8; any template engine features (conditionals,
loops).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudice.model.bundled import is_bundled
from cudice.model.prompts import chat_prompt, e2e_prompt, infill_answer_start, infill_prompt
from cudice.model.tiny import CHATML_TEMPLATE

STYLES = ("cudice", "dice")
TEMPLATES_ENV = "CUDICE_PROMPT_TEMPLATES"
RECORD = "cudice_prompt_style.json"
CHECKPOINT_MARKER = "cudice_checkpoint.json"  # cudice.model.train.checkpoint.MARKER (torch-free here)
PLACEHOLDER = re.compile(r"<<([A-Za-z_][A-Za-z0-9_]*)>>")
# kind -> (file name, its placeholders)
TEMPLATE_FILES: dict[str, tuple[str, tuple[str, ...]]] = {
    "e2e": ("e2e.txt", ("reference",)),
    "infill": ("infill.txt", ("pytorch_code", "prefix", "suffix")),
    "chat": ("chat.txt", ("message",)),
    "infill_answer": ("infill_answer.txt", ("prefix",)),
}
KERNELBENCH_URL = "https://github.com/ScalingIntelligence/KernelBench"
DICE_URL = "https://github.com/deadlykitten4/DICE"
WHERE_THE_TEXTS_ARE = (
    f"DICE's released scripts at {DICE_URL} (its BiC-RL rollout script, "
    "training/RL/sample/sdar_rl_rollout_kernel.py, builds the infilling and end-to-end prompts it "
    f"trained on) and KernelBench's prompt constructor under src/ at {KERNELBENCH_URL} (the "
    "end-to-end prompt DICE was evaluated with)"
)
HOW_TO_WRITE_THEM = (
    "write them as UTF-8 files in one directory: e2e.txt with <<reference>> where the reference "
    "architecture goes, infill.txt with <<pytorch_code>>, <<prefix>> and <<suffix>>, and, when the "
    "texts already hold the chat turn (<|im_start|>user ... <|im_start|>assistant), chat.txt holding "
    "just <<message>>; optionally infill_answer.txt ending with <<prefix>>, the opening of the model's "
    "answer that the editor's infilling forces. The bytes are used exactly as written, final "
    "newline included: produce the "
    "files by printing the prompt their code renders (with stand-in values you then replace by the "
    "placeholders), not by copying the source, whose escapes (\\n) and template engine change the "
    "text. docs/training.md, 'Prompt styles', has the steps"
)


class PromptTemplateError(ValueError):
    """A template directory or file that cannot give byte-exact prompts; the message says how to fix it."""


@dataclass(frozen=True, slots=True)
class Template:
    """One template file's text and the placeholders it takes (all of which it holds)."""

    path: Path
    text: str
    names: tuple[str, ...]

    def render(self, **values: str) -> str:
        """The text with every `<<name>>` replaced by `values[name]`, verbatim, in one pass."""
        missing = [n for n in self.names if n not in values]
        if missing:
            raise PromptTemplateError(f"{self.path}: no value for placeholder <<{missing[0]}>>")
        return PLACEHOLDER.sub(lambda m: values[m.group(1)], self.text)


def parse_template(path: str | Path, text: str, names: Sequence[str]) -> Template:
    """A `Template` of `text` (the file `path` holds) if its placeholders are exactly `names`."""
    path = Path(path)
    found = [m.group(1) for m in PLACEHOLDER.finditer(text)]
    unknown = [n for n in found if n not in names]
    if unknown:
        raise PromptTemplateError(
            f"{path}: <<{unknown[0]}>> is not a placeholder of {path.name} (it takes "
            f"{', '.join(f'<<{n}>>' for n in names)}); fix its name. The template syntax has no "
            f"escape: if <<{unknown[0]}>> is meant as literal text, it cannot be used unchanged"
        )
    missing = [n for n in names if n not in found]
    if missing:
        raise PromptTemplateError(
            f"{path}: placeholder <<{missing[0]}>> is missing, so the prompt would lack that part "
            f"of the task; write <<{missing[0]}>> where it goes (all of "
            f"{', '.join(f'<<{n}>>' for n in names)} must appear)"
        )
    return Template(path, text, tuple(names))


def read_template(path: str | Path, names: Sequence[str]) -> Template:
    """Read `path` byte for byte (UTF-8, no newline translation) and check its placeholders."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise PromptTemplateError(f"{path}: cannot read the template ({exc.strerror or exc})") from exc
    if data.startswith(b"\xef\xbb\xbf"):
        raise PromptTemplateError(
            f"{path}: starts with a UTF-8 byte-order mark, which would become part of every prompt; "
            "save the file as UTF-8 without BOM"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PromptTemplateError(
            f"{path}: not valid UTF-8 at byte {exc.start}; save the template as UTF-8"
        ) from exc
    return parse_template(path, text, names)


@dataclass(frozen=True, slots=True)
class PromptStyle:
    """The prompts of one style. `cudice` has no templates; `dice` has the ones its directory holds."""

    name: str
    directory: Path | None = None
    templates: dict[str, Template] = field(default_factory=dict)

    def _template(self, kind: str) -> Template:
        template = self.templates.get(kind)
        if template is None:
            file = TEMPLATE_FILES[kind][0]
            where = f"{self.directory} has no {file}" if self.directory else "no --prompt-templates"
            raise PromptTemplateError(
                f"the {self.name} prompt style has no {kind} template ({where}); "
                f"{WHERE_THE_TEXTS_ARE}; {HOW_TO_WRITE_THEM}"
            )
        return template

    def chat(self, message: str) -> str:
        """The chat-formatted prompt around one user message."""
        if self.name == "cudice" or "chat" not in self.templates:
            return chat_prompt(message)
        return self.templates["chat"].render(message=message)

    def e2e(self, reference: str) -> str:
        """The end-to-end task's user message for a reference architecture."""
        if self.name == "cudice":
            return e2e_prompt(reference)
        return self._template("e2e").render(reference=reference)

    def infill(self, pytorch_code: str, prefix: str, suffix: str) -> str:
        """The infilling task's user message: write what goes between `prefix` and `suffix`."""
        if self.name == "cudice":
            return infill_prompt(pytorch_code, prefix, suffix)
        return self._template("infill").render(pytorch_code=pytorch_code, prefix=prefix, suffix=suffix)

    def infill_answer(self, prefix: str) -> str:
        """The forced opening of the infilling answer (the model writes the middle after it):
        `infill_answer.txt` where this style has one, else `infill_answer_start`."""
        template = self.templates.get("infill_answer")
        if template is None:
            return infill_answer_start(prefix)
        return template.render(prefix=prefix)

    def record(self) -> dict[str, Any]:
        """What `write_record` stores: the style, its directory and each template's SHA-256."""
        return {
            "prompt_style": self.name,
            "templates": str(self.directory.resolve()) if self.directory is not None else None,
            "sha256": {
                t.path.name: hashlib.sha256(t.text.encode("utf-8")).hexdigest()
                for t in self.templates.values()
            },
        }


CUDICE_STYLE = PromptStyle("cudice")


def load_dice_style(directory: str | Path, need: Sequence[str] = ("e2e", "infill")) -> PromptStyle:
    """The `dice` style of the templates in `directory`; the kinds in `need` must be there.

    Every template file present is read and checked, needed or not.
    """
    folder = Path(directory)
    if not folder.is_dir():
        raise PromptTemplateError(
            f"prompt template directory {folder} does not exist (or is not a directory); "
            f"point --prompt-templates / {TEMPLATES_ENV} at the folder holding e2e.txt and infill.txt"
        )
    templates = {
        kind: read_template(folder / file, names)
        for kind, (file, names) in TEMPLATE_FILES.items()
        if (folder / file).exists()
    }
    absent = [TEMPLATE_FILES[k][0] for k in need if k not in templates]
    if absent:
        raise PromptTemplateError(
            f"{folder} has no {' and no '.join(absent)}: this command builds those prompts; "
            f"{HOW_TO_WRITE_THEM}"
        )
    answer = templates.get("infill_answer")
    if answer is not None and not answer.text.endswith("<<prefix>>"):
        raise PromptTemplateError(
            f"{answer.path} must end with <<prefix>> (no newline after it): the model continues the "
            "answer right after the scaffold's prefix, and the editor splices what it writes between "
            "the prefix and the suffix; move any text after <<prefix>> before it, or remove it"
        )
    if "chat" not in templates:
        for kind in ("e2e", "infill"):
            if kind in templates and "<|im_start|>" in templates[kind].text:
                raise PromptTemplateError(
                    f"{templates[kind].path} already holds a chat turn (<|im_start|>), and without "
                    f"a chat.txt in {folder} every prompt is wrapped in cudice's chat turn too, so "
                    "it would hold two; add chat.txt containing exactly <<message>> (the template "
                    "is then the whole prompt), or remove the chat markers from the template"
                )
    return PromptStyle("dice", folder, templates)


def read_record(checkpoint: str | Path) -> str | None:
    """The prompt style recorded in a checkpoint cudice trained, or None without a valid record."""
    try:
        data = json.loads((Path(checkpoint) / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    style = data.get("prompt_style") if isinstance(data, dict) else None
    return style if style in STYLES else None


def write_record(directory: str | Path, style: PromptStyle) -> Path:
    """Write the style record into a checkpoint directory (created), atomically; its path.

    Every process of a run may call it: each writes the same bytes through its own temporary file.
    """
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / RECORD
    tmp = folder / f".{RECORD}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(style.record(), indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def _has_cudice_chat_template(folder: Path) -> bool:
    """Whether the checkpoint's tokenizer carries cudice's own ChatML template, byte for byte."""
    try:
        if (folder / "chat_template.jinja").read_text(encoding="utf-8") == CHATML_TEMPLATE:
            return True
    except (OSError, ValueError):
        pass
    try:
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and config.get("chat_template") == CHATML_TEMPLATE


def default_style(checkpoint: str | Path) -> tuple[str, str]:
    """(the default style of `checkpoint`, why): the rule in the module docstring."""
    folder = Path(checkpoint)
    if is_bundled(folder):
        return "cudice", "cudice's bundled demo model"
    recorded = read_record(folder)
    if recorded is not None:
        return recorded, f"cudice trained it with the {recorded} prompt style ({RECORD})"
    if (folder / CHECKPOINT_MARKER).is_file():
        return "cudice", (
            f"cudice trained it ({CHECKPOINT_MARKER}) before prompt styles were recorded, on cudice's prompts"
        )
    if _has_cudice_chat_template(folder):
        return "cudice", "cudice initialised it (its tokenizer carries cudice's own chat template)"
    return "dice", (
        f"a DICE/SDAR checkpoint cudice neither initialised nor trained (no {CHECKPOINT_MARKER}, no "
        f"{RECORD}, not cudice's chat template)"
    )


def resolve_style(
    style: str | None,
    templates: str | Path | None,
    checkpoint: str | Path,
    need: Sequence[str] = ("e2e", "infill"),
) -> tuple[PromptStyle, str]:
    """(the style to train with, why): `style` when given, else `default_style(checkpoint)`.

    `dice` reads `templates` (which must hold the kinds in `need`); with `need` empty a missing
    directory means the chat turn is `chat_prompt`'s and no template is read.
    """
    if style is not None and style not in STYLES:
        raise PromptTemplateError(f"prompt style {style!r} is not one of {', '.join(STYLES)}")
    if style is None:
        chosen, reason = default_style(checkpoint)
        why = f"the default for {checkpoint}: {reason}"
        opening = f"{checkpoint}'s prompt style defaults to dice ({reason})"
    else:
        chosen, why, opening = style, "--prompt-style", "--prompt-style dice was given"
    if chosen == "cudice":
        return CUDICE_STYLE, why
    if templates is None or str(templates) == "":
        if not need:
            return PromptStyle("dice"), why
        raise PromptTemplateError(
            f"{opening}: the prompts DICE was sampled, rewarded and trained on. This repository does "
            f"not ship those texts (it copies no one's text): get them from {WHERE_THE_TEXTS_ARE}; "
            f"{HOW_TO_WRITE_THEM}. Then pass --prompt-templates DIR (or set {TEMPLATES_ENV}=DIR). Or "
            "pass --prompt-style cudice to train on cudice's own wording, which a DICE model has never seen"
        )
    return load_dice_style(templates, need), why


def inference_style(
    checkpoint: str | Path, style: str | None = None, templates: str | Path | None = None
) -> tuple[PromptStyle, str]:
    """(the style to prompt `checkpoint` with when generating, a warning or ""): `style` when
    given (`dice` then needs the templates: `templates`, else the `CUDICE_PROMPT_TEMPLATES`
    directory, with an e2e.txt), else `default_style(checkpoint)`. A checkpoint whose default is
    `dice` but that has no templates is prompted in cudice's wording, and the warning says so.
    Templates a command does not need may be missing; using one raises `PromptTemplateError`."""
    if templates is None or str(templates) == "":
        templates = os.environ.get(TEMPLATES_ENV) or None
    if style is not None:
        return resolve_style(style, templates, checkpoint, need=("e2e",))[0], ""
    chosen, reason = default_style(checkpoint)
    if chosen == "cudice":
        return CUDICE_STYLE, ""
    if templates is None:
        return CUDICE_STYLE, (
            f"{checkpoint} is prompted in cudice's wording, which it was not trained on ({reason}); "
            f"its answers are better with the texts it was trained on: {WHERE_THE_TEXTS_ARE}; "
            f"{HOW_TO_WRITE_THEM}, then set {TEMPLATES_ENV}=DIR (or pass --prompt-templates DIR)"
        )
    return load_dice_style(templates, need=()), ""


def _head(text: str, sentinel: str) -> str:
    return text.split(sentinel, 1)[0]


_SENTINEL = "\x00"
CUDICE_PROMPT_HEADS = (
    _head(e2e_prompt(_SENTINEL), _SENTINEL),
    _head(infill_prompt(_SENTINEL, _SENTINEL, _SENTINEL), _SENTINEL),
)


def cudice_worded(message: str) -> bool:
    """Whether a user message was written by `e2e_prompt`/`infill_prompt` (cudice's corpus writes
    its SFT pairs with them): it starts with their fixed text up to the first task value."""
    return message.startswith(CUDICE_PROMPT_HEADS)
