"""Plain-function tests: checkpoint completeness, the result cache, the factory, the light import."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from cudice.server.results import ResultCache, result_key
from cudice.server.watch import PathWatcher, checkpoint_signature
from cudice.verifier.source.result import Stage, Verdict, VerifyResult


def test_checkpoint_signature_only_for_complete_checkpoints(tmp_path: Path) -> None:
    assert checkpoint_signature(tmp_path / "missing") is None
    assert checkpoint_signature(tmp_path) is None  # empty
    (tmp_path / "config.json").write_text("{}")
    assert checkpoint_signature(tmp_path) is None  # no weights yet
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "model-00001.safetensors", "b": "model-00002.safetensors"}})
    )
    (tmp_path / "model-00001.safetensors").write_bytes(b"1")
    assert checkpoint_signature(tmp_path) is None  # a shard is missing
    (tmp_path / "model-00002.safetensors").write_bytes(b"2")
    first = checkpoint_signature(tmp_path)
    assert first is not None and first.startswith("files:")
    (tmp_path / "model-00002.safetensors.tmp").write_bytes(b"half")
    assert checkpoint_signature(tmp_path) is None  # being written
    (tmp_path / "model-00002.safetensors.tmp").unlink()
    (tmp_path / "cudice_checkpoint.json").write_text('{"step": 1}')
    marked = checkpoint_signature(tmp_path)
    assert marked is not None and marked.startswith("marker:")
    (tmp_path / "cudice_checkpoint.json").write_text('{"step": 2}')
    assert checkpoint_signature(tmp_path) not in (marked, None)


def test_path_watcher_debounces_a_burst_into_one_call(tmp_path: Path) -> None:
    async def main() -> list[str]:
        calls: list[str] = []
        fired = asyncio.Event()

        def on_change(key: str) -> None:
            calls.append(key)
            fired.set()

        watcher = PathWatcher(asyncio.get_running_loop(), on_change, debounce_s=0.3)
        target = tmp_path / "ref.py"
        target.write_text("0")
        watcher.watch(str(target), key="ref")
        for i in range(5):
            target.write_text(str(i))
        (tmp_path / "unrelated.py").write_text("x")
        await asyncio.wait_for(fired.wait(), 10)
        await asyncio.sleep(0.5)
        watcher.stop()
        return calls

    assert asyncio.run(main()) == ["ref"]


def test_result_cache_round_trips_through_disk_and_keys_on_everything(tmp_path: Path) -> None:
    result = VerifyResult(Verdict.CORRECT, Stage.TIMING, "c.py", speedup=2.0, gpu_name="NVIDIA H200")
    key = result_key("src", "/w/ref.py", "ref", {"num_trials": 5})
    ResultCache(tmp_path).put(key, result)
    assert ResultCache(tmp_path).get(key) == result  # a fresh cache reads it from disk
    others = {
        result_key("src2", "/w/ref.py", "ref", {"num_trials": 5}),
        result_key("src", "/w/ref.py", "ref2", {"num_trials": 5}),
        result_key("src", "/v/ref.py", "ref", {"num_trials": 5}),  # same text, another reference file
        result_key("src", "/w/ref.py", "", {"num_trials": 5}),  # an empty reference is not a missing one
        result_key("src", "/w/ref.py", None, {"num_trials": 5}),
        result_key("src", None, None, {"num_trials": 5}),
        result_key("src", "/w/ref.py", "ref", {"num_trials": 6}),
    }
    assert len({key, *others}) == 8 and key == result_key("src", "/w/ref.py", "ref", {"num_trials": 5})
    (tmp_path / f"{key}.json").write_text("{not json")
    assert ResultCache(tmp_path).get(key) is None


def test_server_factory_gives_independent_servers() -> None:
    from cudice.server.app import create_server
    from cudice.server.protocol import COMMANDS

    a, b = create_server(), create_server()
    assert a is not b and a.documents is not b.documents and a.model is not b.model
    assert set(COMMANDS) <= set(a.protocol.fm.commands)


def test_server_modules_do_not_import_torch() -> None:
    code = (
        "import sys, cudice.server.app, cudice.server.workers.model_child;"
        "import cudice.server.workers.verify_child;"
        "bad = [m for m in ('torch', 'transformers') if m in sys.modules]; print(bad); sys.exit(bool(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_reload_marker_is_the_one_the_trainer_writes() -> None:
    from cudice.model.train.checkpoint import MARKER
    from cudice.server.watch import CHECKPOINT_MARKER

    assert CHECKPOINT_MARKER == MARKER


def test_a_copied_file_does_not_reuse_the_originals_verdict(tmp_path: Path) -> None:
    """Diagnostics in a cached verdict name their file: the cache key must include the path."""
    from cudice.server.app import create_server
    from cudice.server.verification import result_key_of
    from cudice.verifier.source.document import parse_document

    ls = create_server()
    source = (Path(__file__).resolve().parents[2] / "examples" / "relu_broken.py").read_text()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for d in ("a", "b"):
        (tmp_path / d / "relu.py").write_text("# same reference\n")

    def key(folder: str) -> str:
        return result_key_of(
            ls, parse_document(source, str(tmp_path / folder / "relu_broken.py"), require_candidate=False)
        )

    assert key("a") != key("b")
    assert key("a") == key("a")  # reopening still hits


def test_a_checkpoint_being_saved_by_the_trainer_reads_as_incomplete(tmp_path: Path) -> None:
    """The trainer's temporary names are ones the watcher recognises."""
    from cudice.model.train.checkpoint import _tmp_name
    from cudice.server.watch import checkpoint_signature

    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"0")
    assert checkpoint_signature(tmp_path) is not None
    (tmp_path / _tmp_name("model.safetensors")).write_bytes(b"half")
    assert checkpoint_signature(tmp_path) is None
