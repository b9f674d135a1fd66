"""Child script for the `cudice eval` signal tests: `python eval_signal_stand_in.py SCENARIO ROOT`.

It runs the real `eval_command` in its own process (signals are sent to that process, never to
pytest's) over two problems `a.py` and `b.py` with a stand-in backend whose verdicts and timing
the scenario sets, and prints one JSON line: the exit code, the printed JSON's verdicts, the
records `--out` left and what the stand-in saw. Scenarios:

- `stale`: a first run finishes both; a second run without `--resume`, whose `b.py` never
  finishes, gets SIGTERM once `a.py`'s record is written;
- `harvest`: both verdicts are done at once and SIGTERM arrives while the first one is being
  written: the second, already done, must still be reported;
- `shutdown`: both verdicts arrive, then SIGTERM (and a second one) during the backend's
  shutdown: the run is not interrupted and the shutdown finishes.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import cudice.verifier.eval.cli as cli
import cudice.verifier.eval.report as report
from cudice.verifier.source.result import Stage, Verdict, VerifyResult

seen: dict[str, Any] = {"shutdown_finished": False}


class StandIn:
    num_gpus = 1

    def __init__(self, hang: set[str] = frozenset(), signal_in_shutdown: bool = False) -> None:
        self.hang, self.signal_in_shutdown = hang, signal_in_shutdown
        self.pending: list[Future[VerifyResult]] = []

    def __enter__(self) -> StandIn:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.signal_in_shutdown:
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)  # the signals are handled meanwhile
        for fut in self.pending:
            fut.cancel()
        seen["shutdown_finished"] = True

    def submit(
        self, path: Path, reference: Path | None = None, key: str | None = None
    ) -> Future[VerifyResult]:
        fut: Future[VerifyResult] = Future()
        if key in self.hang:
            self.pending.append(fut)
        else:
            fut.set_result(
                VerifyResult(Verdict.CORRECT, Stage.TIMING, str(path), speedup=2.0, speedup_min=1.5)
            )
        return fut


def run(root: Path, backend: StandIn, *extra: str) -> int:
    cli._open_backend = lambda config, workers, ray: (backend, True)  # type: ignore[assignment]
    args = [str(root / "p"), str(root / "c"), "--json", "--out", str(root / "out"), *extra]
    try:
        cli.eval_command.main(args, standalone_mode=False)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def main() -> None:
    scenario, root = sys.argv[1], Path(sys.argv[2])
    for sub in ("p", "c"):
        (root / sub).mkdir(parents=True, exist_ok=True)
        for name in ("a.py", "b.py"):
            (root / sub / name).write_text(f"# {sub} {name}\n")
    records = root / "out" / "problems"
    if scenario == "stale":
        seen["first_rc"] = run(root, StandIn())

        def stop_once_a_is_written() -> None:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:  # the second run deletes, then rewrites a's record
                if (records / "a.json").exists() and not (records / "b.json").exists():
                    os.kill(os.getpid(), signal.SIGTERM)
                    return
                time.sleep(0.01)

        threading.Thread(target=stop_once_a_is_written, daemon=True).start()
        rc = run(root, StandIn(hang={"b.py"}))
    elif scenario == "harvest":
        write = report.write_problem
        calls = []

        def slow_write(*args: Any, **kwargs: Any) -> Path:
            calls.append(args[1])
            if len(calls) == 1:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.2)  # the signal is handled here, in the middle of writing a's record
            return write(*args, **kwargs)

        report.write_problem = slow_write  # type: ignore[assignment]
        rc = run(root, StandIn())
    elif scenario == "shutdown":
        rc = run(root, StandIn(signal_in_shutdown=True))
    else:
        raise SystemExit(f"unknown scenario {scenario}")
    scores = json.loads((root / "out" / "scores.json").read_text())
    print(
        json.dumps(
            {
                "rc": rc,
                "verdicts": {r["problem"]: r["verdict"] for r in scores["per_problem"]},
                "interrupted": scores["interrupted"],
                "records": sorted(p.name for p in records.glob("*.json")),
                **seen,
            }
        )
    )


if __name__ == "__main__":
    main()
