"""Static anti-cheat checks: a candidate that cheats is rejected before it is compiled or run.

`check_document(doc, config)` returns `Diagnostic`s (stage `static`) located on the offending
line of the `.py` file — C++/CUDA findings are mapped back through the document's source map.
Any ERROR among them makes the verdict `static_violation`; warnings are reported only. It is
pure AST and regex work (milliseconds), so it also runs in compile-only mode and in the editor.
`check_built_sources(...)` runs the C++ checks over the sources a `load_inline` call received at
run time, every finding on the call.

The checks (policy and codes: docs/anticheat.md, docs/diagnostics.md):
- module level (here: `ModelNew` and the reference, `load_inline`'s fallbacks and launches; every
  other node rule in `static/module_rules.py`): `ModelNew` inheriting `Model`
  (`static.inherits_model`), holding/using the reference (`static.holds_reference_model`),
  threads/processes/streams (`static.stream_or_thread`), patched timers or torch functions
  (`static.timer_patch`, `static.monkey_patch`), `time.sleep` (`static.sleep`), tensor subclasses
  (`static.tensor_subclass`), code the checks cannot see (`static.dynamic_code`), other GPU
  libraries (`static.foreign_compute`), a `try` around `load_inline` that swallows the failure
  (`static.fallback_to_reference`), forward never calling the extension
  (`static.kernel_never_launched`), `torch.library` and other dispatcher doors
  (`static.dispatcher_override`), file/process APIs (`static.harness_tampering`),
  `torch.compile`/TorchScript (`static.foreign_compute`), builders of code the checks cannot
  read (`static.dynamic_source`);
- what replaces forward (`self.forward = f`, `self.__class__ = C`, `self.__setstate__({...})`,
  `locals()["forward"] = f` in the class body, hooks, a second `ModelNew`): `static/protocol.py`;
  what replaces the extension (`ext.f = g`, `ext = SimpleNamespace(...)`): `static/forward.py`;
- forward and everything a call of `ModelNew` can run (`static/reach.py`): `static/forward.py`
  (torch ops, host round trips, fallbacks, output caches) over `static/bindings.py` (what each
  name holds); names resolve through `static/names.py` (`torch.cuda.torch` is `torch`,
  `load_inline` under any name);
- C++/CUDA text of every `load_inline` call: `static/load_inline.py` over `static/cuda.py`
  (+ `static/cpp_rules.py`, `static/cpp_scan.py`, `static/cpp_preprocess.py`, and
  `static/cpp_tensors.py` for C++ operators on tensors such as `x * (x > 0)`).

C++ sources: literals are checked through their source map; sources the file fixes by other
means (f-strings over constants, `"".join` of literals, `+=` …: `static/sources.py`) are checked
with findings on the expression that builds them; any other source is `static.dynamic_source`
(an error; a warning in `lenient`, where only the run-time checks judge it).

Not covered: anything decided at run time (a kernel launched with zero blocks, work in a library
the candidate loads); a side stream or a C++ `static` seen only through a macro is a warning. The
dynamic checks (`run/dynamic_checks.py`) and the sandbox exist for those.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from cudice.verifier.build.unsafe import unsafe_call_diagnostics
from cudice.verifier.config import VerifyConfig
from cudice.verifier.source.document import Document, callee_name, parse_document
from cudice.verifier.source.reference import reference_path
from cudice.verifier.source.result import Diagnostic, Location, Severity, Stage
from cudice.verifier.static.bindings import Bindings, CandidateModule, dotted
from cudice.verifier.static.cuda import (
    CppSource,
    check_cpp_sources,
    pybind_class_names,
    pybind_python_names,
)
from cudice.verifier.static.forward import Finding, ForwardReport, analyze_forward
from cudice.verifier.static.load_inline import extension_findings
from cudice.verifier.static.module_rules import module_rule_findings
from cudice.verifier.static.names import LoadInlineUses, import_aliases
from cudice.verifier.static.policy import Strictness, parse_strictness
from cudice.verifier.static.protocol import call_protocol_findings
from cudice.verifier.static.reach import base_name, reachable
from cudice.verifier.static.sources import call_functions, resolve_call_sources
from cudice.verifier.static.taint import taint_findings

_LOW_PRECISION_REF = re.compile(r"float16|bfloat16|\.half\(|torch\.half\b")


def check_document(doc: Document, config: VerifyConfig | None = None) -> list[Diagnostic]:
    """All static findings for a parsed candidate; `[]` for a clean one (or one with nothing to check)."""
    level = parse_strictness(config.static_policy if config is not None else "default")
    low_ref = _reference_is_low_precision(doc)
    if doc.kind == "cu":
        src = CppSource(doc.text, lambda line, col: Location(doc.path, line, col))
        diags = check_cpp_sources(
            [src],
            [k.name for k in doc.raw_kernels],
            level,
            reference_low_precision=low_ref,
            check_launches=False,
        )
        return _dedupe(diags)
    if doc.tree is None or doc.model_new is None:
        return []
    cls = next((n for n in doc.tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew"), None)
    if cls is None:
        return []
    candidate = _candidate(doc, doc.tree, cls, level)
    diags = _python_diagnostics(candidate)
    diags += extension_findings(doc, candidate.uses, level, low_ref)
    diags += unsafe_call_diagnostics(doc)  # values that would reach the compiler as more than C++
    return _dedupe(diags)


def check_source(source: str, path: str, config: VerifyConfig | None = None) -> list[Diagnostic]:
    """Parse `source` and run `check_document` (parse problems are not repeated here)."""
    return check_document(parse_document(source, path), config)


def check_built_sources(
    cpp_sources: str | Sequence[str],
    cuda_sources: str | Sequence[str] | None,
    functions: Sequence[str] | None,
    where: Location,
    config: VerifyConfig | None = None,
) -> list[Diagnostic]:
    """The C++ checks over the sources a `load_inline` call actually received at run time (the
    route for a source `static.dynamic_source` could not read): every finding lands on `where`,
    the call in the candidate's file. Kernel launches are checked too, since the text is complete."""
    level = parse_strictness(config.static_policy if config is not None else "default")
    texts = [("cpp", t) for t in ([cpp_sources] if isinstance(cpp_sources, str) else cpp_sources)]
    if cuda_sources is not None:
        texts += [("cuda", t) for t in ([cuda_sources] if isinstance(cuda_sources, str) else cuda_sources)]
    sources = [CppSource(t, lambda _line, _col: where, kind == "cuda") for kind, t in texts]
    return _dedupe(check_cpp_sources(sources, functions, level))


