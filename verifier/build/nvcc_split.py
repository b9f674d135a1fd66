"""nvcc's own compile steps, with the host front end and the device compiler side by side.

Role: `nvcc -c x.cu` runs, one after the other, the host preprocessor and `cudafe++` (the host
front end, which parses the whole translation unit, torch's headers included), the device
preprocessor, `cicc` (which parses it all again, then compiles the device code), `ptxas`,
`fatbinary`, and the host compiler. The two front ends take most of the time and depend on each
other only through the module-id file that `cudafe++` writes and `cicc` reads. `plan()` reads
the steps from `nvcc --dryrun` and writes that file first (an id of the same form, from the
object's content hash), so `run()` can start both chains at once and the host compile after
them, which saves most of one front end's time for a `cuda.cu` that includes torch
(docs/benchmarks.md). With the same module id the object is byte-identical to nvcc's
(tests/verifier/build/test_nvcc_split.py).

Contract: `plan()` returns None whenever the dry run is not the single-architecture shape
described above (several `-gencode` targets, `-rdc`, `-E`, another nvcc), and the caller runs
nvcc itself. `run()` reports what nvcc would: the output of every step that ran, in nvcc's
order, and a non-zero status when a step failed; when the host front end fails, the device
chain is stopped and its output dropped (nvcc would not have started it). Every step is a
child in its own session that dies with the thread that started it (process.run_process).
`run(host_compile=False)` is a check: `cudafe++` runs with EDG's `--no_code_gen` (it parses
and reports, but writes no host source: a fifth to a third of its time on a `cuda.cu` over
torch's headers), and the host compile is skipped; both only make what the host compiler
reads. With a `prefix_cache` folder, a check's two preprocessor steps read the headers' part of
the source from it (build/ppcache.py; a step it cannot answer runs as nvcc's). What a check
prints is what the build's steps print (tests/verifier/build/test_check_only.py compares them on
errors and warnings of both front ends, CUDA-specific ones included).

Not covered: parallel steps across several architectures (nvcc `--threads` does that), and
keeping the intermediate files (they are deleted after the step).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cudice.verifier.process import CancelToken, run_process

_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_GEN_ID = "--gen_module_id_file"
_ID_FILE = re.compile(r'--module_id_file_name\s+"?([^"\s]+)"?')
# EDG's switch to stop after the front end: cudafe++ then parses and reports as always but does not
# write the host source (`.cudafe1.cpp`) that only the host compiler reads
_NO_CODE_GEN = "--no_code_gen"


@dataclass(frozen=True, slots=True)
class Plan:
    """nvcc's steps for one object: two chains that may run side by side, then the host compile."""

    env: dict[str, str]
    host_front: tuple[str, ...]  # host preprocessor, cudafe++ (reads the module id)
    check_front: tuple[str, ...]  # the same, cudafe++ with `--no_code_gen` (a check: no host source written)
    device: tuple[str, ...]  # device preprocessor, cicc, ptxas, fatbinary
    host_compile: str
    module_id_file: Path
    module_id: str
    keep_dir: Path
    source: Path
    prefix_cache: Path | None = None  # a check's two preprocessor steps go through build/ppcache.py


