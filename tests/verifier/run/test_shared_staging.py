"""Staging through GPU memory shared with one runner (run/shared_staging.py, run/judge_clock.py `stage`).

On the CPU: the layout as pure functions (nested sets with tensors and other values round-trip bit
for bit, offsets aligned, malformed entries refused); a descriptor passed over a Unix socket pair
(run/channel.py `send_fd`/`recv_fd`) between two messages; the fallback on both sides, with the
runner's request loop in a thread of this process (as test_runner_dispatch.py runs it): a judge
without a GPU, and a runner that cannot map the buffer it was passed, both stage over the socket,
and the runner then holds what `timing_staging="socket"` gives it; the config field.

On the CPU too, with a memfd standing in for the GPU buffer: a correctness trial's inputs sent and
the candidate's outputs fetched through shared memory (run/judge_state.py `send_shared`, `fetch`),
their size bounds, and the fallbacks to the socket.

On a GPU (`gpu`): a sealed set staged through a shared buffer into a runner in another process is
bit-identical there, and so are a trial's inputs sent and outputs fetched that way; the walls say
each went through shared memory.

Not covered here: whether sharing is faster (bench/timing_fidelity.py `--staging`), a real judge
with runners inside the boundary (test_judge.py runs the default, shared on a GPU).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import types
from collections.abc import Iterator
from typing import Any, cast

import pytest

torch = pytest.importorskip("torch")

from cudice.verifier.config import VerifyConfig  # noqa: E402
from cudice.verifier.run import channel, shared_staging  # noqa: E402
from cudice.verifier.run.judge_clock import Clock, stage  # noqa: E402
from cudice.verifier.run.runner import serve  # noqa: E402
from cudice.verifier.run.runner_link import RunnerLink  # noqa: E402
from cudice.verifier.run.runner_state import RunnerState  # noqa: E402


def _sets() -> list[list[Any]]:
    """Two input sets with every kind of value a set may hold."""
    g = torch.Generator().manual_seed(7)
    a = torch.randn(3, 5, generator=g)
    return [
        [
            a,
            a.t(),  # not contiguous: staged contiguous
            torch.randn(7, generator=g).to(torch.bfloat16),
            torch.tensor(3.5, dtype=torch.float64),  # 0-dim
            torch.zeros(0, 4),  # empty
            torch.randint(0, 2, (9,), generator=g).bool(),
            torch.randint(-(2**40), 2**40, (5,), generator=g),
            torch.randn(3, generator=g, dtype=torch.complex64),
            torch.randint(0, 255, (13,), generator=g, dtype=torch.uint8),  # odd size
        ],
        [
            17,
            2.5,
            "mean",
            None,
            True,
            (torch.randn(2, 2, generator=g), 4),
            {"w": torch.randn(6, generator=g).half(), "k": [1, 2]},
        ],
    ]


def _bits(t: Any) -> bytes:
    return bytes(t.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy().tobytes())


def _same(got: Any, want: Any) -> None:
    """`got` equals `want` bit for bit, tensors contiguous, containers of the same types."""
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor)
        assert got.dtype == want.dtype and list(got.shape) == list(want.shape)
        assert got.is_contiguous()
        assert _bits(got) == _bits(want)
        return
    assert type(got) is type(want)
    if isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            _same(g, w)
    elif isinstance(want, dict):
        assert list(got) == list(want)
        for k in want:
            _same(got[k], want[k])
    else:
        assert got == want


def test_layout_round_trips_nested_sets_bit_for_bit() -> None:
    sets = _sets()
    lay = shared_staging.layout(sets)
    assert lay.size % shared_staging.ALIGN == 0
    end = 0
    for offset, t in lay.places:  # aligned, in order, never overlapping
        assert offset % shared_staging.ALIGN == 0 and offset >= end
        end = offset + t.numel() * t.element_size()
    assert end <= lay.size
    buffer = torch.full((lay.size,), 0xA5, dtype=torch.uint8)
    shared_staging.pack(lay, buffer)
    tree = json.loads(json.dumps(lay.tree))  # what travels is JSON
    _same(shared_staging.unpack(tree, buffer), sets)
    # the socket path gives the same values
    _same(channel.decode(*channel.encode(sets)), sets)


def test_unpack_clones_a_strided_entry_and_refuses_malformed_ones() -> None:
    buffer = torch.arange(1024, dtype=torch.int32).view(torch.uint8)
    entry = {"__t__": 0, "dtype": "int32", "shape": [3, 2], "strides": [1, 3], "offset": 256}
    got = shared_staging.unpack([entry], buffer)[0]
    want = torch.arange(64, 70, dtype=torch.int32).as_strided((3, 2), (1, 3))
    assert got.is_contiguous() and torch.equal(got, want)
    got[0, 0] = -1  # a clone: the buffer is not written
    assert int(buffer.view(torch.int32)[64]) == 64
    bad = [
        {**entry, "offset": 4},  # not aligned
        {**entry, "offset": 4096},  # past the buffer
        {**entry, "shape": [3000, 2], "strides": [2, 1]},  # reaches past the buffer
        {**entry, "dtype": "object"},
        {**entry, "strides": [1]},
        {**entry, "shape": [3, -2]},
        {**entry, "offset": True},
    ]
    for e in bad:
        with pytest.raises(channel.ChannelError):
            shared_staging.unpack([e], buffer)


def test_unpack_with_a_budget_refuses_clones_larger_than_what_was_sent() -> None:
    """Outputs from the candidate's runner (`budget`): a stride-0 or strided entry, or entries that
    overlap into more bytes than outputs of the expected size take, cannot make the judge clone more
    than that budget; contiguous entries within it come through."""
    buffer = torch.zeros(4096, dtype=torch.uint8)
    flat = {"__t__": 0, "dtype": "float32", "shape": [256], "strides": [1], "offset": 0}
    assert shared_staging.unpack([flat, {**flat, "__t__": 1}], buffer, budget=2048)[1].shape == (256,)
    refused = [
        [{**flat, "shape": [25_000_000], "strides": [0]}],  # one element, 100 MB of clone
        [{**flat, "shape": [16, 16], "strides": [1, 16]}],  # transposed: not what a runner sends
        [flat, {**flat, "__t__": 1}, {**flat, "__t__": 2}],  # the same bytes thrice: past 2048
    ]
    for tree in refused:
        with pytest.raises(channel.ChannelError):
            shared_staging.unpack(tree, buffer, budget=2048)


def _memfd(data: bytes) -> int:
    fd = os.memfd_create("cudice-test")
    os.write(fd, data)
    return fd


def test_a_descriptor_travels_between_two_messages() -> None:
    ours, theirs = socket.socketpair()
    assert ours.family == socket.AF_UNIX
    fd = _memfd(b"shared bytes")
    try:
        channel.send(ours, {"op": "stage", "n": 1})
        channel.send_fd(ours, fd)
        channel.send(ours, {"op": "next"})
        head, _ = channel.recv(theirs, 0)
        got = channel.recv_fd(theirs)
        try:
            assert got != fd
            assert os.pread(got, 12, 0) == b"shared bytes"
        finally:
            os.close(got)
        assert head["n"] == 1 and channel.recv(theirs, 0)[0]["op"] == "next"
        ours.sendall(b"x")  # a byte without a descriptor is refused
        with pytest.raises(channel.ChannelError):
            channel.recv_fd(theirs)
    finally:
        os.close(fd)
        ours.close()
        theirs.close()


@pytest.fixture
def runner() -> Iterator[tuple[socket.socket, RunnerState]]:
    """A runner's request loop (CPU) in a thread, and the judge's end of its socket."""
    ours, theirs = socket.socketpair()
    state = RunnerState(theirs)
    loop = threading.Thread(target=serve, args=(state,), daemon=True)
    loop.start()
    try:
        assert channel.recv(ours, 1 << 20)[0]["op"] == "ready"
        yield ours, state
        channel.send(ours, {"op": "exit"})
        loop.join(timeout=120)
        assert not loop.is_alive()
    finally:
        ours.close()
        theirs.close()


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_a_runner_that_cannot_map_the_buffer_says_so_and_closes_the_descriptor(
    runner: tuple[socket.socket, RunnerState],
) -> None:
    ours, state = runner
    sets = _sets()
    lay = shared_staging.layout(sets)
    fd = _memfd(b"\0" * 64)
    before = _open_fds()
    header = {"op": "stage", "sets": lay.tree, "flush_mib": 0, "sealed": True, "shared": {"size": 64}}
    channel.send(ours, header)
    channel.send_fd(ours, fd)
    rep, _ = channel.recv(ours, 0)
    os.close(fd)
    assert rep["ok"] is True and rep["staged"] is False
    assert "CUDA device" in rep["why"]
    assert _open_fds() <= before  # the runner closed its descriptor
    tree, blobs = channel.encode(sets)  # the socket path, as the judge then sends it
    channel.send(ours, {"op": "stage", "sets": tree, "flush_mib": 0, "sealed": True}, blobs)
    rep, _ = channel.recv(ours, 0)
    assert rep == {"ok": True, "staged": True, "blobs": []}
    _same(state.sets, sets)


def _judge(config: VerifyConfig, sock: socket.socket) -> tuple[Any, RunnerLink]:
    """The pieces of a judge's state and runner link that `stage` uses."""
    st = types.SimpleNamespace(
        config=config, device="cpu", walls={}, lease=None, lease_depth=0, ref_call_s=0.0, where=None
    )
    link = types.SimpleNamespace(role="candidate", sock=sock, proc=types.SimpleNamespace(poll=lambda: None))
    link.request = lambda *a, **k: RunnerLink.request(cast(RunnerLink, link), *a, **k)
    return st, cast(RunnerLink, link)


