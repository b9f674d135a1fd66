"""Compiler-output parsing and mapping, on recorded nvcc/g++ output (no compiler needed)."""

from __future__ import annotations

from cudice.verifier.build.compile import map_messages
from cudice.verifier.build.generated import CUDA_HEADERS, from_call
from cudice.verifier.build.messages import caret_column, parse_messages
from cudice.verifier.source.document import parse_document
from cudice.verifier.source.result import Severity

SOURCE = (
    "from torch.utils.cpp_extension import load_inline\n"
    "src = '''\n"
    "__global__ void k(float* x) {\n"
    "\tx[0] = vv;\n"
    "}\n"
    "'''\n"
    "m = load_inline(name='m', cpp_sources='int f();', cuda_sources=src, functions=['f'])\n"
    "class ModelNew: pass\nclass Model: pass\ndef get_inputs(): return []\n"
)

NVCC_OUT = """ninja: Entering directory `/b'
FAILED: [code=2] cuda.cuda.o
/usr/local/cuda/bin/nvcc -Werror -c /b/cuda.cu -o cuda.cuda.o
/b/cuda.cu(6): error: identifier "vv" is undefined
     x[0] = vv;
            ^

/b/cuda.cu(1): warning #177-D: something in a header line
/usr/include/torch/foo.h(3): error: header trouble

2 errors detected in the compilation of "/b/cuda.cu".
/b/main.cpp:2:5: error: 'g' was not declared in this scope
main.cpp:2:5: note: suggested alternative: 'f'
ninja: build stopped: subcommand failed.
"""


def test_generated_layout_matches_load_inline() -> None:
    doc = parse_document(SOURCE, "c.py")
    module = from_call(doc, doc.load_inline_calls[0])
    assert module is not None
    cu = module.file("cuda.cu")
    assert cu is not None
    assert cu.text.split("\n")[:3] == list(CUDA_HEADERS)
    assert cu.text.split("\n")[5] == "\tx[0] = vv;"  # generated line 6
    main = module.file("main.cpp")
    assert main is not None and main.text.split("\n")[:2] == ["#include <torch/extension.h>", "int f();"]
    assert 'm.def("f", torch::wrap_pybind_function(f), "f");' in main.text


def test_messages_parse_and_map_into_the_py_file() -> None:
    msgs = parse_messages(NVCC_OUT)
    assert [(m.tool, m.severity, m.line) for m in msgs] == [
        ("nvcc", "error", 6),
        ("nvcc", "warning", 1),
        ("nvcc", "error", 3),
        ("gcc", "error", 2),
    ]
    assert msgs[0].caret_text is not None and msgs[3].notes[0].message.startswith("suggested")
    doc = parse_document(SOURCE, "c.py")
    module = from_call(doc, doc.load_inline_calls[0])
    assert module is not None
    diags = map_messages(module, "c.py", msgs)
    first = diags[0]
    assert first.location is not None and (first.location.line, first.location.column) == (4, 9)
    # header warning dropped; header error and cudice-written main.cpp line point at the call
    assert all(d.severity is Severity.ERROR for d in diags)
    call_line = doc.location(doc.load_inline_calls[0].span).line
    assert [d.location.line for d in diags[1:] if d.location] == [call_line, call_line]
    assert "foo.h:3" in diags[1].message


def test_caret_column_survives_tab_expansion() -> None:
    assert caret_column("     x[0] = vv;", "            ^", "\tx[0] = vv;") == 9