def plan(
    nvcc_cmd: list[str], keep_dir: Path, seed: str, env: dict[str, str], prefix_cache: Path | None = None
) -> Plan | None:
    """The steps of `nvcc_cmd` (a `... -c src -o obj` command) with intermediates in `keep_dir`, or None.
    With `prefix_cache` (a folder), a check (`run(host_compile=False)`) preprocesses through
    build/ppcache.py, which keeps the headers' part of the source's preprocessed text there."""
    if "-c" not in nvcc_cmd or "-o" not in nvcc_cmd or any(a in nvcc_cmd for a in ("-rdc=true", "-dc", "-E")):
        return None
    keep_dir.mkdir(parents=True, exist_ok=True)
    try:
        dry = subprocess.run(
            [nvcc_cmd[0], "--dryrun", "--keep", "--keep-dir", str(keep_dir), *nvcc_cmd[1:]],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            start_new_session=True,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if dry.returncode != 0:
        return None
    step_env = dict(env)
    steps: list[str] = []
    for raw in dry.stderr.splitlines():
        if not raw.startswith("#$ "):
            continue
        line = raw[3:].strip()
        m = _ASSIGN.match(line)
        if m is not None:  # nvcc's own variables (PATH, CICC_PATH, LD_LIBRARY_PATH...): taken as values
            value = m.group(2).strip()
            try:
                words = shlex.split(value)
            except ValueError:
                return None
            step_env[m.group(1)] = words[0] if len(words) == 1 else value
            continue
        steps.append(line)
    fronts = [i for i, s in enumerate(steps) if s.split(" ", 1)[0] == "cudafe++"]
    if len(fronts) != 1 or fronts[0] != 1 or len(steps) < 5:
        return None
    front, device, last = steps[:2], steps[2:-1], steps[-1]
    ids = _ID_FILE.findall(front[1])
    cicc = [s for s in device if "cicc" in s.split(" ", 1)[0]]
    if (
        _GEN_ID not in front[1]
        or len(ids) != 1
        or len(cicc) != 1
        or _ID_FILE.findall(cicc[0]) != ids
        or not any(s.startswith("fatbinary") for s in device)
        or " -c " not in f" {last} "
        or any(s.startswith(("nvlink", "cudafe++")) for s in device)
    ):
        return None
    source = Path(nvcc_cmd[nvcc_cmd.index("-c") + 1])
    name = source.name
    mangled = re.sub(r"\W", "_", name)
    module_id = f"_{seed[:8]}_{len(name)}_{mangled}_{seed[8:16]}"
    front[1] = front[1].replace(_GEN_ID, "", 1)
    program, args = front[1].split(" ", 1)
    check = (front[0], f"{program} {_NO_CODE_GEN} {args}")
    return Plan(
        step_env,
        tuple(front),
        check,
        tuple(device),
        last,
        Path(ids[0]),
        module_id,
        keep_dir,
        source,
        prefix_cache,
    )


Step = tuple[int, str, bool, bool]  # process.run_process's (returncode, output, cancelled, timed_out)


def run_chains(
    p: Plan,
    front_steps: tuple[str, ...],
    deadline: float,
    cancel: CancelToken | None,
    cwd: Path | None,
    on_output: Callable[[str], None] | None = None,
    preprocess_cached: bool = False,
) -> tuple[list[Step], list[Step]]:
    """The host front end's `front_steps` (their output to `on_output` as it comes) beside the
    device chain in a thread of its own, each chain's steps' results kept apart. A chain stops at
    its first failed, cancelled or timed-out step; the device chain also stops when the front end
    does, or on `cancel`. `preprocess_cached`: each chain's first step (its preprocessor) is
    served through `p.prefix_cache` where the plan has one (build/ppcache.py)."""
    from cudice.verifier.build import ppcache

    p.module_id_file.write_text(p.module_id)
    stop_device = threading.Event()

    class _Either:  # the caller's cancel, or the host front end's failure
        def is_set(self) -> bool:
            return stop_device.is_set() or (cancel is not None and cancel.is_set())

    def chain(
        steps: tuple[str, ...],
        token: object,
        out: list[Step],
        live: Callable[[str], None] | None = None,
    ) -> None:
        for i, step in enumerate(steps):
            left = max(deadline - time.monotonic(), 0.1)
            res = None
            if i == 0 and preprocess_cached and p.prefix_cache is not None:
                res = ppcache.run_step(step, p.source, p.prefix_cache, p.env, cwd, left, token)  # type: ignore[arg-type]
            if res is None:
                res = run_process(["sh", "-c", step], left, token, cwd, live, env=p.env)  # type: ignore[arg-type]
            out.append(res)
            if res[0] != 0 or res[2] or res[3]:
                return

    front: list[Step] = []
    device: list[Step] = []
    worker = threading.Thread(target=chain, args=(p.device, _Either(), device), daemon=True)
    worker.start()
    try:
        chain(front_steps, cancel, front, on_output)  # its errors stream as nvcc's would, first
        if front[-1][0] != 0 or front[-1][2] or front[-1][3]:
            stop_device.set()
        worker.join()
    finally:
        stop_device.set()
        worker.join(timeout=30)
    return front, device


def run(
    p: Plan,
    timeout_s: float,
    cancel: CancelToken | None,
    cwd: Path | None,
    on_output: Callable[[str], None] | None = None,
    host_compile: bool = True,
) -> tuple[int, str, bool, bool]:
    """(returncode, output, cancelled, timed_out), as process.run_process reports a plain nvcc.

    `host_compile=False` stops after the two front ends and the device chain: every step that
    parses the candidate has run and reported, and no object is written (a check, not a build)."""
    deadline = time.monotonic() + timeout_s
    front, device = run_chains(
        p,
        p.host_front if host_compile else p.check_front,
        deadline,
        cancel,
        cwd,
        on_output,
        preprocess_cached=not host_compile,
    )
    front_out = "".join(r[1] for r in front)
    f_rc, _, f_cancel, f_timeout = front[-1]
    if f_rc != 0 or f_cancel or f_timeout:
        return _emit(f_rc or 1, front_out, "", f_cancel, f_timeout, None, p)
    output = "".join(r[1] for r in device)
    d_rc, _, d_cancel, d_timeout = device[-1]
    if d_rc != 0 or d_cancel or d_timeout:
        return _emit(
            d_rc or 1,
            front_out,
            output,
            d_cancel and cancel is not None and cancel.is_set(),
            d_timeout,
            on_output,
            p,
        )
    if not host_compile:
        return _emit(0, front_out, output, False, False, on_output, p)
    res = run_process(
        ["sh", "-c", p.host_compile], max(deadline - time.monotonic(), 0.1), cancel, cwd, None, env=p.env
    )
    return _emit(res[0], front_out, output + res[1], res[2], res[3], on_output, p)


def _emit(
    rc: int,
    streamed: str,
    rest: str,
    cancelled: bool,
    timed_out: bool,
    on_output: Callable[[str], None] | None,
    p: Plan,
) -> tuple[int, str, bool, bool]:
    """The result; `rest` (what the device chain and the host compile printed) goes to `on_output` now."""
    shutil.rmtree(p.keep_dir, ignore_errors=True)
    if on_output is not None:
        for line in rest.splitlines(keepends=True):
            on_output(line)
    return rc, streamed + rest, cancelled, timed_out


def environment() -> dict[str, str]:
    """The environment nvcc and its steps run in (process.run_process's: the C locale)."""
    return {**os.environ, "LC_ALL": "C", "LANG": "C"}
