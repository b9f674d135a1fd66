"""A save runs the static checks once: the server runs them and hands the result to both workers.

1. Through the server's own save flow (`verify_document` of an in-process server) with the real
   quick and verify worker processes: the workers run the real verifier
   (`proc_fixtures/counting_verifier.py`: no clangd, the verification ends after its static
   stage) and log each static run; the server's own runs are counted here. One save of each text
   runs the checks exactly once, in the server, and none in the workers; what the workers answer
   equals what the verifier computes when called directly, without a handed result.
2. Through the workers' entry points in this process (`quick_child.answer`, `verify_child.run`,
   with their requests through JSON as on the wire): results with the handed static result equal
   those without it, for clean files, violations, both strictness levels and a raw `.cu` kernel.
3. A handed result computed for other inputs (other text, strictness, path or reference file
   text, or by other code of the checks) is not used: the worker runs the checks itself and
   answers what a direct call answers.

Not covered: the build and run stages (they do not read the static result); clangd's findings.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from cudice.server.core import CudiceServer
from cudice.server.verification import verify_document
from cudice.server.workers import quick_child, verify_child
from cudice.server.workers.quick import QuickChecks, quick_request
from cudice.server.workers.verify import VerifyJobs, VerifyRequest
from cudice.verifier import api
from cudice.verifier.config import VerifyConfig
from cudice.verifier.source.document import parse_document
from cudice.verifier.source.result import Stage, VerifyResult
from cudice.verifier.static import checks
from inprocess_server import initialized_server
from lsprotocol import types as lsp

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FIXTURES = Path(__file__).resolve().parent / "proc_fixtures"
NO_CLANGD = SimpleNamespace(available=False)
VIOLATION = ("return self.relu.relu_cuda(x)", "return self.relu.relu_cuda(x) * 2")
RAW_CU = """\
// cudice: reference=relu.py
extern "C" __global__ void relu_kernel(const float* x, float* out, int n) {
    static float cache[16];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] > 0.f ? x[i] : 0.f;
}
"""


def _comparable(result: VerifyResult) -> dict[str, Any]:
    """A result's JSON without what differs between two runs of the same inputs (clock, timings)."""
    found = result.to_dict()
    found.pop("measured_at")
    found.pop("stage_wall_s")
    return found


def _wire(message: dict[str, Any]) -> dict[str, Any]:
    return dict(json.loads(json.dumps(message)))


@pytest.fixture
def server_static_runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """One entry per static run in this process (the server's, and the in-process workers')."""
    runs: list[str] = []
    check = checks.check_document

    def counted(doc: Any, config: Any = None) -> Any:
        runs.append(doc.path)
        return check(doc, config)

    monkeypatch.setattr(checks, "check_document", counted)
    return runs


def _copy(tmp_path: Path, name: str, reference: str) -> Path:
    shutil.copy(EXAMPLES / reference, tmp_path / reference)
    shutil.copy(EXAMPLES / name, tmp_path / name)
    return tmp_path / name


# -- 1. the server's save flow with real worker processes --------------------------------------


class _KeptQuick:
    """The server's `QuickChecks`, with each check kept running to its end: the server stops
    waiting for the quick answer once the verification is done, and the test waits for it."""

    def __init__(self, quick: QuickChecks) -> None:
        self.quick = quick
        self.answers: list[asyncio.Future[VerifyResult | None]] = []

    async def check(self, *args: Any, **kw: Any) -> VerifyResult | None:
        task = asyncio.ensure_future(self.quick.check(*args, **kw))
        self.answers.append(task)
        return await asyncio.shield(task)


def _server(tmp_path: Path, log: Path) -> tuple[CudiceServer, _KeptQuick, VerifyJobs]:
    env = dict(os.environ)
    env.update(
        CUDICE_VERIFY_MODULE="counting_verifier",
        CUDICE_TEST_STATIC_LOG=str(log),
        CUDICE_GPU="0",
        PYTHONPATH=os.pathsep.join([str(FIXTURES), env.get("PYTHONPATH", "")]),
    )
    quick = _KeptQuick(QuickChecks(env=env))
    jobs = VerifyJobs(env=env, prep_idle_s=3600.0)  # no first-error preparation in this test
    return initialized_server(tmp_path, jobs=jobs, quick=quick), quick, jobs


