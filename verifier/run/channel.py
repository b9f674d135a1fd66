"""Framed messages between the judge and a runner process: a JSON header and raw tensor bytes.

Wire format of one message on a stream socket: an 8-byte big-endian header length, the UTF-8
JSON header, then the blobs whose sizes the header lists under `"blobs"`. Tensors travel as
`{"__t__": index, "dtype": name, "shape": [...]}` in the header and their bytes as a blob;
tuples, lists, dicts (string keys), numbers, strings, booleans and `None` travel as JSON.

Contract for the receiver, which may be the judge reading a hostile candidate's reply: nothing
is unpickled, a header is at most `MAX_HEADER_BYTES`, the blobs of one message at most the
`max_bytes` the caller allows, dtypes come from a fixed list and shapes must match the blob
sizes — anything else raises `ChannelError`, never executes code. Not covered: encryption or
authentication (both ends are local processes; the socket pair is created by the judge).

Timed calls use a leaner form inside a `stream` request (run/judge_clock.py `stream`), after the
runner's JSON `ready` reply: fixed-size binary messages, one call each (`send_call`/`recv_call`:
the staged set, the digest key, the seal key) answered by its digests
(`send_digests`/`recv_digests`), so that what a call costs beyond the forward is small and the
same every time.

A file descriptor (a GPU buffer the judge shares with one runner: run/shared_staging.py) travels
after the message it belongs to, on one marker byte with SCM_RIGHTS (`send_fd`/`recv_fd`); the
judge's runner sockets are Unix socket pairs (run/runner_link.py). The judge sends descriptors
(staged sets, a correctness trial's inputs) and receives one only where it asked for outputs
through GPU memory (run/judge_state.py `fetch`), right after that reply.
"""

from __future__ import annotations

import select
import socket
import struct
import time
from collections.abc import Callable, Sequence
from json import dumps as _dumps
from json import loads as _loads
from typing import Any

# json's functions are bound at import, before candidate code: `json.dumps = ...` does not reach the protocol
MAX_HEADER_BYTES = 16 << 20
_LEN = struct.Struct(">Q")
DTYPES = (
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "bool",
    "complex64",
    "complex128",
)


class ChannelError(Exception):
    """The peer closed the channel or sent something that is not a well-formed message."""


class OversizeMessage(ChannelError):
    """A well-formed header whose blobs carry more bytes than the receiver allows (`sent`,
    `allowed`); the blobs stay unread, so the channel is out of step and must not be used again."""

    def __init__(self, sent: int, allowed: int) -> None:
        super().__init__(f"message carries {sent} bytes, more than the {allowed} allowed here")
        self.sent = sent
        self.allowed = allowed


def send(
    sock: socket.socket, header: dict[str, Any], blobs: Sequence[bytes | bytearray | memoryview] = ()
) -> None:
    views = [memoryview(b).cast("B") for b in blobs]
    body = _dumps({**header, "blobs": [v.nbytes for v in views]}).encode()
    sock.sendall(_LEN.pack(len(body)) + body)
    for v in views:
        sock.sendall(v)


_CALL = struct.Struct("<IQQ")  # staged set index, digest key, seal key (NO_SEAL: the set is not sealed)
_REPLY = struct.Struct("<BI")  # status (0 digests follow; 1 failed: a JSON message follows), digest count
NO_SEAL = (1 << 64) - 1


def send_call(sock: socket.socket, index: int, key: int, seal: int) -> None:
    """One timed call of a stream: forward on staged set `index`, unsealed with `seal` first."""
    sock.sendall(_CALL.pack(index, key & 0xFFFFFFFFFFFFFFFF, seal))


def recv_call(sock: socket.socket) -> tuple[int, int, int]:
    """(set index, digest key, seal key) of the next timed call."""
    index, key, seal = _CALL.unpack(bytes(_read_exact(sock, _CALL.size)))
    return int(index), int(key), int(seal)


