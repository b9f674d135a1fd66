"""The module-wide Python rules of the static checks: what no line of a kernel file may do.

`module_rule_findings()` judges every node of the file on its own, wherever it is: imports
(threads, processes, other GPU libraries, code loaders, `torch.library`), calls (`exec`, process
control, file writes, sleeps, builders of code the checks cannot read, streams,
`operator.methodcaller`), assignments to library attributes (`static.timer_patch`,
`static.monkey_patch`), tensor subclasses, interpreter internals and `/proc` paths. Names are
resolved through `static/names.py`'s `dotted` (canonical paths), so a rule keyed on `os.system`
also sees `torch.utils.cpp_extension.os.system`. `static/checks.py` turns the findings into
diagnostics.

Not covered: what forward computes (`static/forward.py`), what replaces forward
(`static/protocol.py`) and the C++ text (`static/load_inline.py`).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from cudice.verifier.source.document import callee_name
from cudice.verifier.static.bindings import CandidateModule, dotted
from cudice.verifier.static.forward import Finding
from cudice.verifier.static.names import STAR_EXPORTS, canonical
from cudice.verifier.static.policy import (
    ALLOWED_IMPORT_ROOTS,
    COMPUTE_METHODS,
    CONCURRENCY_MODULES,
    DISPATCH_ATTRS,
    DISPATCH_PREFIXES,
    DYNAMIC_ATTRS,
    DYNAMIC_CODE_BUILTINS,
    DYNAMIC_CODE_MODULES,
    DYNAMIC_DOTTED,
    EXITING_EXCEPTIONS,
    FILE_OPS,
    FOREIGN_COMPUTE_MODULES,
    HARNESS_ATTRS,
    HARNESS_MODULES,
    INTERPRETER_HOOKS,
    JIT_COMPILERS,
    OPAQUE_BUILDERS,
    OS_ALLOWED,
    PROCESS_APIS,
    PROCESS_CONTROL,
    STREAM_APIS,
    TIMER_NAMES,
    UNVETTED_SUBMODULES,
    WRITE_METHODS,
    Strictness,
)


def module_rule_findings(module: CandidateModule, level: Strictness) -> Iterator[Finding]:
    """Every node of `module.tree` judged on its own, in `ast.walk` order."""
    for node in ast.walk(module.tree):
        yield from _node_findings(node, module, level)


def _node_findings(node: ast.AST, module: CandidateModule, level: Strictness) -> Iterator[Finding]:
    """What one node does wrong, whatever its kind."""
    aliases = module.aliases
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield from _import_findings(node, level)
    elif isinstance(node, ast.Call):
        if (found := _call_finding(node, module, level)) is not None:
            yield found
    elif isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete, ast.AnnAssign)):
        targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
        for t in targets:
            d = dotted(t, aliases) if isinstance(t, ast.Attribute) else None
            if d:
                yield _patch_finding(t, d)
    elif isinstance(node, ast.ClassDef):
        for b in node.bases:
            if dotted(b, aliases) in ("torch.Tensor", "torch._C.TensorBase", "torch._C._TensorBase"):
                yield Finding(
                    "static.tensor_subclass",
                    node,
                    f"class `{node.name}` subclasses `torch.Tensor`: a lazy tensor can defer the work to "
                    "when the checker reads it. Return plain tensors written by the kernel.",
                )
    elif isinstance(node, ast.FunctionDef) and node.name in ("__torch_function__", "__torch_dispatch__"):
        yield Finding(
            "static.tensor_subclass",
            node,
            f"`{node.name}` intercepts torch operations (lazy or faked results).",
        )
    elif isinstance(node, ast.Attribute):
        if (found := _attribute_finding(node, aliases)) is not None:
            yield found
        elif (found := _reexported_module_finding(node, aliases)) is not None:
            yield found
    elif isinstance(node, ast.Raise) and node.exc is not None:
        exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        if callee_name(exc) in EXITING_EXCEPTIONS:
            yield Finding(
                "static.harness_tampering",
                node,
                f"`raise {callee_name(exc)}` ends the process that runs the verification instead of "
                "reporting an error. Raise `RuntimeError` (or use `TORCH_CHECK` in C++).",
            )
    elif isinstance(node, ast.Name) and node.id == "__builtins__":
        yield Finding(
            "static.dynamic_code", node, "`__builtins__` gives access to code the checks cannot follow."
        )
    elif (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and "/proc/" in node.value
        and "\n" not in node.value
    ):  # multi-line strings are C++ sources, checked there
        yield Finding(
            "static.harness_tampering",
            node,
            f"`{node.value[:40]}` is a `/proc` path: the verifier's arguments and its parent's "
            "environment are there, and a kernel file has no use for them.",
        )


def _reexported_module_finding(node: ast.Attribute, aliases: dict[str, str]) -> Finding | None:
    """The import rules applied to a module reached through another one's attribute (
    `logging.threading.Thread`, `torch.utils.cpp_extension.subprocess.run` resolve to `threading`
    and `subprocess`), and `os` judged by `OS_ALLOWED` (its name after `os.`)."""
    d = dotted(node, aliases)
    if not d or "." not in d:
        return None
    root, first = d.split(".")[0], d.split(".")[1]
    if root in CONCURRENCY_MODULES or d.startswith(tuple(m + "." for m in CONCURRENCY_MODULES)):
        return Finding(
            "static.stream_or_thread",
            node,
            f"`{ast.unparse(node)}` is `{d}`: threads or processes can do the work outside the timed "
            "call. Do the work in CUDA kernels launched from forward.",
        )
    if root in DYNAMIC_CODE_MODULES:
        return Finding(
            "static.dynamic_code",
            node,
            f"`{ast.unparse(node)}` is `{d}`, which runs code the checks cannot see.",
        )
    if root in HARNESS_MODULES:
        return Finding(
            "static.harness_tampering",
            node,
            f"`{ast.unparse(node)}` is `{d}`: a kernel file has no use for it (files, load paths).",
        )
    if root == "os" and first not in OS_ALLOWED:
        return Finding(
            "static.harness_tampering",
            node,
            f"`{d}`: of `os` a kernel file may use the environment, paths and "
            f"queries ({', '.join(sorted(OS_ALLOWED))}); the rest controls processes or files.",
        )
    return None


def _attribute_finding(node: ast.Attribute, aliases: dict[str, str]) -> Finding | None:
    """An attribute that builds tensor subclasses, compiles PyTorch, reaches the dispatcher, the
    verifier's process or interpreter internals, or a second stream: the first that applies."""
    if node.attr in ("_make_subclass", "as_subclass", "_make_wrapper_subclass"):
        return Finding(
            "static.tensor_subclass",
            node,
            f"`.{node.attr}` builds a tensor subclass (lazy or faked results). Return plain tensors.",
        )
    if (dotted(node, aliases) or "").startswith(JIT_COMPILERS):
        return Finding(
            "static.foreign_compute",
            node,
            f"`{ast.unparse(node)}` compiles PyTorch code into its own GPU kernels (Triton, fusers): "
            "they, not this file's CUDA, would do the work.",
        )
    if _is_dispatch_api(dotted(node, aliases), node.attr):
        return Finding(
            "static.dispatcher_override",
            node,
            f"`{ast.unparse(node)}` reaches PyTorch's dispatcher: an implementation registered "
            "for an `aten` op replaces it in the whole process, including the ops the verifier uses "
            "to compare outputs (e.g. `aten::allclose`). Call the compiled extension's functions "
            "instead.",
        )
    if dotted(node, aliases) in HARNESS_ATTRS:
        return Finding(
            "static.harness_tampering",
            node,
            f"`{ast.unparse(node)}` belongs to the verifier's process (its arguments name the result file).",
        )
    d = dotted(node, aliases) or ""
    if _is_unvetted_part(d):
        return _unvetted_part(node, d)
    if d in INTERPRETER_HOOKS:
        return Finding(
            "static.dynamic_code",
            node,
            f"`{ast.unparse(node)}` runs the file's code on interpreter events (calls, lines, "
            "imports, exceptions), where the static checks cannot place it.",
        )
    if node.attr in DYNAMIC_ATTRS or d in DYNAMIC_DOTTED or node.attr == "__dict__":
        return Finding(
            "static.dynamic_code",
            node,
            f"`{ast.unparse(node)}` reaches into interpreter internals, "
            "which the static checks cannot follow.",
        )
    if node.attr in ("wait_stream", "record_stream"):
        return Finding(
            "static.stream_or_thread",
            node,
            f"`.{node.attr}` means work on a second stream, which the timing on the current stream "
            "does not see. Launch on the current stream.",
        )
    return None


