"""End-to-end: degraded generated code shows the compiler's errors, not only an anti-cheat finding.

A model that degrades writes garbage inside the kernel and launches a kernel by a wrong name. The
static checks see the launch of an undefined kernel; the compiler sees both mistakes. Through a
real server (real quick worker, real verifier, no GPU) the editor gets the compiler's errors on
their lines, the static finding as a warning, and the verdict `compile_error`.
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


async def test_garbage_and_a_misnamed_launch_get_the_compilers_errors(
    tmp_path: Path, editors: Editors
) -> None:
    copy_example("relu.py", tmp_path / "relu.py")
    text = (
        (REPO / "examples" / "relu_cuda.py")
        .read_text()
        .replace('name="relu"', f'name="degraded_{uuid.uuid4().hex[:8]}"')
        .replace("relu_kernel<<<blocks", "relu_kernl<<<blocks")
        .replace("float v = x[i];", "float v = x[i] likelikelike;")
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
