"""The quick worker gets a typed `VerifyConfig`, as the verification worker does.

The server's request carries the config's fields that differ from the defaults
(`VerifyConfig.overrides()`, server/workers/quick.py `quick_request`), and the worker reads them
with `VerifyConfig.from_dict` (server/workers/quick_child.py `request_config`): the strictness
arrives as the config's `static_policy`, and a key that is no field is refused by name, in
process and as the worker's `error` event (a real worker, the scripted verifier of tests/e2e).
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from cudice.server.workers import quick_child
from cudice.server.workers.protocol import ChildProcess
from cudice.server.workers.quick import quick_request
from cudice.verifier.config import VerifyConfig
from cudice.verifier.source.result import Stage, Verdict, VerifyResult

FAKES = Path(__file__).resolve().parents[2] / "e2e"
pytestmark = pytest.mark.timeout(90)


class _Recording:
    """A verifier module whose `quick_check` records the config it was handed."""

    def __init__(self) -> None:
        self.configs: list[Any] = []

    def quick_check(self, path: str, source: str, checker: Any = None, *, config: Any = None) -> VerifyResult:
        self.configs.append(config)
        return VerifyResult(Verdict.CHECKED, Stage.COMPILE, path)


def _wire(request: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(request))  # type: ignore[no-any-return]


def test_the_request_carries_the_config_as_overrides_and_the_worker_reads_it_back() -> None:
    lenient = _wire(quick_request("1", "/tmp/k.py", "", "lenient", None))
    assert lenient["config"] == {"static_policy": "lenient"} and "static_policy" not in lenient
    assert _wire(quick_request("2", "/tmp/k.py", "", None, None))["config"] == {}
    assert _wire(quick_request("3", "/tmp/k.py", "", "default", None))["config"] == {}
    api = _Recording()
    for request in (lenient, _wire(quick_request("2", "/tmp/k.py", "", None, None))):
        quick_child.answer(api, request, SimpleNamespace(available=False))
    assert api.configs == [VerifyConfig(static_policy="lenient"), VerifyConfig()]


def test_an_invalid_policy_is_refused_before_it_is_sent() -> None:
    with pytest.raises(ValueError, match="static_policy='sloppy'"):
        quick_request("1", "/tmp/k.py", "", "sloppy", None)


def test_an_unknown_config_key_is_refused_and_named_in_process() -> None:
    api = _Recording()
    request = {"id": "1", "path": "/tmp/k.py", "source": "", "config": {"static_polcy": "lenient"}}
    with pytest.raises(ValueError, match=r"no field 'static_polcy'; valid fields: num_trials"):
        quick_child.answer(api, request, None)
    with pytest.raises(ValueError, match=r"unknown key\(s\) 'static_policy'; valid keys: id, path"):
        quick_child.answer(
            api, {**request, "config": {"static_policy": "strict"}, "static_policy": "lenient"}, None
        )
    assert api.configs == []  # nothing was checked


def test_a_quick_worker_handed_an_unknown_config_key_reports_it_and_keeps_serving() -> None:
    env = {
        **os.environ,
        "CUDICE_VERIFY_MODULE": "lsp_fakes.fake_verifier",
        "PYTHONPATH": os.pathsep.join([str(FAKES), os.environ.get("PYTHONPATH", "")]),
    }

    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        worker = ChildProcess("cudice.server.workers.quick_child", env=env)
        await worker.start()
        try:
            events = worker.events()
            bad = {"id": "1", "path": "/tmp/k_cuda.py", "source": "x = 1\n", "config": {"num_trails": 3}}
            assert await worker.send(bad)
            refused = await asyncio.wait_for(_answer(events, "1"), 60)
            assert await worker.send(_wire(quick_request("2", "/tmp/k_cuda.py", "x = 1\n", "lenient", None)))
            served = await asyncio.wait_for(_answer(events, "2"), 60)
            await events.aclose()
            return refused, served
        finally:
            await worker.close(grace_s=5.0)

    refused, served = asyncio.run(main())
    assert refused["event"] == "error"
    named = "ValueError: VerifyConfig has no field 'num_trails'; valid fields: num_trials"
    assert named in refused["message"]
    assert served["event"] == "result" and served["result"]["verdict"] == "checked"


async def _answer(events: Any, job_id: str) -> dict[str, Any]:
    """The next result or error event of job `job_id` (started and progress events skipped)."""
    async for event in events:
        if event.get("event") in ("result", "error") and event.get("id") == job_id:
            return event  # type: ignore[no-any-return]
    raise AssertionError(f"the worker exited before answering job {job_id}")
