"""What `ModelNew.forward` (and everything it calls) does, judged by the glue policy — AST only.

`analyze_forward()` walks every function that can run when `ModelNew` is called
(`static/reach.py`: the call-protocol methods of `ModelNew` and its in-file bases, its metaclass,
the methods, helper classes, functions and lambdas they reach), each with the `self` of its own
class and its own local names only (another function's `op = ext.f` does not make its `op` a
kernel), and reports:

- `static.torch_op_in_forward` — PyTorch compute (`torch.*`, `F.*`, also through module-level
  aliases, `nn` layers, also from containers and loop variables, tensor compute methods) outside
  the glue allow-list; operators (`x * y`, `x > 0`, `x @ w`, `+=`), `sum`/`max`/`min`/`abs`/`pow`,
  `operator.*` (also `getattr(operator, "mul")`), `math.prod`, `itertools.accumulate` and
  `statistics.*` on any value not provably plain, `operator.add` & co. passed as values
  (`reduce(operator.add, xs)`), and `abs`/`max` … handed to a call with such values (`map(abs, xs)`);
- `static.host_compute` — data moved to the host (`.cpu()`, `.numpy()`, `.tolist()`,
  `.to("cpu")`, `device="cpu"`, NumPy on a tensor);
- `static.fallback_to_reference` — `try` in forward code, or a branch that computes with PyTorch
  while another path calls the kernel;
- `static.output_cache` — state kept across calls (`global` other than a lazy `load_inline`,
  writes to `self.*`/module containers, `id(x)`/`data_ptr()` lookups, `lru_cache`);
- `static.precision_downgrade` (warning) — `.half()`, `.bfloat16()`, `torch.float16` …;
- `static.monkey_patch` — a store into the extension (`ext.f = g`, `self.ext.f = g`) or a rebinding
  of its name to anything but an extension: calls through it would still read as launches;
- which exposed extension functions forward calls (for `static.kernel_never_launched`), under any
  name `static/bindings.py` can follow.

Operators are judged by what their operands provably are (`NonTensors`), and that fails closed: a
value is possibly a tensor unless it is built from literals, metadata (`.numel()`, `.size()`,
`.shape`, `.dim()`, `.stride()`, `.dtype` …), `len()`/`int()`/`float()`, `math`, `torch.cuda`
queries, arithmetic of such values, names bound only to them (assignment, unpacking, `for` and
comprehension targets, `:=`), plain module constants, `self.<attr>`s that every store sets to such a
value (`ModelNew.__init__`'s parameters are the harness's init inputs), parameters every call site
passes such values, and results of the file's own functions that return only such values. So
forward's parameters (annotated or not), lambda parameters, container elements (`[x][0]`) and
results of unknown calls are possibly tensors. The messages of operator findings say so. A
separate, positive inference (`_tensor_names`) only picks the wording ("tensor arithmetic") and
NumPy-on-a-tensor. Not covered: containers filled at run time, calls through `getattr` (flagged
separately as dynamic code), classes and functions of other files, an in-file object whose method
is named like tensor metadata (`h.size()` is taken to be plain) unless an in-file class defines that
name, and files whose facts do not settle within 64 rounds (then nothing is proven plain).
"""

from __future__ import annotations

import ast
import builtins
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
    EMPTY_FACTORIES,
    FILLING_FACTORIES,
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
from cudice.verifier.static.reach import FORWARD_ROOTS, Function, Reached, reachable

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
    facts: NonTensors  # what is provably not a tensor, file-wide
    plain: _Env  # and in `fn`


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
    facts = NonTensors(names)
    for r in reached:
        scope = _scope(names, level, module_vars, r, facts)
        report.findings += _function_findings(scope)
        report.kernel_calls |= _kernel_calls(scope)
    report.findings += _assigned_forward(names.cls)
    report.findings += _extension_replaced(names)
    return report


def _extension_replaced(names: Bindings) -> Iterator[Finding]:
    """`static.monkey_patch`: a store into the extension (`ext.relu_out = f`, `setattr(ext, ...)`,
    `self.ext.f = g`) or a rebinding of its name to anything but an extension (`ext =
    SimpleNamespace(relu_out=f)` at module level or under `global ext`): calls through the name would
    still read as kernel launches while running the replacement (which `static/reach.py` follows and
    judges as forward code). A function's own local `ext` is not the extension."""
    owners = {id(n): c for c in names.index.classes.values() for n in c.body}
    scopes: list[tuple[list[ast.AST], LocalNames, frozenset[str], frozenset[str]]] = [
        (list(_module_nodes(names.tree)), LocalNames({}), frozenset(), frozenset(names.extensions))
    ]
    for fn in (n for n in ast.walk(names.tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        owner = owners.get(id(fn))
        declared = frozenset(x for n in _own_nodes(fn) if isinstance(n, ast.Global) for x in n.names)
        local = LocalNames(names.kinds_for(owner) if owner is not None else {})
        shadowed = frozenset(_bound_names(fn)) - declared
        scopes.append((list(_own_nodes(fn)), local, shadowed, declared & names.extensions))
    for nodes, local, shadowed, rebindable in scopes:
        for node in nodes:
            targets: list[ast.expr] = []
            if isinstance(node, (ast.Assign, ast.Delete)):
                targets = list(node.targets)
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            elif (
                isinstance(node, ast.Call)
                and callee_name(node.func) in ("setattr", "delattr")
                and node.args
                and _extension_here(node.args[0], names, local, shadowed)
            ):
                yield _ext_patch(node, ast.unparse(node.args[0]))
            for t in (x for target in targets for x in ast.walk(target)):
                if isinstance(t, (ast.Attribute, ast.Subscript)) and _extension_here(
                    t.value, names, local, shadowed
                ):
                    yield _ext_patch(t, ast.unparse(t.value))
                elif (
                    isinstance(t, ast.Name)
                    and isinstance(t.ctx, ast.Store)
                    and t.id in rebindable
                    and isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign))
                    and not _builds_extension(node.value, names, local)
                ):
                    yield _ext_patch(t, t.id)


def _extension_here(e: ast.expr, names: Bindings, local: LocalNames, shadowed: AbstractSet[str]) -> bool:
    """`e` holds the extension where it is read (a function's own local of that name does not)."""
    return not (isinstance(e, ast.Name) and e.id in shadowed) and names.is_extension(e, local)


def _module_nodes(tree: ast.Module) -> Iterator[ast.AST]:
    """The nodes run at module level (class bodies included, function and lambda bodies not)."""
    todo: list[ast.AST] = list(tree.body)
    while todo:
        n = todo.pop()
        yield n
        if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            todo += list(ast.iter_child_nodes(n))


def _builds_extension(value: ast.expr | None, names: Bindings, local: LocalNames) -> bool:
    """`load_inline(...)`, another name of the extension, `ext.ReluOp()`, or `None` (a lazy loader's
    placeholder)."""
    if value is None or (isinstance(value, ast.Constant) and value.value is None):
        return True
    if isinstance(value, ast.Call) and "load_inline" in (
        callee_name(value.func),
        (dotted(value.func, names.aliases) or "").rsplit(".", 1)[-1],
    ):
        return True
    return names.is_extension(value, local) or names.builds_extension_object(value, local)


