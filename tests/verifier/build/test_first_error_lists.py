"""The first-error lists (build/headers.py) computed the cheaper way are the lists computed the plain way.

Two shortcuts make the lists of a slim error verdict cheaper on a fresh build cache, and each is
compared here with the way it replaces:
- `macro_differences` with a source's `#include`s also caches the list without them when the
  full side's runs show those includes entered no file (only the slim side then preprocesses the
  probe without them): on this machine's torch headers, the two lists are byte for byte the lists
  of two separate calls (the include-free one first, so the call with includes cannot share),
  for `cuda.cu` with the include set `api.prepare_first_error` uses and for `main.cpp`.
- `outer_scope_words` reads a function body from one brace token to the next in one match: the
  same words as reading it token by token (`skip_bodies=False`), on the full headers'
  preprocessed text and on made-up text full of the tokens that can hide a brace (strings, raw
  strings, character literals, digit separators, directives, lambdas in arguments).

Not covered: torch versions or compilers other than this machine's (the slow tests read its
headers); the name list's preprocessor runs, which are as before.
"""

from __future__ import annotations

import random
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from cudice.verifier.build.headers import Overlay, ensure_overlay, macro_differences, outer_scope_words
from cudice.verifier.build.toolchain import probe_toolchain
from cudice.verifier.config import VerifyConfig
from verifier_marks import needs_nvcc

# the `#include`s of the cabi-binding `cuda.cu` that api.prepare_first_error prepares for
CABI_INCLUDES = (
    "<torch/types.h>",
    "<cuda.h>",
    "<cuda_runtime.h>",
    "<torch/extension.h>",
    "<cuda_runtime.h>",
    "<Python.h>",
    "<cstdint>",
    "<exception>",
    "<new>",
    "<optional>",
    "<stdexcept>",
    "<string>",
    "<utility>",
    "<vector>",
)


def _lists(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in root.glob("macros-*.txt")}


@needs_nvcc
@pytest.mark.slow
@pytest.mark.timeout(2400)
@pytest.mark.parametrize("cuda", [True, False], ids=["cuda.cu", "main.cpp"])
def test_shared_macro_lists_are_the_lists_computed_apart(
    cuda: bool, tmp_path: Path, session_config: VerifyConfig
) -> None:
    tc = probe_toolchain(session_config.cache_dir, session_config.arch_list_env)
    overlay = ensure_overlay(tmp_path, tc.cflags)
    standins = shlex.quote(str(overlay.standins))
    if cuda:
        compiler, flags = tc.nvcc, f"{tc.cuda_cflags} -Xcompiler -idirafter,{standins}"
        includes = CABI_INCLUDES
    else:
        compiler, flags = tc.cxx, f"{tc.cflags} -idirafter {standins}"
        includes = ("<torch/extension.h>", "<vector>")
    slim = f"-I{shlex.quote(str(overlay.device if cuda else overlay.host))} {flags}"

    shared = macro_differences(overlay, compiler, flags, slim, cuda, includes)
    written = _lists(overlay.root)
    assert shared is not None and len(written) == 2, written.keys()  # both lists from one call
    for p in overlay.root.glob("macros-*.txt"):
        p.unlink()

    alone = macro_differences(overlay, compiler, flags, slim, cuda, ())  # the probe without includes
    apart = macro_differences(overlay, compiler, flags, slim, cuda, includes)  # cannot share: cached
    assert apart == shared and alone is not None
    assert _lists(overlay.root) == written
    assert not [p for p in overlay.root.iterdir() if p.name.startswith(".macros-")]  # work folders gone


@needs_nvcc
@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_body_skip_gives_the_token_scans_words_on_the_full_headers(
    tmp_path: Path, session_config: VerifyConfig
) -> None:
    tc = probe_toolchain(session_config.cache_dir, session_config.arch_list_env)
    overlay = ensure_overlay(tmp_path, tc.cflags)
    src = tmp_path / "probe.cu"
    src.write_text("".join(f"#include {h}\n" for h in CABI_INCLUDES))
    flags = f"{tc.cuda_cflags} -Xcompiler -idirafter,{shlex.quote(str(overlay.standins))}"
    for extra in (["-Xcompiler", "-dD"], ["-Xcompiler", "-dD", "-U__CUDA_ARCH__"]):
        cmd = [*shlex.split(tc.nvcc), *shlex.split(flags), "-E", *extra, str(src)]
        text = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=tmp_path).stdout
        words = outer_scope_words(text)
        assert words == outer_scope_words(text, skip_bodies=False)
        assert "Tensor" in words and "vv" not in words  # a real scan, not every word of the text


