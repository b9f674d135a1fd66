"""The server sees a candidate's reference exactly as the verifier does, and re-verifies when it changes.

A `# cudice: reference=` comment may stand on the first line, indented or after code; the server's
watch list and its result-cache key come from the same document model the verifier reads, and the
key holds the reference's resolved path and text. The server runs in-process (initialized with
plain client capabilities); its verify and quick-check workers are stand-ins that record what
they were asked to run.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from cudice.server.app import create_server
from cudice.server.core import CudiceServer
from cudice.server.verification import reference_path, result_key_of, verify_document
from cudice.server.workers.verify import VerifyRequest
from cudice.verifier.source.document import parse_document
from cudice.verifier.source.reference import resolve_reference
from cudice.verifier.source.result import Stage, Verdict, VerifyResult
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
    """Stands in for `VerifyJobs`: records each request and answers `compiled`."""

    def __init__(self) -> None:
        self.requests: list[VerifyRequest] = []

    async def run(self, request: VerifyRequest, **_: Any) -> VerifyResult:
        self.requests.append(request)
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
    ls = create_server(results_dir=tmp_path / "results")
    answer = ls.protocol.lsp_initialize(
        lsp.InitializeParams(capabilities=lsp.ClientCapabilities(), root_uri=tmp_path.as_uri())
    )
    for _ in answer:  # a generator in pygls 2: run it to its end
        pass
    jobs = _Jobs()
    ls.__dict__["jobs"] = jobs  # the workers are cached properties: these stand in before first use
    ls.__dict__["quick"] = _Quick()
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