def _ext_patch(node: ast.AST, ext: str) -> Finding:
    return Finding(
        "static.monkey_patch",
        node,
        f"`{_short(node)}` replaces the compiled extension `{ext}` (or one of its functions): calls "
        "through it would count as kernel launches while running something else. Bind the module "
        "`load_inline` returns once and call its functions unchanged.",
    )


def _scope(
    names: Bindings, level: Strictness, module_vars: frozenset[str], r: Reached, facts: NonTensors
) -> _Scope:
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
        facts,
        facts.env(fn, r.owner),
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
    """`static.output_cache`: `@lru_cache`, `@cache`, `@cached_property` on the function, unless the
    cache cannot hold an output: the function takes no argument but `self`/`cls` (a loader that
    builds the extension once), or every argument is provably a plain number (`NonTensors`, every
    call site) and so is its result (a launch configuration from sizes)."""
    fn = s.fn
    for deco in fn.decorator_list:
        d = dotted(deco.func if isinstance(deco, ast.Call) else deco, s.names.aliases) or ""
        if d.rsplit(".", 1)[-1] in ("lru_cache", "cache", "cached_property") and not _cache_holds_no_output(
            s
        ):
            yield Finding(
                "static.output_cache",
                deco,
                f"`@{d}` on `{fn.name}` returns stored results for repeated inputs instead of computing.",
            )


def _cache_holds_no_output(s: _Scope) -> bool:
    """Whether a cache on `s.fn` cannot return a stored output: nothing to key on but `self`/`cls`
    (and no `*args`/`**kwargs`), or plain numbers in and out."""
    fn = s.fn
    if fn.args.vararg or fn.args.kwarg:
        return False
    args = [a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]]
    keyed = [a for a in args if a not in ("self", "cls")]
    if not keyed:
        return True
    plain = s.facts.params.get(id(fn), frozenset())
    return set(keyed) <= plain and id(fn) in s.facts.returns


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


def _maybe_tensor(s: _Scope, e: ast.expr) -> bool:
    """Whether `e` may be a tensor (or hold one): anything `NonTensors` cannot prove plain."""
    return not s.facts.plain(e, s.plain)


def _is_kernel_call(call: ast.Call, names: Bindings, local: LocalNames) -> bool:
    """A call of an extension function, under any name `Bindings` follows."""
    f = call.func
    if names.is_kernel_ref(f, local):
        return True
    # `ext.anything(...)`: the extension module's own attribute, exposed or not
    return isinstance(f, ast.Attribute) and names.is_extension(f.value, local)


