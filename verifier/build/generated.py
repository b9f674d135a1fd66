"""The files `load_inline` would write, laid out byte-for-byte as torch does, with a line map.

torch's `load_inline` (torch/utils/cpp_extension.py) writes
- `main.cpp` = "\\n".join(["#include <torch/extension.h>", *cpp_sources, <PYBIND11_MODULE lines>]),
- `cuda.cu`  = "\\n".join(["#include <torch/types.h>", "#include <cuda.h>", "#include <cuda_runtime.h>",
  *cuda_sources]),
so compiler line numbers are offset by those implicit header lines and by the earlier sources.
`GeneratedModule.locate(file, line, column)` turns a compiler position back into the `.py`
document's (line, column), or None when it falls on a line cudice (not the user) wrote.

`layout` refuses (raises `UnsafeModule`) a name, `functions` entry or source that build/unsafe.py
says would reach the compiler as more than C++.

Not covered: `no_implicit_headers=True` and `with_pytorch_error_handling=False` calls are laid
out as the defaults (their extra keywords are not read from the call).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from cudice.verifier.build.cabi import Signature, signatures
from cudice.verifier.build.unsafe import UnsafeModule, unsafe_reason
from cudice.verifier.source.document import Document, LoadInlineCall
from cudice.verifier.source.result import Location
from cudice.verifier.source.sourcemap import SourceSpan

CPP_HEADERS = ("#include <torch/extension.h>",)
CUDA_HEADERS = ("#include <torch/types.h>", "#include <cuda.h>", "#include <cuda_runtime.h>")
MAIN_CPP = "main.cpp"
CUDA_CU = "cuda.cu"


@dataclass(frozen=True, slots=True)
class Piece:
    """One user source inside a generated file: it starts at `first_line` (1-based)."""

    first_line: int
    num_lines: int
    span: SourceSpan | None  # None: the text is known (run time) but not mappable to the file


@dataclass(frozen=True, slots=True)
class GeneratedFile:
    name: str  # "main.cpp" or "cuda.cu"
    text: str
    pieces: tuple[Piece, ...]


@dataclass(frozen=True, slots=True)
class GeneratedModule:
    """What one `load_inline` call compiles: module name, files, and where the call is."""

    name: str
    files: tuple[GeneratedFile, ...]
    call_location: Location | None = None  # the load_inline call in the document (fallback location)
    # the bound functions when `main.cpp` only declares them (verifier/build/cabi.py); None: pybind11 only
    binding: tuple[Signature, ...] | None = None

    @property
    def has_cuda(self) -> bool:
        return any(f.name == CUDA_CU for f in self.files)

    def file(self, name: str) -> GeneratedFile | None:
        return next((f for f in self.files if f.name == name), None)

    def content_hash(self, *extra: str) -> str:
        """Hash of the module name, every generated file and `extra` (flags, tool versions)."""
        h = hashlib.sha256(self.name.encode())
        for f in self.files:
            h.update(b"\0" + f.name.encode() + b"\0" + f.text.encode())
        for e in extra:
            h.update(b"\0" + e.encode())
        return h.hexdigest()

    def locate(self, file_name: str, line: int, column: int = 1) -> tuple[int, int] | None:
        """Document (line, column) of a compiler position in `file_name`, or None if not user text."""
        f = self.file(file_name)
        if f is None:
            return None
        for piece in f.pieces:
            if piece.first_line <= line < piece.first_line + piece.num_lines and piece.span is not None:
                return piece.span.to_file(line - piece.first_line + 1, column)
        return None

    def line_text(self, file_name: str, line: int) -> str:
        f = self.file(file_name)
        lines = f.text.split("\n") if f else []
        return lines[line - 1] if 0 < line <= len(lines) else ""


def layout(
    name: str,
    cpp: list[tuple[str, SourceSpan | None]],
    cuda: list[tuple[str, SourceSpan | None]],
    functions: tuple[str, ...] | None,
    call_location: Location | None = None,
) -> GeneratedModule:
    """Lay out sources exactly as `load_inline` does (see the module docstring). Raises
    `UnsafeModule` (build/unsafe.py) for a name, a `functions` entry or a source that would reach
    the compiler as more than C++: every builder gets its modules from here."""
    if (why := unsafe_reason(name, [t for t, _ in [*cpp, *cuda]], functions)) is not None:
        raise UnsafeModule(why)
    module_def: list[str] = []
    if functions is not None:
        module_def.append("PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {")
        module_def += [f'm.def("{f}", torch::wrap_pybind_function({f}), "{f}");' for f in functions]
        module_def.append("}")
    files = [_join(MAIN_CPP, CPP_HEADERS, cpp, module_def)]
    if cuda:
        files.append(_join(CUDA_CU, CUDA_HEADERS, cuda, []))
    binding = signatures([t for t, _ in cpp], functions, [t for t, _ in cuda]) if cuda else None
    return GeneratedModule(name, tuple(files), call_location, binding)


def _join(
    name: str, headers: tuple[str, ...], sources: list[tuple[str, SourceSpan | None]], trailer: list[str]
) -> GeneratedFile:
    parts = [*headers]
    pieces = []
    line = len(headers) + 1
    for text, span in sources:
        n = text.count("\n") + 1
        pieces.append(Piece(line, n, span))
        parts.append(text)
        line += n
    parts += trailer
    return GeneratedFile(name, "\n".join(parts), tuple(pieces))


def from_call(doc: Document, call: LoadInlineCall) -> GeneratedModule | None:
    """The module a statically known call builds; None when a source's value is only known at run
    time, or when build/unsafe.py refuses the call's values (the static stage reports that as
    `static.build_injection`, and nothing of it is compiled)."""
    if not call.is_mappable or call.name is None:
        return None
    cpp = [(s.text or "", s.span) for s in call.cpp_sources]
    cuda = [(s.text or "", s.span) for s in call.cuda_sources]
    try:
        return layout(call.name, cpp, cuda, call.functions, doc.location(call.span))
    except UnsafeModule:
        return None


def from_values(
    name: str,
    cpp_sources: str | list[str],
    cuda_sources: str | list[str] | None,
    functions: str | list[str] | dict[str, str] | None,
    doc: Document | None = None,
) -> GeneratedModule:
    """The module for a `load_inline` call seen at run time (dynamic sources included).

    Where a value equals a statically mapped source of `doc`, its mapping is reused, so a call
    evaluated at run time still reports into the right lines.
    """
    known: dict[str, SourceSpan] = {}
    call_location = None
    if doc is not None:
        for call in doc.load_inline_calls:
            if call.name == name:
                call_location = doc.location(call.span)
            for s in call.sources:
                if s.span is not None:
                    known.setdefault(s.span.text, s.span)
    cpp = [cpp_sources] if isinstance(cpp_sources, str) else list(cpp_sources)
    cuda = [cuda_sources] if isinstance(cuda_sources, str) else list(cuda_sources or [])
    funcs: tuple[str, ...] | None
    if functions is None:
        funcs = None
    elif isinstance(functions, str):
        funcs = (functions,)
    else:
        funcs = tuple(functions)
    return layout(
        name, [(t, known.get(t)) for t in cpp], [(t, known.get(t)) for t in cuda], funcs, call_location
    )
