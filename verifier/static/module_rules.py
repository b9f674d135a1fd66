"""The module-wide Python rules of the static checks: what no line of a kernel file may do.

`ModuleRules` is the part of `static_checks._ModuleChecker` that judges every node of the file
on its own, wherever it is: imports (threads, processes, other GPU libraries, code loaders,
`torch.library`), calls (`exec`, process control, file writes, sleeps, builders of code the
checks cannot read, streams, `operator.methodcaller`), assignments to library attributes
(`static.timer_patch`, `static.monkey_patch`), tensor subclasses, interpreter internals and
`/proc` paths. Names are resolved through `static_names.dotted` (canonical paths), so a rule
keyed on `os.system` also sees `torch.utils.cpp_extension.os.system`.

Not covered: what forward computes (`static/forward.py`), what replaces forward
(`static/protocol.py`) and the C++ text (`static/load_inline.py`).
"""

from __future__ import annotations

import ast

from cudice.verifier.source.document import callee_name
from cudice.verifier.source.result import Diagnostic, Severity
from cudice.verifier.static.bindings import dotted
from cudice.verifier.static.names import STAR_EXPORTS, canonical
from cudice.verifier.static.policy import (
    COMPUTE_METHODS,
    CONCURRENCY_MODULES,
    DISPATCH_ATTRS,
    DISPATCH_PREFIXES,
    DYNAMIC_ATTRS,
    DYNAMIC_CODE_BUILTINS,
    DYNAMIC_CODE_MODULES,
    DYNAMIC_DOTTED,
    FILE_OPS,
    FOREIGN_COMPUTE_MODULES,
    HARNESS_ATTRS,
    HARNESS_MODULES,
    JIT_COMPILERS,
    OPAQUE_BUILDERS,
    PROCESS_APIS,
    PROCESS_CONTROL,
    STREAM_APIS,
    TIMER_NAMES,
    WRITE_METHODS,
    Strictness,
)


