"""What `ModelNew.forward` (and everything it calls) does, judged by the glue policy — AST only.

`analyze_forward()` walks every function that can run when `ModelNew` is called
(`static/reach.py`: the call-protocol methods of `ModelNew` and its in-file bases, its metaclass,
the methods, helper classes, functions and lambdas they reach), each with the `self` of its own
class and its own local names only (another function's `op = ext.f` does not make its `op` a
kernel), and reports:

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
from collections.abc import Iterable, Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from cudice.verifier.source.document import callee_name
from cudice.verifier.static.bindings import (
    TORCH_SUBMODULES_COMPUTE,
    Bindings,
    CandidateModule,
    LocalNames,
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
    TENSOR_GLUE_ALWAYS,
    TENSOR_GLUE_DEFAULT,
    TENSOR_METADATA_METHODS,
    TORCH_CUDA_PLUMBING,
    Strictness,
    tensor_method_is_compute,
    torch_function_allowed,
)
from cudice.verifier.static.reach import Function, Reached, reachable

_NON_TENSOR_METHODS = TENSOR_METADATA_METHODS | {"tolist"}
# the tensor class under its public and private names: `<class>.<method>(x, ...)` is a method call
TENSOR_CLASSES = frozenset({"torch.Tensor", "torch._C.TensorBase", "torch._C._TensorBase"})
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
    """One raw finding: `node` locates it; `static/checks.py` turns it into a `Diagnostic`."""

    code: str
    node: ast.AST
    message: str
    warning: bool = False


@dataclass(slots=True)
class ForwardReport:
    findings: list[Finding] = field(default_factory=list)
    kernel_calls: set[str] = field(default_factory=set)  # exposed function names called
    reachable: list[ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Scope:
    """One reachable function as its checks read it: what the module's names hold, the policy, and
    what the function's own names hold."""

    names: Bindings
    level: Strictness
    module_vars: frozenset[str]  # module-level names assigned (writes into them are caches)
    fn: Function
    local: LocalNames
    tensors: frozenset[str]  # names inferred to hold tensors
    called: frozenset[int]  # ids of the `func` of every call in `fn`
    inner: frozenset[int]  # ids of the `value` of every attribute in `fn`


def analyze_forward(module: CandidateModule, level: Strictness) -> ForwardReport:
    """Findings for `module.cls` (ModelNew) under `level`: every function a call of it can run
    (`static/reach.py`), each with the `self` of its own class, then `forward` assigned in the class."""
    names = Bindings(module)
    module_vars = frozenset(
        t.id
        for n in module.tree.body
        if isinstance(n, (ast.Assign, ast.AnnAssign))
        for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
        if isinstance(t, ast.Name)
    )
    reached = reachable(names.index, names.cls)
    report = ForwardReport(reachable=[r.fn for r in reached])
    for r in reached:
        scope = _scope(names, level, module_vars, r)
        report.findings += _function_findings(scope)
        report.kernel_calls |= _kernel_calls(scope)
    report.findings += _assigned_forward(names.cls)
    return report


def _scope(names: Bindings, level: Strictness, module_vars: frozenset[str], r: Reached) -> _Scope:
    """What `r.fn`'s names hold: its class's `self.<attr>` kinds and its own local names only (no
    other function's), found before its tensors are inferred."""
    fn = r.fn
    self_kinds = names.kinds_for(r.owner)
    kernels = names.local_kernels(fn, self_kinds)
    nodes = list(ast.walk(fn))
    torch: set[str] = set()
    growing = LocalNames(self_kinds, kernels, torch)  # sees `torch` grow node by node
    for _ in range(2):
        for n in nodes:
            if isinstance(n, (ast.For, ast.comprehension)) and any(
                names.is_torch_callable(i, growing) for i in ast.walk(n.iter) if isinstance(i, ast.expr)
            ):
                torch |= {t.id for t in ast.walk(n.target) if isinstance(t, ast.Name)}
            elif isinstance(n, ast.Assign) and (
                names.is_torch_callable(n.value, growing) or names.holds_torch_callable(n.value)
            ):
                torch |= {t.id for t in n.targets if isinstance(t, ast.Name)}
    local = LocalNames(self_kinds, kernels, frozenset(torch))
    return _Scope(
        names,
        level,
        module_vars,
        fn,
        local,
        frozenset(_tensor_names(fn, names, local)),
        frozenset(id(n.func) for n in nodes if isinstance(n, ast.Call)),
        frozenset(id(n.value) for n in nodes if isinstance(n, ast.Attribute)),
    )


