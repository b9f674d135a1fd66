"""The allow-lists of the static checks: the modules a kernel file may import, and the tensor API.

Both close what a denylist leaves open: an import outside the allowed modules is
`static.unvetted_import` (a module nobody listed that runs strings, looks functions up by name,
writes files or starts threads is rejected before anyone lists it), and a tensor method that the
glue tables do not allow is compute whether or not a compute list names it. Also: the parts of
allowed modules that start threads or processes, reached as attributes, and interpreter hooks.
"""

from __future__ import annotations

import pytest
from cudice.verifier.config import VerifyConfig
from cudice.verifier.source.document import parse_document
from cudice.verifier.source.reference import resolve_reference
from cudice.verifier.source.result import Severity
from cudice.verifier.static.checks import check_source
from cudice.verifier.static.policy import TENSOR_API_NOT_COMPUTE, Strictness, tensor_method_is_compute
from cudice.verifier.static.tensor_api import TENSOR_API_METHODS

HEAD = "import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n"
BODY = '''
ext = load_inline(name="ext", cpp_sources="torch::Tensor f(torch::Tensor x);",
                  cuda_sources="""
__global__ void k(float* x) { x[0] = 1.0f; }
torch::Tensor f(torch::Tensor x) { k<<<1, 1>>>(x.data_ptr<float>()); return x; }
""", functions=["f"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        {line}
        return ext.f(x)
'''


def findings(text: str, policy: str = "default") -> dict[str, Severity]:
    return {d.code: d.severity for d in check_source(text, "cand.py", VerifyConfig(static_policy=policy))}


@pytest.mark.parametrize(
    "imports",
    [
        "import math\nimport os\nimport sys\nfrom typing import Any\nimport functools, itertools",
        "import numpy as np\nfrom collections import OrderedDict\nfrom dataclasses import dataclass",
        "import time\nimport warnings\nimport re\nfrom pathlib import Path",
    ],
)
def test_allowed_imports_stay_clean(imports: str) -> None:
    assert "static.unvetted_import" not in findings(HEAD + imports + "\n" + BODY.replace("{line}", "pass"))


@pytest.mark.parametrize(
    "imports",
    [
        "import pkgutil",
        "from pydoc import locate",
        "import timeit",
        "import code",
        "import gzip",
        "import io",
        "from select import select",
        "import runpy",
        "import doctest",
        "import xml.etree.ElementTree as ET",
        "import some_package_nobody_listed",
        "from . import helpers",
        "import logging",
        "import logging.handlers",
        "from logging import config",
        "from numpy import ctypeslib",
        "import torch.utils.data",
        "from torch.multiprocessing import Process",
        "from torch.utils.benchmark import Timer",
        "import torch.utils.collect_env",
    ],
)
def test_other_imports_are_unvetted(imports: str) -> None:
    text = HEAD + imports + "\n" + BODY.replace("{line}", "pass")
    assert findings(text).get("static.unvetted_import") is Severity.ERROR
    assert findings(text, "lenient").get("static.unvetted_import") in (Severity.WARNING, Severity.ERROR)


def test_lenient_downgrades_an_unknown_module_to_a_warning() -> None:
    text = HEAD + "import pkgutil\n" + BODY.replace("{line}", "pass")
    assert findings(text, "lenient").get("static.unvetted_import") is Severity.WARNING


@pytest.mark.parametrize(
    "line",
    [
        "loader = torch.utils.data.DataLoader([x], num_workers=2)",
        "import logging; h = logging.handlers.QueueListener(None)",
    ],
)
def test_thread_starting_parts_reached_as_attributes_are_unvetted(line: str) -> None:
    assert "static.unvetted_import" in findings(HEAD + "import logging\n" + BODY.replace("{line}", line))


@pytest.mark.parametrize("hook", ["sys.settrace(None)", "sys.setprofile(None)", "sys.addaudithook(print)"])
def test_interpreter_hooks_are_dynamic_code(hook: str) -> None:
    assert "static.dynamic_code" in findings(HEAD + "import sys\n" + BODY.replace("{line}", hook))


@pytest.mark.parametrize(
    ("line", "code"),
    [
        ("t = logging.threading.Thread(target=print)", "static.stream_or_thread"),  # threading, re-exported
        ("torch.utils.cpp_extension.subprocess.run(['true'])", "static.stream_or_thread"),
        ("os.pidfd_send_signal(os.pidfd_open(os.getpid()), 9)", "static.harness_tampering"),
        ("raise SystemExit(0)", "static.harness_tampering"),
        ("torch.save(x, '/tmp/x.pt')", "static.harness_tampering"),
        ("torch.jit.CompilationUnit('def f(x): return x.relu()')", "static.unvetted_import"),
    ],
)
def test_modules_reached_through_allowed_ones_and_process_control(line: str, code: str) -> None:
    text = HEAD + "import os\nimport logging\n" + BODY.replace("{line}", line)
    assert code in findings(text)