def _import_findings(node: ast.Import | ast.ImportFrom, level: Strictness) -> Iterator[Finding]:
    """Imports of dispatcher APIs, `torch` star imports, `time.sleep`, of modules for threads,
    processes, other GPU libraries, code loaders or the places later processes load code from, and
    of any module outside `ALLOWED_IMPORT_ROOTS` (`_unvetted_import`)."""
    mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
    full = mods if isinstance(node, ast.Import) else [f"{node.module}.{a.name}" for a in node.names]
    if (unvetted := _unvetted_import(node, mods, full, level)) is not None:
        yield unvetted
    for m in full:
        if _is_dispatch_api(m, m.rsplit(".", 1)[-1]):
            yield Finding(
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
        yield Finding(
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
        yield Finding(
            "static.sleep",
            node,
            "imports `time.sleep`: a kernel file has no reason to sleep; it skews timing.",
        )
    for m in mods:
        root = m.split(".")[0]
        if m in CONCURRENCY_MODULES or root in CONCURRENCY_MODULES:
            yield Finding(
                "static.stream_or_thread",
                node,
                f"imports `{m}`: threads or processes can do the work outside the timed call. "
                "Do the work in CUDA kernels launched from forward.",
            )
        elif root in FOREIGN_COMPUTE_MODULES:
            yield Finding(
                "static.foreign_compute",
                node,
                f"imports `{m}`: another GPU library would do the work instead of this file's CUDA kernels.",
            )
        elif root in DYNAMIC_CODE_MODULES:
            yield Finding(
                "static.dynamic_code",
                node,
                f"imports `{m}`, which can run or rewrite code the static checks cannot see.",
            )
        elif root in HARNESS_MODULES:
            yield Finding(
                "static.harness_tampering",
                node,
                f"imports `{m}`: a kernel file has no use for it; it finds or writes the places later "
                "processes load code from (a `.pth` file in site-packages runs in every later Python).",
            )


def _unvetted_import(
    node: ast.Import | ast.ImportFrom, mods: list[str], full: list[str], level: Strictness
) -> Finding | None:
    """`static.unvetted_import` for a relative import, an import of a module outside
    `ALLOWED_IMPORT_ROOTS`, or of a part of one that `UNVETTED_SUBMODULES` names (a warning in
    `lenient`); modules another rule of `_import_findings` names are left to that rule."""
    if isinstance(node, ast.ImportFrom) and node.level:
        return Finding(
            "static.unvetted_import",
            node,
            "a relative import loads a file next to this one, which the checks never read. "
            "Keep the kernel file self-contained.",
        )
    named_elsewhere = (CONCURRENCY_MODULES, FOREIGN_COMPUTE_MODULES, DYNAMIC_CODE_MODULES, HARNESS_MODULES)
    for m in mods:
        root = m.split(".")[0]
        if root in ALLOWED_IMPORT_ROOTS or any(root in t or m in t for t in named_elsewhere):
            continue
        return Finding(
            "static.unvetted_import",
            node,
            f"imports `{m}`, which is not among the modules a kernel file may import "
            f"({', '.join(sorted(ALLOWED_IMPORT_ROOTS - {'__future__'}))}): the checks cannot vet "
            "what another module does (run a string as code, write files, start threads or "
            f"processes), so the file is not run. Remove the import, or do what `{m}` did with "
            "the modules above.",
            warning=level is Strictness.LENIENT,
        )
    for m in full:
        if _is_unvetted_part(m):
            return _unvetted_part(node, m)
    return None


def _is_unvetted_part(name: str) -> bool:
    """Whether `name` is one of `UNVETTED_SUBMODULES` or inside one."""
    return (name + ".").startswith(tuple(u + "." for u in UNVETTED_SUBMODULES))


def _unvetted_part(node: ast.AST, name: str) -> Finding:
    return Finding(
        "static.unvetted_import",
        node,
        f"`{name}` starts threads or processes or reaches native code, which the checks cannot "
        "follow: a kernel file has no use for it. Do the work in CUDA kernels launched from forward.",
    )


def _call_finding(node: ast.Call, module: CandidateModule, level: Strictness) -> Finding | None:
    """A call that runs hidden code, controls or leaves the process, writes files, builds code the
    checks cannot read, patches by `setattr`, looks up an op by name, sleeps, or starts a process
    or stream: the first that applies."""
    func = node.func
    name = func.id if isinstance(func, ast.Name) else None
    d = dotted(func, module.aliases) or ""
    if name in DYNAMIC_CODE_BUILTINS:
        return Finding("static.dynamic_code", node, f"`{name}(...)` runs code the static checks cannot see.")
    if d in PROCESS_CONTROL or name in ("exit", "quit"):
        return Finding(
            "static.harness_tampering",
            node,
            f"`{d or name}(...)` controls the process that runs the verification: ending it or "
            "installing handlers lets a candidate skip the checks or forge their result. "
            "A kernel file needs neither.",
        )
    if (
        (callee_name(func) == "open" and _opens_for_writing(node))
        or FILE_OPS.match(d)
        or (
            isinstance(func, ast.Attribute)
            and func.attr in WRITE_METHODS
            and not d.startswith("torch")
            and func.attr not in module.exposed
        )
    ):
        return Finding(
            "static.harness_tampering",
            node,
            f"`{ast.unparse(node.func)}(...)` writes files or changes the process or its environment: "
            "the verifier's files live next to the candidate and later jobs run after it, so a kernel "
            "file must not write files or detach processes.",
        )
    if OPAQUE_BUILDERS.match(d):
        return Finding(
            "static.dynamic_source",
            node,
            f"`{d}(...)` compiles or loads code that is not in this file's string literals, so the "
            "static checks cannot read it. Put the C++/CUDA in "
            "`load_inline(cpp_sources=..., cuda_sources=...)` literals.",
            warning=level is Strictness.LENIENT,
        )
    if name in ("setattr", "delattr") and node.args:
        target = dotted(node.args[0], module.aliases)
        attr_node = node.args[1] if len(node.args) > 1 else None
        attr = str(attr_node.value) if isinstance(attr_node, ast.Constant) else "?"
        return _patch_finding(node, f"{target}.{attr}") if target else None
    if d in ("operator.methodcaller", "operator.attrgetter"):
        return Finding(
            "static.dynamic_code",
            node,
            f"`{d}(...)` calls a method named by a string, hiding which op runs. Call it directly.",
        )
    if name == "getattr" and node.args:
        target = dotted(node.args[0], module.aliases) or ""
        key = node.args[1] if len(node.args) > 1 else None
        if target.startswith("torch") or (isinstance(key, ast.Constant) and key.value in COMPUTE_METHODS):
            return Finding(
                "static.dynamic_code",
                node,
                f"`{ast.unparse(node)}` looks up a torch function by name, hiding which op runs.",
            )
        return None
    if d in ("time.sleep", "asyncio.sleep") or (
        name == "sleep" and module.aliases.get("sleep") == "time.sleep"
    ):
        return Finding(
            "static.sleep",
            node,
            "`time.sleep(...)`: a kernel file has no reason to sleep; it skews timing.",
        )
    if PROCESS_APIS.match(d):
        return Finding("static.stream_or_thread", node, f"`{d}(...)` starts another process.")
    if d.startswith("torch.cuda.") and d.rsplit(".", 1)[-1] in STREAM_APIS:
        return Finding(
            "static.stream_or_thread",
            node,
            f"`{d}(...)`: work on another stream or a captured graph escapes the timed stream. "
            "Launch on the current stream.",
        )
    return None


def _patch_finding(node: ast.AST, d: str) -> Finding:
    """An assignment to the library attribute `d`: a timer patch when it names timing, sync or
    comparison, else a monkey patch."""
    parts = set(d.split("."))
    if d.split(".")[0] == "time" or parts & TIMER_NAMES:
        return Finding(
            "static.timer_patch",
            node,
            f"assigns `{d}`: replacing timing, synchronisation or comparison "
            "functions fakes the measurement or the correctness check.",
        )
    return Finding(
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
