"""The editor's save → verdict time for kernels the verifier has never seen.

What a user waits for: the language server (`python -m cudice.server`, what editors run) is up, the
user saves a new KernelBench candidate, and the verdict (with its speedup on a GPU box) arrives as
`cudice/status` with `lastVerdict` set and `verifying` false. Candidates come from
`bench/kb_candidates.py` (self-contained files, reference included), each a distinct source, so
every save is a fresh build. The first save warms the server's workers and the shared header
objects and is reported apart; the others are timed one after the other, as a user saves.

How the text reaches the server is what a user's editor does: the file is opened as a draft (the
candidate with one line less), changed to the candidate's text (`didChange`), and saved `lead`
seconds later (`--leads 0,8`: each lead gets its own candidates). With lead 0 the save follows the
change at once, so nothing could be built before it; with a lead the server may build the unsaved
text in the meantime (on a GPU box: server/prebuild.py), as it would while a user looks over what
they typed. Each lead's p50/p95 is reported.

    python bench/editor_verdict.py [--candidates 8] [--leads 0] [--offset 300] [--compile-only]

Baseline in the same run: a plain `load_inline` build of the same files one after the other, after
the editor part (skip with --skip-load-inline); it is what a KernelBench-style harness pays before it
can even run the kernel. Prints one line per save and a JSON summary. No model is loaded
(`CUDICE_NO_BUNDLED_MODEL=1`): generation is not part of this figure.
Not covered: a real editor's own latency (Neovim/VS Code draw the lens after the notification).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lsprotocol import types as lsp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kb_candidates
from lsp_latency import lsp_client, percentile
from verify_speed import PlainLoadInline


async def _verdict_of(uri: str, statuses: list[dict[str, Any]], arrived: asyncio.Event, start: int) -> str:
    """Wait (event-driven, 900 s bound) for a settled status of `uri` after index `start`."""
    deadline = time.monotonic() + 900
    while True:
        for s in statuses[start:]:
            if s.get("uri") == uri and s.get("lastVerdict") is not None and not s.get("verifying"):
                return str(s["lastVerdict"])
        arrived.clear()
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no verdict for {uri} within 900 s")
        await asyncio.wait_for(arrived.wait(), left)


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    leads = [float(x) for x in args.leads.split(",")]
    per_lead = [lead for lead in leads for _ in range(args.candidates)]
    plan = [leads[0], *per_lead]  # the first save warms up
    cands = kb_candidates.generate(args.offset + len(plan))[args.offset :]
    paths = []
    for c in cands:
        paths.append(workdir / f"{c.name}.py")
        paths[-1].write_text(c.source)
    env = {**os.environ, "CUDICE_CACHE_DIR": str(workdir / "cache"), "CUDICE_NO_BUNDLED_MODEL": "1"}
    statuses: list[dict[str, Any]] = []
    arrived = asyncio.Event()
    client = lsp_client(statuses, arrived.set)
    await client.start_io(sys.executable, "-m", "cudice.server", "--log-level", "warning", env=env)
    opts = {"cudice": {"verify": {"onSave": True, "compileOnly": args.compile_only}}}
    caps = lsp.ClientCapabilities(window=lsp.WindowClientCapabilities(work_done_progress=True))
    await client.initialize_async(
        lsp.InitializeParams(capabilities=caps, initialization_options=opts, root_uri=workdir.as_uri())
    )
    client.initialized(lsp.InitializedParams())
    rows: list[dict[str, Any]] = []
    try:
        for i, (cand, path, lead) in enumerate(zip(cands, paths, plan, strict=True)):
            uri = path.as_uri()
            draft = "\n".join(cand.source.splitlines()[:-1]) + "\n"
            client.text_document_did_open(
                lsp.DidOpenTextDocumentParams(
                    lsp.TextDocumentItem(uri=uri, language_id="python", version=1, text=draft)
                )
            )
            client.text_document_did_change(
                lsp.DidChangeTextDocumentParams(
                    lsp.VersionedTextDocumentIdentifier(uri=uri, version=2),
                    [lsp.TextDocumentContentChangeWholeDocument(text=cand.source)],
                )
            )
            if lead > 0:
                await asyncio.sleep(lead)  # the user's pause before saving (what is measured is after it)
            start = len(statuses)
            t0 = time.perf_counter()
            client.text_document_did_save(lsp.DidSaveTextDocumentParams(lsp.TextDocumentIdentifier(uri)))
            verdict = await _verdict_of(uri, statuses, arrived, start)
            row = {
                "candidate": cand.name,
                "category": cand.category,
                "verdict": verdict,
                "save_to_verdict_s": time.perf_counter() - t0,
                "lead_s": lead,
                "warm_up": i == 0,
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
            client.text_document_did_close(lsp.DidCloseTextDocumentParams(lsp.TextDocumentIdentifier(uri)))
    finally:
        await client.shutdown_async(None)
        client.exit(None)
        await client.stop()
    timed = [r["save_to_verdict_s"] for r in rows if not r["warm_up"]]
    out: dict[str, Any] = {
        "num_timed": len(timed),
        "warm_up_s": rows[0]["save_to_verdict_s"],
        "save_to_verdict_p50_s": statistics.median(timed),
        "save_to_verdict_p95_s": percentile(timed, 0.95),
        "verdicts": {v: sum(1 for r in rows if r["verdict"] == v) for v in {r["verdict"] for r in rows}},
        "compile_only": args.compile_only,
        "by_lead": {
            str(lead): {
                "p50_s": statistics.median(ws),
                "p95_s": percentile(ws, 0.95),
                "n": len(ws),
            }
            for lead in leads
            if (ws := [r["save_to_verdict_s"] for r in rows if not r["warm_up"] and r["lead_s"] == lead])
        },
    }
    if not args.skip_load_inline:
        walls = []
        for path in paths[1 : 1 + args.candidates]:
            wall, ok = PlainLoadInline(path).wait()
            walls.append(wall)
            print(json.dumps({"load_inline": path.stem, "wall_s": wall, "built": ok}), flush=True)
        out["load_inline_p50_s"] = statistics.median(walls)
        out["ratio_load_inline_over_editor_p50"] = out["load_inline_p50_s"] / out["save_to_verdict_p50_s"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--candidates", type=int, default=8, help="timed saves (one more warms up)")
    ap.add_argument("--offset", type=int, default=300, help="first kb_candidates index (distinct sources)")
    ap.add_argument(
        "--leads",
        default="0",
        help="seconds between the last change and the save, comma-separated (each with its own candidates)",
    )
    ap.add_argument("--compile-only", action="store_true")
    ap.add_argument("--skip-load-inline", action="store_true")
    ap.add_argument("--quick", action="store_true", help="4 timed saves (bench/run_gpu.sh passes it)")
    args = ap.parse_args()
    if args.quick:
        args.candidates = min(args.candidates, 4)
    with tempfile.TemporaryDirectory(prefix="cudice-editor-verdict-") as tmp:
        out = asyncio.run(run(args, Path(tmp)))
    out.update(
        machine=f"{platform.node()} {os.cpu_count()} cores",
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    )
    by_lead = "; ".join(
        f"saved {lead} s after the change: p50 {v['p50_s']:.1f} s, p95 {v['p95_s']:.1f} s (n={v['n']})"
        for lead, v in out["by_lead"].items()
    )
    print(
        f"RESULT editor save->verdict {by_lead}; warm-up {out['warm_up_s']:.1f} s; verdicts {out['verdicts']}"
    )
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