def test_the_environment_and_paths_of_os_stay_allowed() -> None:
    line = 'p = os.path.join(os.getcwd(), os.environ.get("X", "y")); n = os.cpu_count()'
    assert findings(HEAD + "import os\n" + BODY.replace("{line}", line)) == {}


def test_numpy_save_writes_a_file() -> None:
    line = 'np.save("/tmp/x.npy", 1)'
    text = HEAD + "import numpy as np\n" + BODY.replace("{line}", line)
    assert "static.harness_tampering" in findings(text)


def test_the_tensor_api_table_covers_the_installed_torch() -> None:
    torch = pytest.importorskip("torch")
    names = {n for n in dir(torch.Tensor) if not (n.startswith("__") and n.endswith("__"))}
    missing = sorted(names - TENSOR_API_METHODS)
    assert not missing, (
        f"torch.Tensor has names verifier/static/tensor_api.py lacks: {missing[:20]}; regenerate the "
        "table (its docstring says how)"
    )


@pytest.mark.parametrize("method", ["prelu", "sum_to_size", "_addmm_activation", "fmax", "take_along_dim"])
def test_an_unlisted_tensor_method_is_compute(method: str) -> None:
    assert tensor_method_is_compute(method, Strictness.DEFAULT)
    text = HEAD + BODY.replace("{line}", f"y = x.{method}(x)")
    assert findings(text).get("static.torch_op_in_forward") is Severity.ERROR


@pytest.mark.parametrize(
    "method", ["size", "view", "contiguous", "is_contiguous", "moveaxis", "values", "append"]
)
def test_glue_metadata_shared_and_foreign_names_are_not(method: str) -> None:
    assert not tensor_method_is_compute(method, Strictness.DEFAULT)


def test_the_not_compute_names_are_tensor_api_names() -> None:
    assert TENSOR_API_NOT_COMPUTE <= TENSOR_API_METHODS


def test_a_reference_comment_wins_over_the_files_own_model() -> None:
    text = (
        "# cudice: reference=ref.py\nimport torch\nimport torch.nn as nn\n\n\n"
        "class Model(nn.Module):\n    def forward(self, x):\n        return x\n\n\n"
        "def get_inputs():\n    return [torch.randn(4)]\n\n\n"
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"
    )
    doc = parse_document(text, "/virtual/cand.py")
    assert doc.reference.origin == "comment" and doc.reference.path == "ref.py"
    assert [d.code for d in doc.problems] == ["parse.two_references"]
    assert doc.problems[0].severity is Severity.WARNING
    without = parse_document(text.replace("# cudice: reference=ref.py\n", ""), "/virtual/cand.py")
    assert without.reference.origin == "same_file" and not without.problems
    assert resolve_reference is not None


@pytest.mark.parametrize(
    ("line", "code"),
    [
        # the host computes element by element: `.item()` in a loop, NumPy's Python loops, a copy
        # into a tensor made without `device=`
        ("v = [x.reshape(-1)[i].item() for i in range(4)]", "static.host_compute"),
        ("import numpy as np; f = np.vectorize(max)", "static.host_compute"),
        ("h = torch.empty(x.shape); h.copy_(x)", "static.host_compute"),
        # containers and classes are no numbers: a tensor held in a slice or a new type is a tensor
        ("s = slice(x, 0); y = s.start * (s.start > 0)", "static.torch_op_in_forward"),
        ("T = type('N', (), {'v': x}); y = T.v * (T.v > 0)", "static.torch_op_in_forward"),
        # a metadata name stored on another object proves nothing about what it holds
        ("b = Box(); b.shape = x; y = b.shape * (b.shape > 0)", "static.torch_op_in_forward"),
        # a constructor run at call time, or a class made by `type(...)` and called
        ("self.__init__()", "static.monkey_patch"),
        ("b = type(Box())()", "static.monkey_patch"),
        # a tensor's compute method taken as a value and called elsewhere
        ("f = x.clamp_min; y = f(0)", "static.torch_op_in_forward"),
        ("y = [x.relu][0]()", "static.torch_op_in_forward"),
    ],
)
def test_host_loops_and_laundered_tensors_are_caught(line: str, code: str) -> None:
    text = HEAD + "class Box:\n    pass\n\n" + BODY.replace("{line}", line)
    assert code in findings(text)


def test_launch_arithmetic_and_names_stay_plain() -> None:
    line = (
        "n = x.numel(); b = (n + 255) // 256; t = type(self).__name__ == 'ModelNew' and x.size(0) > 0; "
        "d = x.device; c = x.is_cuda and not x.is_mps; s = x.shape"
    )
    assert findings(HEAD + BODY.replace("{line}", line)) == {}
