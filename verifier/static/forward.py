"""What `ModelNew.forward` (and everything it calls) does, judged by the glue policy — AST only.

`analyze_forward()` walks every function that can run when `ModelNew` is called
(`static/reach.py`: the call-protocol methods of `ModelNew` and its in-file bases, its metaclass,
the methods, helper classes, functions and lambdas they reach), each with the `self` of its own
class, and reports:

- `static.torch_op_in_forward` — PyTorch compute (`torch.*`, `F.*`, also through module-level
  aliases, `nn` layers, also from containers and loop variables, tensor compute methods,
  operators on tensors such as `x + y` and `x @ w`) outside the glue allow-list;
- `static.host_compute` — data moved to the host (`.cpu()`, `.numpy()`, `.tolist()`,
  `.to("cpu")`, `device="cpu"`, NumPy on a tensor);
- `static.fallback_to_reference` — `try` in forward code, or a branch that computes with PyTorch
  while another path calls the kernel;
- `static.output_cache` — state kept across calls (`global` other than a lazy `load_inline`,
  writes to `self.*`/module containers, `id(x)`/`data_ptr()` lookups, `lru_cache`);
- `static.precision_downgrade` (warning) — `.half()`, `.bfloat16()`, `torch.float16` …;
- which exposed extension functions forward calls (for `static.kernel_never_launched`), under any
  name `static/bindings.py` can follow.

Tensor-ness is inferred, not known: forward's unannotated parameters, `self.<parameter>`s and
names assigned from tensor expressions are tensors; `x.size(0)`, `x.shape[0]`, `x.numel()` are
not. Arithmetic between non-tensors (grid sizes) is never flagged. Not covered: containers
filled at run time, calls through `getattr`/higher-order functions (flagged separately as
dynamic code), classes and functions of other files.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass, field

from cudice.verifier.source.document import callee_name
from cudice.verifier.static.bindings import (
    TORCH_SUBMODULES_COMPUTE,
    Bindings,
    CandidateModule,
    dotted,
    is_compute_ref,
    literal_prefix,
    self_attr,
)
from cudice.verifier.static.policy import (
    COMPUTE_METHODS,
    IDENTITY_FUNCS,
    IDENTITY_METHODS,
    NN_NON_COMPUTE,
    STREAM_APIS,
    TENSOR_METADATA_METHODS,
    TORCH_CUDA_PLUMBING,
    Strictness,
    tensor_method_is_compute,
    torch_function_allowed,
)
from cudice.verifier.static.reach import Function, Reached, reachable

_NON_TENSOR_METHODS = TENSOR_METADATA_METHODS | {"tolist"}
_NON_TENSOR_ATTRS = frozenset({"shape", "dtype", "device", "ndim", "is_cuda", "layout", "requires_grad"})
_LOW_PRECISION = frozenset({"float16", "half", "bfloat16"})
_SCALAR_ANNOTATIONS = frozenset({"int", "float", "bool", "str", "tuple", "list"})
_MUTATORS = frozenset(
    {"append", "extend", "insert", "update", "setdefault", "add", "__setitem__", "appendleft"}
)
_CONTAINER_FACTORIES = frozenset({"dict", "list", "set", "defaultdict", "OrderedDict", "deque"})
_HOST_METHODS = frozenset({"cpu", "numpy", "tolist", "__array__", "pin_memory"})


@dataclass(frozen=True, slots=True)
class Finding:
    """One raw finding: `node` locates it; `static_checks` turns it into a `Diagnostic`."""

    code: str
    node: ast.AST
    message: str
    warning: bool = False


@dataclass(slots=True)
class ForwardReport:
    findings: list[Finding] = field(default_factory=list)
    kernel_calls: set[str] = field(default_factory=set)  # exposed function names called
    reachable: list[ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=list)


class _Analyzer(Bindings):
    def __init__(self, module: CandidateModule, level: Strictness) -> None:
        super().__init__(module)
        self.level = level
        self.module_vars = {
            t.id
            for n in module.tree.body
            if isinstance(n, (ast.Assign, ast.AnnAssign))
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
            if isinstance(t, ast.Name)
        }
        self.report = ForwardReport()
        self._called: set[int] = set()
        self._inner: set[int] = set()

    # -- phase 2: reachability (static/reach.py) ------------------------------------------------
    def reachable(self) -> list[Reached]:
        return reachable(self.index, self.cls)

    # -- phase 3: judge each reachable function --------------------------------------------------
    def run(self) -> ForwardReport:
        reached = self.reachable()
        self.report.reachable = [r.fn for r in reached]
        for r in reached:
            self.self_kinds = self.kinds_for(r.owner)
            self._function(r.fn)
        self.self_kinds = self.kinds_for(None)
        for stmt in self.cls.body:  # `forward = torch.relu` and friends at class level
            if isinstance(stmt, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id in ("forward", "__call__") for t in stmt.targets
            ):
                self.report.findings.append(
                    Finding(
                        "static.torch_op_in_forward",
                        stmt,
                        "`forward` is assigned instead of defined: the callable it names is not the "
                        "candidate's kernel code. Define `def forward(self, ...)` that launches the kernel.",
                    )
                )
        return self.report

    def _function(self, fn: Function) -> None:
        tensors = self._tensor_names(fn)
        for deco in fn.decorator_list:
            d = dotted(deco.func if isinstance(deco, ast.Call) else deco, self.aliases) or ""
            if d.rsplit(".", 1)[-1] in ("lru_cache", "cache", "cached_property"):
                self._add(
                    "static.output_cache",
                    deco,
                    f"`@{d}` on `{fn.name}` returns stored results for repeated inputs instead of computing.",
                )
        for default in [*fn.args.defaults, *fn.args.kw_defaults]:
            if isinstance(default, (ast.Dict, ast.List, ast.Set)) or (
                isinstance(default, ast.Call) and callee_name(default.func) in _CONTAINER_FACTORIES
            ):
                self._add(
                    "static.output_cache",
                    default,
                    f"mutable default argument of `{fn.name}`: it survives between calls and can cache "
                    "outputs.",
                )
        nodes = list(ast.walk(fn))
        self._local_kernels = set()
        for _ in range(2):  # `fn = self.ext.relu_out; g = fn` inside the function
            self._local_kernels |= {
                t.id
                for n in nodes
                if isinstance(n, ast.Assign) and self._is_kernel_ref(n.value)
                for t in n.targets
                if isinstance(t, ast.Name)
            }
        self._local_torch = set()
        for _ in range(2):
            for n in nodes:
                if isinstance(n, (ast.For, ast.comprehension)) and any(
                    self._is_torch_callable(i) for i in ast.walk(n.iter) if isinstance(i, ast.expr)
                ):
                    self._local_torch |= {t.id for t in ast.walk(n.target) if isinstance(t, ast.Name)}
                elif isinstance(n, ast.Assign) and (
                    self._is_torch_callable(n.value) or self._holds_torch_callable(n.value)
                ):
                    self._local_torch |= {t.id for t in n.targets if isinstance(t, ast.Name)}
        self._called = {id(n.func) for n in nodes if isinstance(n, ast.Call)}
        self._inner = {id(n.value) for n in nodes if isinstance(n, ast.Attribute)}
        for node in nodes:
            self._node(node, fn, tensors)

    def _tensor_names(self, fn: Function) -> set[str]:
        names: set[str] = set()
        if fn.name in ("forward", "__call__"):
            for a in fn.args.args[1:] + fn.args.kwonlyargs:
                ann = ast.unparse(a.annotation) if a.annotation else ""
                if ann.split("[")[0] not in _SCALAR_ANNOTATIONS:
                    names.add(a.arg)
            if fn.args.vararg:
                names.add(fn.args.vararg.arg)
        else:
            for a in fn.args.args + fn.args.kwonlyargs:
                if a.annotation is not None and "Tensor" in ast.unparse(a.annotation):
                    names.add(a.arg)
        assigns = sorted(
            (n for n in ast.walk(fn) if isinstance(n, (ast.Assign, ast.AnnAssign))),
            key=lambda n: (n.lineno, n.col_offset),
        )
        for _ in range(2):  # two passes settle simple chains like `a = x; b = a`
            for n in assigns:
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                if n.value is not None and self._is_tensor(n.value, names):
                    names.update(t.id for t in targets if isinstance(t, ast.Name))
        return names

    def _is_tensor(self, e: ast.expr, tensors: set[str]) -> bool:
        if isinstance(e, ast.Name):
            return e.id in tensors
        if (attr := self_attr(e)) is not None:
            return self.self_kinds.get(attr) == "tensor"
        if isinstance(e, ast.Attribute):
            return (
                e.attr not in _NON_TENSOR_ATTRS
                and e.attr in ("T", "mT", "data", "real", "imag")
                and self._is_tensor(e.value, tensors)
            )
        if isinstance(e, ast.Subscript):
            return self._is_tensor(e.value, tensors)
        if isinstance(e, ast.BinOp):
            return self._is_tensor(e.left, tensors) or self._is_tensor(e.right, tensors)
        if isinstance(e, ast.UnaryOp):
            return self._is_tensor(e.operand, tensors)
        if isinstance(e, ast.Call):
            if self._is_kernel_call(e):
                return True
            d = dotted(e.func, self.aliases)
            if d and d.startswith("torch."):
                return d.rsplit(".", 1)[-1] not in (
                    "numel",
                    "is_tensor",
                    "is_floating_point",
                    "Size",
                    "device",
                )
            if isinstance(e.func, ast.Attribute):
                return e.func.attr not in _NON_TENSOR_METHODS and self._is_tensor(e.func.value, tensors)
        return False

    def _is_kernel_call(self, call: ast.Call) -> bool:
        f = call.func
        if self._is_kernel_ref(f):
            return True
        # `ext.anything(...)`: the extension module's own attribute, exposed or not
        return isinstance(f, ast.Attribute) and self._is_extension(f.value)

    def _add(self, code: str, node: ast.AST, message: str, warning: bool = False) -> None:
        self.report.findings.append(Finding(code, node, message, warning))

    def _torch_op(self, node: ast.AST, what: str) -> None:
        lenient = self.level is Strictness.LENIENT
        self._add(
            "static.torch_op_in_forward",
            node,
            f"{what} runs a PyTorch kernel inside ModelNew.forward: the speedup would measure PyTorch, not "
            "your CUDA kernel. Do this computation in the kernel (glue such as `torch.empty_like`, "
            "`.view`, `.contiguous` is allowed; see docs/anticheat.md).",
            warning=lenient,
        )

    def _node(self, node: ast.AST, fn: Function, tensors: set[str]) -> None:
        if isinstance(node, ast.Try):
            self._add(
                "static.fallback_to_reference",
                node,
                "`try` in forward code: an `except` branch can fall back to PyTorch or the reference when "
                "the kernel fails, so a broken kernel would still pass. Let errors propagate.",
            )
        elif isinstance(node, (ast.If, ast.IfExp)):
            self._branch_fallback(node, fn)
        elif isinstance(node, (ast.Global, ast.Nonlocal)) and not _only_builds_extension(fn, node.names):
            self._add(
                "static.output_cache",
                node,
                f"`{type(node).__name__.lower()} {', '.join(node.names)}` in forward code keeps state across "
                "calls (an output cache would pass timing without computing).",
            )
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            self._assignment(node, fn, tensors)
        elif isinstance(node, ast.Call):
            self._container_write(node, fn)
            self._call(node, tensors)
        elif isinstance(node, ast.BinOp):
            if isinstance(node.op, ast.MatMult):
                self._torch_op(node, "`@` (matrix multiply)")
            elif self._is_tensor(node.left, tensors) or self._is_tensor(node.right, tensors):
                self._torch_op(node, f"tensor arithmetic `{_short(node)}`")
        elif isinstance(node, ast.UnaryOp) and not isinstance(node.op, ast.Not):
            if self._is_tensor(node.operand, tensors):
                self._torch_op(node, f"tensor arithmetic `{_short(node)}`")
        elif isinstance(node, ast.Compare):
            ops_compute = all(not isinstance(o, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for o in node.ops)
            if ops_compute and any(self._is_tensor(e, tensors) for e in [node.left, *node.comparators]):
                self._torch_op(node, f"tensor comparison `{_short(node)}`")
            if not ops_compute and any(_uses_identity(e) for e in [node.left, *node.comparators]):
                self._add(
                    "static.output_cache",
                    node,
                    "membership test keyed by an input's identity/address: "
                    "results cached per input would be returned without computing.",
                )
        elif isinstance(node, ast.Subscript) and _uses_identity(node.slice):
            self._add(
                "static.output_cache",
                node,
                "lookup keyed by `id(...)`/`data_ptr()`: results cached per "
                "input address would be returned without computing.",
            )
        elif (
            isinstance(node, ast.Name) and node.id in self.reference_names and isinstance(node.ctx, ast.Load)
        ):
            self._add(
                "static.holds_reference_model",
                node,
                f"forward code uses `{node.id}`, the reference: the candidate would run the reference.",
            )
        elif isinstance(node, ast.Attribute):
            d = dotted(node, self.aliases)
            if d and d.rsplit(".", 1)[-1] in _LOW_PRECISION and d.startswith("torch."):
                self._add(
                    "static.precision_downgrade",
                    node,
                    f"`{d}` in forward: computing in reduced precision for a float32 reference passes the "
                    "tolerance while doing less work than asked.",
                    warning=True,
                )
            elif d and id(node) not in self._called and id(node) not in self._inner and is_compute_ref(d):
                self._torch_op(node, f"`{d}` passed around as a function (`f = torch.relu; f(x)`)")

    def _assignment(
        self, node: ast.Assign | ast.AugAssign | ast.AnnAssign, fn: Function, tensors: set[str]
    ) -> None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if isinstance(node, ast.AugAssign) and (
            self._is_tensor(node.target, tensors) or self._is_tensor(node.value, tensors)
        ):
            self._torch_op(node, f"in-place tensor arithmetic `{_short(node)}`")
        value = node.value
        is_lazy_build = isinstance(value, ast.Call) and callee_name(value.func) == "load_inline"
        for t in targets:
            base = t.value if isinstance(t, ast.Subscript) else t
            attr = self_attr(base)
            if attr is not None and fn.name != "__init__" and not is_lazy_build:
                self._add(
                    "static.output_cache",
                    t,
                    f"forward code stores `self.{attr}`: state kept across calls lets a later call return a "
                    "stored result. Allocate buffers in `__init__`; compute every output in the call.",
                )
            elif isinstance(base, ast.Name) and isinstance(t, ast.Subscript) and base.id in self.module_vars:
                self._add(
                    "static.output_cache",
                    t,
                    f"forward code writes into module-level `{base.id}`: a module-level cache returns stored "
                    "outputs instead of computing.",
                )

    def _container_write(self, node: ast.Call, fn: Function) -> None:
        func = node.func
        if not isinstance(func, ast.Attribute) or func.attr not in _MUTATORS:
            return
        recv = func.value
        owner = (
            f"self.{self_attr(recv)}"
            if self_attr(recv) and fn.name != "__init__"
            else (recv.id if isinstance(recv, ast.Name) and recv.id in self.module_vars else None)
        )
        if owner is not None:
            self._add(
                "static.output_cache",
                node,
                f"forward code calls `{owner}.{func.attr}(...)`: a container kept across calls can hold "
                "outputs that later calls return without computing.",
            )

    def _call(self, node: ast.Call, tensors: set[str]) -> None:
        func = node.func
        if self._is_kernel_call(node):
            self.report.kernel_calls.add(callee_name(func) or "")
            return
        if (host := self._host_transfer(node, tensors)) is not None:
            self._add(
                "static.host_compute",
                node,
                f"{host} in ModelNew.forward: whatever computes on the host copy (NumPy, Python) is not your "
                "CUDA kernel, and the round trip is not what the speedup should measure. Keep the data on "
                "the GPU and compute in the kernel.",
                warning=self.level is Strictness.LENIENT,
            )
            return
        name = callee_name(func)
        if name in IDENTITY_FUNCS and isinstance(func, ast.Name):
            self._add(
                "static.output_cache",
                node,
                f"`{name}(...)` in forward code: an input's identity is the "
                "key of an output cache (results returned without computing).",
            )
            return
        if (
            isinstance(func, ast.Name)
            and func.id in ("abs", "sum", "pow", "max", "min", "round", "divmod")
            and any(
                self._is_tensor(a, tensors)
                or (isinstance(a, (ast.List, ast.Tuple)) and any(self._is_tensor(i, tensors) for i in a.elts))
                for a in node.args
            )  # `sum([x, y])` adds the tensors
        ):
            self._torch_op(node, f"`{func.id}(...)` on a tensor")
            return
        if isinstance(func, ast.Name) and func.id in self.reference_names:
            return  # reported by the Name visit
        d = dotted(func, self.aliases)
        if d is not None:
            if d.startswith("torch."):
                self._torch_call(node, d)
            elif d.startswith("operator.") and any(self._is_tensor(a, tensors) for a in node.args):
                self._torch_op(node, f"`{d}(...)` on a tensor")
            return
        if not isinstance(func, ast.Attribute) and self._is_torch_callable(func):
            self._torch_op(
                node, f"`{_short(func)}(...)` (a torch.nn layer or torch function taken from a container)"
            )
            return
        attr, kind = self._member(func)
        if attr is not None:
            if kind == "torch":
                self._torch_op(node, f"`self.{attr}(...)` (a torch.nn layer or torch function)")
            elif kind == "reference":
                self._add(
                    "static.holds_reference_model",
                    node,
                    f"`self.{attr}` is an instance of the reference `Model`; calling it runs the reference.",
                )
            return
        if isinstance(func, ast.Attribute):
            if func.attr in ("half", "bfloat16"):
                self._add(
                    "static.precision_downgrade",
                    node,
                    f"`.{func.attr}()` converts to reduced precision: "
                    "for a float32 reference it passes the tolerance with less work.",
                    warning=True,
                )
            if tensor_method_is_compute(func.attr, self.level):
                self._torch_op(node, f"`.{func.attr}(...)`")

    def _member(self, func: ast.expr) -> tuple[str | None, str | None]:
        """`self.a`, `getattr(self, "a")`, `type(self).a`, `self.__class__.a`, `<InFileClass>.a`: the
        attribute name and what it holds (`Bindings` kinds of that class), else (None, None)."""
        attr = self_attr(func)
        if attr is not None:
            return attr, self.self_kinds.get(attr)
        if (
            isinstance(func, ast.Call)
            and callee_name(func.func) == "getattr"
            and len(func.args) >= 2
            and isinstance(func.args[0], ast.Name)
            and func.args[0].id == "self"
        ):
            key = func.args[1]
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                return key.value, self.self_kinds.get(key.value)
            # a computed name: any attribute it can name (all of them, or those its prefix allows)
            prefix = literal_prefix(key) if isinstance(key, ast.JoinedStr) else ""
            kinds = {k for name, k in self.self_kinds.items() if name.startswith(prefix)}
            return ast.unparse(key), "torch" if "torch" in kinds else None
        if not isinstance(func, ast.Attribute):
            return None, None
        owner = func.value
        if isinstance(owner, ast.Name) and owner.id in self.index.classes:
            return func.attr, self.kinds_for(self.index.classes[owner.id]).get(func.attr)
        if (isinstance(owner, ast.Call) and callee_name(owner.func) == "type") or (
            isinstance(owner, ast.Attribute) and owner.attr == "__class__" and self_attr(owner) is not None
        ):
            return func.attr, self.self_kinds.get(func.attr)
        return None, None

    def _host_transfer(self, node: ast.Call, tensors: set[str]) -> str | None:
        """What moves data to the host in this call (`.cpu()`, `.to("cpu")`, `device="cpu"`, NumPy on a
        tensor), or None."""
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in _HOST_METHODS:
            return f"`.{func.attr}()` copies the tensor to the host"
        devices = [k.value for k in node.keywords if k.arg == "device"]
        if isinstance(func, ast.Attribute) and func.attr == "to" and node.args:
            devices.append(node.args[0])
        if any(self._is_cpu_device(e) for e in devices):
            return f"`{_short(node)}` puts data on the host"
        d = dotted(func, self.aliases) or ""
        if d.startswith(("numpy.", "scipy.")) and any(self._is_tensor(a, tensors) for a in node.args):
            return f"`{d}(...)` on a tensor runs NumPy on the host"
        return None

    def _is_cpu_device(self, e: ast.expr) -> bool:
        if isinstance(e, ast.Call) and (dotted(e.func, self.aliases) or "").endswith("device") and e.args:
            e = e.args[0]
        value = self.constants.value(e)
        return isinstance(value, str) and value.split(":")[0] == "cpu"

    def _torch_call(self, node: ast.Call, d: str) -> None:
        last = d.rsplit(".", 1)[-1]
        if d.startswith("torch.cuda."):
            # device and stream plumbing, no compute (streams are `static.stream_or_thread`); `d` is
            # canonical, so `torch.cuda.torch.relu` arrives here as `torch.relu`
            if last in TORCH_CUDA_PLUMBING or last in STREAM_APIS or torch_function_allowed(last, self.level):
                return
            self._torch_op(node, f"`{d}(...)` (not device or stream plumbing)")
            return
        if d.startswith("torch.nn.") and not d.startswith(TORCH_SUBMODULES_COMPUTE):
            if last not in NN_NON_COMPUTE:
                self._torch_op(node, f"`{d}` (a torch.nn layer built in forward)")
            return
        if d.startswith(TORCH_SUBMODULES_COMPUTE) or not torch_function_allowed(last, self.level):
            self._torch_op(node, f"`{d}(...)`")

    def _branch_fallback(self, node: ast.If | ast.IfExp, fn: Function) -> None:
        body = node.body if isinstance(node.body, list) else [node.body]
        orelse = node.orelse if isinstance(node.orelse, list) else [node.orelse]
        inside_if = {id(n) for n in ast.walk(node)}
        rest = [n for n in ast.walk(fn) if id(n) not in inside_if]  # the function outside this `if`
        for branch, other in ((body, orelse), (orelse, body)):
            torch_here = self._computes_with_torch(branch)
            kernel_here = self._calls_kernel(branch)
            torch_elsewhere = self._computes_with_torch(other) or self._computes_with_torch(rest)
            kernel_elsewhere = self._calls_kernel(other) or self._calls_kernel(rest)
            if (torch_here and not kernel_here and kernel_elsewhere) or (
                kernel_here and not torch_here and torch_elsewhere
            ):
                self._add(
                    "static.fallback_to_reference",
                    node,
                    "a branch computes with PyTorch (or the reference) while another path calls the kernel: "
                    "the measured path may not be the kernel. Remove the fallback branch.",
                )
                return

    def _computes_with_torch(self, stmts: Iterable[ast.AST]) -> bool:
        for s in stmts:
            for n in ast.walk(s):
                if isinstance(n, ast.Name) and n.id in self.reference_names:
                    return True
                if isinstance(n, ast.Call) and not self._is_kernel_call(n):
                    d = dotted(n.func, self.aliases)
                    if (
                        d
                        and d.startswith("torch.")
                        and not torch_function_allowed(d.rsplit(".", 1)[-1], self.level)
                    ):
                        return True
                    if isinstance(n.func, ast.Attribute) and d is None and n.func.attr in COMPUTE_METHODS:
                        return True
                    if self.self_kinds.get(self_attr(n.func) or "") in ("torch", "reference"):
                        return True
        return False

    def _calls_kernel(self, stmts: Iterable[ast.AST]) -> bool:
        return any(isinstance(n, ast.Call) and self._is_kernel_call(n) for s in stmts for n in ast.walk(s))


def _only_builds_extension(fn: Function, names: list[str]) -> bool:
    """`global _ext` in a lazy loader whose every store to `_ext` is `load_inline(...)` (or None): the
    extension module is kept, not an output."""
    stores = [
        n
        for n in ast.walk(fn)
        if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
        and any(
            isinstance(t, ast.Name) and t.id in names
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
        )
    ]
    return bool(stores) and all(
        isinstance(n, ast.Assign)
        and (
            (isinstance(n.value, ast.Call) and callee_name(n.value.func) == "load_inline")
            or (isinstance(n.value, ast.Constant) and n.value.value is None)
        )
        for n in stores
    )


def _uses_identity(e: ast.AST) -> bool:
    for n in ast.walk(e):
        if isinstance(n, ast.Call):
            name = callee_name(n.func)
            if (isinstance(n.func, ast.Name) and name in IDENTITY_FUNCS) or (
                isinstance(n.func, ast.Attribute) and name in IDENTITY_METHODS
            ):
                return True
    return False


def _short(node: ast.AST) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 40 else text[:37] + "..."


def analyze_forward(module: CandidateModule, level: Strictness) -> ForwardReport:
    """Findings for `module.cls` (ModelNew) under `level`."""
    return _Analyzer(module, level).run()