def send_digests(sock: socket.socket, values: Sequence[float] | None) -> None:
    """A timed call's digests (float64), or `None`: it failed and a JSON message follows."""
    if values is None:
        sock.sendall(_REPLY.pack(1, 0))
        return
    sock.sendall(_REPLY.pack(0, len(values)) + struct.pack(f"<{len(values)}d", *values))


def recv_digests(sock: socket.socket, max_count: int) -> list[float] | None:
    """The digests of one timed call; `None` when the runner reports a failure (read it with `recv`)."""
    status, count = _REPLY.unpack(bytes(_read_exact(sock, _REPLY.size)))
    if status == 1:
        return None
    if status != 0 or count > max_count:
        raise ChannelError(
            f"a timed call's reply has status {status} and {count} digests (at most {max_count})"
        )
    return list(struct.unpack(f"<{count}d", bytes(_read_exact(sock, 8 * count))))


def _read_exact(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:], min(n - got, 1 << 24))
        if k == 0:
            raise ChannelError(f"the peer closed the channel after {got} of {n} bytes")
        got += k
    return buf


_FD_MARK = b"F"  # the one byte that carries a passed file descriptor


def send_fd(sock: socket.socket, fd: int) -> None:
    """Pass `fd` to the peer (SCM_RIGHTS on a Unix socket: the peer gets its own descriptor of the
    same open file; the caller still owns and closes `fd`). It rides on one marker byte sent after
    the message it belongs to, so the peer reads that message in full first (`recv`) and then the
    descriptor (`recv_fd`); a reader that skipped it would read the marker as the next message's
    length and fail, never act on it."""
    if sock.family != socket.AF_UNIX:
        raise ChannelError("file descriptors travel only over Unix sockets")
    socket.send_fds(sock, [_FD_MARK], [fd])


def recv_fd(sock: socket.socket) -> int:
    """The descriptor the peer passed with `send_fd` (the caller owns and closes it). Anything else
    (no descriptor, another byte, more than one) raises ChannelError, every descriptor received closed."""
    import os

    data, fds, flags, _ = socket.recv_fds(sock, 1, 1)
    if data == _FD_MARK and len(fds) == 1 and not flags & getattr(socket, "MSG_CTRUNC", 0):
        return int(fds[0])
    for fd in fds:
        os.close(fd)
    if not data:
        raise ChannelError("the peer closed the channel before passing a descriptor")
    raise ChannelError(f"expected a passed descriptor, got {data!r} with {len(fds)} descriptors")


def poll_readable(sock: socket.socket, seconds: float) -> None:
    """Poll `sock` without sleeping until it has data or `seconds` pass (a timed exchange: waking
    a thread that slept in the kernel adds tens of microseconds, more on an idle core)."""
    until = time.perf_counter() + seconds
    while not select.select([sock], [], [], 0)[0] and time.perf_counter() < until:
        pass


def recv(sock: socket.socket, max_bytes: int) -> tuple[dict[str, Any], list[bytearray]]:
    """One message: (header, blobs). Raises ChannelError on EOF, oversize or malformed input."""
    (size,) = _LEN.unpack(bytes(_read_exact(sock, _LEN.size)))
    if size > MAX_HEADER_BYTES:
        raise ChannelError(f"message header of {size} bytes is over the {MAX_HEADER_BYTES}-byte limit")
    try:
        header = _loads(bytes(_read_exact(sock, size)))
    except ValueError as exc:
        raise ChannelError(f"message header is not JSON: {exc}") from None
    sizes = header.get("blobs") if isinstance(header, dict) else None
    if not isinstance(sizes, list) or not all(isinstance(s, int) and s >= 0 for s in sizes):
        raise ChannelError("message header lacks a valid 'blobs' size list")
    if sum(sizes) > max_bytes:
        raise OversizeMessage(sum(sizes), max_bytes)
    return header, [_read_exact(sock, s) for s in sizes]