def _torch_op(s: _Scope, node: ast.AST, what: str, hint: str = "") -> Finding:
    """`static.torch_op_in_forward` for `what` (a warning in `lenient`), `hint` appended."""
    return Finding(
        "static.torch_op_in_forward",
        node,
        f"{what} runs a PyTorch kernel inside ModelNew.forward: the speedup would measure PyTorch, not "
        "your CUDA kernel. Do this computation in the kernel (glue such as `torch.empty_like`, "
        f"`.view`, `.contiguous` is allowed; see docs/anticheat.md).{hint}",
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
        elif _maybe_tensor(s, node.left) or _maybe_tensor(s, node.right):
            yield _operator_finding(s, node, "arithmetic")
    elif isinstance(node, ast.UnaryOp) and not isinstance(node.op, ast.Not):
        if _maybe_tensor(s, node.operand):
            yield _operator_finding(s, node, "arithmetic")
    elif isinstance(node, ast.Compare):
        ops_compute = all(not isinstance(o, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for o in node.ops)
        if ops_compute and any(_maybe_tensor(s, e) for e in [node.left, *node.comparators]):
            yield _operator_finding(s, node, "comparison")
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
        elif (found := _operator_value(node, s)) is not None:
            yield found
        elif (
            isinstance(node.ctx, ast.Load)
            and id(node) not in s.called
            and id(node) not in s.inner
            and tensor_method_is_compute(node.attr, s.level)
            and _is_tensor(s, node.value)
        ):  # `f = x.clamp_min; f(0)`, `[x.relu][0]()`: the bound method is called elsewhere
            yield _torch_op(s, node, f"`{_short(node)}` (a tensor's compute method taken as a value)")
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
        if (found := _operator_value(node, s)) is not None:
            yield found


def _getattr_path(e: ast.expr, s: _Scope) -> str | None:
    """`getattr(operator, "mul")` → `operator.mul`: a module's attribute fetched by a fixed name."""
    if not (isinstance(e, ast.Call) and callee_name(e.func) == "getattr" and len(e.args) >= 2):
        return None
    base, key = dotted(e.args[0], s.names.aliases), e.args[1]
    if base is None or not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
        return None
    return f"{base}.{key.value}"


def _arithmetic_passed(call: ast.Call, s: _Scope) -> str | None:
    """A builtin or `operator` arithmetic function handed to `call` as an argument (`map(abs, xs)`,
    `reduce(max, xs)`): `call` applies it to the other arguments."""
    for a in [*call.args, *(k.value for k in call.keywords)]:
        if (
            isinstance(a, ast.Name)
            and a.id in _ARITHMETIC_BUILTINS
            and a.id not in s.plain.bound
            and a.id not in s.names.module_funcs
        ):
            return a.id
        d = dotted(a, s.names.aliases) or _getattr_path(a, s) or ""
        if d.startswith("operator.") and d.rsplit(".", 1)[-1] not in _OPERATOR_PLAIN:
            return d
    return None


def _operator_value(node: ast.Name | ast.Attribute, s: _Scope) -> Finding | None:
    """`operator.add` (or `from operator import mul`) passed as a value (`reduce(operator.add, xs)`,
    `map(operator.mul, a, b)`): whoever calls it applies the operator to values the checks never see,
    tensors included."""
    if id(node) in s.called or id(node) in s.inner or node_id_bound(node, s):
        return None
    d = dotted(node, s.names.aliases) or ""
    if not d.startswith("operator.") or d.rsplit(".", 1)[-1] in _OPERATOR_PLAIN:
        return None
    if _applied_to_plain(node, s):
        return None
    return _torch_op(s, node, f"`{d}` passed as a function (its caller applies it to tensors)")


_APPLIERS = frozenset({"functools.reduce", "itertools.accumulate", "map", "reduce", "accumulate"})


def _applied_to_plain(fn_arg: ast.expr, s: _Scope) -> bool:
    """Whether `fn_arg` is handed to `functools.reduce`, `itertools.accumulate` or `map` together
    with provably plain values only (`reduce(operator.mul, x.shape, 1)`: a product of sizes)."""
    for call in ast.walk(s.fn):
        if not isinstance(call, ast.Call) or not any(a is fn_arg for a in call.args):
            continue
        name = dotted(call.func, s.names.aliases) or callee_name(call.func) or ""
        if name not in _APPLIERS or call.keywords:
            return False
        return all(s.facts.plain(a, s.plain) for a in call.args if a is not fn_arg)
    return False


def node_id_bound(node: ast.AST, s: _Scope) -> bool:
    return isinstance(node, ast.Name) and node.id in s.plain.bound


def _operator_finding(s: _Scope, node: ast.AST, kind: str) -> Finding:
    """An operator on a value inferred to be a tensor, or on one the checks cannot prove is a plain
    number (which says how launch arithmetic stays recognisable)."""
    if _is_tensor_operator(s, node):
        return _torch_op(s, node, f"tensor {kind} `{_short(node)}`")
    return _torch_op(
        s,
        node,
        f"{kind} `{_short(node)}` on a value not provably a plain number (a forward argument, a "
        "container element, an unannotated parameter, a call result: it may be a tensor)",
        " Launch arithmetic is recognised when its operands come from literals, `len()`, `int()`, "
        "`.numel()`, `.size()`, `.shape`, `.dim()`, `.stride()`, or names, parameters and "
        "`self.<attr>`s only ever bound to such values.",
    )


def _is_tensor_operator(s: _Scope, node: ast.AST) -> bool:
    parts: list[ast.expr] = []
    if isinstance(node, ast.BinOp):
        parts = [node.left, node.right]
    elif isinstance(node, ast.UnaryOp):
        parts = [node.operand]
    elif isinstance(node, ast.Compare):
        parts = [node.left, *node.comparators]
    elif isinstance(node, ast.AugAssign):
        parts = [node.target, node.value]
    return any(_is_tensor(s, p) for p in parts)


def _assignment_findings(node: ast.Assign | ast.AugAssign | ast.AnnAssign, s: _Scope) -> Iterator[Finding]:
    """In-place tensor arithmetic, and stores into `self.*` (outside `__init__`) or into module-level
    containers."""
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    if isinstance(node, ast.AugAssign) and (_maybe_tensor(s, node.target) or _maybe_tensor(s, node.value)):
        yield _operator_finding(s, node, "in-place arithmetic")
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
        elif (
            isinstance(base, ast.Name)
            and isinstance(t, ast.Subscript)
            and base.id in s.module_vars
            and not is_lazy_build  # `_BUILT[tag] = load_inline(...)`: a build kept, not an output
        ):
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
    if (isinstance(func, ast.Attribute) and func.attr == "__init__" and s.fn.name != "__init__") or (
        isinstance(func, ast.Call) and callee_name(func.func) == "type"
    ):
        # a constructor run again at call time (`self.__init__(x)`, `H.__init__(obj, x)`), or a class
        # made or fetched by `type(...)` and called: code the checks would read as load-time only
        yield Finding(
            "static.monkey_patch",
            node,
            f"`{_short(node)}` runs a constructor at call time: what it computes is not what the "
            "checks read as the module's set-up. Build everything in `__init__` and compute in forward.",
        )
        return
    host = _host_transfer(node, s)
    if (
        host is None
        and isinstance(func, ast.Attribute)
        and func.attr in ("item", "tolist")
        and _in_loop(node, s)
    ):
        host = f"`.{func.attr}()` in a loop reads the tensor element by element to the host"
    if host is not None:
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
    args = [*node.args, *(k.value for k in node.keywords)]
    maybe = [a for a in args if _maybe_tensor(s, a)]
    if (
        isinstance(func, ast.Name)
        and func.id in _ARITHMETIC_BUILTINS
        and func.id not in s.plain.bound
        and func.id not in s.names.module_funcs
        and maybe
    ):  # `sum([x, y])`, `sum(c for c in x.unbind(1))` add the tensors
        yield _torch_op(s, node, f"`{func.id}(...)` on a value that may be (or hold) a tensor")
        return
    fetched = _getattr_path(node, s) or ""
    if fetched.startswith("operator.") and id(node) not in s.called:
        if fetched.rsplit(".", 1)[-1] not in _OPERATOR_PLAIN:
            yield _torch_op(s, node, f"`{fetched}` passed as a function (its caller applies it to tensors)")
    if maybe and (passed := _arithmetic_passed(node, s)) is not None:
        yield _torch_op(s, node, f"`{passed}` passed to `{_short(func)}` with values that may be tensors")
        return
    if isinstance(func, ast.Name) and func.id in s.names.reference_names:
        return  # reported by the Name visit
    d = dotted(func, s.names.aliases) or _getattr_path(func, s)
    if d is not None:
        if d.startswith("torch."):
            if (found := _torch_call(node, d, s)) is not None:
                yield found
        elif (d.startswith(("operator.", "statistics.")) or d in _REDUCERS) and maybe:
            yield _torch_op(s, node, f"`{d}(...)` on a value that may be (or hold) a tensor")
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


def _in_loop(node: ast.AST, s: _Scope) -> bool:
    """Whether `node` is inside a `for`/`while` loop or a comprehension of `s.fn`."""
    for loop in ast.walk(s.fn):
        if isinstance(
            loop,
            (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp),
        ):
            if any(n is node for n in ast.walk(loop)):
                return True
    return False


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
    if d.startswith(("numpy.", "scipy.")) and any(_maybe_tensor(s, a) for a in node.args):
        return f"`{d}(...)` on a value that may be a tensor runs NumPy on the host"
    if d in _HOST_LOOPS:
        return f"`{d}(...)` makes a function that loops over an array in Python on the host"
    if isinstance(func, ast.Attribute) and func.attr == "copy_" and _host_factory(func.value, s):
        return f"`{_short(node)}` copies into a tensor made without `device=`, on the host"
    return None


# NumPy's Python-level loops: what they build computes element by element on the host.
_HOST_LOOPS = frozenset(
    {
        "numpy.vectorize",
        "numpy.frompyfunc",
        "numpy.apply_along_axis",
        "numpy.apply_over_axes",
        "numpy.piecewise",
    }
)


def _host_factory(e: ast.expr, s: _Scope) -> bool:
    """A torch factory call without `device=` (a CPU tensor), or a name bound to one in `s.fn`."""
    if isinstance(e, ast.Name):
        values = [
            n.value
            for n in ast.walk(s.fn)
            if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == e.id for t in n.targets)
        ]
        return any(_host_factory(v, s) for v in values)
    if not isinstance(e, ast.Call):
        return False
    d = dotted(e.func, s.names.aliases) or ""
    last = d.rsplit(".", 1)[-1]
    return (
        d.startswith("torch.")
        and last in (*EMPTY_FACTORIES, *FILLING_FACTORIES, "tensor", "arange", "rand", "randn")
        and not last.endswith("_like")
        and not any(k.arg == "device" for k in e.keywords)
    )


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


# -- what is provably not a tensor ------------------------------------------------------------------
# Builtins whose result is never a tensor, whatever they are given.
_PLAIN_BUILTINS = frozenset(
    {
        "len",
        "int",
        "float",
        "bool",
        "str",
        "repr",
        "range",
        "isinstance",
        "issubclass",
        "hasattr",
        "callable",
        "id",
        "hash",
        "format",
        "ord",
        "chr",
        "print",
        "bin",
        "hex",
        "oct",
    }
)
# Attributes every class and function has that hold its name (strings).
_NAME_ATTRS = frozenset({"__name__", "__qualname__", "__module__"})
# torch functions (by last name) that return no tensor.
_TORCH_PLAIN = frozenset(
    {
        "numel",
        "is_tensor",
        "is_floating_point",
        "is_complex",
        "Size",
        "device",
        "dtype",
        "finfo",
        "iinfo",
        "get_default_dtype",
        "is_grad_enabled",
        "is_inference_mode_enabled",
        "result_type",
        "promote_types",
        "get_device",
    }
)
# Tensor methods whose result is no tensor (metadata, host values).
_PLAIN_METHODS = _NON_TENSOR_METHODS | {"item"}
# Attributes of `nn.Module` that are plain values.
_MODULE_PLAIN_ATTRS = frozenset({"training"})
_PLAIN_DECORATORS = frozenset({"staticmethod", "classmethod"})
# Decorators that pass the arguments through and return the function's result (or a stored one):
# a call of the decorated function still hands its parameters the call site's values.
_CACHING_DECORATORS = frozenset({"lru_cache", "cache"})
# Hyperparameters an `nn` layer base stores on `self` (plain values, never stored by the file).
_LAYER_CONFIG_ATTRS = frozenset(
    {
        "in_features",
        "out_features",
        "in_channels",
        "out_channels",
        "kernel_size",
        "stride",
        "padding",
        "dilation",
        "groups",
        "output_padding",
        "padding_mode",
        "eps",
        "momentum",
        "num_features",
        "normalized_shape",
        "affine",
        "track_running_stats",
        "elementwise_affine",
        "negative_slope",
        "inplace",
        "dim",
        "num_heads",
        "embed_dim",
        "head_dim",
        "batch_first",
        "hidden_size",
        "input_size",
        "num_layers",
        "bidirectional",
        "num_embeddings",
        "embedding_dim",
        "padding_idx",
        "p",
        "approximate",
        "beta",
        "threshold",
        "lambd",
        "alpha",
        "training",
    }
)
# Tensor attributes that are tensors.
_TENSOR_ATTRS = frozenset({"T", "mT", "H", "mH", "data", "grad", "real", "imag"})
_TORCH_DTYPES = frozenset(
    {
        "float32",
        "float",
        "float16",
        "half",
        "bfloat16",
        "float64",
        "double",
        "int8",
        "int16",
        "int32",
        "int64",
        "long",
        "int",
        "short",
        "uint8",
        "bool",
        "complex64",
        "complex128",
        "cfloat",
        "cdouble",
        "channels_last",
        "contiguous_format",
        "strided",
        "preserve_format",
    }
)
# Builtins that add, compare or otherwise compute on what they are given (tensors included).
_ARITHMETIC_BUILTINS = frozenset({"abs", "sum", "pow", "max", "min", "round", "divmod"})
# Library functions that reduce what they are given with arithmetic (`math.prod(x.unbind(0))`).
_REDUCERS = frozenset({"math.prod", "math.fsum", "math.sumprod", "itertools.accumulate"})
# `operator` functions that apply no arithmetic when passed around.
_OPERATOR_PLAIN = frozenset({"itemgetter", "index", "length_hint", "truth", "not_", "is_", "is_not"})


@dataclass(frozen=True, slots=True)
class _Env:
    """One function as the non-tensor inference reads it: its locally bound names, which of them are
    provably not tensors, and the class whose `self` it sees."""

    bound: frozenset[str]
    plain: frozenset[str]
    owner: ast.ClassDef | None


class NonTensors:
    """Which values of the file are provably not tensors, so that operators on them are no PyTorch
    compute. It fails closed: a value is possibly a tensor unless it is built from literals, `len()`,
    `int()`/`float()`, tensor metadata (`.numel()`, `.size()`, `.dim()`, `.stride()`, `.shape`,
    `.dtype` …), `math`, arithmetic of such values, names bound only to such values (assignments,
    unpacking, `for`/comprehension targets, `:=`), module constants, `self.<attr>`s stored only such
    values, parameters of the file's own functions that every call site passes such values, and
    results of the file's own functions that only return such values. Parameters of the methods the
    call protocol enters (`forward`, dunders) and of lambdas are possibly tensors whatever their
    annotation says; `ModelNew.__init__`'s are the harness's init inputs (plain values)."""

    def __init__(self, names: Bindings) -> None:
        self.names = names
        self.index = names.index
        tree = names.tree
        self.functions: list[tuple[Function, ast.ClassDef | None]] = []
        owners = {id(n): c for c in self.index.classes.values() for n in c.body}
        for n in ast.walk(tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions.append((n, owners.get(id(n))))
        self.functions += [(f, None) for f in names.module_funcs.values() if f not in tree.body]  # lambdas
        self.module_bound = _module_names(tree)
        self.module_imports = frozenset(
            (a.asname or a.name).split(".")[0]
            for stmt in tree.body
            if isinstance(stmt, (ast.Import, ast.ImportFrom))
            for a in stmt.names
        )
        # names in-file classes define (methods, class attributes): `h.size()` is not metadata then
        self.members = frozenset(
            name
            for c in self.index.classes.values()
            for stmt in c.body
            for name in (
                [stmt.name]
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef))
                else [n for n, _ in _bindings(stmt)]
            )
        ) | _record_fields(tree)
        # every attribute name the file stores into (`obj.a = v`, `setattr(obj, "a", v)`, `del obj.a`),
        # and those stored on anything but `self` (`b.shape = x`, `f.size = g`; any `setattr`): a
        # metadata name stored so is no proof of a number on any object
        stores = _attribute_stores(tree)
        self.stored_attr_names = frozenset(name for name, _ in stores)
        self.foreign_stored_attrs = frozenset(name for name, on_self in stores if not on_self)
        # the innermost function around each node (closures read their enclosing function's names)
        self.enclosing: dict[int, Function] = {}
        for fn, _ in self.functions:
            for n in ast.walk(fn):
                if n is not fn:
                    self.enclosing[id(n)] = fn
        self.calls = self._call_sites()
        # greatest fixpoint: start from "everything plain" and drop what a binding disproves
        self.module_plain = frozenset(self.module_bound)
        self.params: dict[int, frozenset[str]] = {
            id(fn): frozenset(a.arg for a in _params(fn)) for fn, _ in self.functions
        }
        self.returns: set[int] = {id(fn) for fn, _ in self.functions}
        self.envs: dict[int, _Env] = {}
        self.attrs: dict[int, frozenset[str]] = {
            id(c): self._plain_attrs(c, optimistic=True) for c in self.index.classes.values()
        }
        for _ in range(64):
            previous = {k: v.plain for k, v in self.envs.items()}
            self.envs = {id(fn): self._env(fn, owner) for fn, owner in self.functions}
            settled = previous == {k: v.plain for k, v in self.envs.items()}
            module = self._module_plain() & self.module_plain
            attrs = {k: self._plain_attrs(c) & self.attrs[k] for k, c in _by_id(self.index.classes)}
            params = {
                id(fn): self._plain_params(fn, owner) & self.params[id(fn)] for fn, owner in self.functions
            }
            returns = {id(fn) for fn, _ in self.functions if self._returns_plain(fn)} & self.returns
            if settled and (module, attrs, params, returns) == (
                self.module_plain,
                self.attrs,
                self.params,
                self.returns,
            ):
                break
            self.module_plain, self.attrs, self.params, self.returns = module, attrs, params, returns
        else:  # not settled: nothing is proven
            self.module_plain, self.returns = frozenset(), set()
            self.attrs = {k: _MODULE_PLAIN_ATTRS for k in self.attrs}
            self.params = {k: frozenset() for k in self.params}
            self.envs = {id(fn): self._env(fn, owner) for fn, owner in self.functions}

    # -- the module -------------------------------------------------------------------------------
    def _module_plain(self) -> frozenset[str]:
        """Module names every module-level binding of which is plain (given the current facts)."""
        values: dict[str, list[ast.expr | None]] = {}
        for stmt in self.names.tree.body:
            for name, value in _bindings(stmt):
                values.setdefault(name, []).append(value)
        for fn, _ in self.functions:  # `global N; N = x`, `CACHE["k"] = x` in a function
            local = _bound_names(fn) - {n for g in ast.walk(fn) if isinstance(g, ast.Global) for n in g.names}
            for n in ast.walk(fn):
                changed = list(n.names) if isinstance(n, ast.Global) else []
                changed += [root for root, _ in _mutations(n) if root not in local]
                for name in changed:
                    values.setdefault(name, []).append(None)
        env = _Env(self.module_bound, self.module_plain, None)
        return frozenset(k for k, v in values.items() if all(x is not None and self.plain(x, env) for x in v))

    # -- functions --------------------------------------------------------------------------------
    def _env(self, fn: Function, owner: ast.ClassDef | None) -> _Env:
        """The greatest set of `fn`'s names whose every binding is plain (a loop counter stays plain)."""
        values: dict[str, list[ast.expr | None]] = {}
        params = self.params.get(id(fn), frozenset())
        for a in _params(fn):
            values.setdefault(a.arg, []).append(_PLAIN if a.arg in params else None)
        lambdas = _called_lambdas(fn)
        for node in ast.walk(fn):
            if node is fn:
                continue
            if isinstance(node, ast.Lambda):  # its parameters hold what its calls pass, if all are seen
                for name, value in _lambda_arguments(node, lambdas.get(id(node))):
                    values.setdefault(name, []).append(value)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and id(node) not in self.params:
                for a in _params(node):
                    values.setdefault(a.arg, []).append(None)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                nested = self.params[id(node)]
                for a in _params(node):
                    values.setdefault(a.arg, []).append(_PLAIN if a.arg in nested else None)
            for name, value in _bindings(node):
                values.setdefault(name, []).append(value)
        # a free name of a closure (a nested function, or a lambda `reach` made one) is the enclosing
        # function's: plain only where it is plain there
        inner = fn.body[0].value if fn.name == "<lambda>" and isinstance(fn.body[0], ast.Return) else fn
        around = self.enclosing.get(id(inner))
        if around is not None:
            outer = self.envs.get(id(around))
            for name in outer.bound if outer is not None else _bound_names(around):
                if name not in values:
                    values[name] = [_PLAIN if outer is None or name in outer.plain else None]
        bound = frozenset(values)
        plain = {k for k, v in values.items() if all(x is not None for x in v)}
        for _ in range(len(plain) + 1):
            env = _Env(bound, frozenset(plain), owner)
            keep = {k for k in plain if all(v is not None and self.plain(v, env) for v in values[k])}
            if keep == plain:
                break
            plain = keep
        return _Env(bound, frozenset(plain), owner)

    def env(self, fn: Function, owner: ast.ClassDef | None) -> _Env:
        return self.envs.get(id(fn)) or self._env(fn, owner)

    def _plain_params(self, fn: Function, owner: ast.ClassDef | None) -> frozenset[str]:
        """Parameters every call site passes a plain value (or leaves at a plain default)."""
        ps = _params(fn)
        if owner is not None and owner is self.names.cls and fn.name == "__init__":
            return frozenset(a.arg for a in ps[1:])  # the harness's init inputs
        sites = self.calls.get(id(fn))
        if not sites or fn.name in FORWARD_ROOTS or (fn.name.startswith("__") and fn.name != "__init__"):
            return frozenset()
        if any(_decorator_name(d) not in _PLAIN_DECORATORS | _CACHING_DECORATORS for d in fn.decorator_list):
            return frozenset()
        skip = 1 if _takes_self(fn, owner) else 0
        positional = [a.arg for a in [*fn.args.posonlyargs, *fn.args.args]][skip:]
        defaults = dict(
            zip(
                reversed([a.arg for a in [*fn.args.posonlyargs, *fn.args.args]]),
                reversed(fn.args.defaults),
                strict=False,
            )
        )
        defaults.update(
            {a.arg: d for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults, strict=True) if d is not None}
        )
        plain = {a.arg for a in ps[skip:]} - {fn.args.vararg.arg if fn.args.vararg else "", ""}
        if fn.args.kwarg:
            plain.discard(fn.args.kwarg.arg)
        module_env = _Env(self.module_bound, self.module_plain, None)
        for call, caller, caller_owner in sites:
            if any(isinstance(a, ast.Starred) for a in call.args) or any(
                k.arg is None for k in call.keywords
            ):
                return frozenset()
            env = self.envs.get(id(caller)) if caller is not None else module_env
            if env is None:
                env = _Env(frozenset(), frozenset(), caller_owner)
            passed: dict[str, ast.expr] = dict(zip(positional, call.args, strict=False))
            passed.update({k.arg: k.value for k in call.keywords if k.arg})
            for p in list(plain):
                value = passed.get(p, defaults.get(p))
                if value is None or not self.plain(value, env if p in passed else module_env):
                    plain.discard(p)
            if fn.args.vararg and len(call.args) > len(positional):
                plain.discard(fn.args.vararg.arg)
        return frozenset(plain)

    def _returns_plain(self, fn: Function) -> bool:
        env = self.envs[id(fn)]
        for node in _own_nodes(fn):
            if isinstance(node, (ast.Yield, ast.YieldFrom, ast.Await)):
                return False
            if isinstance(node, ast.Return) and node.value is not None and not self.plain(node.value, env):
                return False
        return True

    def _call_sites(self) -> dict[int, list[tuple[ast.Call, Function | None, ast.ClassDef | None]]]:
        """Every call of each of the file's functions, with the function it is in (None: module
        level); a function also used as a value (passed, stored, decorated) gets no entry, so its
        parameters stay possibly tensors."""
        sites: dict[int, list[tuple[ast.Call, Function | None, ast.ClassDef | None]]] = {}
        escaped: set[int] = set()
        callee_ids: set[int] = set()
        where: dict[int, tuple[Function | None, ast.ClassDef | None]] = {}
        for fn, owner in self.functions:
            for n in ast.walk(fn):
                where.setdefault(id(n), (fn, owner))
        for n in ast.walk(self.names.tree):
            if isinstance(n, ast.Call):
                callee_ids.add(id(n.func))
        by_name: dict[str, list[Function]] = {}
        for fn, _ in self.functions:
            by_name.setdefault(fn.name, []).append(fn)
        for n in ast.walk(self.names.tree):
            caller, owner = where.get(id(n), (None, None))
            if isinstance(n, ast.Call):
                for fn in self._targets(n.func, owner):
                    sites.setdefault(id(fn), []).append((n, caller, owner))
            elif id(n) not in callee_ids and isinstance(getattr(n, "ctx", None), ast.Load):
                escaped |= {id(fn) for fn in self._targets(n, owner)}
            if (
                isinstance(n, ast.Attribute)
                and n.attr in by_name
                and not (id(n) in callee_ids and self._targets(n, owner))
                and not self._outside(n.value, owner)
            ):  # `ModelNew._act(self, x)`, `obj.m(x)`: a call the file's resolution does not follow
                escaped |= {id(fn) for fn in by_name[n.attr]}
            elif isinstance(n, ast.Call) and callee_name(n.func) in _LOOKUPS and len(n.args) >= 2:
                key = n.args[1]
                if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                    return {}  # `getattr(self, name)`: any function may be called with anything
                escaped |= {id(fn) for fn in by_name.get(key.value, [])}  # `getattr(self, "_act")`
        return {k: v for k, v in sites.items() if k not in escaped}

    def _outside(self, e: ast.expr, owner: ast.ClassDef | None) -> bool:
        """`e` is the extension or an imported module: its attributes are none of the file's functions."""
        root = e
        while isinstance(root, ast.Attribute):
            root = root.value
        if isinstance(root, ast.Name) and root.id in self.module_imports:
            return True
        return self.names.is_extension(e, LocalNames(self.names.kinds_for(owner)))

    def _targets(self, e: ast.AST, owner: ast.ClassDef | None) -> list[Function]:
        """The file's functions `e` names: `f`, `self.m`/`cls.m`/`super().m`, `C` (its `__init__`)."""
        if isinstance(e, ast.Call):
            return []
        if isinstance(e, ast.Name):
            out: list[Function] = [f for f in [self.names.module_funcs.get(e.id)] if f is not None]
            out += self.index.nested.get(e.id, [])
            cls = self.index.classes.get(e.id)
            if cls is not None and (init := self.index.methods(cls).get("__init__")) is not None:
                out.append(init)
            return out
        if (
            isinstance(e, ast.Attribute)
            and isinstance(e.value, ast.Call)
            and isinstance(e.value.func, ast.Name)
            and (built := self.index.classes.get(e.value.func.id)) is not None
        ):  # `_T().run(n)`: a method of a fresh in-file object
            return [m for c in self.index.chain(built) for m in _methods_named(c, e.attr)]
        if isinstance(e, ast.Attribute) and owner is not None:
            recv = e.value
            if (isinstance(recv, ast.Name) and recv.id in ("self", "cls")) or (
                isinstance(recv, ast.Call) and callee_name(recv.func) == "super"
            ):
                return [m for c in self._related(owner) for m in _methods_named(c, e.attr)]
            held = self.index.self_values(owner).get(self_attr(recv) or "", [])
            classes = [
                self.index.classes.get(v.func.id)
                for v in held
                if isinstance(v, ast.Call) and isinstance(v.func, ast.Name)
            ]
            if held and len(classes) == len(held) and all(c is not None for c in classes):
                # `self.t.blocks(n)` where every store to `self.t` builds an in-file class
                return [
                    m for c in classes if c for k in self.index.chain(c) for m in _methods_named(k, e.attr)
                ]
        return []

    def _related(self, cls: ast.ClassDef) -> list[ast.ClassDef]:
        """`cls`, its in-file bases and its in-file subclasses: at run time `self` in a method of
        `cls` may be an instance of any subclass, whose overrides and stores then apply."""
        subclasses = [k for k in self.index.classes.values() if k is not cls and cls in self.index.chain(k)]
        out = list(self.index.chain(cls))
        for k in subclasses:
            out += [c for c in self.index.chain(k) if c not in out]
        return out

    def _plain_attrs(self, cls: ast.ClassDef, optimistic: bool = False) -> frozenset[str]:
        """`self.<attr>`s of `cls` whose every store (class body, any method of the chain) is plain;
        `optimistic`: every attribute stored at all (the fixpoint's start)."""
        values: dict[str, list[ast.expr | None]] = {}
        kinds = self.names.kinds_for(cls)
        module_env = _Env(self.module_bound, self.module_plain, None)
        for c in self._related(cls):
            for stmt in c.body:
                if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):  # class attributes
                    for name, value in _bindings(stmt):
                        ok = optimistic or (value is not None and self.plain(value, module_env))
                        values.setdefault(name, []).append(_PLAIN if ok else None)
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    env = self.envs.get(id(stmt))
                    for node in ast.walk(stmt):
                        for attr, value in _self_stores(node):
                            ok = optimistic or (
                                value is not None and env is not None and self.plain(value, env)
                            )
                            values.setdefault(attr or "*", []).append(_PLAIN if ok else None)
        if "*" in values and None in values["*"]:  # `setattr(self, name, v)` with a computed name
            return _MODULE_PLAIN_ATTRS
        stored = {
            k
            for k, v in values.items()
            if kinds.get(k) not in ("tensor", "torch", "ext", "kernel", "reference") and None not in v
        }
        bases = {dotted(b, self.names.aliases) or "" for c in self.index.chain(cls) for b in c.bases}
        layer = any(b.startswith("torch.nn.") and not b.endswith(".Module") for b in bases)
        inherited = {a for a in _LAYER_CONFIG_ATTRS if a not in values} if layer else set()
        # `training` is a flag unless the file stores something else into it
        return frozenset(stored | inherited) | (_MODULE_PLAIN_ATTRS - values.keys())

    def _layer_config(self, e: ast.Attribute, env: _Env) -> bool:
        """`self.<layer>.<config>`: a configuration number (`kernel_size`, `stride`, `out_features`
        …) of a `torch.nn` layer the class holds for its weights, where the file stores that
        attribute name nowhere (it cannot have been replaced by a tensor)."""
        layer = self_attr(e.value) if isinstance(e.value, ast.Attribute) else None
        if layer is None or env.owner is None or e.attr not in _LAYER_CONFIG_ATTRS or e.attr in self.members:
            return False
        if self.names.kinds_for(env.owner).get(layer) != "torch":
            return False
        return e.attr not in self.stored_attr_names

    def _plain_property(self, cls: ast.ClassDef, name: str) -> bool:
        """`self.<name>` where `<name>` is a method of the class chain decorated only with
        `property`/`cached_property`, with no setter, whose result is plain (`self.returns`)."""
        defs = [
            stmt
            for c in self.index.chain(cls)
            for stmt in c.body
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name
        ]
        if not defs or name in self.stored_attr_names:
            return False
        for stmt in defs:  # a setter or deleter (`@block.setter`) makes it a stored value
            decos = [_decorator_name(d) for d in stmt.decorator_list]
            if not decos or any(d not in ("property", "cached_property") for d in decos):
                return False
        return all(id(stmt) in self.returns for stmt in defs)

    # -- expressions ------------------------------------------------------------------------------
    def plain(self, e: ast.expr, env: _Env) -> bool:
        """Whether `e` is provably plain: no tensor, holding none, and — for a callable — returning a
        plain value when called with plain arguments (`math.ceil`, `len`, a lambda of plain maths)."""
        if e is _PLAIN or isinstance(e, (ast.Constant, ast.JoinedStr)):
            return True
        if isinstance(e, ast.Lambda):
            params = frozenset(a.arg for a in _params(e))
            return self.plain(e.body, _Env(env.bound | params, env.plain | params, env.owner))
        if isinstance(e, ast.Name):
            if e.id in env.bound:
                return e.id in env.plain
            if e.id in self.names.module_funcs:
                return id(self.names.module_funcs[e.id]) in self.returns
            if e.id in self.module_imports:
                return _plain_ref(dotted(e, self.names.aliases) or e.id)
            if e.id in self.module_bound:
                return e.id in self.module_plain and e.id not in self.index.classes
            return e.id in _BUILTIN_NAMES
        if isinstance(e, ast.Attribute):
            attr = self_attr(e)
            if attr is not None and env.owner is not None:
                return attr in self.attrs.get(id(env.owner), _MODULE_PLAIN_ATTRS) or self._plain_property(
                    env.owner, attr
                )
            if self._layer_config(e, env):
                return True
            if e.attr in _NAME_ATTRS and e.attr not in self.foreign_stored_attrs:
                return True  # `type(self).__name__`: a string
            if e.attr in _NON_TENSOR_ATTRS and e.attr not in self.members | self.foreign_stored_attrs:
                return True
            root = e.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in self.module_imports and root.id not in env.bound:
                return _plain_ref(dotted(e, self.names.aliases) or "")
            return self.plain(e.value, env) and e.attr not in _TENSOR_ATTRS
        if isinstance(e, (ast.Subscript, ast.Starred, ast.NamedExpr)):
            return self.plain(e.value, env)
        if isinstance(e, ast.BinOp):
            if (
                isinstance(e.op, ast.Mod)
                and isinstance(e.left, ast.Constant)
                and isinstance(e.left.value, str)
            ):
                return True  # `"%d" % n` formats a string
            return self.plain(e.left, env) and self.plain(e.right, env)
        if isinstance(e, ast.UnaryOp):
            return isinstance(e.op, ast.Not) or self.plain(e.operand, env)
        if isinstance(e, ast.BoolOp):
            return all(self.plain(v, env) for v in e.values)
        if isinstance(e, ast.Compare):
            return all(self.plain(v, env) for v in [e.left, *e.comparators])
        if isinstance(e, ast.IfExp):
            return self.plain(e.body, env) and self.plain(e.orelse, env)
        if isinstance(e, (ast.Tuple, ast.List, ast.Set)):
            return all(self.plain(x, env) for x in e.elts)
        if isinstance(e, ast.Dict):
            return all(self.plain(x, env) for x in [*e.keys, *e.values] if x is not None)
        if isinstance(e, (ast.ListComp, ast.SetComp, ast.GeneratorExp)):
            return self.plain(e.elt, env)  # generator targets are bindings of the function
        if isinstance(e, ast.DictComp):
            return self.plain(e.key, env) and self.plain(e.value, env)
        if isinstance(e, ast.Slice):
            return all(self.plain(x, env) for x in (e.lower, e.upper, e.step) if x is not None)
        if isinstance(e, ast.Call):
            return self._plain_call(e, env)
        return False

    def _plain_call(self, e: ast.Call, env: _Env) -> bool:
        """Metadata, `len()`/`int()` & co., the file's functions that return plain values, a few torch
        queries (`torch.cuda.*`, `torch.finfo` …), else a plain callee given plain arguments."""
        func = e.func
        args = [*e.args, *(k.value for k in e.keywords)]
        if isinstance(func, ast.Name) and func.id not in env.bound and func.id not in self.module_bound:
            if func.id in _PLAIN_BUILTINS:
                return True
        targets = self._targets(func, env.owner)
        if targets and not (isinstance(func, ast.Name) and func.id in self.index.classes):
            return all(id(t) in self.returns for t in targets)
        if (
            isinstance(func, ast.Attribute)
            and func.attr in _PLAIN_METHODS
            and func.attr not in self.members | self.foreign_stored_attrs
        ):
            return True  # tensor metadata (an in-file class defining `size` & co. is not trusted)
        d = dotted(func, self.names.aliases) or ""
        if d.startswith("torch.") and not (isinstance(func, ast.Name) and func.id in env.bound):
            return d.startswith("torch.cuda.") or d.rsplit(".", 1)[-1] in _TORCH_PLAIN
        return self.plain(func, env) and all(self.plain(a, env) for a in args)


