"""Which code actions to offer at a cursor: plain data, no model work (codeAction must be instant).

- *Generate CUDA kernel for `<Model>`*: the cursor or selection is inside an `nn.Module`
  class other than `ModelNew`. Carries `cudice.generateKernel(uri, class name)`.
- *Infill kernel body*: the cursor is inside a plain CUDA string literal (one literal, no
  f-string, no concatenation). The middle is the body of the `__global__` function under the
  cursor when that body is empty (comments aside) or holds the marker `cudice: infill`,
  otherwise the whole string contents. Carries `cudice.infillKernel(uri, {"start", "end"},
  version)` with code-point offsets.

What a file contains (classes, CUDA strings, kernels and their bodies) comes from the verifier's
document model (`cudice.verifier.source.document`); this module only decides what to offer.

A file that mentions `nn.Module` but does not parse gets one disabled *Generate* action whose
reason names the syntax error (clients without `disabledSupport` see it in the title).
While the model is idle (configured, loaded on first use) both are offered as when it is ready.
While the model loads both are offered with "(once the model has loaded)" in the title: running
one waits for the load. Otherwise, while the model is not ready, both are returned disabled with
the reason (clients with `disabledSupport`), or with the reason in the title (others; running it
then shows the reason).
Not covered: actions on raw `.cu` files.
"""

from __future__ import annotations

from dataclasses import dataclass

from cudice.server.protocol import CMD_GENERATE, CMD_INFILL, KIND_GENERATE, KIND_INFILL
from cudice.verifier.source.document import Document
from cudice.verifier.source.positions import Span
from cudice.verifier.static.cpp_scan import blank_comments_and_strings
from lsprotocol import types as lsp

INFILL_MARKER = "cudice: infill"


@dataclass(frozen=True, slots=True)
class ModelAvailability:
    """The model worker's state ("ready", "loading", "missing", "error") and its message, the
    reason shown to the user when generation cannot run."""

    state: str
    reason: str = ""

    @property
    def is_ready(self) -> bool:
        return self.state == "ready"

    @property
    def is_loading(self) -> bool:  # offered anyway: running it waits for the load
        return self.state == "loading"

    @property
    def is_idle(self) -> bool:  # offered as if ready: running it loads the model first
        return self.state == "idle"


def infill_target(doc: Document, offset: int) -> Span | None:
    """The middle to infill for a cursor at `offset`, or None when the cursor is not in CUDA source."""
    s = doc.cuda_string_at(offset)
    if s is None or s.content is None or not s.is_single_literal:
        return None
    content = s.content
    for k in doc.kernels:
        if k.body is None or not (content.start <= k.body.start and k.body.contains(offset)):
            continue
        text = k.body.text(doc.text)
        if not blank_comments_and_strings(text).strip() or INFILL_MARKER in text:
            return k.body
    return content


def syntax_error_reason(doc: Document) -> str | None:
    """Why nothing can be generated from a reference that does not parse, or None. Only for
    files that mention `nn.Module` (other Python files are the user's Python tools' business)."""
    found = next((d for d in doc.problems if d.code == "parse.syntax_error"), None)
    if found is None or "nn.Module" not in doc.text:
        return None
    where = f" on line {found.location.line}" if found.location is not None else ""
    message = found.message.removeprefix("Python syntax error: ").split(". Fix the syntax")[0]
    return f"Python syntax error{where} ({message}): fix it, then generate"


def code_actions(
    *,
    uri: str,
    doc: Document,
    start: int,
    end: int,
    version: int | None,
    model: ModelAvailability,
    disabled_support: bool,
) -> list[lsp.CodeAction]:
    """The actions for the selection [start, end] (code-point offsets)."""
    actions: list[lsp.CodeAction] = []

    def add(title: str, kind: str, command: str, args: list[object], blocked: str | None = None) -> None:
        disabled = None
        reason = blocked or (None if model.is_ready or model.is_loading or model.is_idle else model.reason)
        if reason is not None:
            if disabled_support:
                disabled = lsp.CodeActionDisabled(reason=reason)
            else:
                title = f"{title} (unavailable: {reason})"
        elif model.is_loading:
            title = f"{title} (once the model has loaded)"
        actions.append(
            lsp.CodeAction(
                title=title,
                kind=kind,
                disabled=disabled,
                command=lsp.Command(title=title, command=command, arguments=args),
            )
        )

    syntax = syntax_error_reason(doc)
    if syntax is not None:  # no classes to offer: say why instead of offering nothing
        add("Generate CUDA kernel", KIND_GENERATE, CMD_GENERATE, [uri, "Model"], blocked=syntax)
        return actions
    cls = doc.module_class_at(start)
    if cls is not None and cls.name != "ModelNew" and cls.span.contains(end):
        add(f"Generate CUDA kernel for `{cls.name}`", KIND_GENERATE, CMD_GENERATE, [uri, cls.name])
    target = infill_target(doc, start)
    if target is not None:
        add(
            "Infill kernel body",
            KIND_INFILL,
            CMD_INFILL,
            [uri, {"start": target.start, "end": target.end}, version],
        )
    return actions
