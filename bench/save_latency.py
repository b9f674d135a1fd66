"""The editor's save → first diagnostic and save → verdict times, on the examples, through the server.

What an editor runs (`python -m cudice.server` over stdio) verifies on save: the candidate's text is
changed (`didChange`: a new trailing comment, so no cached verdict is shown), written to disk and
saved (`didSave`). Timed from the `didSave`: the first `publishDiagnostics` of the file (the quick
check's findings, or the static stage's when it finds something) and the verdict (`cudice/status`
with `lastVerdict` set and `verifying` false). The CUDA sources never change, so after one warm-up
save per file (reported apart) the build is found in the build cache: what is timed is the save
flow around it (parse, static checks, quick check, the verify worker's start, the cached build,
the reference probe). More untimed saves follow until the quick check answers before the verdict
(clangd's preamble is built: `--quick-warm-s`), so the first diagnostic is the quick check's
where it is faster (`quick_first`). Files are saved in turn, one save at a time.

    python bench/save_latency.py [--saves 8] [--files relu_cuda.py,softmax_cuda.py] [--cache DIR]

`--cache` keeps the build cache across runs (e.g. to compare two versions of the server: run each
with the same folder, the first run pays the build). Prints one line per save and a JSON summary
with the machine, the date and the load average. Not covered: a GPU run stage (this box has none:
the verdict is the compile-only one); a real editor's own latency.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from lsprotocol import types as lsp
from pygls.lsp.client import LanguageClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lsp_latency import lsp_client

REPO = Path(__file__).resolve().parent.parent
REFERENCES = {"relu_cuda.py": "relu.py", "softmax_cuda.py": "softmax.py", "relu_broken.py": "relu.py"}
BOUND_S = 900.0  # per event; a cold build on a loaded 2-core box takes minutes


class _Events:
    """The server's notifications, kept in arrival order with their arrival time."""

    def __init__(self) -> None:
        self.diagnostics: list[tuple[float, str]] = []  # (time, uri)
        self.statuses: list[tuple[float, dict[str, Any]]] = []
        self.arrived = asyncio.Event()

    async def wait(self, found: Any, what: str) -> float:
        deadline = time.monotonic() + BOUND_S
        while (at := found()) is None:
            self.arrived.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {what} within {BOUND_S:.0f} s")
            await asyncio.wait_for(self.arrived.wait(), left)
        return float(at)


def _client(events: _Events) -> LanguageClient:
    """bench/lsp_latency.py's editor client, with each diagnostics and status arrival timed."""
    statuses: list[dict[str, Any]] = []

    def on_status() -> None:
        events.statuses.append((time.perf_counter(), statuses[-1]))
        events.arrived.set()

    def on_diagnostics(params: lsp.PublishDiagnosticsParams) -> None:
        events.diagnostics.append((time.perf_counter(), params.uri))
        events.arrived.set()

    return lsp_client(statuses, on_status, on_diagnostics)