def _direct_static_stage(path: Path, source: str, config: VerifyConfig) -> VerifyResult:
    """`api.verify`'s result after its static stage, called directly (no handed static result)."""
    stages: list[VerifyResult] = []

    class Done(Exception):
        pass

    def on_stage(partial: Any, *_: Any) -> None:
        if isinstance(partial, VerifyResult) and partial.stage is Stage.STATIC:
            stages.append(partial)
            raise Done

    with pytest.raises(Done):
        api.verify(path, source=source, config=config, on_stage=on_stage)
    return stages[0]


@pytest.mark.timeout(900)
async def test_each_save_runs_the_static_checks_once_in_the_server_and_never_in_the_workers(
    tmp_path: Path, server_static_runs: list[str]
) -> None:
    log = tmp_path / "worker-static.log"
    log.touch()
    ls, quick, jobs = _server(tmp_path, log)
    relu = _copy(tmp_path, "relu_cuda.py", "relu.py")
    softmax = _copy(tmp_path, "softmax_cuda.py", "softmax.py")
    texts = [
        (relu, relu.read_text()),
        (softmax, softmax.read_text()),
        (relu, relu.read_text().replace(*VIOLATION)),  # a static violation
    ]
    answers: list[tuple[Path, str, VerifyResult, VerifyResult | None]] = []
    try:
        for version, (path, text) in enumerate(texts, start=1):
            path.write_text(text)  # saved, as the editor does before `didSave`
            uri = path.as_uri()
            ls.workspace.put_text_document(
                lsp.TextDocumentItem(uri=uri, language_id="python", version=version, text=text)
            )
            result = await asyncio.wait_for(verify_document(ls, uri), 600)
            found = await asyncio.wait_for(quick.answers[-1], 600)
            assert result is not None and result.stage is Stage.STATIC
            assert found is not None, "the quick worker did not answer"
            answers.append((path, text, result, found))
            assert server_static_runs == [str(path)] * 1, server_static_runs  # once, in the server
            assert log.read_text() == "", "a worker ran the static checks again"
            server_static_runs.clear()
    finally:
        jobs.cancel_all()
        await quick.quick.shutdown()

    config = VerifyConfig.from_dict({"static_policy": ls.settings.verify_strictness})
    for path, text, result, found in answers:
        direct_quick = api.quick_check(str(path), text, NO_CLANGD, config=config)  # type: ignore[arg-type]
        assert _comparable(found) == _comparable(direct_quick)
        direct = _direct_static_stage(path, text, dataclasses.replace(config, compile_only=True))
        assert _comparable(result) == _comparable(direct)
    assert any(d.code.startswith("static.") for d in answers[-1][2].diagnostics)  # the violation showed


# -- 2. the workers' entry points: with the handed result, the same answers ---------------------


def _cases(tmp_path: Path) -> Iterator[tuple[Path, str, str]]:
    relu = _copy(tmp_path, "relu_cuda.py", "relu.py")
    softmax = _copy(tmp_path, "softmax_cuda.py", "softmax.py")
    raw = tmp_path / "relu_raw.cu"
    raw.write_text(RAW_CU)
    for policy in ("default", "lenient"):
        yield relu, relu.read_text(), policy
        yield relu, relu.read_text().replace(*VIOLATION), policy
        yield softmax, softmax.read_text(), policy
        yield raw, RAW_CU, policy


class _Stream:
    """verify_child's event stream: keeps the events and stops the run after its static stage."""

    class Done(Exception):
        pass

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def emit(self, event: str, **fields: Any) -> None:
        self.events.append((event, fields))
        if event == "partial" and fields["result"]["stage"] == Stage.STATIC.value:
            raise self.Done


def _verify_worker(request: VerifyRequest) -> list[dict[str, Any]]:
    """The partial and final results `verify_child.run` emits for `request`, up to the static stage."""
    stream = _Stream()
    try:
        verify_child.run(_wire(request.message()), stream)  # type: ignore[arg-type]
    except _Stream.Done:
        pass
    return [
        _comparable(VerifyResult.from_dict(fields["result"]))
        for event, fields in stream.events
        if event in ("partial", "final")
    ]


def _quick_worker(path: Path, text: str, policy: str, static: api.StaticResult | None) -> VerifyResult:
    return quick_child.answer(api, _wire(quick_request("1", str(path), text, policy, static)), NO_CLANGD)  # type: ignore[no-any-return]


def _server_static(path: Path, text: str, config: VerifyConfig) -> api.StaticResult:
    """The static result as the server computes it: over its own parse (the editor's outline)."""
    found = api.static_checks(parse_document(text, str(path), require_candidate=False), config)
    assert found is not None
    return found


