"""One `DocumentState` per document, parsed once per text; what one save costs in parses and checks.

The server runs in-process (plain client capabilities). Its quick-check and verification workers
are stand-ins that run the workers' own entry points in this process (`quick_child.answer`,
`verify_child.run` with the real verifier, stopped after its static stage
so no compiler runs; both get their requests as the real workers do, through JSON), so the counts
below are those of the server and both workers together.

Not covered: the build and run stages (they parse nothing of the candidate's Python).
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from cudice.server.core import CudiceServer
from cudice.server.document_state import DocumentState
from cudice.server.verification import verify_document
from cudice.server.workers import quick_child, verify_child
from cudice.server.workers.quick import quick_request
from cudice.server.workers.verify import VerifyRequest
from cudice.verifier import api
from cudice.verifier.config import VerifyConfig
from cudice.verifier.source import document, reference
from cudice.verifier.source.result import Stage, Verdict, VerifyResult
from cudice.verifier.static import checks
from inprocess_server import initialized_server
from lsprotocol import types as lsp

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


class _StopAfterStatic(Exception):
    pass


class _Stream:
    """The verify worker's event stream: stops the run once the static stage has reported."""

    def emit(self, event: str, **fields: Any) -> None:
        if event == "partial" and fields["result"]["stage"] == Stage.STATIC.value:
            raise _StopAfterStatic


class _InProcessJobs:
    """`VerifyJobs` whose worker is `verify_child.run` in this process, as the child runs it."""

    def __init__(self) -> None:
        self.requests: list[VerifyRequest] = []

    async def run(self, request: VerifyRequest, **_: Any) -> VerifyResult:
        self.requests.append(request)
        await asyncio.sleep(0)  # the quick check, started beside this run, answers first
        wire = json.loads(json.dumps(request.message()))  # what the worker reads on its stdin
        try:
            verify_child.run(wire, _Stream())  # type: ignore[arg-type]
        except _StopAfterStatic:
            pass
        return VerifyResult(Verdict.COMPILED, Stage.COMPILE, request.path, compile_only=True)

    def cancel(self, uri: str) -> bool:
        return False

    def is_running(self, uri: str) -> bool:
        return False


class _NoClangd:
    available = False


class _InProcessQuick:
    """`QuickChecks` whose worker is `quick_child.answer` in this process, as the child runs it."""

    async def check(
        self, path: str, source: str, *, static_policy: str | None = None, static: Any = None, **_: Any
    ) -> VerifyResult | None:
        wire = json.loads(json.dumps(quick_request("1", path, source, static_policy, static)))
        return quick_child.answer(api, wire, _NoClangd())  # type: ignore[no-any-return]


def _server(tmp_path: Path) -> tuple[CudiceServer, _InProcessJobs]:
    jobs = _InProcessJobs()
    return initialized_server(tmp_path, jobs=jobs, quick=_InProcessQuick()), jobs