@pytest.mark.parametrize("staging", ["socket", "shared"])
def test_stage_without_a_gpu_gives_the_socket_paths_sets(
    staging: str, runner: tuple[socket.socket, RunnerState]
) -> None:
    ours, state = runner
    st, link = _judge(VerifyConfig(timing_staging=staging), ours)
    clock = Clock(flush_mib=0)
    sets = _sets()
    stage(st, clock, link, sets, sealed=True)
    _same(state.sets, sets)
    assert st.walls["timing.staging_path_shared"] == 0.0
    assert st.walls["timing.staging_socket_count"] == 1.0
    if staging == "shared":
        assert st.walls["timing.staging_fallback_judge"] == 1.0
        assert clock.staging_why.startswith("judge: ") and clock.shared_off
    else:
        assert "timing.staging_fallback_judge" not in st.walls and clock.staging_why == ""
    stage(st, clock, link, sets, sealed=True)  # the judge's side cannot share: not tried again
    _same(state.sets, sets)
    assert st.walls["timing.staging_socket_count"] == 2.0
    assert st.walls.get("timing.staging_fallback_judge", 0.0) == (1.0 if staging == "shared" else 0.0)


def test_stage_falls_back_when_the_runner_cannot_map_the_buffer(
    runner: tuple[socket.socket, RunnerState], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The judge offers a buffer (a stand-in: a memfd), the CPU runner cannot map it: the judge
    releases it after the reply and stages over the socket."""
    ours, state = runner
    closed: list[bool] = []

    class Buffer:
        size = 4096

        def close(self) -> None:
            closed.append(True)

    monkeypatch.setattr(shared_staging, "offer", lambda lay, device: (Buffer(), _memfd(b"\0" * 4096)))
    st, link = _judge(VerifyConfig(timing_staging="shared"), ours)
    clock = Clock(flush_mib=0)
    sets = _sets()
    before = _open_fds()
    stage(st, clock, link, sets, sealed=True)
    assert closed == [True]
    assert _open_fds() <= before  # both ends' descriptors closed
    _same(state.sets, sets)
    assert st.walls["timing.staging_fallback_runner"] == 1.0
    assert st.walls["timing.staging_path_shared"] == 0.0
    assert clock.staging_why.startswith("the candidate's runner: ")


def _fetching_judge(ours: socket.socket, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, RunnerLink]:
    """A judge's state that asks for shared outputs ("cuda") but decodes what the socket sends on
    the CPU (there is no GPU here)."""
    from cudice.verifier.run import judge_state

    st, link = _judge(VerifyConfig(timing_staging="shared"), ours)
    st.device, st.diags, st.fetch_shared_off = "cuda", [], False
    st.where = None
    # the driver's allocation granularity, as on the GPUs of docs/benchmarks.md
    monkeypatch.setattr(shared_staging, "buffer_bound", lambda n, device: -(-n // _GRAN) * _GRAN)
    cpu_decode = judge_state.decode
    monkeypatch.setattr(
        judge_state,
        "decode",
        lambda st_, rep, blobs: cpu_decode(types.SimpleNamespace(device="cpu"), rep, blobs),
    )
    return st, link


_GRAN = 2 << 20  # bytes: every shared buffer is a whole number of these (cuMemGetAllocationGranularity)
_BIG = 16 << 20  # `max_bytes` of outputs large enough to come through GPU memory


def _offer_memfd(monkeypatch: pytest.MonkeyPatch, released: list[bool], size_bump: int = 0) -> None:
    """The runner's `offer` with a memfd standing in for the GPU buffer (its bytes as `pack` lays
    them, rounded up to the granularity as `Mapping.create` rounds)."""

    class Buffer:
        def __init__(self, size: int) -> None:
            self.size = size + size_bump

        def close(self) -> None:
            released.append(True)

    def offer(lay: shared_staging.Layout, device: str) -> tuple[Buffer, int]:
        raw = torch.zeros(-(-lay.size // _GRAN) * _GRAN, dtype=torch.uint8)
        shared_staging.pack(lay, raw)
        return Buffer(raw.numel()), _memfd(raw.numpy().tobytes())

    monkeypatch.setattr(shared_staging, "offer", offer)


def _take_memfd(fd: int, size: object, tree: object, device: str, budget: int | None = None) -> Any:
    """The judge's `take` with the memfd's bytes as the buffer; closes `fd` as `take` does."""
    try:
        data = os.pread(fd, int(cast(int, size)), 0)
    finally:
        os.close(fd)
    return shared_staging.unpack(tree, torch.frombuffer(bytearray(data), dtype=torch.uint8), budget)


def test_outputs_come_back_through_the_runners_buffer(
    runner: tuple[socket.socket, RunnerState], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`fetch` on a GPU: the runner answers with the layout and then the buffer's descriptor; the
    judge clones the outputs out of it (bit for bit what the socket gives), closes its descriptor,
    and the runner releases its buffer when the next request arrives."""
    from cudice.verifier.run.judge_state import fetch
    from cudice.verifier.source.result import Stage

    ours, state = runner
    released: list[bool] = []
    _offer_memfd(monkeypatch, released)
    monkeypatch.setattr(shared_staging, "take", _take_memfd)
    st, link = _fetching_judge(ours, monkeypatch)
    state.device = "cuda"
    outputs = _sets()[0]
    state.last = outputs
    before = _open_fds()
    got = fetch(st, link, {"op": "fetch"}, Stage.CORRECTNESS, max_bytes=_BIG)
    _same(got, outputs)
    assert state.offered is not None and not released and not st.fetch_shared_off
    state.last = (outputs[0],)
    _same(fetch(st, link, {"op": "fetch"}, Stage.CORRECTNESS, max_bytes=_BIG), (outputs[0],))
    assert released == [True]  # the first buffer, released when the second request came
    # outputs that may take less than SHARED_FETCH_MIN_BYTES: over the socket (milliseconds there)
    _same(fetch(st, link, {"op": "fetch"}, Stage.CORRECTNESS, max_bytes=1 << 20), (outputs[0],))
    assert released == [True, True] and state.offered is None
    _same(fetch(st, link, {"op": "fetch"}, Stage.CORRECTNESS, max_bytes=_BIG), (outputs[0],))
    state.device = "cpu"
    channel.send(ours, {"op": "guards"})  # any request releases the last one
    channel.recv(ours, 1 << 20)
    assert released == [True, True, True] and state.offered is None
    assert st.walls["fetch_shared_count"] == 3.0 and not st.diags
    assert _open_fds() <= before


