"""Staging a repetition's input sets (and a correctness trial's inputs and outputs) through GPU
memory shared between the judge and one runner at a time.

Role: the default way staged sets reach a runner on a GPU, instead of its socket
(run/judge_clock.py `stage`, `VerifyConfig.timing_staging == "shared"`; the socket where this
cannot work, or under `"socket"`). The judge's sets are
already on the GPU; over the socket they go GPU -> host -> socket -> host -> GPU, seconds per
runner and repetition for large sets (docs/benchmarks.md compares the two). Here the judge
allocates one buffer for one runner with the CUDA driver's virtual memory management
(`cuMemCreate` with a POSIX file descriptor as its shareable handle), zeroes it, copies the sealed
sets into it (device to device), synchronises, exports the fd and sends it over the runner's Unix
socket with SCM_RIGHTS (run/channel.py `send_fd`) beside the layout of every tensor (`layout`:
offset, dtype, shape, strides; other values as JSON, as the socket path sends them). The runner
imports and maps it, clones every tensor into allocations of its own (`unpack`), synchronises,
unmaps, releases, closes the fd and replies; its staged sets are then bit for bit what the socket
path gives.

The other way, outputs: where the judge asks for them with `"shared"` (run/judge_state.py `fetch`:
correctness trials and the kept outputs of timed calls, on a GPU with shared staging on), the
candidate's runner `offer`s its outputs in a buffer of its own, sends the fd after its reply and
releases the buffer when the next request arrives; the judge maps at most the bytes outputs of the
expected size take, clones every entry (`take`, each checked against the buffer) and releases it.
The buffer holds only what the runner would have sent over the socket; where the judge cannot map
it, it asks again over the socket.

Contract:
- a buffer is made for one runner and one staging, holds nothing but that staging's (sealed) sets
  and zeroes, and is never read by the judge after its fd left: the judge drops its own view before
  exporting and releases the buffer once the runner's reply is in. What the runner writes into it
  reaches no one. The fd names only that allocation: no other judge memory (not the caching
  allocator's segments, whose IPC handles expose whole segments) can be reached through it.
  Legacy `cudaIpc*` handles do not work across the runners' PID namespaces; fds do.
- every failure (no cuda-bindings, a CPU device, a driver refusing POSIX fds, a mapping or a view
  that fails) raises `SharedUnavailable` (or the driver's error) on the side where it happens; the
  judge then stages that repetition over the socket, the runner having answered `"staged": false`.
- the seals are untouched: sets travel sealed and are unsealed only inside the clock (run/seal.py).

Not covered: multi-GPU placement (both processes
use their own current device), a candidate that keeps its mapping of the buffer (it holds GPU
memory of its own making until its process ends, as with any allocation it keeps).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any

ALIGN = 256  # bytes: every tensor's offset in a shared buffer (any dtype's element size divides it)


class SharedUnavailable(Exception):
    """Shared staging cannot be used here (the reason is the message); the socket path is used."""


@dataclass(frozen=True, slots=True)
class Layout:
    """Where every tensor of a staging lies in one buffer."""

    tree: object  # the JSON tree: tensors as {"__t__": i, dtype, shape, strides, offset}, rest as JSON
    places: list[tuple[int, Any]]  # (offset, contiguous tensor) in order of `__t__`
    size: int  # bytes the tensors need, a multiple of ALIGN (at least ALIGN)


def _round_up(n: int, to: int) -> int:
    return (n + to - 1) // to * to


def _contiguous_strides(shape: list[int]) -> list[int]:
    strides, step = [], 1
    for s in reversed(shape):
        strides.append(step)
        step *= max(s, 1)
    return strides[::-1]


def layout(value: object) -> Layout:
    """The layout of `value` (nested lists, tuples, dicts of tensors and JSON values, as
    run/channel.py `encode` takes them): each tensor, made contiguous, at the next `ALIGN`ed offset."""
    import torch
    from cudice.verifier.run.channel import DTYPES, ChannelError, encode_tree

    places: list[tuple[int, Any]] = []
    end = 0

    def leaf(t: torch.Tensor) -> object:
        nonlocal end
        t = t.detach().contiguous()
        name = str(t.dtype).removeprefix("torch.")
        if name not in DTYPES:
            raise ChannelError(f"dtype {t.dtype} cannot be sent; supported: {', '.join(DTYPES)}")
        offset = _round_up(end, ALIGN)
        places.append((offset, t))
        end = offset + t.numel() * t.element_size()
        shape = list(t.shape)
        return {
            "__t__": len(places) - 1,
            "dtype": name,
            "shape": shape,
            "strides": _contiguous_strides(shape),
            "offset": offset,
        }

    tree = encode_tree(value, leaf)
    return Layout(tree, places, max(_round_up(end, ALIGN), ALIGN))


def pack(lay: Layout, buffer: Any) -> None:
    """Copy the tensors of `lay` into `buffer` (a uint8 tensor of at least `lay.size` bytes, on any
    device): their raw bytes, exact. Asynchronous on CUDA: synchronise before handing it out."""
    import torch

    for offset, t in lay.places:
        n = t.numel() * t.element_size()
        if n:
            buffer[offset : offset + n].copy_(t.reshape(-1).view(torch.uint8))


def unpack(tree: object, buffer: Any, budget: int | None = None) -> Any:
    """The value `tree` describes, every tensor cloned out of `buffer` (a uint8 tensor) into a fresh
    contiguous tensor on `buffer`'s device. Entries that do not fit the buffer, misaligned offsets,
    unknown dtypes or malformed shapes and strides raise `ChannelError`. With `budget` (a tree from
    a process not trusted, the runner's outputs) every entry must be contiguous and their bytes
    together at most `budget`: overlapping or stride-0 entries cannot make the clones larger than
    what was sent, as the socket's byte count bounds them there."""
    import torch
    from cudice.verifier.run.channel import DTYPES, ChannelError, decode_tree

    size = int(buffer.numel())
    cloned = 0

    def leaf(v: dict[str, Any]) -> object:
        name, shape, strides, offset = v.get("dtype"), v.get("shape"), v.get("strides"), v.get("offset")
        if not (
            name in DTYPES
            and isinstance(shape, list)
            and isinstance(strides, list)
            and len(strides) == len(shape)
            and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape + strides)
            and isinstance(offset, int)
            and not isinstance(offset, bool)
            and offset >= 0
            and offset % ALIGN == 0
        ):
            raise ChannelError(f"malformed shared tensor entry {str(v)[:200]}")
        nonlocal cloned
        dtype = getattr(torch, str(name))
        numel = 1
        for s in shape:
            numel *= s
        if budget is not None:
            cloned += numel * torch.empty((), dtype=dtype).element_size()
            if strides != _contiguous_strides(shape) or cloned > budget:
                raise ChannelError(
                    f"shared tensor entry {str(v)[:200]} is not contiguous or goes past the "
                    f"{budget} bytes the outputs may take"
                )
        if numel == 0:
            return torch.empty(shape, dtype=dtype, device=buffer.device)
        esize = torch.empty((), dtype=dtype).element_size()
        extent = 1 + sum((s - 1) * d for s, d in zip(shape, strides, strict=True))  # elements spanned
        if offset + extent * esize > size:
            raise ChannelError(f"shared tensor entry {str(v)[:200]} reaches past the {size}-byte buffer")
        raw = buffer[offset : offset + extent * esize].view(dtype)
        return raw.as_strided(shape, strides).clone(memory_format=torch.contiguous_format)

    return decode_tree(tree, leaf)


