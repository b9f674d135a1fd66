"""What does one judge -> runner request cost around a tiny GPU forward? (GPU only)

The judge times the candidate by wall-clock requests to a runner process (verifier/run/judge.py). On
the H200 those requests cost 0.7-2.6 ms around a 0.02 ms forward. This microbenchmark takes the
judge's pieces one at a time, with plain processes and no cudice code in the loop: a server that
spins on a socket and runs `relu` on 64x1024 floats plus a synchronisation per request, and a
client that times requests, adding in turn a second server interleaved, the client's own probe
kernel before each request (`judge_clock.wait_gpu_idle`), stopping the other server around each
request (`judge_clock.paused_runner`), a profiler session in the servers (CUPTI), and a fresh
CUDA generator per request (seal.py). The baseline is the in-process CUDA-event time of the same
forward, in the same run.

Usage: `python bench/request_cost.py [--requests N]`; prints one line per variant (µs).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import time

SERVER = r"""
import os, select, socket, sys, torch
sock = socket.socket(fileno=int(sys.argv[1]))
profile, generator = sys.argv[2] == "1", sys.argv[3] == "1"
x = torch.randn(64 * 1024, device="cuda")
torch.relu(x); torch.cuda.synchronize()
if profile:
    from torch.profiler import ProfilerActivity, profile as prof
    with prof(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
        torch.relu(x); torch.cuda.synchronize()
sock.sendall(b"r")
while True:
    while not select.select([sock], [], [], 0)[0]:
        pass
    if sock.recv(1) != b"g":
        break
    if generator:
        g = torch.Generator(device="cuda").manual_seed(1)
        torch.randint(0, 9, (4096,), generator=g, device="cuda")
    torch.relu(x)
    torch.cuda.synchronize()
    sock.sendall(b"d")
"""


def start(profile: bool, generator: bool) -> tuple[subprocess.Popen[bytes], socket.socket]:
    mine, theirs = socket.socketpair()
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(theirs.fileno()), str(int(profile)), str(int(generator))],
        pass_fds=(theirs.fileno(),),
    )
    theirs.close()
    assert mine.recv(1) == b"r"
    return proc, mine


def wait_state(pid: int, stopped: bool) -> None:
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        if (state in "Tt") == stopped:
            return


def run(n: int, *, two: bool, probe: bool, pause: bool, profile: bool, generator: bool) -> list[float]:
    import torch

    tiny = torch.zeros(1, device="cuda")
    servers = [start(profile, generator) for _ in range(2 if two else 1)]
    times: list[float] = []
    try:
        for i in range(n + 50):
            k = i % len(servers)
            other = servers[1 - k][0] if two else None
            if pause and other is not None:
                os.kill(other.pid, signal.SIGSTOP)
                wait_state(other.pid, True)
            if probe:
                tiny.add_(1.0)
                torch.cuda.synchronize()
            sock = servers[k][1]
            t0 = time.perf_counter()
            sock.sendall(b"g")
            while not __import__("select").select([sock], [], [], 0)[0]:
                pass
            sock.recv(1)
            if i >= 50 and k == 0:
                times.append(time.perf_counter() - t0)
            if pause and other is not None:
                os.kill(other.pid, signal.SIGCONT)
                wait_state(other.pid, False)
    finally:
        for proc, sock in servers:
            sock.sendall(b"x")
            proc.wait(timeout=30)
    return times


def events_us(n: int) -> list[float]:
    import torch

    x = torch.randn(64 * 1024, device="cuda")
    out = []
    for _ in range(n):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        torch.relu(x)
        e.record()
        torch.cuda.synchronize()
        out.append(s.elapsed_time(e) * 1e3)
    return out


def show(name: str, us: list[float]) -> None:
    us = sorted(us)
    q = statistics.quantiles(us, n=20)
    print(
        f"{name:<46} n={len(us):5d} min {us[0]:8.1f}  q10 {q[1]:8.1f}  q25 {q[4]:8.1f}  "
        f"median {q[9]:8.1f}  q90 {q[17]:8.1f} us",
        flush=True,
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1000)
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("request_cost: needs a CUDA GPU", file=sys.stderr)
        return 2
    show("baseline: in-process CUDA events of the forward", events_us(args.requests))
    variants = [
        ("one server", dict(two=False, probe=False, pause=False, profile=False, generator=False)),
        (
            "+ probe kernel before each request",
            dict(two=False, probe=True, pause=False, profile=False, generator=False),
        ),
        ("two servers interleaved", dict(two=True, probe=False, pause=False, profile=False, generator=False)),
        (
            "two + other stopped around each request",
            dict(two=True, probe=False, pause=True, profile=False, generator=False),
        ),
        ("two + probe", dict(two=True, probe=True, pause=False, profile=False, generator=False)),
        (
            "two + probe + stopped (the judge's design)",
            dict(two=True, probe=True, pause=True, profile=False, generator=False),
        ),
        (
            "one server + profiler session (CUPTI)",
            dict(two=False, probe=False, pause=False, profile=True, generator=False),
        ),
        (
            "one server + CUDA generator per request",
            dict(two=False, probe=False, pause=False, profile=False, generator=True),
        ),
        ("all of the above", dict(two=True, probe=True, pause=True, profile=True, generator=True)),
    ]
    for name, kw in variants:
        try:
            show(name, [t * 1e6 for t in run(args.requests, **kw)])  # type: ignore[arg-type]
        except Exception as exc:  # one broken variant should not hide the others
            print(f"{name}: failed: {type(exc).__name__}: {exc}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
