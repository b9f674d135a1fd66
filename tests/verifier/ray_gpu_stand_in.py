"""Child module for the Ray GPU-placement test, started by `sandbox.run_in_child` as its worker.

Started by the sandbox in place of the real worker (which needs a CUDA GPU). It records which
GPU it was given (`CUDA_VISIBLE_DEVICES`) and whether another run was active at the same time
(marker files `active-*`, held for a short window), then writes `{"ran": true}`. It speaks the
sandbox's protocol: the job on stdin and the result on `--result-fd FD` (or, with two plain
arguments, job and result files).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

WINDOW_S = 0.3  # how long a run stays "active": a second concurrent run on the GPU would see it


def main(argv: list[str]) -> int:
    if "--result-fd" in argv:
        job = json.loads(sys.stdin.read())
        fd = int(argv[argv.index("--result-fd") + 1])
    else:
        job, fd = json.loads(Path(argv[0]).read_text()), None
    folder, name = Path(job["folder"]), job["name"]
    mine = folder / f"active-{name}"
    seen = {p.name for p in folder.glob("active-*")}
    mine.touch()
    time.sleep(WINDOW_S)
    seen |= {p.name for p in folder.glob("active-*") if p != mine}
    mine.unlink()
    row = {"gpu": os.environ.get("CUDA_VISIBLE_DEVICES"), "overlap": sorted(seen), "worker": os.getppid()}
    (folder / f"ran-{name}.json").write_text(json.dumps(row))
    result = json.dumps({"ran": True})
    if fd is None:
        Path(argv[1]).write_text(result)
    else:
        with os.fdopen(fd, "w") as f:
            f.write(result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