# -- the CUDA driver's virtual memory management ------------------------------------------------------
def driver() -> Any:
    """`cuda.bindings.driver`, or `SharedUnavailable` without cuda-bindings."""
    try:
        from cuda.bindings import driver as cu
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise SharedUnavailable(f"cuda-bindings is not installed ({exc})") from None
    return cu


def _check(cu: Any, result: Any, what: str) -> None:
    if result != cu.CUresult.CUDA_SUCCESS:
        raise SharedUnavailable(f"{what} failed: {getattr(result, 'name', result)}")


def device_index(device: str) -> int:
    """The CUDA ordinal of `device` ("cuda", "cuda:1"); `SharedUnavailable` for any other device."""
    import torch

    if not device.startswith("cuda") or not torch.cuda.is_available():
        raise SharedUnavailable(f"shared staging needs a CUDA device, not {device!r}")
    index = torch.device(device).index
    return int(index) if index is not None else int(torch.cuda.current_device())


def _access(cu: Any, ptr: int, size: int, dev: int) -> None:
    desc = cu.CUmemAccessDesc()
    desc.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    desc.location.id = dev
    desc.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    (result,) = cu.cuMemSetAccess(ptr, size, [desc], 1)
    _check(cu, result, "cuMemSetAccess")


def _prop(cu: Any, dev: int) -> Any:
    prop = cu.CUmemAllocationProp()
    prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = dev
    prop.requestedHandleTypes = cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    return prop


def _granularity(cu: Any, prop: Any) -> int:
    err, gran = cu.cuMemGetAllocationGranularity(
        prop, cu.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
    )
    _check(cu, err, "cuMemGetAllocationGranularity")
    return max(int(gran), 1)


def buffer_bound(nbytes: int, device: str) -> int:
    """The size of the buffer `offer` makes for `nbytes` of tensors on `device`: every buffer is a
    whole number of the driver's allocation granularity (2 MiB on the GPUs of docs/benchmarks.md).
    `SharedUnavailable` where that cannot be asked."""
    cu = driver()
    return _round_up(max(nbytes, 1), _granularity(cu, _prop(cu, device_index(device))))


class _CudaBytes:
    """`size` bytes at device address `ptr`, for `torch.as_tensor` (CUDA array interface)."""

    def __init__(self, ptr: int, size: int) -> None:
        self.__cuda_array_interface__ = {
            "shape": (size,),
            "typestr": "|u1",
            "data": (ptr, False),
            "version": 2,
        }