def _function_findings(s: _Scope) -> list[Finding]:
    """Caching decorators, mutable defaults, then every node of the function in `ast.walk` order."""
    out = [*_caching_decorators(s), *_mutable_defaults(s.fn)]
    for node in ast.walk(s.fn):
        out += _node_findings(node, s)
    return out


def _kernel_calls(s: _Scope) -> set[str]:
    """The names under which the function calls the extension."""
    return {
        callee_name(n.func) or ""
        for n in ast.walk(s.fn)
        if isinstance(n, ast.Call) and _is_kernel_call(n, s.names, s.local)
    }


def _caching_decorators(s: _Scope) -> Iterator[Finding]:
    """`static.output_cache`: `@lru_cache`, `@cache`, `@cached_property` on the function."""
    fn = s.fn
    for deco in fn.decorator_list:
        d = dotted(deco.func if isinstance(deco, ast.Call) else deco, s.names.aliases) or ""
        if d.rsplit(".", 1)[-1] in ("lru_cache", "cache", "cached_property"):
            yield Finding(
                "static.output_cache",
                deco,
                f"`@{d}` on `{fn.name}` returns stored results for repeated inputs instead of computing.",
            )


def _mutable_defaults(fn: Function) -> Iterator[Finding]:
    """`static.output_cache`: container defaults, which survive between calls."""
    for default in [*fn.args.defaults, *fn.args.kw_defaults]:
        if isinstance(default, (ast.Dict, ast.List, ast.Set)) or (
            isinstance(default, ast.Call) and callee_name(default.func) in _CONTAINER_FACTORIES
        ):
            yield Finding(
                "static.output_cache",
                default,
                f"mutable default argument of `{fn.name}`: it survives between calls and can cache outputs.",
            )


def _tensor_names(fn: Function, names: Bindings, local: LocalNames) -> set[str]:
    """Names of `fn` inferred to hold tensors: forward's unannotated parameters, parameters annotated
    `Tensor` elsewhere, and names assigned from tensor expressions."""
    tensors: set[str] = set()
    if fn.name in ("forward", "__call__"):
        for a in fn.args.args[1:] + fn.args.kwonlyargs:
            ann = ast.unparse(a.annotation) if a.annotation else ""
            if ann.split("[")[0] not in _SCALAR_ANNOTATIONS:
                tensors.add(a.arg)
        if fn.args.vararg:
            tensors.add(fn.args.vararg.arg)
    else:
        for a in fn.args.args + fn.args.kwonlyargs:
            if a.annotation is not None and "Tensor" in ast.unparse(a.annotation):
                tensors.add(a.arg)
    assigns = sorted(
        (n for n in ast.walk(fn) if isinstance(n, (ast.Assign, ast.AnnAssign))),
        key=lambda n: (n.lineno, n.col_offset),
    )
    for _ in range(2):  # two passes settle simple chains like `a = x; b = a`
        for n in assigns:
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            if n.value is not None and _is_tensor_expr(n.value, tensors, names, local):
                tensors.update(t.id for t in targets if isinstance(t, ast.Name))
    return tensors


def _is_tensor_expr(e: ast.expr, tensors: AbstractSet[str], names: Bindings, local: LocalNames) -> bool:
    """Whether `e` is inferred to be a tensor, given the names in `tensors` are."""
    if isinstance(e, ast.Name):
        return e.id in tensors
    if (attr := self_attr(e)) is not None:
        return local.self_kinds.get(attr) == "tensor"
    if isinstance(e, ast.Attribute):
        return (
            e.attr not in _NON_TENSOR_ATTRS
            and e.attr in ("T", "mT", "data", "real", "imag")
            and _is_tensor_expr(e.value, tensors, names, local)
        )
    if isinstance(e, ast.Subscript):
        return _is_tensor_expr(e.value, tensors, names, local)
    if isinstance(e, ast.BinOp):
        return _is_tensor_expr(e.left, tensors, names, local) or _is_tensor_expr(
            e.right, tensors, names, local
        )
    if isinstance(e, ast.UnaryOp):
        return _is_tensor_expr(e.operand, tensors, names, local)
    if isinstance(e, ast.Call):
        if _is_kernel_call(e, names, local):
            return True
        d = dotted(e.func, names.aliases)
        if d and d.startswith("torch."):
            return d.rsplit(".", 1)[-1] not in (
                "numel",
                "is_tensor",
                "is_floating_point",
                "Size",
                "device",
            )
        if isinstance(e.func, ast.Attribute):
            return e.func.attr not in _NON_TENSOR_METHODS and _is_tensor_expr(
                e.func.value, tensors, names, local
            )
    return False