# Bodies that hide braces, quotes and directives in every token kind the scan knows.
TRICKY_BODIES = (
    "const char* s = \"}{\"; char c = '}'; char d = '{';",
    'auto r = R"x(})x"; auto q = u8R"(}{)"; auto l = LR"-({)-";',
    "int n = 1'000'000; double e = 1.5e+3; auto h = 0x1'F'; auto f = .5f;",
    "\n#pragma unroll {\n  for (int i = 0; i < 3; ++i) { x += i; }",
    "\n  # define Q }\n  return [&](int a) { return a + x; }(1);",
    'if (a) { b(); } else { c("{"); } while (d) {}',
    "auto p = \"\\\"}\"; auto q = '\\'';  s = L'}';",
    "x = y < z > w >> 2 && q -> r :: t;  $dollar{ } ",
    'char s[] = "unterminated }\n; x = 1;',
)
TRICKY_SCOPES = (
    "namespace n {{ {decl} }}",
    "struct S {{ int m; void f() {{ {body} }} }};",
    "int g(int a, int b = h([]() {{ {body} }})) {{ {body} }}",
    'extern "C" {{ void k() {{ {body} }} }}',
    "template <typename T = W<{{}}>> T t(T x) {{ {body} }}",
    "enum E {{ A = 1, B }}; int v = {{ 1 }};",
)


def test_body_skip_gives_the_token_scans_words_on_tricky_text() -> None:
    for body in TRICKY_BODIES:
        for scope in TRICKY_SCOPES:
            text = scope.format(body=body, decl="int d;") + "\nint after;\n"
            assert outer_scope_words(text) == outer_scope_words(text, skip_bodies=False), text
    rng = random.Random(20240607)
    pieces = [*TRICKY_BODIES, "{", "}", "(", ")", ";", "int w;", "\n", " ", "'", '"', 'R"(', ')"', "#"]
    for _ in range(3000):
        body = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 12)))
        text = f"namespace n {{ void f() {{ {body} }} int z; }}\nint after;\n"
        assert outer_scope_words(text) == outer_scope_words(text, skip_bodies=False), text


def _small_headers(root: Path) -> tuple[str, str]:
    """Full and slim flags over a few small headers: the slim `torch/extension.h` lacks `FULL_ONLY`,
    and `guarded.h` (include guard), `once.h` (`#pragma once`) and `loose.h` (no guard) are what a
    source may include again."""
    full = root / "full"
    (full / "torch").mkdir(parents=True)
    (full / "torch" / "extension.h").write_text(
        '#pragma once\n#include "guarded.h"\n#include "once.h"\n#include "loose.h"\n#define FULL_ONLY 1\n'
    )
    (full / "guarded.h").write_text("#ifndef GUARDED_H\n#define GUARDED_H\n#define G 1\n#endif\n")
    (full / "once.h").write_text("#pragma once\n#define O 1\n")
    (full / "loose.h").write_text("#undef L\n#define L 2\n")
    (full / "extra.h").write_text("#define EXTRA 1\n#undef FULL_ONLY\n")
    (root / "host" / "torch").mkdir(parents=True)
    (root / "host" / "torch" / "extension.h").write_text('#pragma once\n#include "once.h"\n#define SLIM 1\n')
    flags = f"-I{shlex.quote(str(full))}"
    return flags, f"-I{shlex.quote(str(root / 'host'))} {flags}"


@pytest.mark.parametrize(
    "includes",
    [
        ("<torch/extension.h>", "<once.h>", "<guarded.h>"),
        ("<loose.h>",),
        ("<extra.h>",),
        ("<guarded.h>", "<extra.h>"),
    ],
)
@pytest.mark.parametrize("refuses_h", [False, True], ids=["g++", "no-H"])
def test_small_headers_give_the_lists_computed_apart(
    includes: tuple[str, ...], refuses_h: bool, tmp_path: Path
) -> None:
    """With g++ on small headers, for includes that enter no file on the full side (the list
    without them is then cached on the way) and ones that do (it is not), and with a "compiler"
    that refuses `-H` (the plain way then): the lists one call caches are those of two calls."""
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("needs g++")
    compiler = f'sh -c \'for a; do [ "$a" = -H ] && exit 1; done; exec {cxx} "$@"\' sh' if refuses_h else cxx
    flags, slim = _small_headers(tmp_path)
    overlay = Overlay(tmp_path, ())

    shared = macro_differences(overlay, compiler, flags, slim, False, includes)
    written = _lists(tmp_path)
    for p in tmp_path.glob("macros-*.txt"):
        p.unlink()
    alone = macro_differences(overlay, compiler, flags, slim, False, ())
    apart = macro_differences(overlay, compiler, flags, slim, False, includes)
    assert shared is not None and apart == shared and alone is not None and "SLIM" in alone
    both = _lists(tmp_path)
    if refuses_h or "<loose.h>" in includes or "<extra.h>" in includes:
        assert len(written) == 1 and written.items() <= both.items()  # the list with includes alone
    else:
        assert written == both
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".macros-")]
