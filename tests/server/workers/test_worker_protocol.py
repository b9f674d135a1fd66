"""The model worker's protocol mapping, and the model client's state machine driven end to end
through a real worker process with the scripted engine (no LSP)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

from cudice.model.generation import Generation, Progress
from cudice.server.workers.model import LoadRequest, ModelUnavailable, ModelWorker, WorkerDied, _generation
from cudice.server.workers.model_child import _generation_fields, _progress_fields

FAKES = Path(__file__).resolve().parents[2] / "e2e"


def test_the_engines_records_cross_the_protocol_unchanged() -> None:
    progress = Progress(8, 4, 0.5, "abc")
    fields = _progress_fields(progress)
    assert fields == {"num_tokens": 8, "num_forwards": 4, "seconds": 0.5}  # the text stays in the child
    assert Progress(**fields).tokens_per_second == 16.0 and Progress(**fields).tokens_per_forward == 2.0
    assert _progress_fields(7) == {"num_tokens": 7}
    gen = Generation("t", "m", 3, 2, 1.5, 2.0, False, step_map=(0, 1, 1), finish_reason="eos", raw_text="r")
    event = json.loads(json.dumps({"event": "done", "id": "1", **_generation_fields(gen, seconds=9.0)}))
    assert _generation(event, was_cancelled=False) == gen
    assert _generation(event, was_cancelled=True).cancelled  # the server stopped waiting for it


def test_an_engine_with_fewer_fields_gets_derived_numbers_and_defaults() -> None:
    gen = type(
        "G",
        (),
        {
            "text": "t",
            "middle": None,
            "num_tokens": 10,
            "num_forwards": 4,
            "seconds": 2.0,
            "cancelled": False,
        },
    )()
    fields = _generation_fields(gen, seconds=9.0)
    assert fields["tokens_per_forward"] == 2.5 and fields["seconds"] == 2.0 and fields["middle"] is None
    assert _generation(fields, was_cancelled=False) == Generation("t", None, 10, 4, 2.5, 2.0, False)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["CUDICE_ENGINE_MODULE"] = "lsp_fakes.fake_engine"
    env["PYTHONPATH"] = os.pathsep.join([str(FAKES), env.get("PYTHONPATH", "")])
    return env


def test_model_worker_loads_runs_restarts_and_gives_up(tmp_path: Path) -> None:
    states: list[str] = []
    notices: list[str] = []

    async def main() -> None:
        worker = ModelWorker(
            on_state=lambda s, m: states.append(s), on_notice=notices.append, env=_env(), max_restarts=1
        )
        try:
            try:
                await worker.run("generate", {}, cancel=asyncio.Event())
                raise AssertionError("ran without a model")
            except ModelUnavailable as exc:  # before the first load: starting, not "no model configured"
                assert "not loaded yet" in str(exc) and "no model configured" not in str(exc)
            assert await worker.load(None) is False
            try:
                await worker.run("generate", {}, cancel=asyncio.Event())
                raise AssertionError("ran without a model")
            except ModelUnavailable as exc:
                assert "cudice.model.path" in str(exc)
            assert await worker.load(LoadRequest(str(tmp_path), "cpu", "auto")) is True
            seen: list[int] = []
            result = await worker.run(
                "generate",
                {"reference_source": "class Model: pass", "settings": {}},
                cancel=asyncio.Event(),
                on_progress=lambda p: seen.append(p.num_tokens),
            )
            assert (
                result.num_tokens == 20 and seen == sorted(seen) and seen[-1] == 20 and not result.cancelled
            )
            typo = {"reference_source": "class Model: pass", "settings": {"sampler_max_tokens": 9}}
            try:  # a settings key the worker does not know fails the job, named, never dropped
                await worker.run("generate", typo, cancel=asyncio.Event())
                raise AssertionError("an unknown settings key was accepted")
            except RuntimeError as exc:
                assert "'sampler_max_tokens'" in str(exc) and "sampler_max_new_tokens" in str(exc)

            async def until(pred: object) -> None:
                for _ in range(800):
                    if pred():  # type: ignore[operator]
                        return
                    await asyncio.sleep(0.025)
                raise AssertionError(f"state stuck at {states}")

            crash = {"reference_source": "CUDICE_TEST_CRASH", "settings": {}}
            try:  # max_restarts=1: the first crash restarts the worker and reloads the model ...
                await worker.run("generate", crash, cancel=asyncio.Event())
                raise AssertionError("the crash was not reported")
            except WorkerDied:
                pass
            await until(lambda: states.count("ready") == 2)
            try:  # ... the second one in a row gives up and says how to retry
                await worker.run("generate", crash, cancel=asyncio.Event())
                raise AssertionError("the crash was not reported")
            except WorkerDied:
                pass
            await until(lambda: worker.state == "error")
            assert worker.state == "error" and "gave up" in worker.message
            assert any("Restarting the model worker" in n for n in notices)
        finally:
            await worker.shutdown()

    asyncio.run(asyncio.wait_for(main(), 60))
    assert states[:3] == ["missing", "loading", "ready"]  # load(None) first: "no model configured"


def test_the_fast_setting_reaches_load_engine(monkeypatch, tmp_path: Path) -> None:
    import sys

    from cudice.server.settings import parse_settings
    from cudice.server.workers.model_child import ModelChild

    monkeypatch.syspath_prepend(str(FAKES))
    monkeypatch.setenv("CUDICE_ENGINE_MODULE", "lsp_fakes.fake_engine")
    monkeypatch.setenv("CUDICE_FAKE_LOAD_S", "0")
    events: list[tuple[str, dict]] = []
    child = ModelChild(type("Stream", (), {"emit": lambda self, e, **kw: events.append((e, kw))})())
    for mode, flag in (("auto", None), ("on", True), ("off", False)):
        settings, warnings = parse_settings({"cudice": {"model": {"fast": mode}}})
        assert not warnings and settings.model_fast == mode
        child.load({"op": "load", "path": str(tmp_path), "fast": settings.model_fast})
        assert sys.modules["lsp_fakes.fake_engine"].LOADS[-1]["fast"] is flag
        assert events[-1][0] == "loaded"
    assert parse_settings({"cudice": {"model": {"fast": "always"}}})[0].model_fast == "auto"
