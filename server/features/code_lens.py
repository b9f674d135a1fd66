"""The code lens over `class ModelNew`: the latest verdict (or its state) plus a re-verify command.

Not covered: lenses on files without `class ModelNew` (references get the generate action).
"""

from __future__ import annotations

from cudice.server.features.display import lens_title
from cudice.server.features.outline import Outline
from cudice.server.features.positions import LineIndex
from cudice.server.protocol import CMD_VERIFY
from cudice.verifier.result import VerifyResult
from lsprotocol import types as lsp


def code_lenses(*, uri: str, source: str, outline: Outline, result: VerifyResult | None, is_running: bool,
                required_speedup: float = 1.0, encoding: str = "utf-16") -> list[lsp.CodeLens]:
    cls = outline.model_new
    if cls is None:
        return []
    index = LineIndex.of(source, encoding)
    line = index.line_of(cls.span.start)
    rng = lsp.Range(lsp.Position(line, 0), lsp.Position(line, 0))
    if is_running:
        title = "⏳ cudice: verifying…"
    elif result is None:
        title = "cudice: not verified yet · verify"
    else:
        title = f"{lens_title(result, required_speedup)} · re-verify"
    return [lsp.CodeLens(range=rng, command=lsp.Command(title=title, command=CMD_VERIFY, arguments=[uri]))]