async def _save(
    client: LanguageClient, events: _Events, path: Path, text: str, version: int
) -> dict[str, float | str]:
    uri = path.as_uri()
    client.text_document_did_change(
        lsp.DidChangeTextDocumentParams(
            lsp.VersionedTextDocumentIdentifier(uri=uri, version=version),
            [lsp.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )
    path.write_text(text)
    # a request answered after the change: whatever the change itself publishes came before it
    await client.text_document_hover_async(
        lsp.HoverParams(lsp.TextDocumentIdentifier(uri), lsp.Position(line=0, character=0))
    )
    num_diags, num_statuses = len(events.diagnostics), len(events.statuses)
    t0 = time.perf_counter()
    client.text_document_did_save(lsp.DidSaveTextDocumentParams(lsp.TextDocumentIdentifier(uri)))

    def first_diagnostic() -> float | None:
        return next((t for t, u in events.diagnostics[num_diags:] if u == uri), None)

    def verdict() -> float | None:
        return next(
            (
                t
                for t, s in events.statuses[num_statuses:]
                if s.get("uri") == uri and s.get("lastVerdict") is not None and not s.get("verifying")
            ),
            None,
        )

    diag_at = await events.wait(first_diagnostic, "diagnostic")
    verdict_at = await events.wait(verdict, "verdict")
    last = next(s for t, s in events.statuses[num_statuses:] if t == verdict_at)
    published = sum(1 for t, u in events.diagnostics[num_diags:] if u == uri and t <= verdict_at)
    return {
        "first_diagnostic_s": diag_at - t0,
        "verdict_s": verdict_at - t0,
        "verdict": str(last.get("lastVerdict")),
        "quick_first": published >= 2,  # the quick check's findings came before the verdict's
    }


async def run(args: argparse.Namespace, workdir: Path, cache: Path) -> dict[str, Any]:
    files = [f.strip() for f in args.files.split(",") if f.strip()]
    paths = {}
    for name in files:
        shutil.copy(REPO / "examples" / REFERENCES[name], workdir / REFERENCES[name])
        paths[name] = workdir / name
        shutil.copy(REPO / "examples" / name, paths[name])
    env = {**os.environ, "CUDICE_CACHE_DIR": str(cache), "CUDICE_NO_BUNDLED_MODEL": "1"}
    events = _Events()
    client = _client(events)
    await client.start_io(sys.executable, "-m", "cudice.server", "--log-level", "warning", env=env)
    opts = {"cudice": {"verify": {"onSave": True}}}
    caps = lsp.ClientCapabilities(window=lsp.WindowClientCapabilities(work_done_progress=True))
    await client.initialize_async(
        lsp.InitializeParams(capabilities=caps, initialization_options=opts, root_uri=workdir.as_uri())
    )
    client.initialized(lsp.InitializedParams())
    nonce = uuid.uuid4().hex[:8]  # no verdict of an earlier run is in the result cache
    rows: list[dict[str, Any]] = []
    try:
        for name in files:
            base = paths[name].read_text()
            client.text_document_did_open(
                lsp.DidOpenTextDocumentParams(
                    lsp.TextDocumentItem(uri=paths[name].as_uri(), language_id="python", version=1, text=base)
                )
            )
        version = 1
        for name in files:  # warm-up saves: the builds (with a cold cache), then clangd's preamble
            version += 1
            text = (REPO / "examples" / name).read_text() + f"\n# warm-up {nonce}\n"
            row = {"file": name, "save": 0, "warm_up": True}
            row.update(await _save(client, events, paths[name], text, version))
            rows.append(row)
            print(json.dumps(row), flush=True)
        deadline = time.monotonic() + args.quick_warm_s
        while not rows[-1]["quick_first"] and time.monotonic() < deadline:
            version += 1
            text = (REPO / "examples" / files[0]).read_text() + f"\n# warm-up {nonce} {version}\n"
            row = {"file": files[0], "save": 0, "warm_up": True}
            row.update(await _save(client, events, paths[files[0]], text, version))
            rows.append(row)
            print(json.dumps(row), flush=True)
        for i in range(1, args.saves + 1):
            for name in files:
                version += 1
                text = (REPO / "examples" / name).read_text() + f"\n# save {nonce} {i}\n"
                row: dict[str, Any] = {"file": name, "save": i, "warm_up": i == 0}
                row.update(await _save(client, events, paths[name], text, version))
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        await client.shutdown_async(None)
        client.exit(None)
        await client.stop()
    out: dict[str, Any] = {"saves_per_file": args.saves}
    for name in files:
        timed = [r for r in rows if r["file"] == name and not r["warm_up"]]
        for what in ("first_diagnostic_s", "verdict_s"):
            values = [float(r[what]) for r in timed]
            out[f"{name} {what}"] = {
                "median": statistics.median(values),
                "mean": statistics.fmean(values),
                "min": min(values),
                "max": max(values),
            }
        out[f"{name} verdicts"] = sorted({str(r["verdict"]) for r in timed})
        out[f"{name} quick_first"] = sum(bool(r["quick_first"]) for r in timed)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--saves", type=int, default=8, help="timed saves per file (one more warms up)")
    ap.add_argument("--files", default="relu_cuda.py,softmax_cuda.py", help="files of examples/")
    ap.add_argument("--cache", type=Path, default=None, help="build cache to keep (default: temp)")
    ap.add_argument(
        "--quick-warm-s",
        type=float,
        default=600.0,
        help="save again (untimed) until the quick check answers before the verdict, at most this long",
    )
    args = ap.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="cudice-save-latency-") as tmp:
        cache = args.cache or Path(tmp) / "cache"
        work = Path(tmp) / "work"
        work.mkdir()
        out = asyncio.run(run(args, work, cache))
    out.update(
        machine=f"{platform.node()} {os.cpu_count()} cores",
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        load_avg_before=load_before,
        load_avg_after=os.getloadavg(),
    )
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