def _open(ls: CudiceServer, tmp_path: Path) -> str:
    shutil.copy(EXAMPLES / "relu.py", tmp_path / "relu.py")
    cand = tmp_path / "relu_cuda.py"
    shutil.copy(EXAMPLES / "relu_cuda.py", cand)
    uri = cand.as_uri()
    ls.workspace.put_text_document(
        lsp.TextDocumentItem(uri=uri, language_id="python", version=1, text=cand.read_text())
    )
    return uri


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Calls of the parser (per file name), the static checks and the reference resolution."""
    found: Counter[str] = Counter()
    parse, check, resolve_path = document.parse_document, checks.check_document, reference.reference_path

    def counted_parse(source: str, path: str, **kw: Any) -> Any:
        found[f"parse {Path(path).name}"] += 1
        return parse(source, path, **kw)

    def counted_check(doc: Any, config: Any) -> Any:
        found["static"] += 1
        return check(doc, config)

    def counted_resolve(doc: Any) -> Any:
        found["reference"] += 1
        return resolve_path(doc)

    for module in (document, api, reference):
        monkeypatch.setattr(module, "parse_document", counted_parse)
    monkeypatch.setattr(checks, "check_document", counted_check)
    monkeypatch.setattr(reference, "reference_path", counted_resolve)
    return found


async def test_one_save_parses_each_text_once_per_process_and_runs_the_static_checks_once(
    tmp_path: Path, counts: Counter[str]
) -> None:
    ls, jobs = _server(tmp_path)
    uri = _open(ls, tmp_path)
    ls.analyse(uri, ls.workspace.get_text_document(uri).source)  # what hover and lens do after open
    ls.analyse(uri, ls.workspace.get_text_document(uri).source)
    assert counts == Counter({"parse relu_cuda.py": 1, "reference": 1})  # one parse per text
    counts.clear()

    result = await verify_document(ls, uri)  # one save
    assert result is not None and len(jobs.requests) == 1
    # the server parses nothing again and runs the static checks once, for both workers; each worker
    # process parses the candidate once and takes that static result (its key names the reference's
    # path: the server and each worker resolve it once for that); the verify worker parses and
    # resolves the reference
    assert counts == Counter({"parse relu_cuda.py": 2, "static": 1, "parse relu.py": 1, "reference": 4}), (
        counts
    )


async def test_a_document_s_state_lives_in_one_object(tmp_path: Path, counts: Counter[str]) -> None:
    ls, _ = _server(tmp_path)
    uri = _open(ls, tmp_path)
    await verify_document(ls, uri)
    state = ls.documents[uri]
    assert isinstance(state, DocumentState) and list(ls.documents) == [uri]
    assert state.latest is not None and state.latest.result.verdict is Verdict.COMPILED
    assert state.building == 0 and not state.edited and not state.flagged
    assert state.analysis is not None and state.analysis.reference == str((tmp_path / "relu.py").resolve())
    assert state.watched_reference is None  # no reference watcher in this server (not initialized)
    assert ls.dependents == {}


async def test_a_save_while_the_same_text_is_being_verified_starts_no_second_run(
    tmp_path: Path, counts: Counter[str]
) -> None:
    """The run on open and the save right after it (same text, reference and settings) share one
    run; a changed text or an explicit verify starts its own."""
    ls, jobs = _server(tmp_path)
    uri = _open(ls, tmp_path)
    first, second = await asyncio.gather(verify_document(ls, uri), verify_document(ls, uri))
    assert first is not None and second is None and len(jobs.requests) == 1
    state = ls.documents[uri]
    assert state.building == 0 and state.running_key is None
    edited = (tmp_path / "relu_cuda.py").read_text() + "\n# edited\n"
    (tmp_path / "relu_cuda.py").write_text(edited)
    ls.workspace.put_text_document(
        lsp.TextDocumentItem(uri=uri, language_id="python", version=3, text=edited)
    )
    a, b = await asyncio.gather(verify_document(ls, uri), verify_document(ls, uri, force=True))
    assert a is not None and b is not None and len(jobs.requests) == 3


def test_workers_get_a_typed_config_and_refuse_unknown_keys() -> None:
    config = VerifyConfig(num_trials=3, compile_only=True, arch_list=("8.0", "9.0"))
    assert VerifyConfig.from_dict(config.overrides()) == config
    assert config.overrides() == {"num_trials": 3, "compile_only": True, "arch_list": ["8.0", "9.0"]}
    with pytest.raises(ValueError, match=r"no field 'num_trails'; valid fields: num_trials, atol"):
        VerifyConfig.from_dict({"num_trails": 3})


def test_a_worker_handed_an_unknown_config_key_fails_the_run_and_names_it(tmp_path: Path) -> None:
    events: list[tuple[str, dict[str, Any]]] = []

    class Stream:
        def emit(self, event: str, **fields: Any) -> None:
            events.append((event, fields))

    with pytest.raises(ValueError, match="'static_polcy'"):
        verify_child.run(
            {"path": str(tmp_path / "k.py"), "source": "", "config": {"static_polcy": "x"}}, Stream()
        )  # type: ignore[arg-type]
    assert events == []