def _plain_ref(d: str) -> bool:
    """A module attribute (not called) that is plain: anything outside torch (`math.ceil`,
    `numpy.float32`), and in torch its dtypes, plain queries and `torch.cuda` plumbing."""
    if d == "torch" or not d.startswith("torch."):
        return True
    last = d.rsplit(".", 1)[-1]
    return d.startswith("torch.cuda.") or last in _TORCH_PLAIN or last in _TORCH_DTYPES


_PLAIN = ast.Constant(value=0)  # the value of a binding known to be plain (a parameter, `self`)
# builtins that are plain callables (their results are plain given plain arguments); not those
# that reach namespaces (`globals()["w"]`), run code or read the outside world
_BUILTIN_NAMES = frozenset(dir(builtins)) - {
    "globals",
    "locals",
    "vars",
    "eval",
    "exec",
    "compile",
    "__import__",
    "open",
    "input",
    "super",
    "memoryview",
    "breakpoint",
}


def _by_id(classes: dict[str, ast.ClassDef]) -> list[tuple[int, ast.ClassDef]]:
    return [(id(c), c) for c in classes.values()]


def _params(fn: Function | ast.Lambda) -> list[ast.arg]:
    a = fn.args
    return [
        *a.posonlyargs,
        *a.args,
        *([a.vararg] if a.vararg else []),
        *a.kwonlyargs,
        *([a.kwarg] if a.kwarg else []),
    ]