def _is_tensor(s: _Scope, e: ast.expr) -> bool:
    """Whether `e` is inferred to be a tensor in the function of `s`."""
    return _is_tensor_expr(e, s.tensors, s.names, s.local)


def _is_kernel_call(call: ast.Call, names: Bindings, local: LocalNames) -> bool:
    """A call of an extension function, under any name `Bindings` follows."""
    f = call.func
    if names.is_kernel_ref(f, local):
        return True
    # `ext.anything(...)`: the extension module's own attribute, exposed or not
    return isinstance(f, ast.Attribute) and names.is_extension(f.value, local)


def _torch_op(s: _Scope, node: ast.AST, what: str) -> Finding:
    """`static.torch_op_in_forward` for `what` (a warning in `lenient`)."""
    return Finding(
        "static.torch_op_in_forward",
        node,
        f"{what} runs a PyTorch kernel inside ModelNew.forward: the speedup would measure PyTorch, not "
        "your CUDA kernel. Do this computation in the kernel (glue such as `torch.empty_like`, "
        "`.view`, `.contiguous` is allowed; see docs/anticheat.md).",
        warning=s.level is Strictness.LENIENT,
    )


def _node_findings(node: ast.AST, s: _Scope) -> Iterator[Finding]:
    """What one node of the function does wrong: `try`, fallback branches, `global`, stores and
    container writes that keep state, calls, tensor operators, identity-keyed lookups, the reference,
    reduced precision and torch functions passed around."""
    if isinstance(node, ast.Try):
        yield Finding(
            "static.fallback_to_reference",
            node,
            "`try` in forward code: an `except` branch can fall back to PyTorch or the reference when "
            "the kernel fails, so a broken kernel would still pass. Let errors propagate.",
        )
    elif isinstance(node, (ast.If, ast.IfExp)):
        if (found := _branch_fallback(node, s)) is not None:
            yield found
    elif isinstance(node, (ast.Global, ast.Nonlocal)) and not _only_builds_extension(s.fn, node.names):
        yield Finding(
            "static.output_cache",
            node,
            f"`{type(node).__name__.lower()} {', '.join(node.names)}` in forward code keeps state across "
            "calls (an output cache would pass timing without computing).",
        )
    elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
        yield from _assignment_findings(node, s)
    elif isinstance(node, ast.Call):
        if (found := _container_write(node, s)) is not None:
            yield found
        yield from _call_findings(node, s)
    elif isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.MatMult):
            yield _torch_op(s, node, "`@` (matrix multiply)")
        elif _is_tensor(s, node.left) or _is_tensor(s, node.right):
            yield _torch_op(s, node, f"tensor arithmetic `{_short(node)}`")
    elif isinstance(node, ast.UnaryOp) and not isinstance(node.op, ast.Not):
        if _is_tensor(s, node.operand):
            yield _torch_op(s, node, f"tensor arithmetic `{_short(node)}`")
    elif isinstance(node, ast.Compare):
        ops_compute = all(not isinstance(o, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for o in node.ops)
        if ops_compute and any(_is_tensor(s, e) for e in [node.left, *node.comparators]):
            yield _torch_op(s, node, f"tensor comparison `{_short(node)}`")
        if not ops_compute and any(_uses_identity(e) for e in [node.left, *node.comparators]):
            yield Finding(
                "static.output_cache",
                node,
                "membership test keyed by an input's identity/address: "
                "results cached per input would be returned without computing.",
            )
    elif isinstance(node, ast.Subscript) and _uses_identity(node.slice):
        yield Finding(
            "static.output_cache",
            node,
            "lookup keyed by `id(...)`/`data_ptr()`: results cached per "
            "input address would be returned without computing.",
        )
    elif isinstance(node, ast.Name) and node.id in s.names.reference_names and isinstance(node.ctx, ast.Load):
        yield Finding(
            "static.holds_reference_model",
            node,
            f"forward code uses `{node.id}`, the reference: the candidate would run the reference.",
        )
    elif isinstance(node, ast.Attribute):
        d = dotted(node, s.names.aliases)
        if d and d.rsplit(".", 1)[-1] in _LOW_PRECISION and d.startswith("torch."):
            yield Finding(
                "static.precision_downgrade",
                node,
                f"`{d}` in forward: computing in reduced precision for a float32 reference passes the "
                "tolerance while doing less work than asked.",
                warning=True,
            )
        elif d and id(node) not in s.called and id(node) not in s.inner and is_compute_ref(d):
            yield _torch_op(s, node, f"`{d}` passed around as a function (`f = torch.relu; f(x)`)")


def _assignment_findings(node: ast.Assign | ast.AugAssign | ast.AnnAssign, s: _Scope) -> Iterator[Finding]:
    """In-place tensor arithmetic, and stores into `self.*` (outside `__init__`) or into module-level
    containers."""
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    if isinstance(node, ast.AugAssign) and (_is_tensor(s, node.target) or _is_tensor(s, node.value)):
        yield _torch_op(s, node, f"in-place tensor arithmetic `{_short(node)}`")
    value = node.value
    is_lazy_build = isinstance(value, ast.Call) and callee_name(value.func) == "load_inline"
    for t in targets:
        base = t.value if isinstance(t, ast.Subscript) else t
        attr = self_attr(base)
        if attr is not None and s.fn.name != "__init__" and not is_lazy_build:
            yield Finding(
                "static.output_cache",
                t,
                f"forward code stores `self.{attr}`: state kept across calls lets a later call return a "
                "stored result. Allocate buffers in `__init__`; compute every output in the call.",
            )
        elif isinstance(base, ast.Name) and isinstance(t, ast.Subscript) and base.id in s.module_vars:
            yield Finding(
                "static.output_cache",
                t,
                f"forward code writes into module-level `{base.id}`: a module-level cache returns stored "
                "outputs instead of computing.",
            )


def _container_write(node: ast.Call, s: _Scope) -> Finding | None:
    """`static.output_cache`: a mutating method (`append`, `update` …) of a `self.*` container
    (outside `__init__`) or of a module-level one."""
    func = node.func
    if not isinstance(func, ast.Attribute) or func.attr not in _MUTATORS:
        return None
    recv = func.value
    owner = (
        f"self.{self_attr(recv)}"
        if self_attr(recv) and s.fn.name != "__init__"
        else (recv.id if isinstance(recv, ast.Name) and recv.id in s.module_vars else None)
    )
    if owner is None:
        return None
    return Finding(
        "static.output_cache",
        node,
        f"forward code calls `{owner}.{func.attr}(...)`: a container kept across calls can hold "
        "outputs that later calls return without computing.",
    )


def _call_findings(node: ast.Call, s: _Scope) -> Iterator[Finding]:
    """A call that is not a kernel launch: host round trips, identity keys, builtins and `operator`
    on tensors, torch functions, layers and reference members, reduced precision, compute methods."""
    func = node.func
    if _is_kernel_call(node, s.names, s.local):
        return
    if (host := _host_transfer(node, s)) is not None:
        yield Finding(
            "static.host_compute",
            node,
            f"{host} in ModelNew.forward: whatever computes on the host copy (NumPy, Python) is not your "
            "CUDA kernel, and the round trip is not what the speedup should measure. Keep the data on "
            "the GPU and compute in the kernel.",
            warning=s.level is Strictness.LENIENT,
        )
        return
    name = callee_name(func)
    if name in IDENTITY_FUNCS and isinstance(func, ast.Name):
        yield Finding(
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
            _is_tensor(s, a)
            or (isinstance(a, (ast.List, ast.Tuple)) and any(_is_tensor(s, i) for i in a.elts))
            for a in node.args
        )  # `sum([x, y])` adds the tensors
    ):
        yield _torch_op(s, node, f"`{func.id}(...)` on a tensor")
        return
    if isinstance(func, ast.Name) and func.id in s.names.reference_names:
        return  # reported by the Name visit
    d = dotted(func, s.names.aliases)
    if d is not None:
        if d.startswith("torch."):
            if (found := _torch_call(node, d, s)) is not None:
                yield found
        elif d.startswith("operator.") and any(_is_tensor(s, a) for a in node.args):
            yield _torch_op(s, node, f"`{d}(...)` on a tensor")
        return
    if not isinstance(func, ast.Attribute) and s.names.is_torch_callable(func, s.local):
        yield _torch_op(
            s, node, f"`{_short(func)}(...)` (a torch.nn layer or torch function taken from a container)"
        )
        return
    attr, kind = _member(func, s)
    if attr is not None:
        if kind == "torch":
            yield _torch_op(s, node, f"`self.{attr}(...)` (a torch.nn layer or torch function)")
        elif kind == "reference":
            yield Finding(
                "static.holds_reference_model",
                node,
                f"`self.{attr}` is an instance of the reference `Model`; calling it runs the reference.",
            )
        return
    if isinstance(func, ast.Attribute):
        if func.attr in ("half", "bfloat16"):
            yield Finding(
                "static.precision_downgrade",
                node,
                f"`.{func.attr}()` converts to reduced precision: "
                "for a float32 reference it passes the tolerance with less work.",
                warning=True,
            )
        if tensor_method_is_compute(func.attr, s.level):
            yield _torch_op(s, node, f"`.{func.attr}(...)`")