def test_outputs_the_judge_cannot_map_come_again_over_the_socket(
    runner: tuple[socket.socket, RunnerState], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A buffer the judge cannot map (a driver that refuses): the same outputs over the socket, and
    the socket for the rest of the run; the fallback is counted."""
    from cudice.verifier.run.judge_state import fetch
    from cudice.verifier.source.result import Stage

    ours, state = runner
    released: list[bool] = []
    _offer_memfd(monkeypatch, released)
    asked: list[object] = []

    def refuse(fd: int, size: object, tree: object, device: str, budget: int | None = None) -> Any:
        os.close(fd)
        asked.append(size)
        raise shared_staging.SharedUnavailable(
            "cuMemImportFromShareableHandle failed: CUDA_ERROR_NOT_SUPPORTED"
        )

    monkeypatch.setattr(shared_staging, "take", refuse)
    st, link = _fetching_judge(ours, monkeypatch)
    state.device = "cuda"
    state.last = _sets()[1]
    _same(fetch(st, link, {"op": "fetch"}, Stage.CORRECTNESS, max_bytes=_BIG), _sets()[1])
    assert len(asked) == 1 and st.fetch_shared_off and st.walls["fetch_shared_fallback"] == 1.0
    (note,) = st.diags
    assert note.code == "verify.shared_fetch_unavailable" and "CUDA_ERROR_NOT_SUPPORTED" in note.message
    _same(fetch(st, link, {"op": "fetch"}, Stage.CORRECTNESS, max_bytes=_BIG), _sets()[1])
    assert len(asked) == 1  # not tried again


def test_a_shared_buffer_larger_than_the_outputs_need_is_refused(
    runner: tuple[socket.socket, RunnerState], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A runner that claims a buffer beyond what outputs of the expected size take: the outputs
    cannot be read (`incorrect`), nothing is mapped, the descriptor is closed."""
    from cudice.verifier.run.judge_state import fetch
    from cudice.verifier.run.judging import Stop
    from cudice.verifier.source.result import Stage, Verdict

    ours, state = runner
    _offer_memfd(monkeypatch, [], size_bump=1 << 30)
    monkeypatch.setattr(shared_staging, "take", lambda *a: pytest.fail("mapped an oversized buffer"))
    st, link = _fetching_judge(ours, monkeypatch)
    state.device = "cuda"
    state.last = _sets()[0]
    before = _open_fds()
    with pytest.raises(Stop) as stop:
        fetch(st, link, {"op": "fetch"}, Stage.CORRECTNESS, max_bytes=_BIG)
    assert stop.value.verdict is Verdict.INCORRECT
    assert "shared output buffer" in stop.value.diagnostics[0].message
    state.device = "cpu"
    channel.send(ours, {"op": "guards"})  # answered once the runner has closed its own descriptor
    channel.recv(ours, 1 << 20)
    assert _open_fds() <= before  # the judge closed the descriptor it got, unmapped


def test_outputs_larger_than_allowed_over_the_socket_are_incorrect_as_through_gpu_memory(
    runner: tuple[socket.socket, RunnerState],
) -> None:
    """Outputs whose bytes are beyond what the reference's shapes allow are `incorrect` over the
    socket too (they were `crash`, a broken protocol): the same verdict and code as a shared buffer
    too large for them, with the sizes in the message. The reference's runner doing so, or the
    candidate's answering a request that carries no outputs, is a crash."""
    from cudice.verifier.run.judge_state import ask, fetch
    from cudice.verifier.run.judging import Stop
    from cudice.verifier.source.result import Stage, Verdict

    ours, state = runner
    st, link = _judge(VerifyConfig(timing_staging="socket"), ours)
    st.diags = []
    state.last = _sets()[0]
    with pytest.raises(Stop) as stop:
        fetch(st, link, {"op": "fetch"}, Stage.CORRECTNESS, max_bytes=64)
    assert stop.value.verdict is Verdict.INCORRECT
    (why,) = stop.value.diagnostics
    assert why.code == "dynamic.output_not_plain_tensor" and "more than the 64" in why.message

    a, b = socket.socketpair()
    try:
        other_st, other = _judge(VerifyConfig(timing_staging="socket"), a)
        cast(Any, other).log_tail = lambda: ""
        cast(Any, other).request = lambda *a, **k: (_ for _ in ()).throw(channel.OversizeMessage(99, 64))
        for role, request in (("reference", "fetch"), ("candidate", "release")):
            cast(Any, other).role = role  # the reference's outputs, or a request answered without any
            with pytest.raises(Stop) as stop:
                if request == "fetch":
                    fetch(other_st, other, {"op": "fetch"}, Stage.CORRECTNESS, max_bytes=64)
                else:
                    ask(other_st, other, {"op": "release"}, Stage.TIMING)
            assert stop.value.verdict is Verdict.CRASH, (role, request)
    finally:
        a.close()
        b.close()


def test_a_trials_inputs_go_through_gpu_memory_and_fall_back_to_the_socket(
    runner: tuple[socket.socket, RunnerState], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A correctness trial's inputs of 8 MiB or more: through a buffer the judge makes for the
    candidate's runner (a memfd stand-in here), bit for bit what the socket gives; a runner that
    cannot map it answers `staged: false`, the judge sends them over the socket and keeps to the
    socket for the run (the information diagnostic says why). Small inputs go over the socket."""
    from cudice.verifier.run.judge_correctness import _send_inputs

    ours, state = runner
    released: list[bool] = []
    _offer_memfd(monkeypatch, released)
    monkeypatch.setattr(shared_staging, "take", _take_memfd)
    st, link = _fetching_judge(ours, monkeypatch)
    g = torch.Generator().manual_seed(5)
    inputs = [torch.randn(1 << 21, generator=g), 3, torch.randn(4, 4, generator=g).t()]
    _send_inputs(st, link, inputs)
    _same(state.inputs, [inputs[0], 3, inputs[2].contiguous()])
    assert st.walls["inputs_shared_count"] == 1.0 and released == [True] and not st.diags
    _send_inputs(st, link, [inputs[2]])  # small: the socket
    assert st.walls["inputs_shared_count"] == 1.0
    _same(state.inputs, [inputs[2].contiguous()])

    def refuse(fd: int, size: object, tree: object, device: str, budget: int | None = None) -> Any:
        os.close(fd)
        raise shared_staging.SharedUnavailable(
            "cuMemImportFromShareableHandle failed: CUDA_ERROR_NOT_PERMITTED"
        )

    monkeypatch.setattr(shared_staging, "take", refuse)
    _send_inputs(st, link, inputs)
    _same(state.inputs, [inputs[0], 3, inputs[2].contiguous()])
    assert st.fetch_shared_off and st.walls["fetch_shared_fallback"] == 1.0
    (note,) = st.diags
    assert note.code == "verify.shared_fetch_unavailable" and "CUDA_ERROR_NOT_PERMITTED" in note.message
    _send_inputs(st, link, inputs)  # not tried again
    assert len(released) == 2 and st.walls["inputs_shared_count"] == 1.0


def test_inputs_the_judge_cannot_share_and_a_refusal(
    runner: tuple[socket.socket, RunnerState], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The judge cannot make a buffer (no cuda-bindings, a driver error): nothing is sent, the
    inputs go over the socket, the reason is an information diagnostic, no descriptor is left open.
    A runner whose shared inputs reply is a failure ends the trial as any refused request does."""
    from cudice.verifier.run.judge_correctness import _send_inputs
    from cudice.verifier.run.judging import Stop

    ours, state = runner

    def no_buffer(lay: shared_staging.Layout, device: str) -> Any:
        raise shared_staging.SharedUnavailable("cuda-bindings is not installed")

    monkeypatch.setattr(shared_staging, "offer", no_buffer)
    st, link = _fetching_judge(ours, monkeypatch)
    inputs = [torch.randn(1 << 21)]
    before = _open_fds()
    _send_inputs(st, link, inputs)
    _same(state.inputs, inputs)
    (note,) = st.diags
    assert "judge: SharedUnavailable: cuda-bindings" in note.message and st.fetch_shared_off
    assert _open_fds() <= before

    _offer_memfd(monkeypatch, [])
    st, link = _fetching_judge(ours, monkeypatch)

    def failing(st_: RunnerState, req: dict[str, Any], blobs: list[bytearray], key: str) -> tuple[bool, Any]:
        os.close(channel.recv_fd(st_.sock))
        raise RuntimeError("the runner broke")

    from cudice.verifier.run import runner as runner_module

    monkeypatch.setattr(runner_module, "received", failing)
    with pytest.raises(Stop) as stop:
        _send_inputs(st, link, inputs)
    assert stop.value.verdict.value == "runtime_error"


def test_the_config_switch() -> None:
    assert VerifyConfig().timing_staging == "shared"
    cfg = VerifyConfig(timing_staging="socket")
    assert cfg.overrides() == {"timing_staging": "socket"}
    assert VerifyConfig.from_dict(cfg.overrides()) == cfg
    with pytest.raises(ValueError, match="timing_staging"):
        VerifyConfig(timing_staging="ipc")


CHILD = r"""
import hashlib, json, socket, sys, torch
from cudice.verifier.run.runner import serve
from cudice.verifier.run.runner_state import RunnerState

state = RunnerState(socket.socket(fileno=int(sys.argv[1])), device="cuda")
# outputs to fetch: strided, half precision, a plain value among them
state.last = [torch.arange(1 << 20, device="cuda", dtype=torch.float32) * 0.5, 7,
              torch.arange(15, device="cuda").reshape(3, 5).half().t()]
serve(state)
print("INPUTS " + json.dumps([
    hashlib.sha256(x.contiguous().cpu().reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest()
    if isinstance(x, torch.Tensor) else x for x in state.inputs
]))
print("STAGED " + json.dumps([
    [hashlib.sha256(x.contiguous().cpu().reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest()
     if isinstance(x, torch.Tensor) else x for x in s]
    for s in state.sets
]))
"""


@pytest.mark.gpu
def test_a_sealed_set_staged_through_shared_memory_is_bit_identical_in_another_process() -> None:
    pytest.importorskip("cuda.bindings.driver")
    from cudice.verifier.process import die_with_parent
    from cudice.verifier.run import seal

    ours, theirs = socket.socketpair()
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(theirs.fileno())],
        pass_fds=(theirs.fileno(),),
        stdout=subprocess.PIPE,
        preexec_fn=die_with_parent,
    )
    theirs.close()
    try:
        assert channel.recv(ours, 1 << 20)[0]["op"] == "ready"
        st, link = _judge(VerifyConfig(timing_staging="shared"), ours)
        st.device = "cuda"
        clock = Clock(flush_mib=0)
        g = torch.Generator(device="cuda").manual_seed(3)
        sets = [
            [torch.randn(1 << 20, generator=g, device="cuda"), 5, torch.randn(33, 7, device="cuda").half()],
            [torch.randn(1 << 20, generator=g, device="cuda"), 6, torch.randn(33, 7, device="cuda").half()],
        ]
        for s in sets:
            seal.toggle(s, 12345)
        stage(st, clock, link, sets, sealed=True)
        assert clock.staging_why == ""
        assert st.walls["timing.staging_path_shared"] == 1.0
        # and back: outputs the runner offers through a buffer of its own, cloned here
        from cudice.verifier.run.judge_state import fetch
        from cudice.verifier.source.result import Stage

        st.diags, st.fetch_shared_off, st.where = [], False, None
        got = fetch(st, link, {"op": "fetch"}, Stage.CORRECTNESS, max_bytes=16 << 20)
        assert st.walls.get("fetch_shared_count") == 1.0, [d.message for d in st.diags]
        _same(
            got,
            [
                torch.arange(1 << 20, device="cuda", dtype=torch.float32) * 0.5,
                7,
                torch.arange(15, device="cuda").reshape(3, 5).half().t().contiguous(),
            ],
        )
        # a correctness trial's inputs, through a buffer the judge makes
        from cudice.verifier.run.judge_correctness import _send_inputs

        trial = [torch.randn(3 << 20, generator=g, device="cuda")]
        _send_inputs(st, link, trial)
        assert st.walls.get("inputs_shared_count") == 1.0, [d.message for d in st.diags]
        channel.send(ours, {"op": "exit"})
        out, _ = proc.communicate(timeout=300)
    finally:
        ours.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    line = next(x for x in out.decode().splitlines() if x.startswith("INPUTS "))
    assert json.loads(line[7:]) == [hashlib.sha256(_bits(trial[0])).hexdigest()]
    line = next(x for x in out.decode().splitlines() if x.startswith("STAGED "))
    want = [
        [hashlib.sha256(_bits(x)).hexdigest() if isinstance(x, torch.Tensor) else x for x in s] for s in sets
    ]
    assert json.loads(line[7:]) == want
