"""End-to-end: degraded generated code shows the compiler's errors, not only an anti-cheat finding.

A model that degrades writes garbage inside the kernel and launches a kernel by a wrong name. The
static checks see the launch of an undefined kernel; the compiler sees both mistakes. Through a
real server (real quick worker, real verifier, no GPU) the editor gets the compiler's errors on
their lines, the static finding as a warning, and the verdict `compile_error`.

A model that misspells the variable holding its CUDA source (`cuda_sources=cuda_srcx`) gets an
error on that argument's line saying the name is not defined (the file would raise NameError),
not a finding about CUDA built at run time.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from lsp_support import REPO, Editors, copy_example, shared_build_cache

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]

REAL = {
    "CUDICE_ENGINE_MODULE": "cudice.model.engine",
    "CUDICE_VERIFY_MODULE": "cudice.verifier.api",
    "CUDICE_CACHE_DIR": str(shared_build_cache()),
    "CUDICE_GPU": "0",
}


def _relu_candidate(folder: Path, name: str, *edits: tuple[str, str]) -> str:
    """Copy the reference relu.py into `folder`; return examples/relu_cuda.py with its extension
    renamed `<name>_<8 hex digits>` (built anew, not found in the shared build cache) and each
    `(old, new)` of `edits` replaced in turn."""
    copy_example("relu.py", folder / "relu.py")
    text = (REPO / "examples" / "relu_cuda.py").read_text()
    text = text.replace('name="relu"', f'name="{name}_{uuid.uuid4().hex[:8]}"')
    for old, new in edits:
        text = text.replace(old, new)
    return text


async def test_garbage_and_a_misnamed_launch_get_the_compilers_errors(
    tmp_path: Path, editors: Editors
) -> None:
    text = _relu_candidate(
        tmp_path,
        "degraded",
        ("relu_kernel<<<blocks", "relu_kernl<<<blocks"),
        ("float v = x[i];", "float v = x[i] likelikelike;"),
    )
    lines = text.splitlines()
    garbage = next(i for i, t in enumerate(lines) if "likelikelike" in t)
    launch = next(i for i, t in enumerate(lines) if "relu_kernl<<<" in t)
    (tmp_path / "degraded_cuda.py").write_text(text)
    editor = await editors.start("neovim@v0.11", tmp_path, env=REAL)
    uri = editor.open(tmp_path / "degraded_cuda.py")
    editor.save(uri)
    await editor.wait_status(lambda s: s["uri"] == uri and s["lastVerdict"] == "compile_error", timeout=300)
    diags = await editor.wait_diagnostics(
        uri,
        lambda d: {x.range.start.line for x in d if x.code == "compile.error"} == {garbage, launch},
        timeout=60,
    )
    statics = [d for d in diags if str(d.code).startswith("static.")]
    assert statics and all(d.severity == 2 for d in statics), statics


async def test_an_undefined_source_variable_is_named_on_its_line(tmp_path: Path, editors: Editors) -> None:
    """A misspelt `cuda_sources=` variable is reported as an undefined name on the argument's line
    (not as CUDA built at run time, which the static checks cannot read)."""
    text = _relu_candidate(tmp_path, "undefined", ("cuda_sources=relu_source,", "cuda_sources=cuda_srcx,"))
    line = next(i for i, t in enumerate(text.splitlines()) if "cuda_sources=cuda_srcx" in t)
    (tmp_path / "undefined_cuda.py").write_text(text)
    editor = await editors.start("neovim@v0.11", tmp_path, env=REAL)
    uri = editor.open(tmp_path / "undefined_cuda.py")
    editor.save(uri)
    diags = await editor.wait_diagnostics(
        uri, lambda d: any(x.code == "static.dynamic_source" for x in d), timeout=300
    )
    (found,) = [d for d in diags if d.code == "static.dynamic_source"]
    assert "name `cuda_srcx` is not defined in this file" in found.message, found
    assert "built at run time" not in found.message, found
    assert found.range.start.line == line and found.severity == 1 and found.source == "cudice", found
