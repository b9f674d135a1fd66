"""bench/serve_load.py --transport tcp at the tiny shape on the CPU, 1 and 2 editors, a few tokens.

The bench builds its checkpoint, starts a real `cudice-lsp --tcp --multi` process with
`CUDICE_TEAM_BATCHING=0` and then one batched, connects its editors over real sockets and generates
through the *Generate CUDA kernel* action's command. Checked: the report's structure (both modes at
every level, figures measured and consistent, the batched/serial ratio of the same run); every
editor got every answer, each its own (written in its own workspace, equal to what that editor got
from the serial server, never another editor's); both servers exited 0 through their own shutdown,
and nothing the bench started outlives it.

Not covered: the figures themselves (tiny shape on a shared 2-core CPU), the CUDA memory figure.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def serve_load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("serve_load_bench", ROOT / "bench" / "serve_load.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _family(marker: str) -> list[int]:
    """Live processes whose environment carries `marker`."""
    found = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(name))
        except (OSError, ValueError):
            pass
    return found


def test_tcp_mode_reports_both_servers_and_every_editor_gets_only_its_own_answers(
    serve_load: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "serve_load.json"
    argv = ["--transport", "tcp", "--shape", "tiny", "--device", "cpu", "--concurrency", "1,2"]
    argv += ["--requests-per-client", "2", "--max-new-tokens", "8", "--workdir", str(tmp_path / "w")]
    code = serve_load.main([*argv, "--json", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    report = json.loads(out.read_text())
    assert report["transport"] == "tcp" and report["shape"] == "tiny" and report["device"] == "cpu"
    assert report["throughput_unit"].startswith("generated tokens/s")
    assert report["editors"] == 2 and report["distinct_answers"] == 2  # the check below has teeth
    assert {m: s["exit_code"] for m, s in report["servers"].items()} == {"serial": 0, "batched": 0}
    levels = {(r["mode"], r["concurrency"]): r for r in report["levels"]}
    assert sorted(levels) == [("batched", 1), ("batched", 2), ("serial", 1), ("serial", 2)]
    for (mode, c), r in levels.items():
        assert r["requests"] == r["ok"] == 2 * c and not r["failures"], r
        # editor i asks for 8 + i tokens, and random weights never stop early
        assert r["tokens"] == 2 * sum(8 + i for i in range(c)), r
        assert r["tok_s"] == pytest.approx(r["tokens"] / r["seconds"])
        assert r["gen_s"] == pytest.approx(r["ok"] / r["seconds"])
        assert 0 < r["p50_s"] <= r["p95_s"] <= r["worst_user_p95_s"] <= r["seconds"]
        assert r["peak_rss_bytes"] > 50 * 2**20 and r["peak_gpu_bytes"] == 0  # a loaded model worker
        # every answer is its own editor's: as from the serial server, none another editor's
        assert r["own_answers"] and r["foreign_answers"] == 0
        assert r["same_as_serial"] == r["ok"] and r["other_answers"] == 0, r
        expected = 1.0 if mode == "serial" else r["tok_s"] / levels[("serial", c)]["tok_s"]
        assert r["ratio"] == pytest.approx(expected)
    assert "RESULT" in printed and "tcp_c2_ratio" in printed
    # each editor's workspace holds its own answer; the servers left no process behind
    written = sorted((tmp_path / "w").glob("batched-c2-user*/relu_cuda.py"))
    assert len(written) == 2 and written[0].read_text() != written[1].read_text()
    for mode in ("serial", "batched"):
        assert _family(f"{serve_load.FAMILY_ENV}={mode}-{os.getpid()}-") == []


@pytest.mark.parametrize(
    ("answers", "want", "reasons"),
    [
        # every answer its own serial file, its own count
        ({"a": [("A", 10)], "b": [("B", 11)]}, (2, 0, 0, 2), []),
        # files of random weights coincide: b's file equals a's serial one, but b's count is b's own
        ({"a": [("A", 10)], "b": [("A", 11)]}, (1, 1, 0, 2), []),
        # a's answer carries b's count: b's request, a mix-up even where the files coincide
        ({"a": [("A", 11)], "b": [("B", 11)]}, (1, 0, 1, 1), ["a got an answer of b's length (11 tokens)"]),
        # stopped early (no count to go by): another editor's file is a mix-up
        ({"a": [("B", 3)], "b": [("B", 11)]}, (1, 0, 1, 1), ["a got another editor's answer"]),
        # stopped early with a file of its own: bf16 divergence
        ({"a": [("C", 3)], "b": [("B", 11)]}, (1, 1, 0, 1), []),
    ],
)
def test_answers_are_told_apart_by_their_token_counts_where_files_coincide(
    serve_load: ModuleType, answers: dict, want: tuple, reasons: list
) -> None:
    failures: list[str] = []
    got = serve_load.classify_answers(answers, {"a": "A", "b": "B"}, {"a": 10, "b": 11}, failures)
    assert got == want and failures == reasons, (got, failures)
