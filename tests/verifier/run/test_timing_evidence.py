"""The timing evidence the judge relies on, without a GPU: digests (run/witness.py), sealed input
sets (run/seal.py), the per-GPU lease (run/gpu_lease.py) and thread counts read from /proc (process.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, cast

import pytest
from cudice.verifier.process import paused, process_state, tree_pids, tree_schedstat, tree_threads
from cudice.verifier.run import seal, witness
from cudice.verifier.run.gpu_lease import GpuLease, LeaseTimeout
from cudice.verifier.run.judge import bias_too_large, estimates_disagree, interval_too_wide

torch = pytest.importorskip("torch")


def _digest(x: torch.Tensor, key: int) -> list[float]:
    return [float(v) for v in witness.digest([x], key, "cpu")]


def test_digest_needs_every_element_and_changes_with_the_key() -> None:
    x = torch.randn(1000, 37)
    d = _digest(x, 1)
    assert len(d) == witness.NUM_DIGESTS and len(set(d)) == witness.NUM_DIGESTS
    assert d == pytest.approx(_digest(x.clone(), 1), rel=1e-12)
    y = x.clone()
    y[999, 36] += 1.0  # one element of 37,000
    assert all(abs(a - b) > 0.4 for a, b in zip(_digest(y, 1), d, strict=True))
    assert _digest(x, 2)[0] != pytest.approx(d[0], rel=1e-6)  # other weights
    # signed weights of magnitude in [0.5, 1.5): bounded by the sum of |x|, far below it in practice
    plain = float(x.double().abs().sum())
    assert all(abs(v) <= 1.5 * plain and abs(v) < 0.1 * plain for v in d)
    w = witness._weights(10_000, 5, "cpu")[0]
    assert 0.5 <= float(w.abs().min()) and float(w.abs().max()) < 1.5
    assert 0.45 < float((w > 0).double().mean()) < 0.55


def test_digest_accepts_honest_rounding_and_rejects_stale_or_partial_outputs() -> None:
    ref = torch.randn(4096, 64)
    key = 12345
    want = _digest(ref, key)
    bound = witness.bound(ref, 1e-2 * float(ref.square().mean().sqrt()), 1e-2)
    honest = ref * (1 + 1e-5 * torch.randn_like(ref))  # another summation order, say
    assert witness.check(_digest(honest, key), want, [bound]).ok
    stale = torch.randn_like(ref)  # what the buffer held before the work finished: same statistics
    partial = ref.clone()
    partial[2048:] = 0.0  # half of the work not done yet
    for bad in (stale, partial, torch.full_like(ref, float("nan"))):
        verdict = witness.check(_digest(bad, key), want, [bound])
        assert not verdict.ok and verdict.index == 0


def test_integer_outputs_must_match_exactly() -> None:
    idx = torch.randint(0, 100, (5000,))
    key = 99
    bound = witness.bound(idx, 0.0, 0.0)
    assert witness.check(_digest(idx, key), _digest(idx.clone(), key), [bound]).ok
    off = idx.clone()
    off[7] += 1
    assert not witness.check(_digest(off, key), _digest(idx, key), [bound]).ok


def test_a_missing_digest_fails() -> None:
    assert not witness.check([], [1.0] * witness.NUM_DIGESTS, [0.1]).ok


def test_sealing_is_exact_hides_the_values_and_is_undone_by_the_same_key() -> None:
    x = torch.randn(3, 5000)
    idx = torch.randint(0, 10, (4097,))
    half = torch.randn(100).half()
    mask = torch.rand(333) > 0.5
    originals = [t.clone() for t in (x, idx, half, mask)]
    tensors = [x, idx, half, mask, 7]
    seal.toggle(tensors, 424242)
    assert not torch.equal(x.view(torch.int32), originals[0].view(torch.int32))
    assert not torch.equal(idx, originals[1])
    seal.toggle(tensors, 424242)
    for t, o in zip(tensors, originals, strict=False):
        assert torch.equal(
            t.view(torch.uint8) if t.dtype == torch.bool else t,
            o.view(torch.uint8) if o.dtype == torch.bool else o,
        )
    assert tensors[4] == 7
    seal.toggle(tensors[:1], 1)
    seal.toggle(tensors[:1], 2)  # another key does not unseal
    assert not torch.equal(x, originals[0])


def test_the_seal_never_repeats_and_covers_every_dtype_and_length() -> None:
    """Known values in an input reveal the key stream only where they are: a sealed block of
    zeros shows no repeated word, and every dtype and byte length (odd ones too) round-trips."""
    zeros = torch.zeros(1 << 16, dtype=torch.int32)
    seal.toggle([zeros], 99)
    assert zeros.unique().numel() > 0.99 * zeros.numel()
    words = seal.stream_words(0, 1000, 5, "cpu")
    assert torch.equal(seal.stream_words(37, 100, 5, "cpu"), words[37:137])
    assert int(words.min()) >= 0 and int(words.max()) < 1 << 32
    odd = [
        torch.randn(101).half(),
        torch.randint(0, 255, (7,), dtype=torch.uint8),
        torch.randn(3, dtype=torch.complex128),
        torch.tensor(3.5),
        torch.rand(13) > 0.5,
    ]
    originals = [t.clone() for t in odd]
    seal.toggle(odd, 2**63 - 1)
    assert not torch.equal(odd[1], originals[1]) and not torch.equal(
        odd[0].view(torch.int16), originals[0].view(torch.int16)
    )
    seal.toggle(odd, 2**63 - 1)
    for t, o in zip(odd, originals, strict=True):
        assert torch.equal(t.reshape(-1).view(torch.uint8), o.reshape(-1).view(torch.uint8))


@pytest.mark.gpu
def test_the_gpu_kernels_give_their_pytorch_forms_bit_for_bit() -> None:
    """The seal and the digest run as NVRTC kernels on the GPU: the same bits as the PyTorch forms
    the judge and the runner fall back to (a mismatch would fail every honest timed call)."""
    assert seal._cuda_kernel() is not None and witness._cuda_kernel() is not None
    x = torch.randn(1_000_003, device="cuda")
    sealed = x.clone()
    seal.toggle([sealed], 1234567)
    by_torch = x.clone().view(torch.int32)
    by_torch.bitwise_xor_(
        seal._as_int32(seal.stream_words(0, x.numel(), seal.tensor_key(1234567, 0), "cuda"))
    )
    assert torch.equal(sealed.view(torch.int32), by_torch)
    out = torch.zeros(witness.NUM_DIGESTS, dtype=torch.float64, device="cuda")
    witness.digest_tensor(x, 77, out, 0)
    w = witness._weights(x.numel(), 77, "cuda")
    want = (w * x.double()).sum(dim=1)
    assert torch.allclose(out, want, rtol=1e-9, atol=1e-9)


def test_a_non_contiguous_input_is_refused() -> None:
    with pytest.raises(ValueError, match="contiguous"):
        seal.toggle([torch.randn(8, 8).t()], 1)


def _hold(path: Path, mode: str, seconds: float) -> subprocess.Popen[str]:
    code = (
        "import sys, time; from pathlib import Path; from cudice.verifier.run.gpu_lease import GpuLease\n"
        f"lease = GpuLease('t', Path({str(path)!r}))\n"
        f"with getattr(lease, {mode!r})():\n    print('held', flush=True); time.sleep({seconds})\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_timing_excludes_other_processes_and_shared_holds_overlap(tmp_path: Path) -> None:
    other = _hold(tmp_path, "shared", 60)
    try:
        with GpuLease("t", tmp_path).shared():  # shared with shared: no wait
            pass
        lease = GpuLease("t", tmp_path, timeout_s=0.3)
        with pytest.raises(LeaseTimeout, match="held by another verification"), lease.exclusive():
            pass
    finally:
        other.kill()
        other.wait()
    with GpuLease("t", tmp_path, timeout_s=30).exclusive():  # released by the process's death
        pass


def test_a_run_alone_holds_the_gpu_for_its_whole_length(tmp_path: Path) -> None:
    """`VerifyConfig.run_alone` (the retry of a run that ran out of GPU memory beside others): the
    judge holds its GPU's lease exclusively from after the runners' load to the verdict, so no other
    verification's shared or exclusive hold gets in meanwhile; its own holds inside are no-ops
    (neither waiting on itself nor refused as nested), and the lease is free again after. Where
    another verification holds the GPU past the wait, the run goes on without the hold."""
    from types import SimpleNamespace

    from cudice.verifier.run.judge_state import alone, exclusive, shared

    st = SimpleNamespace(lease=GpuLease("t", tmp_path, timeout_s=5), lease_depth=0, alone=False, walls={})
    with alone(st, 30) as got:  # type: ignore[arg-type]
        assert got
        with shared(st), exclusive(st), shared(st):  # type: ignore[arg-type]
            assert st.lease_depth >= 1
        for mode in ("shared", "exclusive"):
            with pytest.raises(LeaseTimeout), getattr(GpuLease("t", tmp_path, timeout_s=0.3), mode)():
                pass
    assert not st.alone and st.lease_depth == 0
    with GpuLease("t", tmp_path, timeout_s=30).shared():
        pass
    # a GPU another verification holds past the wait: the run goes on as any run does
    other = _hold(tmp_path, "exclusive", 60)
    try:
        with alone(st, 0.3) as got:  # type: ignore[arg-type]
            assert not got and not st.alone and st.lease_depth == 0
        assert st.walls["alone_lease_timeout"] == 1.0
    finally:
        other.kill()
        other.wait()


def test_a_waiting_timer_is_not_starved_by_new_shared_holders(tmp_path: Path) -> None:
    first = _hold(tmp_path, "shared", 1.5)
    got: list[str] = []
    timer = threading.Thread(target=lambda: _run_exclusive(tmp_path, got))
    timer.start()
    deadline = time.monotonic() + 30
    while not (tmp_path / "cudice-gpu-t.gate").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # let the timer take the gate (it waits for `first` from then on)
    late = GpuLease("t", tmp_path, timeout_s=30)
    with late.shared():
        got.append("late shared")
    timer.join(timeout=60)
    first.wait(timeout=60)
    assert got == ["exclusive", "late shared"]


def _run_exclusive(path: Path, got: list[str]) -> None:
    with GpuLease("t", path, timeout_s=30).exclusive():
        got.append("exclusive")


def test_thread_counts_come_from_outside_the_process() -> None:
    code = (
        "import threading, time, sys\n"
        "sys.stdout.write('a\\n'); sys.stdout.flush(); sys.stdin.readline()\n"
        "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
        "sys.stdout.write('b\\n'); sys.stdout.flush(); sys.stdin.readline()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert proc.stdout.readline() == "a\n"
        before = tree_threads(proc.pid)
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.stdout.readline() == "b\n"
        assert tree_threads(proc.pid) == before + 1
    finally:
        proc.kill()
        proc.wait()
    assert tree_threads(proc.pid) == 0
    assert tree_threads(os.getpid()) >= 1


def test_cpu_time_comes_from_outside_the_process_and_counts_its_children() -> None:
    """The judge reads a runner's time on a CPU from the kernel (/proc/<pid>/task/*/schedstat):
    a child that spins for a while adds to its parent's tree, a sleeping one adds nearly nothing."""
    if not os.path.exists(f"/proc/{os.getpid()}/schedstat"):
        pytest.skip("this kernel keeps no schedstat")
    spin = (  # the child: 0.3 s on a CPU, then it waits on its stdin
        "import sys, time\n"
        "t = time.process_time()\n"
        "while time.process_time() - t < 0.3: pass\n"
        "sys.stdout.write('x\\n'); sys.stdout.flush(); sys.stdin.readline()\n"
    )
    code = (
        "import subprocess, sys\n"
        f"child = subprocess.Popen([sys.executable, '-c', {spin!r}],\n"
        "                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)\n"
        "child.stdout.readline()\n"
        "sys.stdout.write('a\\n'); sys.stdout.flush(); sys.stdin.readline(); child.kill()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert proc.stdout.readline() == "a\n"
        run_ns, wait_ns = tree_schedstat(proc.pid)
        assert run_ns >= 0.3e9  # the child's 0.3 s of CPU, however busy this machine is
        assert wait_ns >= 0
        quiet, _ = tree_schedstat(proc.pid)
        assert quiet - run_ns < 0.1e9  # both are waiting on a pipe now
    finally:
        proc.kill()
        proc.wait()
    assert tree_schedstat(proc.pid) == (0, 0)


def test_a_paused_runner_and_its_children_are_stopped_and_then_continue() -> None:
    """While the reference is timed the candidate's runner is stopped with everything it started
    (run/judge.py): every process of the tree is in state T inside `paused`, none after."""
    code = (
        "import subprocess, sys\n"
        "wait = 'import sys; sys.stdin.readline()'\n"
        "child = subprocess.Popen([sys.executable, '-c', wait], stdin=subprocess.PIPE)\n"
        "sys.stdout.write(str(child.pid) + '\\n'); sys.stdout.flush(); sys.stdin.readline()\n"
        "child.kill()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        child = int(proc.stdout.readline())
        assert set(tree_pids(proc.pid)) == {proc.pid, child}
        with paused(proc.pid) as ok:
            assert ok
            assert {process_state(proc.pid), process_state(child)} == {"T"}
        assert "T" not in {process_state(proc.pid), process_state(child)}
        proc.stdin.write("\n")  # it runs again: it reads the line and ends
        proc.stdin.flush()
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
        proc.wait()
    with paused(proc.pid) as ok:  # a process that is gone: nothing stopped, said so
        assert not ok


def test_runner_found_in_its_wrapper_tree() -> None:
    """The judge pins the runner's own process, not the wrapper that started it."""
    from cudice.verifier.process import descendant_running

    code = "import subprocess, sys; subprocess.run([sys.executable, '-m', 'json.tool', '-'], stdin=sys.stdin)"
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        found = None
        while found is None and time.monotonic() < deadline:  # the child starts asynchronously
            found = descendant_running(proc.pid, "json.tool")
        assert found is not None and found != proc.pid
        assert descendant_running(proc.pid, "no.such.module") is None
    finally:
        proc.kill()
        proc.wait()


def test_timing_cpus_are_distinct_cores_and_pins_are_given_back() -> None:
    from cudice.verifier.process import cpus_of_node, distinct_cpus, pinned

    allowed = os.sched_getaffinity(0)
    cpus = distinct_cpus(64)
    assert cpus and len(set(cpus)) == len(cpus) and set(cpus) <= allowed
    cores = set()
    for cpu in cpus:
        top = f"/sys/devices/system/cpu/cpu{cpu}/topology"
        if os.path.exists(f"{top}/core_id"):
            core = (open(f"{top}/physical_package_id").read(), open(f"{top}/core_id").read())
            assert core not in cores  # a second hardware thread of a picked core is skipped
            cores.add(core)
    assert distinct_cpus(1, prefer={cpus[-1]}) == [cpus[-1]]
    node0 = cpus_of_node(0)
    assert not node0 or node0 & allowed
    assert cpus_of_node(10**6) == set()
    with pinned({0: cpus[0]}) as took:
        assert took == {0: True}
        assert os.sched_getaffinity(0) == {cpus[0]}
    assert os.sched_getaffinity(0) == allowed
    with pinned({2**22 + 12345: cpus[0]}) as took:  # no such thread: said so, nothing raised
        assert took == {2**22 + 12345: False}


def test_a_time_within_its_noise_is_not_counted() -> None:
    """A candidate's time whose interval over repetitions is wider than the promised fidelity
    (10 % at 50 us of reference time or more, 25 % below) is reported as unresolved, with its
    interval; a tight one is counted; too few repetitions say nothing."""
    tight = [0.100, 0.101, 0.099, 0.100, 0.102, 0.098]
    assert interval_too_wide(tight, 0.2) is not None and interval_too_wide(tight, 0.2)[1] == ""
    noisy = [0.02, 0.05, 0.01, 0.04, 0.03, 0.06]
    half, why = interval_too_wide(noisy, 0.02) or (0.0, "")
    assert half > 0.25 * 0.035 and "+-25%" in why and "6 repetitions" in why
    medium = [0.100, 0.115, 0.085, 0.110, 0.090, 0.100]  # +-8 % of 0.1 ms
    assert interval_too_wide(medium, 0.04)[1] == ""  # a short reference: within 25 %
    assert interval_too_wide(medium, 0.2)[1] == ""
    wide = [0.100, 0.140, 0.060, 0.130, 0.070, 0.100]
    assert "+-10%" in interval_too_wide(wide, 0.2)[1]
    assert interval_too_wide([0.1, 0.2], 0.2) is None


def test_a_gpu_timing_repeats_past_its_plan_until_its_interval_resolves_within_bounds() -> None:
    """The H100's x12 gelu samples (five repetitions, a correct 0.34 ms kernel, +-12 %): a GPU
    timing goes on past its plan and its budget while the interval is too wide, and stops once it
    resolves or at the hard bounds; a CPU timing and a resolved one stop as they always did."""
    from cudice.verifier.run.judge_timing import (
        EXTENDED_TIMING_S,
        MAX_REPETITIONS_FACTOR,
        MIN_REPETITIONS,
        TIMING_BUDGET_S,
        stop_repeating,
    )

    wide = [0.383, 0.307, 0.259, 0.343, 0.336]
    tight = [0.330, 0.336, 0.341, 0.333, 0.338]
    ref, late = 0.195, TIMING_BUDGET_S + 1
    assert interval_too_wide(wide, ref)[1] and not interval_too_wide(tight, ref)[1]
    assert not stop_repeating(MIN_REPETITIONS - 1, late, tight[:4], ref, 10, extend=True)  # never before five
    assert not stop_repeating(5, 1.0, tight, ref, 10, extend=True)  # within plan and budget: go on
    assert stop_repeating(5, late, tight, ref, 10, extend=True)  # over budget and resolved
    assert stop_repeating(5, late, wide, ref, 10, extend=False)  # the CPU's rule: over budget
    assert not stop_repeating(5, late, wide, ref, 10, extend=True)  # a GPU goes on while too wide
    assert stop_repeating(10, late, wide * 2, ref, 10, extend=True)  # ten such repetitions resolve it
    wider = [0.45, 0.22, 0.40, 0.26, 0.34]
    assert not stop_repeating(10, 2.0, wider * 2, ref, 10, extend=True)  # past its plan too
    assert stop_repeating(10, 2.0, tight * 2, ref, 10, extend=True)
    assert stop_repeating(7, EXTENDED_TIMING_S + 1, wider + wider[:2], ref, 10, extend=True)  # hard bounds
    assert stop_repeating(MAX_REPETITIONS_FACTOR * 10, 2.0, wider * 6, ref, 10, extend=True)
    # three planned (the smallest setting): three on a CPU, as before; a GPU still extends
    assert not stop_repeating(2, late, tight[:2], ref, 3, extend=False)
    assert stop_repeating(3, 1.0, wide[:3], ref, 3, extend=False)
    assert not stop_repeating(3, 1.0, wider[:3], ref, 3, extend=True)
    # past the budget with fewer than five of ten done: on
    assert not stop_repeating(4, late, tight[:4], ref, 10, extend=False)
    # hopeless: the H100's ten first repetitions of a 4 us ReLU alone (+-83 % around 0.028 ms, 25 %
    # promised) would need ~110 repetitions to resolve, past the 30 allowed: it stops at once
    relu = [0.011, 0.006, 0.031, -0.012, 0.036, 0.024, 0.043, 0.018, 0.05, 0.122]
    assert interval_too_wide(relu, 0.031)[1]
    assert stop_repeating(10, 2.0, relu, 0.031, 10, extend=True)
    assert stop_repeating(5, 2.0, [-0.01, -0.02, -0.015, 0.01, -0.03], 0.031, 5, extend=True)  # below 0
    assert not stop_repeating(5, late, wide, ref, 10, extend=True)  # gelu needs ~7 of 30: on


def _fake_runner(sock: socket.socket, prepare_s: float, answer: dict[str, object]) -> None:
    """A runner's side of one `stream`: its request, `prepare_s` of preparation, `answer`, then
    (when it says ready) each call answered at once with one digest."""
    from cudice.verifier.run import channel

    req, _ = channel.recv(sock, 0)
    time.sleep(prepare_s)
    channel.send(sock, answer)
    if answer.get("ready") == req["count"]:
        for _ in range(int(req["count"])):
            channel.recv_call(sock)
            channel.send_digests(sock, [1.0])


def test_a_runner_s_preparation_for_a_stream_is_not_in_its_first_call_s_time() -> None:
    """The judge sends a stream's first call only once the runner said it is ready, so what the
    runner does before (it was a full garbage collection, ~0.16 s in every block's first call) is
    no call's time; a runner that answers anything but `ready` ends the job with its reply."""
    from types import SimpleNamespace

    from cudice.verifier.run.judge_clock import Clock, stream
    from cudice.verifier.run.judging import Stop
    from cudice.verifier.source.result import Verdict

    answers: list[dict[str, object]] = [
        {"ok": True, "ready": 3},
        {"ok": False, "error": "no room for the digests"},
        {"ok": True, "ready": True},  # neither ready for three calls nor a failure
    ]
    for answer in answers:
        st = SimpleNamespace(device="cpu", lease=None, lease_depth=0, ref_call_s=0.0, where=None, walls={})
        judge_end, runner_end = socket.socketpair()
        with judge_end, runner_end:
            runner = threading.Thread(target=_fake_runner, args=(runner_end, 0.3, answer), daemon=True)
            runner.start()
            link = SimpleNamespace(sock=judge_end, role="candidate")
            try:
                times, digests = stream(st, Clock(flush_mib=0), link, [0, 1, 2], [7, 8, 9], None)  # type: ignore[arg-type]
            except Stop as stop:
                assert answer.get("ready") != 3 and stop.verdict is Verdict.RUNTIME_ERROR
                why = "no room for the digests" if answer["ok"] is False else "answered a stream of 3 calls"
                assert why in stop.diagnostics[0].message
            else:
                assert answer.get("ready") == 3 and digests == [[1.0]] * 3
                assert len(times) == 3 and max(times) < 0.3, times
                assert st.walls["timing.ready_wait"] >= 0.3  # the preparation, counted apart
            runner.join(timeout=60)
            assert not runner.is_alive()


def test_the_reference_is_warmed_up_untimed_before_its_event_timed_calls() -> None:
    """`event_times` with a warm-up runs untimed calls first (at least five, and for at least the
    time asked, bounded at four times it), then exactly the timed calls asked for; without one,
    only the timed calls run. On the CPU the clock is the host's."""
    from types import SimpleNamespace

    from cudice.verifier.run.judge_clock import EVENT_WARMUP_CALLS, Clock, event_times, warm_up

    calls: list[float] = []

    def model(*_: object) -> None:
        calls.append(time.perf_counter())

    st = SimpleNamespace(device="cpu")
    assert len(event_times(st, Clock(flush_mib=0), model, [], 7)) == 7 and len(calls) == 7  # type: ignore[arg-type]
    calls.clear()
    t0 = time.perf_counter()
    times = event_times(st, Clock(flush_mib=0), model, [], 7, warm_up_s=0.05)  # type: ignore[arg-type]
    assert len(times) == 7 and len(calls) >= EVENT_WARMUP_CALLS + 7
    assert calls[-7] - t0 >= 0.05  # the timed calls began after the warm-up's time
    slow = warm_up(lambda: time.sleep(0.03), cuda=False, seconds=0.01)  # 4 x 10 ms bounds it
    assert 1 <= slow < EVENT_WARMUP_CALLS
    assert warm_up(lambda: time.sleep(0.2), cuda=False, seconds=0.01) == 1  # one call at least


def test_a_time_a_runner_bias_could_move_beyond_the_promise_is_not_counted() -> None:
    """Two runner processes differ by a bias in every call that no interval sees; a candidate
    time that the bias bound moves by more than the promised fidelity is unresolved, a longer one
    counts, and a bound of 0 turns the rule off. The cases are today's H200 measurements: a
    ~30 us relu came out at 0.064 ms (truth ~0.03), a 0.65 ms relu within 5 %."""
    why = bias_too_large(0.0638, 0.0277, 0.040)
    assert "40 us" in why and "+-25%" in why and "0.0638 ms" in why
    assert bias_too_large(0.646, 0.144, 0.040) == ""  # 40 us is 6 % of it: within +-10 %
    assert "+-10%" in bias_too_large(0.30, 0.06, 0.040)  # 13 % of it, reference >= 50 us
    assert bias_too_large(0.30, 0.04, 0.040) == ""  # 13 %, reference below 50 us: within +-25 %
    assert bias_too_large(0.02, 0.02, 0.0) == ""
    assert bias_too_large(-0.01, 0.02, 0.040) != ""  # a negative estimate is never resolved


def test_the_bias_bound_holds_for_the_shortest_time_the_bias_allows() -> None:
    """A bias that inflated the candidate's estimate must not also widen the error it is allowed:
    the promise must hold for `cand - bias` too. softmax 128x1024 under twelve verifications at once
    (H200, docs/benchmarks.md 2026-12-06): the reference 0.028 ms, the candidate estimated at
    0.0407 ms (the harness: 0.026), 13 us over; 10 us is 25 % of 0.0407 ms but 33 % of 0.0307 ms."""
    assert "+-25%" in bias_too_large(0.0407, 0.028, 0.010)
    assert bias_too_large(0.051, 0.028, 0.010) == ""  # 10 us is 24 % of the 0.041 ms it may be
    assert "+-10%" in bias_too_large(0.105, 0.06, 0.010)  # 10 us is 10.5 % of 0.095 ms
    assert bias_too_large(0.111, 0.06, 0.010) == ""


def test_a_time_whose_quantiles_disagree_is_not_counted() -> None:
    """The lower quartiles' and the medians' differences are one shift when the runners differ only
    by their forwards; apart by more than the promised fidelity, the time is unresolved. Cases
    from H200 runs (docs/benchmarks.md, 2026-12-04): a ~30 us relu whose lower quartiles said
    0.064 ms and medians 0.033 ms (the harness: 0.033), a gelu at 0.333 / 0.329 ms (harness 0.338)."""
    why = estimates_disagree(0.0638, 0.0327, 0.0330)
    assert "0.0638 ms" in why and "0.0327 ms" in why and "+-25%" in why
    assert estimates_disagree(0.333, 0.329, 0.142) == ""
    assert "+-10%" in estimates_disagree(0.333, 0.290, 0.142)  # 13 % apart, reference >= 50 us
    assert estimates_disagree(0.333, 0.290, 0.040) == ""  # reference below 50 us: within +-25 %
    assert estimates_disagree(-0.01, -0.01, 0.03) != ""  # a negative estimate is never resolved


def test_digests_into_room_made_beforehand_equal_fresh_ones() -> None:
    """A streamed call writes its digests into zeroed room made before the calls: the same values
    as a fresh buffer, and too little room falls back to a fresh one."""
    outs = [torch.randn(100), torch.arange(7), torch.randn(3, 3).t()]
    fresh = witness.digest(outs, 11, "cpu")
    room = torch.zeros(4 * 64, dtype=torch.float64)
    assert torch.equal(witness.digest(outs, 11, "cpu", room[0:]), fresh)
    assert torch.equal(witness.digest(outs, 11, "cpu", torch.zeros(4, dtype=torch.float64)), fresh)


def test_the_gpus_numa_node_is_read_from_sys(tmp_path: Path) -> None:
    """The judge and its runners start on the CPUs of the node the NVIDIA GPU hangs on; a machine
    with GPUs on two nodes, or none, leaves them where they are."""
    from cudice.verifier.process import gpu_node_cpus

    def device(name: str, vendor: str, cls: str, node: int) -> None:
        d = tmp_path / "bus/pci/devices" / name
        d.mkdir(parents=True)
        (d / "vendor").write_text(vendor + "\n")
        (d / "class").write_text(cls + "\n")
        (d / "numa_node").write_text(f"{node}\n")

    allowed = sorted(os.sched_getaffinity(0))
    node_dir = tmp_path / "devices/system/node/node1"
    node_dir.mkdir(parents=True)
    (node_dir / "cpulist").write_text(f"{allowed[0]}-{allowed[-1]},9999\n")
    device("0000:00:01.0", "0x8086", "0x060400", 0)  # a bridge on node 0
    device("0000:1b:00.0", "0x10de", "0x030200", 1)  # the GPU on node 1
    assert gpu_node_cpus(str(tmp_path)) == frozenset(allowed)  # 9999 is not this process's
    device("0000:9b:00.0", "0x10de", "0x030200", 0)  # a second GPU on the other node
    gpu_node_cpus.cache_clear()
    assert gpu_node_cpus(str(tmp_path)) == frozenset()
    assert gpu_node_cpus(str(tmp_path / "nowhere")) == frozenset()


def test_a_timing_s_samples_are_written_where_asked(tmp_path: Path) -> None:
    """The judge's optional sample dump (CUDICE_TIMING_SAMPLES) holds every per-call time as taken."""
    from cudice.verifier.run.judge_timing import TimingSamples, dump_samples

    samples = TimingSamples()
    samples.ref_events += [0.05, 0.06]
    samples.per_call["candidate"].append([2e-4, 3e-4])
    samples.per_call["reference"].append([1e-4, 1.5e-4])
    path = dump_samples(tmp_path / "d", "/x/relu_cuda.py", samples, [0.1], 0.11)
    row = json.loads(path.read_text())
    assert path.name.startswith("relu_cuda-") and row["ref_events"] == [0.05, 0.06]
    assert row["per_call"]["candidate"] == [[2e-4, 3e-4]] and row["candidate_by_medians_ms"] == 0.11


def test_a_repetition_s_calls_are_cut_into_ordered_blocks_that_cover_them_once() -> None:
    from cudice.verifier.run.judge_timing import MIN_BLOCK_CALLS, TIMING_BLOCKS, blocks

    for total in (1, 3, 7, 16, 17, 32, 101):
        parts = blocks(total)
        assert [i for part in parts for i in part] == list(range(total))
        assert len(parts) <= TIMING_BLOCKS
        assert len(parts) == 1 or min(len(p) for p in parts) >= MIN_BLOCK_CALLS
        assert max(len(p) for p in parts) - min(len(p) for p in parts) <= 1
    assert len(blocks(32)) == TIMING_BLOCKS


def test_a_block_run_slow_as_a_whole_does_not_move_the_estimate() -> None:
    """As measured on an H200: now and then every call of one runner's block is ~150 us slower;
    the pooled lower quartile keeps the forward's difference, a per-block quartile would not."""
    from cudice.verifier.run.judge_timing import TimingSamples, estimate

    def block(base_us: float) -> list[float]:
        return [(base_us + (i % 4)) * 1e-6 for i in range(8)]

    cand = [block(215), block(365), block(215), block(215), block(215), block(215), block(215), block(215)]
    ref = [block(210)] * 8
    samples = TimingSamples(per_call={"candidate": cand, "reference": ref}, blocks_per_repetition=4)
    deltas, by_medians = estimate(samples)
    # within the 1 us the slow block's absence moves the quartile (a per-block mean: +42 us)
    assert len(deltas) == 2 and all(abs(d - 5e-6) <= 1.01e-6 for d in deltas)
    assert abs(by_medians - 5e-6) <= 1.01e-6
    # most of a repetition slow is a slower candidate, and the estimate says so
    slow = TimingSamples(
        per_call={"candidate": [block(365)] * 4, "reference": [block(210)] * 4}, blocks_per_repetition=4
    )
    assert abs(estimate(slow)[0][0] - 155e-6) < 1e-9


def test_calls_the_scheduler_held_up_can_be_set_aside() -> None:
    """`unpreempted` keeps the calls whose runner never waited for a CPU, block by block, so the
    estimate can be read without them (reported beside the one used); a repetition left with
    fewer than 4 calls of a runner gives None."""
    from cudice.verifier.run.judge_timing import TimingSamples, candidate_times, unpreempted

    ms = 1e-3
    samples = TimingSamples(
        ref_events=[0.5],
        per_call={"reference": [[1 * ms] * 8], "candidate": [[2 * ms] * 4 + [9 * ms] * 4]},
        waits={"reference": [[0] * 8], "candidate": [[0] * 4 + [500_000] * 4]},
    )
    kept = unpreempted(samples)
    assert kept is not None and kept.per_call["candidate"] == [[2 * ms] * 4]
    assert candidate_times(kept)[2] == pytest.approx(1.5)  # by the medians: 0.5 ms + (2 - 1) ms
    assert candidate_times(samples)[2] == pytest.approx(5.0)  # the held-up calls moved the median
    samples.waits["candidate"] = [[0] * 3 + [1] * 5]
    assert unpreempted(samples) is None


def test_a_runners_run_queue_wait_is_read_from_outside_it() -> None:
    """`_RunQueueClock` reads the kernel's count for another process: waits are whole, never
    negative; a process that is gone reads 0."""
    from cudice.verifier.run.judge_clock import _RunQueueClock

    if not os.path.exists(f"/proc/{os.getpid()}/schedstat"):
        pytest.skip("this kernel keeps no schedstat")
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.readline()"], stdin=subprocess.PIPE)
    try:
        clock = _RunQueueClock(proc.pid)
        assert clock.fd is not None
        assert all(isinstance(w, int) and w >= 0 for w in (clock.since_last() for _ in range(3)))
    finally:
        proc.kill()
        proc.wait()
    assert _RunQueueClock(proc.pid).since_last() == 0
    clock.close()


def test_a_repetition_gives_its_memory_back_only_when_the_gpu_is_short_of_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Below a quarter of the GPU's memory free (the driver's count), a timing repetition's memory
    is given back; with memory to spare it stays cached (fresh allocations would be timed), and
    without a GPU there is nothing to give back."""
    from types import SimpleNamespace

    from cudice.verifier.run import judge_state

    st = cast(Any, SimpleNamespace(device="cuda"))
    total = 80 << 30
    for free, short in ((10 << 30, True), (30 << 30, False)):
        monkeypatch.setattr(torch.cuda, "mem_get_info", lambda free=free: (free, total))
        assert judge_state.memory_is_short(st) is short
    assert judge_state.memory_is_short(cast(Any, SimpleNamespace(device="cpu"))) is False