def has_violation(diags: Iterable[Diagnostic]) -> bool:
    """Whether the static stage rejects the candidate (any static ERROR)."""
    return any(d.stage is Stage.STATIC and d.severity is Severity.ERROR for d in diags)


def _dedupe(diags: list[Diagnostic]) -> list[Diagnostic]:
    seen: set[tuple[str, int | None, int | None]] = set()
    out: list[Diagnostic] = []
    for d in diags:
        key = (d.code, d.location.line if d.location else None, d.location.column if d.location else None)
        if key not in seen:
            seen.add(key)
            out.append(d)
    return sorted(out, key=lambda d: (d.location.line if d.location else 0, d.code))


def _reference_is_low_precision(doc: Document) -> bool:
    if doc.reference.origin == "same_file":
        return doc.model is not None and bool(_LOW_PRECISION_REF.search(doc.text[doc.model.span.start :]))
    path = reference_path(doc)
    try:
        return path is not None and bool(_LOW_PRECISION_REF.search(path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError):
        return False


@dataclass(frozen=True, slots=True)
class _Candidate:
    """A `ModelNew` file as the Python-side checks read it; each phase below is a function of it."""

    doc: Document
    module: CandidateModule  # the tree, `ModelNew`, aliases, exposed, extension and reference names
    uses: LoadInlineUses
    level: Strictness


def _candidate(doc: Document, tree: ast.Module, cls: ast.ClassDef, level: Strictness) -> _Candidate:
    """What the phases share: import aliases, the uses of `load_inline`, the reference's names, the
    extension's exposed functions and the names bound to it."""
    aliases = import_aliases(tree)
    uses = LoadInlineUses.of(tree, aliases)
    reference_names = {"Model"} | {
        a.asname or a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom)
        for a in n.names
        if a.name == "Model"
    }
    exposed, classes = _exposed_names(doc, tree, uses)
    extensions = _extension_names(tree, {id(c) for c in uses.calls})
    module = CandidateModule(tree, cls, aliases, exposed, extensions, reference_names, classes)
    return _Candidate(doc, module, uses, level)