def test_the_workers_answer_the_same_with_the_handed_static_result(
    tmp_path: Path, server_static_runs: list[str]
) -> None:
    for path, text, policy in _cases(tmp_path):
        config = VerifyConfig(static_policy=policy, compile_violations=False)
        static = _server_static(path, text, config)
        server_static_runs.clear()
        request = VerifyRequest("file:///x", str(path), text, 1, config, static=static)
        with_static = _verify_worker(request)
        quick_with = _quick_worker(path, text, policy, static)
        assert server_static_runs == [], (path.name, policy)  # neither worker ran them
        without = _verify_worker(dataclasses.replace(request, static=None))
        assert with_static == without and len(without) >= 2, (path.name, policy)
        quick_without = api.quick_check(str(path), text, NO_CLANGD, config=config)  # type: ignore[arg-type]
        assert _comparable(quick_with) == _comparable(quick_without), (path.name, policy)
        assert list(static.diagnostics) == checks.check_document(parse_document(text, str(path)), config)
    server_static_runs.clear()
    # a violation ends the verification at its static stage: its final result is the same too
    relu = tmp_path / "relu_cuda.py"
    text = relu.read_text().replace(*VIOLATION)
    config = VerifyConfig(compile_violations=False)
    static = _server_static(relu, text, config)
    handed = api.verify(relu, source=text, config=config, static=static)
    assert handed.verdict.value == "static_violation"
    assert _comparable(handed) == _comparable(api.verify(relu, source=text, config=config))
    assert len(server_static_runs) == 2  # the server's, and the direct call's; none for `handed`


# -- 3. a result for other inputs is never used ------------------------------------------------


def test_a_static_result_of_other_inputs_is_not_used(
    tmp_path: Path, server_static_runs: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    relu = _copy(tmp_path, "relu_cuda.py", "relu.py")
    text = relu.read_text()
    config = VerifyConfig()
    static = _server_static(relu, text, config)
    other_path = tmp_path / "copy_cuda.py"
    shutil.copy(relu, other_path)
    violation = _server_static(relu, text.replace(*VIOLATION), config)  # a violation's findings
    cases = {
        "other text": (relu, text, "default", violation),
        "other strictness": (relu, text.replace(*VIOLATION), "lenient", violation),
        "other path": (other_path, text, "default", static),
    }
    for what, (path, source, policy, handed) in cases.items():
        for verifier in ("quick", "verify"):
            server_static_runs.clear()
            if verifier == "quick":
                got = [_comparable(_quick_worker(path, source, policy, handed))]
                direct = [
                    _comparable(
                        api.quick_check(  # type: ignore[arg-type]
                            str(path), source, NO_CLANGD, config=VerifyConfig(static_policy=policy)
                        )
                    )
                ]
            else:
                request = VerifyRequest(
                    "file:///x", str(path), source, 1, VerifyConfig(static_policy=policy), static=handed
                )
                got = _verify_worker(request)
                direct = _verify_worker(dataclasses.replace(request, static=None))
            assert len(server_static_runs) == 2, (what, verifier)  # the worker ran them itself
            assert got == direct, (what, verifier)
    # a worker running other code of the checks (a newer install) does not take the server's
    server_static_runs.clear()
    with monkeypatch.context() as patched:
        patched.setattr(api, "_checks_digest", lambda: "other code")
        _quick_worker(relu, text, "default", static)
    assert len(server_static_runs) == 1
    # the reference file changes after the server ran the checks: the key names its text
    server_static_runs.clear()
    (tmp_path / "relu.py").write_text((tmp_path / "relu.py").read_text() + "\n# x.half()\n")
    assert static.key != api.static_key(parse_document(text, str(relu)), config)
    _quick_worker(relu, text, "default", static)
    assert len(server_static_runs) == 1


def test_the_static_checks_read_no_setting_but_the_strictness() -> None:
    """`api.STATIC_CONFIG_FIELDS` is what the key holds of the settings: the checks must read no
    other `VerifyConfig` field (a new one read there belongs in the key)."""
    import re

    static_dir = Path(checks.__file__).parent
    fields = {f.name for f in dataclasses.fields(VerifyConfig)}
    read = set()
    for source in static_dir.glob("*.py"):
        read |= {m for m in re.findall(r"config\.(\w+)", source.read_text()) if m in fields}
    assert read <= set(api.STATIC_CONFIG_FIELDS), read
