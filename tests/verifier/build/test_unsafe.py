"""build/unsafe.py: a `load_inline` call's name, functions and includes reach the compiler only as C++.

The module name becomes a compiler flag and a file name, each `functions` entry is pasted into the
generated binding, and the compiler runs outside the runners' boundary: names must be identifiers,
includes must be headers by relative name. Checked on the rule itself, on `layout` (every builder's
way to a module), on `from_call` and the static stage, and on the toolchain's last gate.
"""

from __future__ import annotations

import pytest
from cudice.verifier.api import run_static_checks
from cudice.verifier.build.generated import from_values, layout
from cudice.verifier.build.toolchain import Toolchain
from cudice.verifier.build.unsafe import UnsafeModule, unsafe_reason, unsafe_source_reason
from cudice.verifier.config import VerifyConfig
from cudice.verifier.source.document import parse_document

HONEST_INCLUDES = [
    "#include <torch/extension.h>\n#include <cuda_runtime.h>\n",
    '#include "cuda_fp16.h"\n#include <cub/cub.cuh>\n',
    "  #  include <ATen/cuda/CUDAContext.h>\n",
    "#if __has_include(<cuda_bf16.h>)\n#include <cuda_bf16.h>\n#endif\n",
    "// see /usr/include/foo.h for the layout\nint x = 1;\n",
]
REFUSED_INCLUDES = {
    '#include "/etc/hostname"\n': "absolute path",
    "#include </etc/passwd>\n": "absolute path",
    '#include "../../../etc/passwd"\n': "`..`",
    "#include <torch/../../../../etc/passwd>\n": "`..`",
    "#define F </etc/passwd>\n#include F\n": "macro",
    '#inc\\\nlude "/etc/hostname"\n': "absolute path",
    '%:include "/etc/hostname"\n': "absolute path",
    "#include_next </etc/shadow>\n": "absolute path",
    '#embed "/etc/hostname"\n': "absolute path",
    'bool b = __has_include("/root/.ssh/id_rsa");\n': "absolute path",
    '#pragma GCC dependency "/etc/hostname"\n': "absolute path",
    'asm(".incbin \\"/etc/hostname\\"");\n': "incbin",
    '/**/#include "/etc/hostname"\n': "absolute path",  # a comment is whitespace to the compiler
    "#/* x */include </etc/hostname>\n": "absolute path",
}


@pytest.mark.parametrize("text", HONEST_INCLUDES)
def test_honest_includes_pass(text: str) -> None:
    assert unsafe_source_reason(text) is None


@pytest.mark.parametrize("text", list(REFUSED_INCLUDES))
def test_includes_of_files_outside_the_headers_are_refused(text: str) -> None:
    why = unsafe_source_reason(text)
    assert why is not None and REFUSED_INCLUDES[text] in why, why


@pytest.mark.parametrize(
    "name", ["x -wrapper /bin/sh,-c,id", "x -MD -MF /tmp/f", "x -DOP=at::relu", "a.b", "1x", "", "x\n"]
)
def test_a_module_name_must_be_an_identifier(name: str) -> None:
    why = unsafe_reason(name, [], None)
    assert why is not None and "module name" in why
    with pytest.raises(UnsafeModule):
        layout(name, [("int x;", None)], [], None)


@pytest.mark.parametrize("entry", ["at::relu", 'f", torch::wrap_pybind_function(at::relu)); //', "f g", ""])
def test_a_functions_entry_must_be_an_identifier(entry: str) -> None:
    why = unsafe_reason("ext", [], ["ok", entry])
    assert why is not None and "`functions` entry" in why
    with pytest.raises(UnsafeModule):
        from_values("ext", ["int f(int a) { return a; }"], None, ["f", entry])


def test_good_values_lay_out() -> None:
    module = layout("relu_ext_2", [("torch::Tensor f(torch::Tensor x);", None)], [], ("f",))
    assert module.name == "relu_ext_2" and unsafe_reason("relu_ext_2", [], ["f", "_g1"]) is None


def test_the_toolchain_refuses_a_name_that_is_no_identifier() -> None:
    tc = Toolchain(*(["x"] * len(Toolchain.__dataclass_fields__)))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not a C identifier"):
        tc.flags_for("x -wrapper /bin/sh")


CALL = """
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(name={name!r}, cpp_sources={cpp!r}, functions=["f"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.f(x)
"""


@pytest.mark.parametrize(
    ("name", "cpp"),
    [
        ("ext -wrapper /bin/echo", "torch::Tensor f(torch::Tensor x) { return x; }"),
        ("ext", '#include "/etc/hostname"\ntorch::Tensor f(torch::Tensor x) { return x; }'),
    ],
)
def test_the_static_stage_reports_the_call_and_nothing_is_laid_out(name: str, cpp: str) -> None:
    from cudice.verifier.build.generated import from_call

    doc = parse_document(CALL.format(name=name, cpp=cpp), "/virtual/cand.py")
    codes = [d.code for d in run_static_checks(doc, VerifyConfig())]
    assert "static.build_injection" in codes
    assert from_call(doc, doc.load_inline_calls[0]) is None  # no builder gets a module to compile
