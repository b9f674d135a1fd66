"""Varied infilling wrappers (model/train/corpus/wrappers.py): renamed consistently, still loadable
and within the static policy, with the scaffold split in the same place, and only in the
infilling pairs."""

from __future__ import annotations

import random
import re
from collections import Counter
from pathlib import Path

import pytest
from cudice.model.scaffold import split_scaffold
from cudice.model.train.corpus.build import INFILL_EVERY, VARIED, draw_problems
from cudice.model.train.corpus.heldout import names_agree
from cudice.model.train.corpus.wrappers import vary_wrapper, wrapper_names


@pytest.fixture(scope="module")
def problems() -> list:
    return draw_problems(0, 24, 2, infill_naming=VARIED)


def test_varied_wrappers_are_loadable_split_alike_and_only_in_the_infilling_pairs(problems: list) -> None:
    plain = draw_problems(0, 24, 2, infill_naming="composition")
    assert [p.solution for p in plain] == [p.solution for p in problems]  # same problems, same answers
    assert [p.reference for p in plain] == [p.reference for p in problems]
    infill = [(a, b) for a, b in zip(plain, problems, strict=True) if b.infill_solution]
    # every RL-pool problem has its infilling task, and one training draw in INFILL_EVERY its pair
    assert len(infill) == sum(
        p.split == "rl" or (p.split == "train" and p.index % INFILL_EVERY == 0) for p in problems
    )
    varied = 0
    for before, after in infill:
        assert names_agree(after.infill_solution), after.infill_solution  # wired: f defined and called
        old, new = split_scaffold(before.infill_solution), split_scaffold(after.infill_solution)
        assert "__global__" in new.middle
        if before.infill_solution != after.infill_solution:
            varied += 1
            stem = re.search(r'^    name="(\w+)",$', before.infill_solution, re.M)
            assert stem is not None and f"{stem.group(1)}_source" not in after.infill_solution
            kernels = re.findall(r"__global__ void (\w+)", old.middle)
            assert kernels == re.findall(r"__global__ void (\w+)", new.middle)  # the answer's own
    assert len(infill) // 2 <= varied < len(infill)  # about 3 in 4 (VARY_SHARE)


def test_a_renaming_is_consistent_and_never_takes_a_name_the_file_has() -> None:
    rng = random.Random(3)
    seen: Counter[str] = Counter()
    for _ in range(300):
        names = wrapper_names("tanh_elu", "tanh_elu_cuda", rng)
        new = list(names.values())
        assert len(set(new)) == 4 and not set(new) & set(names)
        assert all(n.isidentifier() and "_" in n for n in new)  # a role suffix on every name
        seen.update(new)
    assert len(seen) > 40  # many spellings, not a second fixed layout
    source = (
        'x_source = """\n__device__ float op_src(float v) { return v; }\n'
        'torch::Tensor x_cuda(torch::Tensor a) { return a; }\n"""\n\n'
        'x_cpp_source = "torch::Tensor x_cuda(torch::Tensor a);"\n\n'
        'x_ext = load_inline(\n    name="x",\n    cpp_sources=x_cpp_source,\n    cuda_sources=x_source,\n'
        '    functions=["x_cuda"],\n    verbose=False,\n)\n\n\nclass ModelNew(nn.Module):\n'
        "    def __init__(self):\n        super().__init__()\n        self.x_ext = x_ext\n\n"
        "    def forward(self, a):\n        return self.x_ext.x_cuda(a)\n"
    )
    for seed in range(300):
        out = vary_wrapper(source, "x", "x_cuda", random.Random(seed))
        assert len(re.findall(r"\bop_src\b", out)) == 1  # "op" + "_src" is drawn, never taken here
        assert not re.search(r"\bx_(source|cpp_source|ext|cuda)\b", out)
        function = re.search(r'functions=\["(\w+)"\]', out)
        assert function is not None and f"torch::Tensor {function.group(1)}(" in out
        assert re.search(rf"\.{function.group(1)}\(a\)", out)
        assert (
            split_scaffold("from torch.utils.cpp_extension import load_inline\n" + out).middle.count("x_cuda")
            == 0
        )


def test_varied_wrappers_pass_the_static_anti_cheat_stage(problems: list, tmp_path: Path) -> None:
    from cudice.model.train.corpus.verify_templates import _static_verdict

    checked = 0
    for i, p in enumerate(problems):
        if not p.infill_solution or checked >= 16:
            continue
        ref, sol = tmp_path / f"ref_{i}.py", tmp_path / f"sol_{i}.py"
        ref.write_text(p.reference)
        sol.write_text(p.infill_solution)
        assert _static_verdict(sol, ref)["verdict"] == "static_ok", p.infill_solution
        checked += 1
    assert checked == 16


def test_no_first_line_is_a_cudice_directive() -> None:
    from cudice.model.train.corpus.wrappers import FIRST_LINES
    from cudice.verifier.source.document import parse_document

    for line in FIRST_LINES:
        assert "cudice:" not in line
        text = line + "import torch\n"
        assert parse_document(text, "x.py", require_candidate=False).reference.origin == "none"


BAKE_SOURCE = (
    'r_source = """\ntorch::Tensor r_cuda(torch::Tensor x, int64_t dim, bool keepdim, double eps) {\n'
    '    if (dim < 0) dim += x.dim();\n    return x.sum(dim, keepdim) + eps;\n}\n"""\n\n'
    'r_cpp_source = "torch::Tensor r_cuda(torch::Tensor x, int64_t dim, bool keepdim, double eps);"\n\n'
    "class ModelNew(nn.Module):\n    def forward(self, x):\n"
    "        return self.r_ext.r_cuda(x, -1, True, 1e-05)\n"
)