# Builtins that fetch an attribute by name.
_LOOKUPS = frozenset({"getattr", "hasattr", "__getattribute__", "__getattr__"})
# Library builders of record objects whose fields are named by strings or keywords.
_RECORD_BUILDERS = frozenset(
    {"namedtuple", "NamedTuple", "make_dataclass", "SimpleNamespace", "type", "Enum"}
)


def _record_fields(tree: ast.Module) -> frozenset[str]:
    """Field names of records the file builds (`namedtuple("N", "shape size")`, `SimpleNamespace(
    shape=x)`, `type("T", (), {"size": f})`): `r.shape` / `r.size()` on one is not tensor metadata."""
    out: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and callee_name(n.func) in _RECORD_BUILDERS:
            out |= {k.arg for k in n.keywords if k.arg}
            for c in ast.walk(n):
                if isinstance(c, ast.Constant) and isinstance(c.value, str):
                    out |= set(c.value.replace(",", " ").split())
    return frozenset(out)


def _bound_names(fn: Function) -> set[str]:
    """The names `fn` binds itself (a store into a container or object binds none)."""
    return {a.arg for a in _params(fn)} | {name for n in ast.walk(fn) for name, _ in _bindings(n, False)}


def _called_lambdas(fn: Function) -> dict[int, list[ast.Call]]:
    """Lambdas of `fn` whose every call is visible: called in place (`(lambda n: ...)(k)`), or bound
    once to a local name used only as a callee (`cdiv = lambda a, b: ...; cdiv(n, 256)`)."""
    out: dict[int, list[ast.Call]] = {}
    nodes = list(ast.walk(fn))
    callees = {id(n.func): n for n in nodes if isinstance(n, ast.Call)}
    bindings: dict[str, list[ast.expr | None]] = {}
    for n in nodes:
        if isinstance(n, ast.Lambda) and id(n) in callees:
            out[id(n)] = [callees[id(n)]]
        for name, value in _bindings(n):
            bindings.setdefault(name, []).append(value)
    for name, values in bindings.items():
        if len(values) != 1 or not isinstance(values[0], ast.Lambda):
            continue
        uses = [n for n in nodes if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)]
        if all(id(u) in callees for u in uses):
            out[id(values[0])] = [callees[id(u)] for u in uses]
    return out


