"""The generate and infill command flows: model work in the worker, progress, a guarded edit.

Generate: pick the `nn.Module` class, ask before overwriting `<name>_cuda.py`, generate with
cancellable progress, write the file, show it, verify it. Infill: remember the document version,
infill the middle with progress, refuse to apply when the document changed meanwhile, else apply a
versioned `WorkspaceEdit` (the client also rejects it if its buffer moved on). Both return a small
JSON result saying what happened (editors may ignore it; tests read it).

Not covered: streaming partial text into the buffer while generating (edits land once, whole).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from cudice.model.generation import Generation, Progress
from cudice.server.core import CudiceServer
from cudice.server.features import edits
from cudice.server.features.code_actions import syntax_error_reason
from cudice.server.progress import WorkProgress
from cudice.server.team import claim_work, release_work
from cudice.server.verification import reference_path, verify_document
from cudice.server.workers.model import ModelUnavailable, WorkerDied
from cudice.verifier.source.document import Document
from cudice.verifier.source.positions import LineIndex
from lsprotocol import types as lsp
from pygls.uris import from_fs_path


def _progress_message(p: Progress) -> str:
    return (
        f"{p.num_tokens} tokens · {p.tokens_per_second:.1f} tok/s · {p.tokens_per_forward:.2f} tokens/forward"
    )


def _fail(ls: CudiceServer, reason: str, **extra: Any) -> dict[str, Any]:
    ls.notice(f"cudice: {reason}")
    return {"ok": False, "reason": reason, **extra}


async def _run_model(
    ls: CudiceServer, uri: str, op: str, payload: dict[str, Any], title: str
) -> Generation | str:
    """Run one model job with progress; the result, or why it did not produce one (also when the
    editor has too much pending work on a multi-client server: team.py)."""
    refused = claim_work(ls, "generate", uri)
    if refused is not None:
        return refused
    try:
        return await _run_claimed(ls, uri, op, payload, title)
    finally:
        release_work(ls, "generate", uri)


async def _run_claimed(
    ls: CudiceServer, uri: str, op: str, payload: dict[str, Any], title: str
) -> Generation | str:
    progress = await WorkProgress.start(ls, title, "starting", percentage=0)
    state = ls.document(uri)
    state.generation_cancel = progress.cancelled
    if ls.released:  # the editor left while this waited for the model: `release` did not see it
        progress.cancelled.set()
    max_tokens = max(1, ls.settings.sampler_max_new_tokens)
    try:
        result = await ls.model.run(
            op,
            {**payload, "settings": ls.settings_dict()},
            cancel=progress.cancelled,
            on_progress=lambda p: progress.report(  # of the token budget: an upper bound
                _progress_message(p), min(99, 100 * p.num_tokens // max_tokens)
            ),
        )
    except ModelUnavailable as exc:
        progress.end("model unavailable")
        return f"the model is not ready: {exc}"
    except WorkerDied as exc:
        progress.end("model worker died")
        return f"the model worker died during generation ({exc}); it is being restarted, try again"
    except RuntimeError as exc:
        progress.end("failed")
        return f"generation failed: {exc}"
    finally:
        if state.generation_cancel is progress.cancelled:
            state.generation_cancel = None
    if result.cancelled:
        progress.end("cancelled")
        ls.notice(f"cudice: {title.removeprefix('cudice: ')} was cancelled", lsp.MessageType.Info)
        return "cancelled"
    tps = result.num_tokens / result.seconds if result.seconds > 0 else 0.0
    progress.end(
        f"{result.num_tokens} tokens in {result.seconds:.1f} s ({tps:.1f} tok/s, "
        f"{result.tokens_per_forward:.2f} tokens/forward)"
    )
    return result


def _stats(r: Generation) -> dict[str, Any]:
    return {
        "num_tokens": r.num_tokens,
        "num_forwards": r.num_forwards,
        "seconds": r.seconds,
        "tokens_per_forward": r.tokens_per_forward,
    }


def _class_name(doc: Document, index: LineIndex, target: Any) -> str | None:
    if isinstance(target, str):
        return target if any(c.name == target and c.is_module for c in doc.classes) else None
    if isinstance(target, dict) and isinstance(target.get("line"), int):
        cls = doc.module_class_at(index.offset(int(target["line"]), int(target.get("character", 0))))
        return cls.name if cls else None
    found = [c for c in doc.classes if c.is_module and c.name != "ModelNew"]
    return found[0].name if len(found) == 1 else None


def _no_class_reason(doc: Document, target: Any, file_name: str) -> str:
    """Why no class to generate for was found, in words (never the raw argument)."""
    syntax = syntax_error_reason(doc)
    if syntax is not None:
        return f"cannot generate for {file_name}: {syntax}"
    if isinstance(target, dict) and isinstance(target.get("line"), int):
        where = f"at line {int(target['line']) + 1}"
    elif isinstance(target, str):
        where = f"named `{target}`"
    else:
        where = "to generate for (there are several, or none)"
    return (
        f"cannot generate: no nn.Module class {where} in {file_name}; "
        "put the cursor inside the reference `class Model(nn.Module)`"
    )


async def _confirm_overwrite(ls: CudiceServer, path: Path) -> bool:
    if not path.exists():
        return True
    answer = await ls.window_show_message_request_async(
        lsp.ShowMessageRequestParams(
            type=lsp.MessageType.Warning,
            message=f"{path.name} already exists. Overwrite it with a new kernel?",
            actions=[lsp.MessageActionItem(title="Overwrite"), lsp.MessageActionItem(title="Keep it")],
        )
    )
    return answer is not None and answer.title == "Overwrite"


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


async def ensure_model(ls: CudiceServer) -> str:
    from cudice.server.model_loading import ensure_model as ensure

    return await ensure(ls)


async def generate_kernel(ls: CudiceServer, uri: Any, target: Any = None) -> dict[str, Any]:
    doc = ls.read_document(uri) if isinstance(uri, str) else None
    source, _, path = doc if doc is not None else ("", None, None)
    if path is None:
        return _fail(ls, f"cannot generate for {uri!r}: not a readable file (save it to disk first)")
    doc_model, index = ls.analyse(uri, source)
    name = _class_name(doc_model, index, target)
    if name is None:
        return _fail(ls, _no_class_reason(doc_model, target, os.path.basename(path)))
    if await ensure_model(ls) != "ready":  # a request made while it loads waits
        return _fail(ls, f"cannot generate yet: {ls.model.message}")
    out = edits.candidate_path(path)
    if not await _confirm_overwrite(ls, out):
        return {"ok": False, "reason": f"kept the existing {out.name}"}
    result = await _run_model(
        ls, uri, "generate", {"reference_source": source}, f"cudice: generating a CUDA kernel for {name}"
    )
    if isinstance(result, str):
        return {"ok": False, "reason": result} if result == "cancelled" else _fail(ls, result)
    _write_atomic(out, edits.candidate_text(result.text, os.path.basename(path)))
    out_uri = from_fs_path(str(out)) or out.as_uri()
    caps = ls.client_capabilities.window
    if caps is not None and caps.show_document is not None and caps.show_document.support:
        ls.spawn(ls.window_show_document_async(lsp.ShowDocumentParams(uri=out_uri, take_focus=True)))
    else:
        ls.notice(f"cudice: wrote {out}", lsp.MessageType.Info)
    ls.spawn(verify_document(ls, out_uri, force=True))
    return {"ok": True, "uri": out_uri, **_stats(result)}


def _pytorch_code(doc: Document) -> str:
    ref = reference_path(doc)
    if ref is not None:
        try:
            return Path(ref).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):  # the verifier reports an unreadable reference
            pass
    return ""


async def infill_kernel(
    ls: CudiceServer, uri: Any, span_arg: Any = None, version_arg: Any = None
) -> dict[str, Any]:
    doc = ls.read_document(uri) if isinstance(uri, str) else None
    if doc is None:
        return _fail(ls, f"cannot infill {uri!r}: unknown document")
    source, version, _ = doc
    if isinstance(version_arg, int) and version is not None and version_arg != version:
        return _fail(
            ls, "the document changed since the action was offered; ask for the code action again", stale=True
        )
    if await ensure_model(ls) != "ready":  # a request made while it loads waits
        return _fail(ls, f"cannot infill yet: {ls.model.message}")
    span = edits.resolve_span(span_arg, source, ls.position_encoding)
    if not isinstance(span, str):
        span = edits.cursor_to_middle(span, ls.analyse(uri, source)[0])
    if isinstance(span, str):
        return _fail(ls, f"cannot infill: {span}")
    prefix, suffix = source[: span.start], source[span.end :]
    result = await _run_model(
        ls,
        uri,
        "infill",
        {"prefix": prefix, "suffix": suffix, "pytorch_code": _pytorch_code(ls.analyse(uri, source)[0])},
        "cudice: infilling the kernel body",
    )
    if isinstance(result, str):
        return {"ok": False, "reason": result} if result == "cancelled" else _fail(ls, result)
    middle = edits.extract_middle(result.text, result.middle, prefix, suffix)
    if middle is None:
        return _fail(
            ls, "the model's output did not keep the code around the CUDA string; nothing was changed"
        )
    now = ls.read_document(uri)
    if now is None or now[1] != version or now[0] != source:
        return _fail(
            ls,
            "the document changed while the kernel was generated, so the infill was not applied "
            "(run the action again)",
            stale=True,
        )
    edit = edits.infill_edit(
        uri, version, source, span, middle, ls.client_supports_document_changes(), ls.position_encoding
    )
    applied = await ls.workspace_apply_edit_async(
        lsp.ApplyWorkspaceEditParams(edit=edit, label="cudice: infill kernel body")
    )
    if not applied.applied:
        return _fail(
            ls,
            f"the editor refused the infill edit: {applied.failure_reason or 'no reason given'}",
            stale=True,
        )
    return {"ok": True, "middle": middle, **_stats(result)}