class ModuleRules:
    """Rules over single nodes; the checker that mixes this in supplies `add` and the fields below."""

    tree: ast.Module
    level: Strictness
    aliases: dict[str, str]
    exposed: set[str]
    diags: list[Diagnostic]

    def add(self, code: str, node: ast.AST, message: str, severity: Severity = Severity.ERROR) -> None:
        raise NotImplementedError

    def _module_node(self, node: ast.AST) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            self._import(node)
        elif isinstance(node, ast.Call):
            self._module_call(node)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete, ast.AnnAssign)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for t in targets:
                d = dotted(t, self.aliases) if isinstance(t, ast.Attribute) else None
                if d:
                    self._patch(t, d)

        elif isinstance(node, ast.ClassDef):
            for b in node.bases:
                if dotted(b, self.aliases) in ("torch.Tensor", "torch._C.TensorBase", "torch._C._TensorBase"):
                    self.add(
                        "static.tensor_subclass",
                        node,
                        f"class `{node.name}` subclasses `torch.Tensor`: a lazy tensor can defer the work to "
                        "when the checker reads it. Return plain tensors written by the kernel.",
                    )
        elif isinstance(node, ast.FunctionDef) and node.name in ("__torch_function__", "__torch_dispatch__"):
            self.add(
                "static.tensor_subclass",
                node,
                f"`{node.name}` intercepts torch operations (lazy or faked results).",
            )
        elif isinstance(node, ast.Attribute):
            if node.attr in ("_make_subclass", "as_subclass", "_make_wrapper_subclass"):
                self.add(
                    "static.tensor_subclass",
                    node,
                    f"`.{node.attr}` builds a tensor subclass (lazy or faked results). Return plain tensors.",
                )
            elif (dotted(node, self.aliases) or "").startswith(JIT_COMPILERS):
                self.add(
                    "static.foreign_compute",
                    node,
                    f"`{ast.unparse(node)}` compiles PyTorch code into its own GPU kernels (Triton, fusers): "
                    "they, not this file's CUDA, would do the work.",
                )
            elif _is_dispatch_api(dotted(node, self.aliases), node.attr):
                self.add(
                    "static.dispatcher_override",
                    node,
                    f"`{ast.unparse(node)}` reaches PyTorch's dispatcher: an implementation registered "
                    "for an `aten` op replaces it in the whole process, including the ops the verifier uses "
                    "to compare outputs (e.g. `aten::allclose`). Call the compiled extension's functions "
                    "instead.",
                )
            elif dotted(node, self.aliases) in HARNESS_ATTRS:
                self.add(
                    "static.harness_tampering",
                    node,
                    f"`{ast.unparse(node)}` belongs to the verifier's process "
                    "(its arguments name the result file).",
                )
            elif (
                node.attr in DYNAMIC_ATTRS
                or dotted(node, self.aliases) in DYNAMIC_DOTTED
                or node.attr == "__dict__"
            ):
                self.add(
                    "static.dynamic_code",
                    node,
                    f"`{ast.unparse(node)}` reaches into interpreter internals, "
                    "which the static checks cannot follow.",
                )
            elif node.attr in ("wait_stream", "record_stream"):
                self.add(
                    "static.stream_or_thread",
                    node,
                    f"`.{node.attr}` means work on a second stream, which the timing on the current stream "
                    "does not see. Launch on the current stream.",
                )
        elif isinstance(node, ast.Name) and node.id == "__builtins__":
            self.add(
                "static.dynamic_code", node, "`__builtins__` gives access to code the checks cannot follow."
            )
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and "/proc/" in node.value
            and "\n" not in node.value
        ):  # multi-line strings are C++ sources, checked there
            self.add(
                "static.harness_tampering",
                node,
                f"`{node.value[:40]}` is a `/proc` path: the verifier's arguments and its parent's "
                "environment are there, and a kernel file has no use for them.",
            )

    def _import(self, node: ast.Import | ast.ImportFrom) -> None:
        mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        full = mods if isinstance(node, ast.Import) else [f"{node.module}.{a.name}" for a in node.names]
        for m in full:
            if _is_dispatch_api(m, m.rsplit(".", 1)[-1]):
                self.add(
                    "static.dispatcher_override",
                    node,
                    f"imports `{m}`: registering operator implementations replaces `aten` ops for the whole "
                    "process, including the comparison the verifier runs. A kernel file calls its extension.",
                )
        if (
            isinstance(node, ast.ImportFrom)
            and (node.module or "").split(".")[0] == "torch"
            and any(a.name == "*" for a in node.names)
            and canonical(node.module or "") not in STAR_EXPORTS
        ):
            self.add(
                "static.dynamic_code",
                node,
                f"`from {node.module} import *` binds PyTorch functions under bare names (`relu(x)`), which "
                "the checks cannot tell from the file's own. Import the module (`import torch`) and name "
                "what you use.",
            )
        if (
            isinstance(node, ast.ImportFrom)
            and node.module == "time"
            and any(a.name == "sleep" for a in node.names)
        ):
            self.add(
                "static.sleep",
                node,
                "imports `time.sleep`: a kernel file has no reason to sleep; it skews timing.",
            )
        for m in mods:
            root = m.split(".")[0]
            if m in CONCURRENCY_MODULES or root in CONCURRENCY_MODULES:
                self.add(
                    "static.stream_or_thread",
                    node,
                    f"imports `{m}`: threads or processes can do the work outside the timed call. "
                    "Do the work in CUDA kernels launched from forward.",
                )
            elif root in FOREIGN_COMPUTE_MODULES:
                self.add(
                    "static.foreign_compute",
                    node,
                    f"imports `{m}`: another GPU library would do the work instead of this file's "
                    "CUDA kernels.",
                )
            elif root in DYNAMIC_CODE_MODULES:
                self.add(
                    "static.dynamic_code",
                    node,
                    f"imports `{m}`, which can run or rewrite code the static checks cannot see.",
                )
            elif root in HARNESS_MODULES:
                self.add(
                    "static.harness_tampering",
                    node,
                    f"imports `{m}`: a kernel file has no use for it; it finds or writes the places later "
                    "processes load code from (a `.pth` file in site-packages runs in every later Python).",
                )

    def _module_call(self, node: ast.Call) -> None:
        func = node.func
        name = func.id if isinstance(func, ast.Name) else None
        d = dotted(func, self.aliases) or ""
        if name in DYNAMIC_CODE_BUILTINS:
            self.add("static.dynamic_code", node, f"`{name}(...)` runs code the static checks cannot see.")
        elif d in PROCESS_CONTROL or name in ("exit", "quit"):
            self.add(
                "static.harness_tampering",
                node,
                f"`{d or name}(...)` controls the process that runs the verification: ending it or "
                "installing handlers lets a candidate skip the checks or forge their result. "
                "A kernel file needs neither.",
            )
        elif (
            (callee_name(func) == "open" and _opens_for_writing(node))
            or FILE_OPS.match(d)
            or (
                isinstance(func, ast.Attribute)
                and func.attr in WRITE_METHODS
                and not d.startswith("torch")
                and func.attr not in self.exposed
            )
        ):
            self.add(
                "static.harness_tampering",
                node,
                f"`{ast.unparse(node.func)}(...)` writes files or changes the process or its environment: "
                "the verifier's files live next to the candidate and later jobs run after it, so a kernel "
                "file must not write files or detach processes.",
            )
        elif OPAQUE_BUILDERS.match(d):
            self.add(
                "static.dynamic_source",
                node,
                f"`{d}(...)` compiles or loads code that is not in this file's string literals, so the "
                "static checks cannot read it. Put the C++/CUDA in "
                "`load_inline(cpp_sources=..., cuda_sources=...)` literals.",
                Severity.WARNING if self.level is Strictness.LENIENT else Severity.ERROR,
            )
        elif name in ("setattr", "delattr") and node.args:
            target = dotted(node.args[0], self.aliases)
            attr_node = node.args[1] if len(node.args) > 1 else None
            attr = str(attr_node.value) if isinstance(attr_node, ast.Constant) else "?"
            if target:
                self._patch(node, f"{target}.{attr}")
        elif d in ("operator.methodcaller", "operator.attrgetter"):
            self.add(
                "static.dynamic_code",
                node,
                f"`{d}(...)` calls a method named by a string, hiding which op runs. Call it directly.",
            )
        elif name == "getattr" and node.args:
            target = dotted(node.args[0], self.aliases) or ""
            key = node.args[1] if len(node.args) > 1 else None
            if target.startswith("torch") or (isinstance(key, ast.Constant) and key.value in COMPUTE_METHODS):
                self.add(
                    "static.dynamic_code",
                    node,
                    f"`{ast.unparse(node)}` looks up a torch function by name, hiding which op runs.",
                )
        elif d in ("time.sleep", "asyncio.sleep") or (
            name == "sleep" and self.aliases.get("sleep") == "time.sleep"
        ):
            self.add(
                "static.sleep",
                node,
                "`time.sleep(...)`: a kernel file has no reason to sleep; it skews timing.",
            )
        elif PROCESS_APIS.match(d):
            self.add("static.stream_or_thread", node, f"`{d}(...)` starts another process.")
        elif d.startswith("torch.cuda.") and d.rsplit(".", 1)[-1] in STREAM_APIS:
            self.add(
                "static.stream_or_thread",
                node,
                f"`{d}(...)`: work on another stream or a captured graph escapes the timed stream. "
                "Launch on the current stream.",
            )

    def _patch(self, node: ast.AST, d: str) -> None:
        parts = set(d.split("."))
        if d.split(".")[0] == "time" or parts & TIMER_NAMES:
            self.add(
                "static.timer_patch",
                node,
                f"assigns `{d}`: replacing timing, synchronisation or comparison "
                "functions fakes the measurement or the correctness check.",
            )
        else:
            self.add(
                "static.monkey_patch",
                node,
                f"assigns `{d}`: changing a library's global state also changes "
                "the reference run (e.g. TF32 flags) or the harness. Leave library settings alone.",
            )


def _opens_for_writing(call: ast.Call) -> bool:
    """`open(p, "w")`, `io.open(p, "a")`, `Path(p).open("w")`: the mode is the first argument of a
    method `.open` and the second of a function `open`; a mode the file does not fix counts as writing."""
    pos = (
        0
        if isinstance(call.func, ast.Attribute)
        and callee_name(call.func.value) not in ("io", "os", "builtins")
        else 1
    )
    mode = (
        call.args[pos]
        if len(call.args) > pos
        else next((k.value for k in call.keywords if k.arg == "mode"), None)
    )
    if mode is None:
        return False
    if not (isinstance(mode, ast.Constant) and isinstance(mode.value, str)):
        return True
    return any(c in mode.value for c in "wax+")


def _is_dispatch_api(d: str | None, attr: str) -> bool:
    return attr in DISPATCH_ATTRS or (d is not None and d.startswith(DISPATCH_PREFIXES))