def _lambda_arguments(lam: ast.Lambda, calls: list[ast.Call] | None) -> Iterator[tuple[str, ast.expr | None]]:
    """Each parameter of `lam` with each value a call passes it (None: unknown)."""
    positional = [*lam.args.posonlyargs, *lam.args.args]
    defaults = dict(zip(reversed(positional), reversed(lam.args.defaults), strict=False))
    for a in _params(lam):
        if calls is None or a in (lam.args.vararg, lam.args.kwarg) or a in lam.args.kwonlyargs:
            yield a.arg, None
            continue
        i = positional.index(a)
        for call in calls:
            if any(isinstance(x, ast.Starred) for x in call.args) or any(
                k.arg is None for k in call.keywords
            ):
                yield a.arg, None
            elif i < len(call.args):
                yield a.arg, call.args[i]
            else:
                given = next((k.value for k in call.keywords if k.arg == a.arg), defaults.get(a))
                yield a.arg, given


def _takes_self(fn: Function, owner: ast.ClassDef | None) -> bool:
    return (
        owner is not None
        and bool([*fn.args.posonlyargs, *fn.args.args])
        and not any(_decorator_name(d) == "staticmethod" for d in fn.decorator_list)
    )


def _attribute_stores(tree: ast.AST) -> list[tuple[str, bool]]:
    """(attribute name, stored on the name `self`) for every store or `del` of an attribute in
    `tree`, and for every `setattr`/`delattr` with a fixed name (counted as not on `self`)."""
    out: list[tuple[str, bool]] = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and isinstance(n.ctx, (ast.Store, ast.Del)):
            out.append((n.attr, isinstance(n.value, ast.Name) and n.value.id == "self"))
        elif (
            isinstance(n, ast.Call)
            and callee_name(n.func) in ("setattr", "delattr")
            and len(n.args) >= 2
            and isinstance(n.args[1], ast.Constant)
            and isinstance(n.args[1].value, str)
        ):
            out.append((n.args[1].value, False))
    return out