def _member(func: ast.expr, s: _Scope) -> tuple[str | None, str | None]:
    """`self.a`, `getattr(self, "a")`, `type(self).a`, `self.__class__.a`, `<InFileClass>.a`: the
    attribute name and what it holds (`Bindings` kinds of that class), else (None, None)."""
    self_kinds = s.local.self_kinds
    attr = self_attr(func)
    if attr is not None:
        return attr, self_kinds.get(attr)
    if (
        isinstance(func, ast.Call)
        and callee_name(func.func) == "getattr"
        and len(func.args) >= 2
        and isinstance(func.args[0], ast.Name)
        and func.args[0].id == "self"
    ):
        key = func.args[1]
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            return key.value, self_kinds.get(key.value)
        # a computed name: any attribute it can name (all of them, or those its prefix allows)
        prefix = literal_prefix(key) if isinstance(key, ast.JoinedStr) else ""
        kinds = {k for name, k in self_kinds.items() if name.startswith(prefix)}
        return ast.unparse(key), "torch" if "torch" in kinds else None
    if not isinstance(func, ast.Attribute):
        return None, None
    owner = func.value
    classes = s.names.index.classes
    if isinstance(owner, ast.Name) and owner.id in classes:
        return func.attr, s.names.kinds_for(classes[owner.id]).get(func.attr)
    if (isinstance(owner, ast.Call) and callee_name(owner.func) == "type") or (
        isinstance(owner, ast.Attribute) and owner.attr == "__class__" and self_attr(owner) is not None
    ):
        return func.attr, self_kinds.get(func.attr)
    return None, None