def _python_diagnostics(c: _Candidate) -> list[Diagnostic]:
    """Every Python-side finding, in the order the phases run."""
    tree = c.module.tree
    findings = [
        *_inherits_model(c),
        *_holds_reference(c),
        *module_rule_findings(c.module, c.level),
        *_load_inline_fallback(c),
        *_load_inline_values(c),
        *call_protocol_findings(tree),
    ]
    report = analyze_forward(c.module, c.level)
    findings += report.findings
    findings += _taint_findings(c, findings)
    return [_diagnostic(c.doc, f) for f in findings] + _launch_diagnostics(c, report)


def _taint_findings(c: _Candidate, found: list[Finding]) -> list[Finding]:
    """`static/taint.py`'s findings on lines no other error covers (one message per offending line)."""
    names = Bindings(c.module)
    covered = {getattr(f.node, "lineno", None) for f in found if not f.warning}
    return [
        f
        for f in taint_findings(names, reachable(names.index, names.cls), c.level)
        if getattr(f.node, "lineno", None) not in covered or isinstance(f.node, ast.ClassDef)
    ]


def _diagnostic(doc: Document, f: Finding) -> Diagnostic:
    """`f` as a static `Diagnostic` spanning its node (a warning if `f` says so, else an error)."""
    node = f.node
    line = getattr(node, "lineno", 1)
    col = getattr(node, "col_offset", 0) + 1
    end_line = getattr(node, "end_lineno", None)
    end_col = getattr(node, "end_col_offset", None)
    location = Location(doc.path, line, col, end_line, None if end_col is None else end_col + 1)
    severity = Severity.WARNING if f.warning else Severity.ERROR
    return Diagnostic(severity, f.message, f.code, Stage.STATIC, location)


# -- ModelNew and the reference ----------------------------------------------------------------
def _inherits_model(c: _Candidate) -> Iterator[Finding]:
    """`static.inherits_model`: bases of `ModelNew` that are, or derive in this file from, `Model`."""
    m = c.module
    tainted = set(m.reference_names)
    classes = [n for n in m.tree.body if isinstance(n, ast.ClassDef)]
    for _ in range(len(classes)):  # transitive: class A(Model); class ModelNew(A)
        for cl in classes:
            if cl.name != "ModelNew" and any(base_name(b) in tainted for b in cl.bases):
                tainted.add(cl.name)
    for b in m.cls.bases:
        if base_name(b) in tainted:
            yield Finding(
                "static.inherits_model",
                b,
                f"`ModelNew` inherits from `{ast.unparse(b)}`, which is (or derives from) the reference "
                "`Model`: its inherited forward runs the reference. Inherit from `nn.Module` only.",
            )


def _holds_reference(c: _Candidate) -> Iterator[Finding]:
    """`static.holds_reference_model`: `Model` read anywhere in `ModelNew` but its bases."""
    m = c.module
    for node in ast.walk(m.cls):
        hit = (
            isinstance(node, ast.Name) and node.id in m.reference_names and isinstance(node.ctx, ast.Load)
        ) or (isinstance(node, ast.Attribute) and node.attr == "Model" and dotted(node, m.aliases))
        if hit and not any(node is b or node in ast.walk(b) for b in m.cls.bases):
            yield Finding(
                "static.holds_reference_model",
                node,
                "`ModelNew` uses the reference `Model` (holds an instance or calls it): the "
                "reference, not the kernel, would produce the output. Build `ModelNew` from "
                "`nn.Module` and kernels.",
            )


# -- load_inline ---------------------------------------------------------------------------------
def _load_inline_fallback(c: _Candidate) -> Iterator[Finding]:
    """`static.fallback_to_reference`: a `try` that calls `load_inline` with an `except` that does not
    re-raise."""
    builders = {id(call) for call in c.uses.calls}
    for node in ast.walk(c.module.tree):
        if not isinstance(node, ast.Try):
            continue
        builds = any(id(n) in builders for s in node.body for n in ast.walk(s))
        swallowed = any(
            not any(isinstance(n, ast.Raise) for s in h.body for n in ast.walk(s)) for h in node.handlers
        )
        if builds and swallowed:
            yield Finding(
                "static.fallback_to_reference",
                node,
                "`load_inline` inside `try` whose `except` does not re-raise: when the kernel fails to "
                "build, the file falls back to something else. Let the build error propagate.",
            )