def encode(value: object) -> tuple[object, list[memoryview]]:
    """A forward's inputs or outputs as (JSON tree, blobs); tensors are copied to host memory."""
    import torch

    blobs: list[memoryview] = []

    def leaf(v: torch.Tensor) -> object:
        # a lazily conjugated or negated view has no bytes of its own: resolved first
        t = v.detach().resolve_conj().resolve_neg().contiguous().cpu()
        name = str(t.dtype).removeprefix("torch.")
        if name not in DTYPES:
            raise ChannelError(f"dtype {t.dtype} cannot be sent; supported: {', '.join(DTYPES)}")
        blobs.append(t.reshape(-1).view(torch.uint8).numpy().data if t.numel() else memoryview(b""))
        return {"__t__": len(blobs) - 1, "dtype": name, "shape": list(t.shape)}

    return encode_tree(value, leaf), blobs


def encode_tree(value: object, leaf: Callable[[Any], object]) -> object:
    """`value` as a JSON tree: tuples, lists, dicts (string keys), numbers, strings, booleans and
    `None` in the wire's forms, each tensor as what `leaf` makes of it (its `{"__t__": ...}` entry)."""
    import torch

    def walk(v: object) -> object:
        if isinstance(v, torch.Tensor):
            return leaf(v)
        if isinstance(v, tuple):
            return {"__tuple__": [walk(x) for x in v]}
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, dict):
            return {"__dict__": [[str(k), walk(x)] for k, x in v.items()]}
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        raise ChannelError(
            f"a value of type {type(v).__name__} cannot be sent (tensors, numbers, strings, "
            "tuples, lists and dicts can)"
        )

    return walk(value)


def decode(tree: object, blobs: list[bytearray], device: str = "cpu") -> Any:
    """Inverse of `encode`; tensors are rebuilt on `device`. Raises ChannelError on a bad tree."""
    import torch

    def leaf(v: dict[str, Any]) -> object:
        idx, name, shape = v.get("__t__"), v.get("dtype"), v.get("shape")
        if not (
            isinstance(idx, int)
            and 0 <= idx < len(blobs)
            and name in DTYPES
            and isinstance(shape, list)
            and all(isinstance(s, int) and s >= 0 for s in shape)
        ):
            raise ChannelError(f"malformed tensor entry {str(v)[:200]}")
        dtype = getattr(torch, str(name))
        numel = 1
        for s in shape:
            numel *= s
        blob = blobs[idx]
        if len(blob) != numel * torch.empty((), dtype=dtype).element_size():
            raise ChannelError(f"tensor entry {idx}: {len(blob)} bytes do not hold {shape} of {name}")
        t = torch.frombuffer(blob, dtype=dtype) if numel else torch.empty(0, dtype=dtype)
        return t.reshape(shape).to(device)

    return decode_tree(tree, leaf)


def decode_tree(tree: object, leaf: Callable[[dict[str, Any]], object]) -> Any:
    """Inverse of `encode_tree`: every `{"__t__": ...}` entry becomes what `leaf` makes of it.
    Raises ChannelError on a malformed tree."""

    def walk(v: object) -> object:
        if isinstance(v, dict) and "__t__" in v:
            return leaf(v)
        if isinstance(v, dict) and "__tuple__" in v:
            return tuple(walk(x) for x in _as_list(v["__tuple__"]))
        if isinstance(v, dict) and "__dict__" in v:
            return {str(k): walk(x) for k, x in (_pair(p) for p in _as_list(v["__dict__"]))}
        if isinstance(v, list):
            return [walk(x) for x in v]
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        raise ChannelError(f"malformed value {str(v)[:200]}")

    return walk(tree)


def _as_list(v: object) -> list[object]:
    if not isinstance(v, list):
        raise ChannelError(f"expected a list, got {type(v).__name__}")
    return v


def _pair(p: object) -> tuple[object, object]:
    if not (isinstance(p, list) and len(p) == 2):
        raise ChannelError("malformed dict entry")
    return p[0], p[1]
