"""Which code actions to offer at a cursor: plain data, no model work (codeAction must be instant).

- *Generate CUDA kernel for `<Model>`*: the cursor or selection is inside an `nn.Module`
  class other than `ModelNew`. Carries `cudice.generateKernel(uri, class name)`.
- *Infill kernel body*: the cursor is inside a plain CUDA string literal. The middle is the
  body of the `__global__` function under the cursor when that body is empty or holds the
  marker `cudice: infill`, otherwise the whole string contents. Carries
  `cudice.infillKernel(uri, {"start", "end"}, version)` with code-point offsets.

While the model is not ready both are returned disabled with the reason (clients with
`disabledSupport`), or with the reason in the title (others; running it then shows the reason).
Not covered: actions on raw `.cu` files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cudice.server.features.outline import KERNEL_RE, Outline, Span
from cudice.server.protocol import CMD_GENERATE, CMD_INFILL, KIND_GENERATE, KIND_INFILL
from lsprotocol import types as lsp

INFILL_MARKER = "cudice: infill"


@dataclass(frozen=True, slots=True)
class ModelAvailability:
    """Whether generation can run now and, if not, why (shown to the user)."""

    is_ready: bool
    reason: str = ""


def _brace_body(text: str, open_at: int) -> Span | None:
    """Span of the text between the brace at `open_at` and its match (exclusive of both)."""
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return Span(open_at + 1, i)
    return None


def infill_target(source: str, outline: Outline, offset: int) -> Span | None:
    """The middle to infill for a cursor at `offset`, or None when the cursor is not in CUDA source."""
    s = outline.cuda_string_at(offset)
    if s is None or not s.is_literal:
        return None
    body = source[s.content.start:s.content.end]
    rel = offset - s.content.start
    for m in KERNEL_RE.finditer(body):
        paren = body.find(")", m.end())
        brace = body.find("{", paren) if paren >= 0 else -1
        if brace < 0:
            continue
        inner = _brace_body(body, brace)
        if inner is None or not (inner.start <= rel <= inner.end):
            continue
        text = body[inner.start:inner.end]
        stripped = re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.DOTALL).strip()
        if not stripped or INFILL_MARKER in text:
            return Span(s.content.start + inner.start, s.content.start + inner.end)
    return s.content


def code_actions(*, uri: str, source: str, outline: Outline, start: int, end: int, version: int | None,
                 model: ModelAvailability, disabled_support: bool) -> list[lsp.CodeAction]:
    """The actions for the selection [start, end] (code-point offsets)."""
    actions: list[lsp.CodeAction] = []

    def add(title: str, kind: str, command: str, args: list[object]) -> None:
        disabled = None
        if not model.is_ready:
            if disabled_support:
                disabled = lsp.CodeActionDisabled(reason=model.reason)
            else:
                title = f"{title} (unavailable: {model.reason})"
        actions.append(lsp.CodeAction(
            title=title, kind=kind, disabled=disabled,
            command=lsp.Command(title=title, command=command, arguments=args),
        ))

    cls = outline.module_class_at(start)
    if cls is not None and cls.name != "ModelNew" and cls.span.contains(end):
        add(f"Generate CUDA kernel for `{cls.name}`", KIND_GENERATE, CMD_GENERATE, [uri, cls.name])
    target = infill_target(source, outline, start)
    if target is not None:
        add("Infill kernel body", KIND_INFILL, CMD_INFILL,
            [uri, {"start": target.start, "end": target.end}, version])
    return actions