def _host_transfer(node: ast.Call, s: _Scope) -> str | None:
    """What moves data to the host in this call (`.cpu()`, `.to("cpu")`, `device="cpu"`, NumPy on a
    tensor), or None."""
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr in _HOST_METHODS:
        return f"`.{func.attr}()` copies the tensor to the host"
    devices = [k.value for k in node.keywords if k.arg == "device"]
    if isinstance(func, ast.Attribute) and func.attr == "to" and node.args:
        devices.append(node.args[0])
    if any(_is_cpu_device(e, s.names) for e in devices):
        return f"`{_short(node)}` puts data on the host"
    d = dotted(func, s.names.aliases) or ""
    if d.startswith(("numpy.", "scipy.")) and any(_is_tensor(s, a) for a in node.args):
        return f"`{d}(...)` on a tensor runs NumPy on the host"
    return None


def _is_cpu_device(e: ast.expr, names: Bindings) -> bool:
    """`"cpu"`, `"cpu:0"`, `torch.device("cpu")`, or a module constant holding one."""
    if isinstance(e, ast.Call) and (dotted(e.func, names.aliases) or "").endswith("device") and e.args:
        e = e.args[0]
    value = names.constants.value(e)
    return isinstance(value, str) and value.split(":")[0] == "cpu"