def _load_inline_values(c: _Candidate) -> Iterator[Finding]:
    """`static.dynamic_source`: builders of code the checks cannot read, and `load_inline` used as a
    value (a warning in `lenient`)."""
    lenient = c.level is Strictness.LENIENT
    for node in c.uses.opaque:
        yield Finding(
            "static.dynamic_source",
            node,
            f"`{ast.unparse(node)}` compiles or loads code that is not in this file's string literals, "
            "so the static checks cannot read it. Put the C++/CUDA in "
            "`load_inline(cpp_sources=..., cuda_sources=...)` literals.",
            warning=lenient,
        )
    for node in c.uses.values:
        yield Finding(
            "static.dynamic_source",
            node,
            f"`{ast.unparse(node)}` is `load_inline` used as a value (passed on, stored, wrapped): the "
            "checks cannot follow it to the call that compiles, so they cannot read the C++/CUDA it "
            "builds. Call `load_inline(...)` (under any name) directly with the sources.",
            warning=lenient,
        )


# -- kernel launches -----------------------------------------------------------------------------
def _exposed_names(doc: Document, tree: ast.Module, uses: LoadInlineUses) -> tuple[set[str], set[str]]:
    """The extension's Python function names — `functions=` where given, else the pybind11 names of
    the sources (for calls the document records, and for `load_inline` under other names) — and the
    classes those sources bind (`py::class_<ReluOp>(m, "ReluOp")`)."""
    names: set[str] = set()
    texts: list[str] = []  # sources of the calls without `functions=`
    for call in doc.load_inline_calls:
        if call.functions is not None:
            names.update(call.functions)
        else:
            texts += [s.text for s in call.sources if s.text is not None]
    spelled = {id(n) for n in uses.spelled}
    for node in uses.calls:
        if id(node) not in spelled:
            functions = call_functions(tree, node)
            if functions is not None:
                names.update(functions)
            else:
                resolved = resolve_call_sources(tree, node)
                texts += [r.text for r in resolved.sources if r.text is not None]
    sources = [CppSource(t, lambda _l, _c: None) for t in texts]
    return names | pybind_python_names(sources), pybind_class_names(sources)


def _launch_diagnostics(c: _Candidate, report: ForwardReport) -> list[Diagnostic]:
    """`static.kernel_never_launched`: no `load_inline` at all, a forward that calls no extension
    function, or else each `functions=` name nothing calls (a warning unless `strict`, on its call)."""
    m, doc = c.module, c.doc
    forward = next((n for n in m.cls.body if isinstance(n, ast.FunctionDef) and n.name == "forward"), m.cls)
    if not c.uses.calls:
        finding = Finding(
            "static.kernel_never_launched",
            m.cls,
            "this file compiles no CUDA (`load_inline` is never called): `ModelNew` cannot be running a "
            "custom kernel. Write the kernel in `cuda_sources` and call it from forward.",
        )
        return [_diagnostic(doc, finding)]
    if not report.kernel_calls:
        finding = Finding(
            "static.kernel_never_launched",
            forward,
            "`forward` never calls a function of the compiled extension"
            + (f" (exposed: {', '.join(sorted(m.exposed))})" if m.exposed else "")
            + ": the custom kernel does none of the work. Call it from forward.",
        )
        return [_diagnostic(doc, finding)]
    used = {
        n.func.attr if isinstance(n.func, ast.Attribute) else callee_name(n.func)
        for n in ast.walk(m.tree)
        if isinstance(n, ast.Call)
    } | {n.attr for n in ast.walk(m.tree) if isinstance(n, ast.Attribute)}
    sev = Severity.ERROR if c.level is Strictness.STRICT else Severity.WARNING
    return [
        Diagnostic(
            sev,
            f"`{fname}` is listed in `functions=` but nothing calls it: dead kernels "
            "make the file look like it does more than it does.",
            "static.kernel_never_launched",
            Stage.STATIC,
            doc.location(call.span),
        )
        for call in doc.load_inline_calls
        for fname in call.functions or ()
        if fname not in used
    ]


def _extension_names(tree: ast.Module, builders: set[int]) -> set[str]:
    """Names bound to the module `load_inline` returns (`relu = load_inline(...)`, `ext = li(...)`)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and id(node.value) in builders:
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names