def test_baked_arguments_leave_signature_declaration_and_call_together() -> None:
    from cudice.model.train.corpus.wrappers import bake_arguments

    seen: set[str] = set()
    for seed in range(64):
        out = bake_arguments(BAKE_SOURCE, "r_cuda", ("-1", "True", "1e-05"), random.Random(seed))
        definition = re.search(r"torch::Tensor r_cuda\(([^)]*)\) \{\n", out)
        decl = re.search(r'"torch::Tensor r_cuda\(([^)]*)\);"', out)
        call = re.search(r"\.r_cuda\(([^)]*)\)\n", out)
        assert definition and decl and call and definition.group(1) == decl.group(1)
        params = definition.group(1).split(", ")
        assert len(params) == len(call.group(1).split(", ")) < 4  # at least one baked
        assert params[0] == "torch::Tensor x" and call.group(1).startswith("x")
        locals_ = dict(re.findall(r"^    (?:int64_t|bool|double) (\w+) = ([^;]+);$", out, re.M))
        expected = {
            "dim": ("int64_t dim", "-1"),
            "keepdim": ("bool keepdim", "true"),
            "eps": ("double eps", "1e-05"),
        }
        for name, (param, value) in expected.items():
            assert (param in params) != (name in locals_)  # a parameter or a local, never both
            assert name not in locals_ or locals_[name] == value  # the value forward passed, in C++
        assert "    if (dim < 0) dim += x.dim();" in out  # a local the body may still assign
        seen.add(definition.group(1))
    assert len(seen) >= 5  # different subsets baked


def test_only_literal_arguments_are_baked_and_other_layouts_are_left_alone() -> None:
    from cudice.model.train.corpus.wrappers import bake_arguments

    source = BAKE_SOURCE.replace("(x, -1, True, 1e-05)", "(x, self.dim, self.keep, self.eps)")
    for seed in range(16):  # nothing is a literal: unchanged
        assert (
            bake_arguments(source, "r_cuda", ("self.dim", "self.keep", "self.eps"), random.Random(seed))
            == source
        )
    mixed = BAKE_SOURCE.replace("(x, -1, True, 1e-05)", "(x, self.dim, True, self.eps)")
    for seed in range(16):
        out = bake_arguments(mixed, "r_cuda", ("self.dim", "True", "self.eps"), random.Random(seed))
        assert ".r_cuda(x, self.dim, self.eps)\n" in out and "    bool keepdim = true;\n" in out
    # forward passes other arguments than the file's: not the layout it knows, unchanged
    assert bake_arguments(BAKE_SOURCE, "r_cuda", ("0", "True", "1e-05"), random.Random(0)) == BAKE_SOURCE


def test_some_corpus_infilling_pairs_have_baked_arguments_and_stay_wired(
    problems: list, tmp_path: Path
) -> None:
    from cudice.model.train.corpus.verify_templates import _static_verdict

    local = re.compile(r"\) \{\n    (?:int64_t|bool|double|float) \w+ = [^;]+;\n")
    baked = [
        p
        for p in draw_problems(0, 160, 2, infill_naming=VARIED)
        if p.infill_solution and local.search(p.infill_solution)
    ]
    assert len(baked) >= 5
    for i, p in enumerate(baked[:6]):
        assert names_agree(p.infill_solution), p.infill_solution
        function = re.search(r'functions=\["(\w+)"\]', p.infill_solution)
        assert function is not None
        decl = re.search(rf'"torch::Tensor {function.group(1)}\(([^)]*)\);"', p.infill_solution)
        call = re.search(rf"\.{function.group(1)}\(([^)]*)\)\n", p.infill_solution)
        assert decl and call and len(decl.group(1).split(", ")) == len(call.group(1).split(", "))
        ref, sol = tmp_path / f"ref_{i}.py", tmp_path / f"sol_{i}.py"
        ref.write_text(p.reference)
        sol.write_text(p.infill_solution)
        assert _static_verdict(sol, ref)["verdict"] == "static_ok", p.infill_solution


def test_some_varied_norm_wrappers_take_a_float_eps_throughout(tmp_path: Path) -> None:
    from cudice.model.train.corpus.verify_templates import _static_verdict

    drawn = draw_problems(0, 160, 2, infill_naming=VARIED, families=("norm",))
    declared = re.compile(r'_?\w* = "torch::Tensor \w+\([^)]*(float|double) eps\);"')
    kinds = [m.group(1) for p in drawn if p.infill_solution and (m := declared.search(p.infill_solution))]
    assert "float" in kinds and "double" in kinds  # some, not all
    floats = [p for p in drawn if p.infill_solution and "float eps);" in p.infill_solution]
    for i, p in enumerate(floats[:3]):
        assert "double eps" not in p.infill_solution and names_agree(p.infill_solution)
        function = re.search(r'functions=\["(\w+)"\]', p.infill_solution)
        assert function is not None
        decl = re.search(rf'"torch::Tensor {function.group(1)}\(([^)]*)\);"', p.infill_solution)
        definition = re.search(rf"torch::Tensor {function.group(1)}\(([^)]*)\) \{{", p.infill_solution)
        assert decl and definition and decl.group(1) == definition.group(1)
        ref, sol = tmp_path / f"ref_{i}.py", tmp_path / f"sol_{i}.py"
        ref.write_text(p.reference)
        sol.write_text(p.infill_solution)
        assert _static_verdict(sol, ref)["verdict"] == "static_ok", p.infill_solution