def _torch_call(node: ast.Call, d: str, s: _Scope) -> Finding | None:
    """`static.torch_op_in_forward` for a call of the torch function `d` outside the glue policy."""
    last = d.rsplit(".", 1)[-1]
    if d.rsplit(".", 1)[0] in TENSOR_CLASSES:
        # `torch.Tensor.contiguous(x)` is `x.contiguous()`: the method's glue rule decides; a name
        # that is neither glue nor a known compute method is flagged here (an unbound method of the
        # tensor class is rarely glue under another name)
        glue = last in TENSOR_GLUE_ALWAYS or last in TENSOR_GLUE_DEFAULT
        if glue and not tensor_method_is_compute(last, s.level):
            return None
        return _torch_op(s, node, f"`{d}(...)`")
    if d.startswith("torch.cuda."):
        # device and stream plumbing, no compute (streams are `static.stream_or_thread`); `d` is
        # canonical, so `torch.cuda.torch.relu` arrives here as `torch.relu`
        if last in TORCH_CUDA_PLUMBING or last in STREAM_APIS or torch_function_allowed(last, s.level):
            return None
        return _torch_op(s, node, f"`{d}(...)` (not device or stream plumbing)")
    if d.startswith("torch.nn.") and not d.startswith(TORCH_SUBMODULES_COMPUTE):
        if last not in NN_NON_COMPUTE:
            return _torch_op(s, node, f"`{d}` (a torch.nn layer built in forward)")
        return None
    if d.startswith(TORCH_SUBMODULES_COMPUTE) or not torch_function_allowed(last, s.level):
        return _torch_op(s, node, f"`{d}(...)`")
    return None


def _branch_fallback(node: ast.If | ast.IfExp, s: _Scope) -> Finding | None:
    """`static.fallback_to_reference`: a branch that computes with PyTorch (or the reference) while
    another path calls the kernel, or the other way round."""
    body = node.body if isinstance(node.body, list) else [node.body]
    orelse = node.orelse if isinstance(node.orelse, list) else [node.orelse]
    inside_if = {id(n) for n in ast.walk(node)}
    rest = [n for n in ast.walk(s.fn) if id(n) not in inside_if]  # the function outside this `if`
    for branch, other in ((body, orelse), (orelse, body)):
        torch_here = _computes_with_torch(branch, s)
        kernel_here = _calls_kernel(branch, s)
        torch_elsewhere = _computes_with_torch(other, s) or _computes_with_torch(rest, s)
        kernel_elsewhere = _calls_kernel(other, s) or _calls_kernel(rest, s)
        if (torch_here and not kernel_here and kernel_elsewhere) or (
            kernel_here and not torch_here and torch_elsewhere
        ):
            return Finding(
                "static.fallback_to_reference",
                node,
                "a branch computes with PyTorch (or the reference) while another path calls the kernel: "
                "the measured path may not be the kernel. Remove the fallback branch.",
            )
    return None


def _computes_with_torch(stmts: Iterable[ast.AST], s: _Scope) -> bool:
    """Whether `stmts` use the reference or call torch compute (functions, compute methods, torch
    members of `self`)."""
    names = s.names
    for st in stmts:
        for n in ast.walk(st):
            if isinstance(n, ast.Name) and n.id in names.reference_names:
                return True
            if isinstance(n, ast.Call) and not _is_kernel_call(n, names, s.local):
                d = dotted(n.func, names.aliases)
                if d and d.startswith("torch.") and not torch_function_allowed(d.rsplit(".", 1)[-1], s.level):
                    return True
                if isinstance(n.func, ast.Attribute) and d is None and n.func.attr in COMPUTE_METHODS:
                    return True
                if s.local.self_kinds.get(self_attr(n.func) or "") in ("torch", "reference"):
                    return True
    return False


def _calls_kernel(stmts: Iterable[ast.AST], s: _Scope) -> bool:
    """Whether `stmts` call the extension."""
    return any(
        isinstance(n, ast.Call) and _is_kernel_call(n, s.names, s.local) for st in stmts for n in ast.walk(st)
    )


def _assigned_forward(cls: ast.ClassDef) -> Iterator[Finding]:
    """`static.torch_op_in_forward`: `forward = torch.relu` and friends at class level."""
    for stmt in cls.body:
        if isinstance(stmt, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id in ("forward", "__call__") for t in stmt.targets
        ):
            yield Finding(
                "static.torch_op_in_forward",
                stmt,
                "`forward` is assigned instead of defined: the callable it names is not the "
                "candidate's kernel code. Define `def forward(self, ...)` that launches the kernel.",
            )


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
