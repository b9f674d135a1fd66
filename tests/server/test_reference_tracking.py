"""The server sees a candidate's reference exactly as the verifier does, and re-verifies when it changes.

A `# cudice: reference=` comment may stand on the first line, indented or after code; the server's
watch list and its result-cache key come from the same document model the verifier reads, and the
key holds the reference's resolved path and text. A finding the verifier locates on a line of the
reference (its `get_inputs()` raised) is shown in the reference's buffer too, while that buffer
holds the text it was found in, and cleared there once a verification no longer reports it. The
server runs in-process (initialized with plain client capabilities); its verify and quick-check
workers are stand-ins that record what they were asked to run, and its published diagnostics are
recorded per URI.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from cudice.server.core import CudiceServer
from cudice.server.publishing import show_reference_findings
from cudice.server.verification import reference_path, result_key_of, verify_document
from cudice.server.workers.verify import VerifyRequest
from cudice.verifier.source.document import parse_document
from cudice.verifier.source.reference import resolve_reference
from cudice.verifier.source.result import Diagnostic, Location, Severity, Stage, Verdict, VerifyResult
from inprocess_server import initialized_server
from lsprotocol import types as lsp

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PLACES = {
    "first line": lambda text: text,
    "indented": lambda text: text.replace("# cudice: reference=relu.py\n", "").replace(
        "class ModelNew(nn.Module):\n", "class ModelNew(nn.Module):\n    # cudice: reference=relu.py\n"
    ),
    "trailing": lambda text: text.replace("# cudice: reference=relu.py\n", "").replace(
        "import torch\n", "import torch  # cudice: reference=relu.py\n", 1
    ),
}


class _Jobs:
    """Stands in for `VerifyJobs`: records each request and answers `compiled`, or `answer` when set."""

    def __init__(self) -> None:
        self.requests: list[VerifyRequest] = []
        self.answer: VerifyResult | None = None

    async def run(self, request: VerifyRequest, **_: Any) -> VerifyResult:
        self.requests.append(request)
        if self.answer is not None:
            return self.answer
        return VerifyResult(Verdict.COMPILED, Stage.COMPILE, request.path, compile_only=True)

    def cancel(self, uri: str) -> bool:
        return False

    def is_running(self, uri: str) -> bool:
        return False


class _Quick:
    async def check(self, path: str, source: str, **_: Any) -> VerifyResult | None:
        return None


class _Watcher:
    """Stands in for the reference `PathWatcher`: records the files it was asked to watch."""

    def __init__(self) -> None:
        self.paths: set[str] = set()

    def watch(self, path: str, key: str | None = None) -> None:
        self.paths.add(path)


def _server(tmp_path: Path) -> tuple[CudiceServer, _Jobs]:
    jobs = _Jobs()
    ls = initialized_server(tmp_path, jobs=jobs, quick=_Quick())
    ls.ref_watcher = _Watcher()  # type: ignore[assignment]
    return ls, jobs


def _candidate(folder: Path, place: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(EXAMPLES / "relu.py", folder / "relu.py")
    cand = folder / "relu_cuda.py"
    cand.write_text(PLACES[place]((EXAMPLES / "relu_cuda.py").read_text()))
    return cand


def _open(ls: CudiceServer, path: Path) -> str:
    uri = path.as_uri()
    ls.workspace.put_text_document(
        lsp.TextDocumentItem(uri=uri, language_id="python", version=1, text=path.read_text())
    )
    return uri


@pytest.mark.parametrize("place", sorted(PLACES))
def test_the_server_and_the_verifier_find_the_same_reference(tmp_path: Path, place: str) -> None:
    cand = _candidate(tmp_path, place)
    doc = parse_document(cand.read_text(), str(cand), require_candidate=False)
    verifier_ref = resolve_reference(doc)
    assert verifier_ref.document is not None and not verifier_ref.diagnostics
    assert reference_path(doc) == verifier_ref.path == str((tmp_path / "relu.py").resolve())


@pytest.mark.parametrize("place", sorted(PLACES))
def test_the_cache_key_holds_the_references_identity_and_content(tmp_path: Path, place: str) -> None:
    ls, _ = _server(tmp_path)
    cand = _candidate(tmp_path / "w", place)

    def key(text: str | None = None) -> str:
        return result_key_of(ls, parse_document(text or cand.read_text(), str(cand), require_candidate=False))

    first = key()
    assert key() == first
    ref = tmp_path / "w" / "relu.py"
    ref.write_text(ref.read_text().replace("dim = 16384", "dim = 4096"))
    edited = key()
    assert edited != first  # the reference's content
    shutil.copy(ref, tmp_path / "w" / "other.py")
    renamed = cand.read_text().replace("reference=relu.py", "reference=other.py")
    assert key(renamed) not in (first, edited)  # same content, another file: its identity
    ref.unlink()
    assert key() not in (first, edited)  # a reference that went missing


@pytest.mark.parametrize("place", sorted(PLACES))
async def test_saving_verifies_again_after_the_reference_changed(tmp_path: Path, place: str) -> None:
    ls, jobs = _server(tmp_path)
    cand = _candidate(tmp_path, place)
    uri = _open(ls, cand)
    first = await verify_document(ls, uri)
    assert first is not None and len(jobs.requests) == 1
    ref_path = str((tmp_path / "relu.py").resolve())
    assert ls.dependents == {ref_path: {uri}} and ls.ref_watcher.paths == {ref_path}  # type: ignore[union-attr]
    assert (
        await verify_document(ls, uri) == first and len(jobs.requests) == 1
    )  # unchanged: the cached verdict
    ref = tmp_path / "relu.py"
    ref.write_text(ref.read_text().replace("dim = 16384", "dim = 4096"))
    assert await verify_document(ls, uri) is not None and len(jobs.requests) == 2  # the reference changed
    assert await verify_document(ls, uri) is not None and len(jobs.requests) == 2


async def test_a_comment_that_names_another_reference_moves_the_watch(tmp_path: Path) -> None:
    ls, jobs = _server(tmp_path)
    cand = _candidate(tmp_path, "trailing")
    shutil.copy(tmp_path / "relu.py", tmp_path / "other.py")
    uri = _open(ls, cand)
    await verify_document(ls, uri)
    text = cand.read_text().replace("reference=relu.py", "reference=other.py")
    cand.write_text(text)
    ls.workspace.remove_text_document(uri)
    _open(ls, cand)
    await verify_document(ls, uri)
    assert len(jobs.requests) == 2  # same reference text, another reference file: verified again
    watched = {ref for ref, uris in ls.dependents.items() if uri in uris}
    assert watched == {str((tmp_path / "other.py").resolve())}


def _published(ls: CudiceServer) -> dict[str, list[lsp.Diagnostic]]:
    """Record the diagnostics `ls` publishes: URI -> the latest list (what an editor shows)."""
    shown: dict[str, list[lsp.Diagnostic]] = {}

    def publish(params: lsp.PublishDiagnosticsParams) -> None:
        shown[params.uri] = list(params.diagnostics)

    ls.text_document_publish_diagnostics = publish  # type: ignore[method-assign]
    return shown


def _inputs_failed(ref: Path, line: int) -> VerifyResult:
    """What the verifier answers without a GPU when the reference's `get_inputs()` raises on `line`
    (verifier/run/reference_probe.py)."""
    found = Diagnostic(
        Severity.ERROR,
        "`get_inputs()` of the reference raised NameError: name 'dimm' is not defined.",
        "reference.get_inputs_failed",
        Stage.LOAD,
        Location(str(ref.resolve()), line, 5),
    )
    return VerifyResult(Verdict.RUNTIME_ERROR, Stage.LOAD, str(ref), (found,), compile_only=True)


def _breaking_line(ref: Path) -> int:
    """Break `get_inputs()` of the reference at `ref` on disk; the 1-based line that now raises."""
    text = ref.read_text().replace("(batch_size, dim)", "(batch_size, dimm)")
    ref.write_text(text)
    return next(i for i, t in enumerate(text.splitlines(), 1) if "dimm" in t)


async def test_a_reference_whose_get_inputs_raises_shows_it_on_its_own_line_until_fixed(
    tmp_path: Path,
) -> None:
    ls, jobs = _server(tmp_path)
    shown = _published(ls)
    cand, ref = _candidate(tmp_path, "first line"), tmp_path / "relu.py"
    line = _breaking_line(ref)
    cand_uri, ref_uri = _open(ls, cand), _open(ls, ref)
    jobs.answer = _inputs_failed(ref, line)
    await verify_document(ls, cand_uri)

    (in_ref,) = shown[ref_uri]  # the reference's buffer: on the line that raised
    assert (in_ref.code, in_ref.severity, in_ref.range.start.line) == (
        "reference.get_inputs_failed",
        lsp.DiagnosticSeverity.Error,
        line - 1,
    )
    assert in_ref.message.startswith("`get_inputs()` of the reference raised NameError")
    (in_cand,) = [d for d in shown[cand_uri] if d.code == "reference.get_inputs_failed"]
    assert in_cand.message.startswith(f"relu.py:{line}: ")  # the candidate still shows it, named

    ref.write_text(ref.read_text().replace("dimm", "dim"))  # fixed and saved: verified again
    ls.workspace.remove_text_document(ref_uri)
    _open(ls, ref)
    jobs.answer = None
    await verify_document(ls, cand_uri)
    assert len(jobs.requests) == 2 and shown[ref_uri] == []
    assert not any(d.code == "reference.get_inputs_failed" for d in shown[cand_uri])


async def test_a_reference_shows_the_finding_only_in_the_text_it_was_found_in(tmp_path: Path) -> None:
    ls, jobs = _server(tmp_path)
    shown = _published(ls)
    cand, ref = _candidate(tmp_path, "first line"), tmp_path / "relu.py"
    line = _breaking_line(ref)
    cand_uri = _open(ls, cand)
    jobs.answer = _inputs_failed(ref, line)
    await verify_document(ls, cand_uri)
    ref_uri = ref.as_uri()
    assert ref_uri not in shown  # not open: nothing is published for it

    ls.workspace.put_text_document(  # opened with unsaved text: its lines may have moved
        lsp.TextDocumentItem(uri=ref_uri, language_id="python", version=1, text="# new\n" + ref.read_text())
    )
    show_reference_findings(ls, ref_uri)
    assert shown.get(ref_uri, []) == []
    ls.workspace.remove_text_document(ref_uri)
    _open(ls, ref)  # opened with the text on disk, which the verification read
    show_reference_findings(ls, ref_uri)
    assert [(d.code, d.range.start.line) for d in shown[ref_uri]] == [
        ("reference.get_inputs_failed", line - 1)
    ]

    ref.write_text("# new\n" + ref.read_text())  # edited and saved: the finding's line has moved
    ls.workspace.remove_text_document(ref_uri)
    _open(ls, ref)
    assert await verify_document(ls, ref_uri) is None  # a reference: nothing to verify
    assert shown[ref_uri] == []
