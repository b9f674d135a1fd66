"""The judge's end of a runner: start `run/runner.py` inside the OS boundary and exchange requests.

`RunnerLink(role, ...)` creates a socket pair and a one-shot report pipe, starts the runner
through `boundary.wrap` (or as a plain child, with a `sandbox.*` reason, where the boundary is
unavailable), reads boundary_init's report — written before any candidate code exists in that
process — and then serves `request()`s. A `build` message the runner sends while loading
(its `load_inline`) is answered by the judge's `on_build` callback, so only trusted code writes
the build cache. The runner dies with the judge: `PR_SET_PDEATHSIG` on `unshare`, whose
death takes the namespace's PID 1 (the trusted boundary_init, the runner's parent), and with it
every process in the namespace.

Not covered: a runner that stops answering — the caller's timeout kills the judge's process
group, which ends the runners as above.
"""

from __future__ import annotations

import functools
import json
import os
import select
import socket
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from cudice.verifier.process import descendant_running, gpu_node_cpus, start_near_gpu, tree_threads
from cudice.verifier.run import channel
from cudice.verifier.run.boundary import Missing, default_spec, probe, wrap

Reply = tuple[dict[str, Any], list[bytearray]]


def runner_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The scrubbed environment of a runner: home and temporary files in its private /tmp."""
    from cudice.verifier.run.sandbox import scrubbed_env

    env = scrubbed_env(extra)
    # The runner's uid has no passwd entry; getpass.getuser() (torch's cache-dir defaults, the
    # profiler) reads these first instead of failing in pwd.getpwuid.
    env.update(
        HOME="/tmp",
        TMPDIR="/tmp",
        TORCH_EXTENSIONS_DIR="/tmp/torch_extensions",
        OMP_NUM_THREADS="1",
        USER="cudice-runner",
        LOGNAME="cudice-runner",
    )
    return env


class RunnerTimeout(Exception):
    """A runner did not answer within the request's deadline (a hung kernel or forward)."""

    def __init__(self, limit_s: float) -> None:
        super().__init__(f"no answer within {limit_s:.1f} s")
        self.limit_s = limit_s


class RunnerLink:
    """One runner process and the judge's socket to it."""

    def __init__(
        self,
        role: str,
        *,
        cache_dir: Path,
        log_dir: Path,
        uid: int,
        env: dict[str, str],
        sandboxed: bool = True,
        module: str = "cudice.verifier.run.runner",
    ) -> None:
        self.role = role
        mine, theirs = socket.socketpair()
        report_r, report_w = os.pipe()
        argv = [sys.executable, "-m", module, "--fd", str(theirs.fileno()), "--role", role]
        boxed = sandboxed and probe() is None
        if sandboxed:
            argv, self.missing = wrap(argv, default_spec(cache_dir, uid=uid, report_fd=report_w))
        else:
            self.missing = [
                Missing(
                    "sandbox.disabled",
                    "the runner was started without the OS boundary (test setting `sandboxed=False`)",
                )
            ]
        self.log_path = log_dir / f"{role}.log"
        self._log: IO[bytes] = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            argv,
            pass_fds=(theirs.fileno(), report_w) if boxed else (theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
            env=env,
            preexec_fn=functools.partial(start_near_gpu, gpu_node_cpus()),
        )
        theirs.close()
        os.close(report_w)
        self.sock = mine
        self.ready = False  # set once its `ready` message was read
        self.runner_pid: int | None = None  # the runner process itself, found at `ready`
        self.threads_at_ready = 0
        self.report: dict[str, Any] = {}
        with os.fdopen(report_r, "rb") as f:  # EOF at once where no boundary_init runs (plain child)
            line = f.readline()
        if line:
            try:
                self.report = json.loads(line)
            except ValueError:
                self.report = {
                    "missing": [{"code": "sandbox.report", "message": "unreadable boundary report"}]
                }
        if boxed and not line:
            self.missing = [
                Missing(
                    "sandbox.unavailable",
                    f"the boundary did not report before the runner started; see {self.log_path.name}",
                )
            ]
        self.missing += [
            Missing(str(m.get("code", "sandbox.partial")), str(m.get("message", "")))
            for m in self.report.get("missing", [])
        ]

    def wait_ready(self) -> dict[str, Any]:
        rep, _ = channel.recv(self.sock, 0)
        self.ready = True
        self.threads_at_ready = self.threads()  # before any candidate code ran in it
        # the runner's own process, found while no candidate code has run (later, a process the
        # candidate starts could carry the module's name in its argv, or the runner's be rewritten)
        self.runner_pid = descendant_running(self.proc.pid, "cudice.verifier.run.runner")
        return rep

    def threads(self) -> int:
        """Threads of the runner and everything it started, counted from /proc outside it."""
        return tree_threads(self.proc.pid)

    def request(
        self,
        header: dict[str, Any],
        blobs: Sequence[memoryview] = (),
        *,
        max_bytes: int = 0,
        on_build: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        deadline_s: float | None = None,
        spin_s: float = 0.0,
    ) -> Reply:
        """Send one request and return its reply, answering `build` messages in between.

        `deadline_s`: the reply must begin within that many seconds, else `RunnerTimeout` (a build the
        runner asks for in between restarts the wait: compiling has its own limit). `spin_s`: poll
        the socket without sleeping for up to that long first (`channel.poll_readable`)."""
        channel.send(self.sock, header, blobs)
        if spin_s > 0:
            channel.poll_readable(self.sock, spin_s)
        while True:
            if deadline_s is not None:
                ready, _, _ = select.select([self.sock], [], [], deadline_s)
                if not ready:
                    raise RunnerTimeout(deadline_s)
            rep, got = channel.recv(self.sock, max_bytes)
            if rep.get("op") != "build":
                return rep, got
            answer = on_build(rep) if on_build is not None else {"ok": False, "error": "no builds here"}
            channel.send(self.sock, answer)

    def log_tail(self, limit: int = 4000) -> str:
        self._log.flush()
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return ""
        return data[-limit:].decode(errors="replace")

    def close(self) -> None:
        try:
            channel.send(self.sock, {"op": "exit"})
        except OSError:
            pass
        self.sock.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()