def _decorator_name(d: ast.expr) -> str:
    return callee_name(d.func if isinstance(d, ast.Call) else d) or ""


def _methods_named(c: ast.ClassDef, name: str) -> list[Function]:
    return [n for n in c.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name]


def _own_nodes(fn: Function) -> Iterator[ast.AST]:
    """The nodes of `fn` outside the functions and lambdas nested in it."""
    todo: list[ast.AST] = list(fn.body)
    while todo:
        n = todo.pop()
        yield n
        if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            todo += list(ast.iter_child_nodes(n))


def _module_names(tree: ast.Module) -> frozenset[str]:
    out: set[str] = set()
    for stmt in tree.body:
        out |= {name for name, _ in _bindings(stmt)}
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(stmt.name)
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in stmt.names}
    return frozenset(out)


def _bindings(node: ast.AST, mutations: bool = True) -> Iterator[tuple[str, ast.expr | None]]:
    """The names one node binds, each with the value it binds (None: not provably plain, e.g. a
    `with` target), for tuple unpacking the matching element when the value is a literal tuple; a
    store into a container or object (`lst[0] = v`, `obj.a = v`, `lst.append(v)`) binds its root
    name to what it now holds as well."""
    if mutations:
        yield from _mutations(node)
    if isinstance(node, ast.Assign):
        for t in node.targets:
            yield from _unpack(t, node.value)
    elif isinstance(node, ast.AnnAssign) and node.value is not None:
        yield from _unpack(node.target, node.value)
    elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
        yield node.target.id, ast.BinOp(ast.Name(node.target.id, ast.Load()), node.op, node.value)
    elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
        target, it = node.target, node.iter
        if (
            isinstance(it, ast.Call)
            and callee_name(it.func) == "enumerate"
            and isinstance(it.func, ast.Name)
            and isinstance(target, ast.Tuple)
            and len(target.elts) == 2
            and isinstance(target.elts[0], ast.Name)
            and it.args
        ):  # `for i, layer in enumerate(self.layers)`: the counter is plain whatever is counted
            yield target.elts[0].id, _PLAIN
            target, it = target.elts[1], it.args[0]
        # an element of a plain iterable is plain (never paired up like an unpacked literal)
        yield from ((n.id, it) for n in ast.walk(target) if isinstance(n, ast.Name))
    elif isinstance(node, ast.NamedExpr):
        yield node.target.id, node.value
    elif isinstance(node, ast.withitem) and node.optional_vars is not None:
        yield from ((n.id, None) for n in ast.walk(node.optional_vars) if isinstance(n, ast.Name))
    elif isinstance(node, ast.ExceptHandler) and node.name:
        yield node.name, None
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
        yield from (((a.asname or a.name).split(".")[0], _PLAIN) for a in node.names)
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        yield node.name, _PLAIN
    elif isinstance(node, (ast.Global, ast.Nonlocal)):
        yield from ((n, None) for n in node.names)
    elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
        yield node.name, None