class Mapping:
    """One VMM allocation mapped into this process: made here (`create`) or imported from a runner's
    fd (`imported`). `view()` is a uint8 tensor over it; `close()` unmaps and releases it (the
    physical memory lives on while another process still holds it)."""

    def __init__(self, cu: Any, handle: Any, size: int, dev: int) -> None:
        self.cu, self.handle, self.size, self.dev = cu, handle, size, dev
        self.ptr = 0
        self.mapped = False
        err, ptr = cu.cuMemAddressReserve(size, 0, 0, 0)
        try:
            _check(cu, err, "cuMemAddressReserve")
            self.ptr = int(ptr)
            (result,) = cu.cuMemMap(self.ptr, size, 0, handle, 0)
            _check(cu, result, "cuMemMap")
            self.mapped = True
            _access(cu, self.ptr, size, dev)
        except BaseException:
            self.close()
            raise

    @classmethod
    def create(cls, nbytes: int, device: str) -> Mapping:
        """A fresh allocation of at least `nbytes` on `device` (rounded up to `granularity`),
        exportable as a POSIX fd."""
        import torch

        dev = device_index(device)
        cu = driver()
        torch.cuda.synchronize(dev)  # torch's context is current on this thread from here on
        prop = _prop(cu, dev)
        size = _round_up(max(nbytes, 1), _granularity(cu, prop))
        err, handle = cu.cuMemCreate(size, prop, 0)
        _check(cu, err, "cuMemCreate (with a POSIX fd handle)")
        return cls(cu, handle, size, dev)

    @classmethod
    def imported(cls, fd: int, size: int, device: str) -> Mapping:
        """The allocation behind `fd` (a POSIX fd from `export_fd` of another process), mapped here.
        `fd` stays open (the caller closes it)."""
        import torch

        dev = device_index(device)
        cu = driver()
        torch.cuda.synchronize(dev)
        err, handle = cu.cuMemImportFromShareableHandle(
            fd, cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
        )
        _check(cu, err, "cuMemImportFromShareableHandle")
        return cls(cu, handle, size, dev)

    def view(self) -> Any:
        """A uint8 tensor over the whole mapping (drop it before `close`)."""
        import torch

        t = torch.as_tensor(_CudaBytes(self.ptr, self.size), device=f"cuda:{self.dev}")
        if t.dtype != torch.uint8 or t.numel() != self.size or t.data_ptr() != self.ptr:
            raise SharedUnavailable("torch did not view the shared buffer as its bytes")
        return t

    def export_fd(self) -> int:
        """A new POSIX fd naming this allocation alone (the caller sends and closes it)."""
        err, fd = self.cu.cuMemExportToShareableHandle(
            self.handle, self.cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0
        )
        _check(self.cu, err, "cuMemExportToShareableHandle")
        return int(fd)

    def close(self) -> None:
        """Unmap, free the address range, release the handle; idempotent, never raises."""
        cu = self.cu
        if self.mapped:
            cu.cuMemUnmap(self.ptr, self.size)
            self.mapped = False
        if self.ptr:
            cu.cuMemAddressFree(self.ptr, self.size)
            self.ptr = 0
        if self.handle is not None:
            cu.cuMemRelease(self.handle)
            self.handle = None


def offer(lay: Layout, device: str) -> tuple[Mapping, int]:
    """The sending side (the judge staging sets, a runner answering with outputs): a fresh buffer
    for one receiver holding `lay`'s tensors (zeroes elsewhere), synchronised, the sender's own view
    dropped, and an fd naming it. The caller sends the fd, closes it, and closes the mapping once the
    receiver has cloned what it holds (never reading it again)."""
    import torch

    buf = Mapping.create(lay.size, device)
    try:
        view = buf.view()
        view.zero_()  # nothing of the judge's earlier use of this memory reaches the runner
        pack(lay, view)
        torch.cuda.synchronize(buf.dev)
        del view
        return buf, buf.export_fd()
    except BaseException:
        buf.close()
        raise


def take(fd: int, size: object, tree: object, device: str, budget: int | None = None) -> Any:
    """The receiving side (a runner staging sets, the judge fetching outputs): the value `tree`
    describes, cloned out of the buffer behind `fd` into this process's own allocations (`unpack`,
    with `budget`); the buffer unmapped and released and `fd` closed, on any outcome."""
    import torch

    try:
        if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
            raise SharedUnavailable(f"a shared buffer of {size!r} bytes")
        buf = Mapping.imported(fd, size, device)
    finally:
        os.close(fd)
    try:
        view = buf.view()
        value = unpack(tree, view, budget)
        torch.cuda.synchronize(buf.dev)
        del view
        return value
    finally:
        with contextlib.suppress(Exception):  # clones queued before an entry failed: done first
            torch.cuda.synchronize(buf.dev)
        buf.close()
