"""The kernels compiled into a built candidate library, named as the PyTorch profiler names them.

Role: the evidence behind `dynamic.torch_kernels_did_work` (dynamic_checks.check_own_kernels_did_work).
A kernel the profiler saw is the candidate's own iff its name is in `own_kernels(library)`; a name
parsed from the source cannot tell the candidate's `vectorized_elementwise_kernel` from ATen's, and
misses kernels the candidate compiles without writing them (CUB's `DeviceReduce`, templates).

Contract: `own_kernels(library) -> frozenset[str]`, every entry function (`__global__`) of every
device image in the library's fatbin (ELF sections `.nv_fatbin` and, for relocatable device code,
`__nv_relfatbin`; or of the library itself if it is a cubin), each under two names: the
demangled one — demangled by libstdc++'s `__cxa_demangle`, the demangler the profiler's CUPTI
layer uses (pytorch/kineto `libkineto/src/Demangle.cpp`), so names agree character for character
— and its symbol, which is what that layer reports for symbols over 1,024 characters. Cached by
the library's content hash.

How: the fatbin's cubins are ELF files; entry functions are `STT_FUNC` symbols flagged
`STO_CUDA_ENTRY` (what `cuobjdump -symbols` prints as `ENTRY`); PTX images name them `.entry`.
Compressed images (`-Xfatbin -compress-all`, `--compress-mode`; PTX is compressed by default) are
read through the toolkit's `cuobjdump` when the toolkit has one; compressed PTX next to readable
cubins is skipped (nvcc compiles both from the same sources). Reading and demangling run in a
child Python with a timeout (the symbols are the candidate's, and a demangler fed a crafted name
may recurse deeply or crash), which dies with the thread that started it.

Raises `KernelSymbolsError` (the caller fails closed) when the library cannot be read, holds no
device image, holds compressed images while the toolkit has no `cuobjdump`, or a tool fails or
times out.

Not covered: the library is the candidate's code, and host code can place bytes in a section named
`.nv_fatbin`, so a forged image can claim any kernel name; names in PyTorch's and vendor
libraries' namespaces are therefore never own (dynamic_checks), and forging a name outside them
gains nothing unless PyTorch runs a kernel of exactly that name.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import re
import shutil
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from cudice.verifier.process import die_with_parent

_FATBIN_MAGIC = 0xBA55ED50
_FATBIN_SECTIONS = (".nv_fatbin", "__nv_relfatbin")
_KIND_PTX, _KIND_ELF = 1, 2
_FLAG_COMPRESSED = 0x2000 | 0x8000  # LZ4 (CUDA ≤ 12) | zstd (CUDA 13)
_SHT_SYMTAB, _STT_FUNC, _STO_CUDA_ENTRY = 2, 2, 0x10
_EM_CUDA = 190
_PTX_ENTRY = re.compile(rb"\.entry\s+([A-Za-z_$%][\w$%]*)")
# `FUNC  GLOBAL  DEFAULT  ENTRY  _Z11relu_kernelPKfPfi` (columns vary between toolkit versions)
_CUOBJDUMP_ENTRY = re.compile(r"^\s*(?:STT_)?FUNC\b.*\b(?:STO_)?ENTRY\b.*?(\S+)\s*$", re.M)

_CACHE: dict[str, frozenset[str]] = {}
_CACHE_LOCK = threading.Lock()
_CACHE_MAX = 256


class KernelSymbolsError(RuntimeError):
    """The kernels of a library could not be listed; the message says why and what to do."""


class _Undecodable(Exception):
    """A device image this module cannot decode itself (compressed)."""


def own_kernels(library: Path, timeout_s: float = 60.0) -> frozenset[str]:
    """Entry functions compiled into `library` (a built `.so`), as demangled names and symbols.

    E.g. `{"relu_kernel(float const*, float*, int)", "_Z11relu_kernelPKfPfi", "void
    cub::...::DeviceReduceKernel<...>(...)", ...}`. `timeout_s` bounds the whole listing.
    """
    try:
        data = library.read_bytes()
    except OSError as exc:
        raise KernelSymbolsError(
            f"cannot read the built library {library} ({exc}): which kernels are the candidate's "
            "was not checked. Rebuild the candidate."
        ) from exc
    key = hashlib.sha256(data).hexdigest()
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
    if hit is not None:
        return hit
    names = _list_in_child(library, timeout_s)
    with _CACHE_LOCK:
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = names
    return names


def _list_in_child(library: Path, timeout_s: float) -> frozenset[str]:
    cmd = [sys.executable, "-m", "cudice.verifier.build.kernel_symbols", str(library), str(timeout_s / 2)]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout_s, preexec_fn=die_with_parent
        )
    except subprocess.TimeoutExpired as exc:
        raise KernelSymbolsError(
            f"listing the kernels of {library.name} took over {timeout_s:.0f} s: which kernels are "
            "the candidate's was not checked."
        ) from exc
    except OSError as exc:
        raise KernelSymbolsError(f"cannot start {sys.executable} to list the kernels: {exc}") from exc
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        raise KernelSymbolsError(f"listing the kernels of {library.name} failed: {tail}")
    return frozenset(json.loads(proc.stdout))


def list_entry_names(library: Path, tool_timeout_s: float = 30.0) -> frozenset[str]:
    """What `own_kernels` returns, computed in this process (the child's work; tests call it)."""
    return frozenset(_with_demangled(entry_symbols(library, tool_timeout_s)))


def entry_symbols(library: Path, tool_timeout_s: float = 30.0) -> set[str]:
    """The mangled symbols of the entry functions in `library`'s device images (`library` may also
    be a bare cubin, as build/compile.py builds from a raw `.cu` document)."""
    data = library.read_bytes()
    try:
        if data[:4] == b"\x7fELF" and struct.unpack_from("<H", data, 0x12)[0] == _EM_CUDA:
            return _cubin_entries(data)
        images = [img for sec in _sections(data, _FATBIN_SECTIONS) for img in _fatbin_images(sec)]
    except (struct.error, ValueError) as exc:
        raise KernelSymbolsError(f"{library.name} is not a readable ELF library ({exc}).") from exc
    if not images:
        raise KernelSymbolsError(
            f"{library.name} holds no CUDA device code (no fatbin section): it was not built by nvcc "
            "from the candidate's CUDA source."
        )
    found: set[str] = set()
    readable_cubins = 0
    undecodable: list[tuple[int, int]] = []
    for kind, flags, payload in images:
        try:
            found |= _image_entries(kind, flags, payload)
            readable_cubins += kind == _KIND_ELF
        except _Undecodable:
            undecodable.append((kind, flags))
    if any(kind == _KIND_ELF for kind, _ in undecodable) or (undecodable and not readable_cubins):
        return _cuobjdump_entries(library, tool_timeout_s)
    return found


def _image_entries(kind: int, flags: int, payload: bytes) -> set[str]:
    if kind not in (_KIND_PTX, _KIND_ELF):
        return set()  # LTO IR and other kinds are inputs of a device link, not loadable images
    if flags & _FLAG_COMPRESSED:
        raise _Undecodable
    if kind == _KIND_PTX:
        return {m.decode() for m in _PTX_ENTRY.findall(payload)}
    if payload[:4] != b"\x7fELF":
        raise _Undecodable
    return _cubin_entries(payload)


def _elf_sections(data: bytes) -> tuple[list[tuple[int, ...]], bytes]:
    """Section headers of a little-endian ELF64 file and its section-name string table."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a little-endian 64-bit ELF file")
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    heads = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = heads[shstrndx]
    return heads, data[names[4] : names[4] + names[5]]


def _cstr(table: bytes, offset: int) -> bytes:
    end = table.find(b"\0", offset)
    return table[offset : end if end >= 0 else len(table)]


def _sections(data: bytes, wanted: tuple[str, ...]) -> Iterator[bytes]:
    heads, names = _elf_sections(data)
    for h in heads:
        if _cstr(names, h[0]).decode(errors="replace") in wanted:
            yield data[h[4] : h[4] + h[5]]


def _fatbin_images(section: bytes) -> Iterator[tuple[int, int, bytes]]:
    """(kind, flags, payload) of each image of each fatbin container in a fatbin section.

    Layout (as the CUDA runtime reads it): a 16-byte container header (magic, version, header
    size, size of the images that follow), then per image a header (kind u16 at 0, header size
    u32 at 4, payload size u64 at 8, flags u64 at 40) and its payload.
    """
    pos = 0
    while pos + 16 <= len(section):
        magic, _version, head, size = struct.unpack_from("<IHHQ", section, pos)
        if magic != _FATBIN_MAGIC:
            pos += 8  # containers are 8-byte aligned; padding between them
            continue
        p, end = pos + head, min(pos + head + size, len(section))
        while p + 48 <= end:
            kind, _, image_head, image_size = struct.unpack_from("<HHIQ", section, p)
            (flags,) = struct.unpack_from("<Q", section, p + 40)
            if image_head < 48 or image_size > end - p - image_head:
                raise ValueError(f"corrupt fatbin image header at offset {p}")
            yield kind, flags, section[p + image_head : p + image_head + image_size]
            p += image_head + image_size
        pos = max(end, pos + 8)


def _cubin_entries(cubin: bytes) -> set[str]:
    heads, _ = _elf_sections(cubin)
    found: set[str] = set()
    for h in heads:
        if h[1] != _SHT_SYMTAB:
            continue
        strtab = heads[h[6]]
        strings = cubin[strtab[4] : strtab[4] + strtab[5]]
        for i in range(h[5] // 24):
            name, info, other, _shndx, _value, _size = struct.unpack_from("<IBBHQQ", cubin, h[4] + i * 24)
            if info & 0xF == _STT_FUNC and other & _STO_CUDA_ENTRY:
                found.add(_cstr(strings, name).decode(errors="replace"))
    return found


def find_cuobjdump() -> str | None:
    """The toolkit's `cuobjdump`: next to nvcc under CUDA_HOME (toolchain.cuda_home), else on PATH."""
    from cudice.verifier.build.toolchain import cuda_home

    tool = Path(cuda_home()) / "bin" / "cuobjdump"
    return str(tool) if tool.is_file() else shutil.which("cuobjdump")


def _cuobjdump_entries(library: Path, timeout_s: float) -> set[str]:
    tool = find_cuobjdump()
    if tool is None:
        raise KernelSymbolsError(
            f"{library.name} holds compressed device images (nvcc `-Xfatbin -compress-all` or "
            "`--compress-mode`), which need the CUDA toolkit's `cuobjdump` to read, and none was found "
            "(CUDA_HOME/bin, PATH). Build without fatbin compression, or install cuobjdump "
            "(pip install nvidia-cuda-cuobjdump, or the toolkit's cuda-cuobjdump package)."
        )
    try:
        proc = subprocess.run(
            [tool, "-symbols", str(library)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            preexec_fn=die_with_parent,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise KernelSymbolsError(f"`cuobjdump -symbols {library.name}` failed: {exc}") from exc
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        raise KernelSymbolsError(f"`cuobjdump -symbols {library.name}` failed: {tail}")
    return set(_CUOBJDUMP_ENTRY.findall(proc.stdout))


def _with_demangled(symbols: set[str]) -> set[str]:
    """Each symbol and, where it demangles, its demangled form (libstdc++'s `__cxa_demangle`)."""
    libstdcxx = ctypes.CDLL("libstdc++.so.6")
    demangle = libstdcxx.__cxa_demangle
    demangle.restype = ctypes.c_void_p
    demangle.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    free = ctypes.CDLL(None).free
    free.argtypes = [ctypes.c_void_p]
    names = set(symbols)
    for sym in symbols:
        status = ctypes.c_int(-1)
        out = demangle(sym.encode(), None, None, ctypes.byref(status))
        if out:
            if status.value == 0:
                names.add(ctypes.string_at(out).decode(errors="replace"))
            free(out)
    return names


def _main(argv: list[str]) -> int:
    """Child entry: `python -m cudice.verifier.build.kernel_symbols LIBRARY [TOOL_TIMEOUT_S]` → JSON list."""
    try:
        names = list_entry_names(Path(argv[0]), float(argv[1]) if len(argv) > 1 else 30.0)
    except (KernelSymbolsError, OSError) as exc:
        print(str(exc), file=sys.stderr)
        return 1
    print(json.dumps(sorted(names)))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