def _mutations(node: ast.AST) -> Iterator[tuple[str, ast.expr | None]]:
    """`lst[0] = v` / `obj.a = v` / `lst.append(v)`: the root name and the value it now holds."""
    targets: list[ast.expr] = []
    value: ast.expr | None = None
    if isinstance(node, ast.Assign):
        targets, value = node.targets, node.value
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets, value = [node.target], node.value
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _MUTATORS:
        targets = [node.func]
        value = ast.Tuple([*node.args, *(k.value for k in node.keywords)], ast.Load())
    for t in targets:
        for part in ast.walk(t):
            if isinstance(part, (ast.Subscript, ast.Attribute)) and isinstance(part.value, ast.Name):
                if part.value.id not in ("self", "cls"):
                    yield part.value.id, value if value is not None else None


def _unpack(target: ast.expr, value: ast.expr) -> Iterator[tuple[str, ast.expr | None]]:
    if isinstance(target, ast.Name):
        yield target.id, value
    elif isinstance(target, (ast.Tuple, ast.List)):
        elts = value.elts if isinstance(value, (ast.Tuple, ast.List)) else None
        starred = any(isinstance(x, ast.Starred) for x in [*target.elts, *(elts or [])])
        if elts is not None and not starred and len(elts) == len(target.elts):
            for t, v in zip(target.elts, elts, strict=True):
                yield from _unpack(t, v)
        else:
            for t in target.elts:
                yield from _unpack(t, value)
    elif isinstance(target, ast.Starred):
        yield from _unpack(target.value, value)


def _self_stores(node: ast.AST) -> Iterator[tuple[str | None, ast.expr | None]]:
    """`self.<attr>` stores of one node (attribute None: `setattr(self, <computed>, v)`)."""
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        value = node.value
        if isinstance(node, ast.AugAssign):
            value = ast.BinOp(node.target, node.op, node.value)
        for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
            for n in ast.walk(t):
                if (attr := self_attr(n)) is not None:
                    yield attr, value if n is t else None
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in _MUTATORS
        and (held := self_attr(node.func.value)) is not None
    ):  # `self.cfg.update(k=x)`: what the container now holds
        yield held, ast.Tuple([*node.args, *(k.value for k in node.keywords)], ast.Load())
    elif isinstance(node, ast.Call) and callee_name(node.func) in ("setattr", "__setattr__"):
        args = node.args
        if isinstance(node.func, ast.Attribute) and self_attr(node.func) == "__setattr__":
            args = [node.func.value, *args]  # `self.__setattr__(name, v)`
        if len(args) >= 3 and isinstance(args[0], ast.Name) and args[0].id == "self":
            key = args[1]
            name = key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else None
            yield name, args[2]
