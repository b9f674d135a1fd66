"""Which expressions of a host function are tensors, and the C++ operators applied to them.

`at::Tensor` overloads `+ - * / % < > <= >= == != & | ^ ~ !`, unary minus and the compound
assignments: `x * (x > 0).to(x.scalar_type())` runs ATen kernels exactly like `at::relu(x)`, with
no function name for a pattern to see. `tensor_operators()` finds every such operator in a host
function's body, for `static/cpp_rules.py` (`static.cpp_torch_op`); `tensor_names()` and
`method_receiver_is_tensor()` tell that rule which method calls have a tensor receiver
(`x.prelu(w)`, `x.contiguous().view(-1).sum_to_size(1)`, `ts[0].prelu(w)`).

Tensor-ness is inferred from declarations, not known from a compiler:

- tensors: names declared `torch::Tensor`/`at::Tensor`/`Tensor` (any name of ATen's namespaces;
  `const`, `&`, `&&`; parameters, locals, lambda parameters, range-`for` variables), and
  `auto v = <tensor expression>`; elements of `std::vector<Tensor>`/`TensorList` names (`ts[0]`,
  `for (auto& t : ts)`);
- tensor expressions: a tensor name, its subscripts and tensor-returning methods (`.contiguous()`,
  `.to(...)`, `.view(...)`, ATen compute methods), ATen factory and op calls (`torch::empty_like(x)`,
  `at::relu(x)`), calls of the file's own functions that return a tensor, and parenthesised
  tensor expressions (`(x > 0)`);
- not tensors: what metadata methods return (`x.size(0)`, `x.numel()`, `x.dim()`, `x.stride(i)`,
  `x.data_ptr<float>()`, `x.item<float>()`, `x.sizes()`, `x.options()`, `x.is_cuda()`), and
  every name not declared as above (scalars, pointers, `int64_t n = x.numel()`).

Not covered: tensors reached through members or pointers (`p->t`, `*ptr`), type aliases
(`using T = at::Tensor`), `decltype`, and the stream operators `<<`/`>>` (printing a tensor is
no compute). A name declared a tensor anywhere in the function counts as one everywhere in it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from cudice.verifier.static.cpp_names import ATEN_AMBIGUOUS, ATEN_UNQUALIFIED
from cudice.verifier.static.policy import COMPUTE_METHODS, EMPTY_FACTORIES, FILLING_FACTORIES

# Methods of `at::Tensor` that return a tensor (views, casts, copies, compute).
TENSOR_METHODS = COMPUTE_METHODS | {
    "contiguous",
    "view",
    "reshape",
    "reshape_as",
    "t",
    "transpose",
    "permute",
    "clone",
    "to",
    "expand",
    "expand_as",
    "narrow",
    "select",
    "slice",
    "index",
    "flatten",
    "squeeze",
    "unsqueeze",
    "detach",
    "float",
    "half",
    "double",
    "bfloat16",
    "view_as",
    "type_as",
    "cuda",
    "cpu",
    "as_strided",
    "unfold",
    "new_empty",
    "new_zeros",
    "new_ones",
    "new_full",
    "new_empty_strided",
    "fill_",
    "zero_",
    "copy_",
}
# Calls under ATen's namespaces that return a tensor (anything under `cuda::` does not).
TENSOR_FUNCTIONS = (
    frozenset(EMPTY_FACTORIES)
    | frozenset(FILLING_FACTORIES)
    | ATEN_UNQUALIFIED
    | ATEN_AMBIGUOUS
    | COMPUTE_METHODS
    | {
        "from_blob",
        "arange",
        "linspace",
        "rand",
        "randn",
        "randint",
        "tensor",
        "eye",
        "empty_like",
        "zeros_like",
    }
)
_KEYWORDS_BEFORE_EXPR = frozenset({"return", "case", "throw", "co_return", "co_yield", "else", "do"})
# Words before `*`/`&` that make it a declarator (`float* x`, `Tensor& x`), not a multiplication.
_DECLARING = frozenset(
    {
        "Tensor",
        "TensorList",
        "auto",
        "const",
        "volatile",
        "void",
        "bool",
        "char",
        "short",
        "int",
        "long",
        "unsigned",
        "signed",
        "float",
        "double",
        "half",
        "__half",
        "__nv_bfloat16",
        "struct",
        "class",
        "typename",
        "__restrict__",
        "T",
    }
)
# Operators on tensors, longest first; the ones that are no compute are listed to be told apart.
_OPS = (
    "<<=",
    ">>=",
    "<<",
    ">>",
    "->",
    "++",
    "--",
    "&&",
    "||",
    "==",
    "!=",
    "<=",
    ">=",
    "+=",
    "-=",
    "*=",
    "/=",
    "%=",
    "&=",
    "|=",
    "^=",
    "+",
    "-",
    "*",
    "/",
    "%",
    "<",
    ">",
    "&",
    "|",
    "^",
    "!",
    "~",
    "=",
)
_NOT_COMPUTE = frozenset({"<<", ">>", "->", "++", "--", "&&", "||", "="})
_UNARY_ONLY = frozenset({"!", "~"})
_AMBIGUOUS_PREFIX = frozenset({"&", "*", "<", ">"})  # address-of, dereference, template brackets
_OP_CHARS = re.compile(r"[-+*/%&|^<>=!~]+$")
_IDENT = re.compile(r"[A-Za-z_]\w*")
_RANGE_FOR = re.compile(
    r"\bfor\s*\(\s*(?:const\s+)?auto\s*(?:const\s*)?(?:&&|&)?\s*([A-Za-z_]\w*)\s*:(?!:)\s*([A-Za-z_]\w*)\s*\)"
)
_MEMBER = re.compile(r"(?:\.|->)\s*(?:template\s+)?([A-Za-z_]\w*)\s*")
_QUALIFIED = re.compile(r"(?:[A-Za-z_]\w*\s*::\s*)*[A-Za-z_]\w*")


@dataclass(frozen=True, slots=True)
class TensorOperator:
    offset: int  # of the operator, in the text given to `tensor_operators`
    op: str
    operand: str  # the tensor operand as written (shortened)


def declared_tensors(text: str, roots: set[str]) -> tuple[set[str], set[str]]:
    """(tensor names, names of tensor containers) declared in `text` (a function's header and body)."""
    ns = "|".join(sorted(map(re.escape, roots)))
    ty = rf"(?:\b(?:{ns})::|(?<![\w:]))Tensor\b"
    decl = re.compile(
        rf"{ty}\s*(?:const\b\s*)?(?:&&|&)?\s*(?:const\b\s*)?([A-Za-z_]\w*)\s*(?=[,;=)\[{{]|:(?!:))"
    )
    container = re.compile(
        rf"(?:\bstd::vector\s*<\s*{ty}\s*>|(?:\b(?:{ns})::|(?<![\w:]))(?:TensorList|ITensorListRef)\b)"
        r"\s*(?:const\b\s*)?&?\s*([A-Za-z_]\w*)\s*(?=[,;=)\[{])"
    )
    tensors = {m.group(1) for m in decl.finditer(text)} - {"const"}
    containers = {m.group(1) for m in container.finditer(text)}
    for m in _RANGE_FOR.finditer(text):  # `for (auto& t : ts)` over a tensor container
        if m.group(2) in containers:
            tensors.add(m.group(1))
    return tensors, containers


def returns_tensor(header: str) -> bool:
    """Whether a function header's return type is a tensor (`torch::Tensor f(...)`, `at::Tensor& f(...)`)."""
    head = header.split("(")[0]
    return (
        re.search(r"\bTensor\b\s*&?\s*[A-Za-z_]\w*\s*(?:<[^()]*>)?\s*$", head) is not None
        and "<" not in (head[: head.find("Tensor")])
    )


@dataclass
class _Scan:
    text: str
    tensors: set[str]
    containers: set[str]
    tensor_fns: set[str]
    roots: set[str]
    _groups: dict[int, bool] = field(default_factory=dict)

    def _ws(self, i: int) -> int:
        while i < len(self.text) and self.text[i].isspace():
            i += 1
        return i

    def __post_init__(self) -> None:
        # matching brackets, found once (linear): `_close` is asked at every `(` of the body
        self._match: dict[int, int] = {}
        stack: list[int] = []
        for j, ch in enumerate(self.text):
            if ch in "([{":
                stack.append(j)
            elif ch in ")]}":
                pair = {")": "(", "]": "[", "}": "{"}[ch]
                while stack and self.text[stack[-1]] != pair and ch == "}":
                    stack.pop()  # an unclosed `(`/`[` inside a block ends with the block
                if stack and self.text[stack[-1]] == pair:
                    self._match[stack.pop()] = j + 1

    def _close(self, i: int, open_ch: str, close_ch: str) -> int:
        """Offset just past the bracket matching the one at `i` (braced lists and lambdas inside
        allowed), or -1 when none matches."""
        return self._match.get(i, -1)

    def _template_args(self, i: int) -> int:
        """Past `<...>` at `i` when it is a template argument list followed by `(`, else -1."""
        depth = 0
        for j in range(i, min(len(self.text), i + 400)):
            ch = self.text[j]
            if ch == "<":
                depth += 1
            elif ch == ">":
                depth -= 1
                if depth == 0:
                    k = self._ws(j + 1)
                    return j + 1 if k < len(self.text) and self.text[k] == "(" else -1
            elif ch in ";{}=&|!":
                return -1
            elif ch == "(":
                end = self._close(j, "(", ")")
                if end < 0:
                    return -1
        return -1

    def group(self, i: int) -> tuple[int, bool]:
        """`(...)` at `i`: its end and whether its content is a tensor expression."""
        end = self._close(i, "(", ")")
        if end < 0:
            return i + 1, False
        if i not in self._groups:
            self._groups[i] = False
            inner = self._ws(i + 1)
            p = self.primary(inner)
            whole = p is not None and p[1] and self._ws(p[0]) == end - 1
            self._groups[i] = whole or bool(self.operators(i + 1, end - 1))
        return end, self._groups[i]

    def primary(self, i: int) -> tuple[int, bool] | None:
        """A primary expression with its postfix chain at `i`: (end, is a tensor), or None."""
        t = self.text
        if i >= len(t):
            return None
        if t[i] == "(":
            j, tensor = self.group(i)
        else:
            m = _QUALIFIED.match(t, i)
            if m is None:
                return None
            name = re.sub(r"\s+", "", m.group(0))
            parts = name.split("::")
            j = self._ws(m.end())
            if j < len(t) and t[j] == "<":
                end = self._template_args(j)
                if end >= 0:
                    j = self._ws(end)
            if j < len(t) and t[j] == "(":
                end = self._close(j, "(", ")")
                j = end if end >= 0 else j + 1
                if len(parts) > 1:
                    tensor = parts[0] in self.roots and "cuda" not in parts and parts[-1] in TENSOR_FUNCTIONS
                else:
                    tensor = name in self.tensor_fns
            else:
                j = m.end()
                tensor = len(parts) == 1 and name in self.tensors
                if len(parts) == 1 and name in self.containers:
                    k = self._ws(j)
                    if k < len(t) and t[k] == "[":
                        end = self._close(k, "[", "]")
                        if end >= 0:
                            j, tensor = end, True
        while True:  # postfix: subscripts and method calls
            k = self._ws(j)
            if k < len(t) and t[k] == "[":
                end = self._close(k, "[", "]")
                if end < 0:
                    break
                j = end
                continue
            mm = _MEMBER.match(t, k)
            if mm is None or (t[k : k + 2] == "->" and tensor):
                break
            j = mm.end()
            if j < len(t) and t[j] == "<":
                end = self._template_args(j)
                if end >= 0:
                    j = self._ws(end)
            if j < len(t) and t[j] == "(":
                end = self._close(j, "(", ")")
                j = end if end >= 0 else j + 1
                tensor = tensor and mm.group(1) in TENSOR_METHODS
            else:
                tensor = False  # a data member
        return j, tensor

    def _before(self, i: int, lo: int = 0) -> str:
        """Up to 64 characters of `text[lo:i]` ending at its last non-space character."""
        j = i
        while j > lo and self.text[j - 1].isspace():
            j -= 1
        return self.text[max(lo, j - 64) : j]

    def _starts(self, lo: int, hi: int) -> list[int]:
        t = self.text
        out = []
        for m in re.finditer(r"[A-Za-z_]\w*|\(", t[lo:hi]):
            i = lo + m.start()
            before = self._before(i)
            if t[i] == "(":
                word = re.search(r"[A-Za-z_]\w*$", before)
                if before[-1:] in (")", "]", ">") or (word and word.group(0) not in _KEYWORDS_BEFORE_EXPR):
                    continue  # a call's argument list: its callee is the primary
            elif (i > 0 and (t[i - 1].isalnum() or t[i - 1] == "_")) or before.endswith((".", "->", "::")):
                continue
            out.append(i)
        return out

    def operators(self, lo: int, hi: int) -> list[TensorOperator]:
        found: dict[int, TensorOperator] = {}
        for i in self._starts(lo, hi):
            p = self.primary(i)
            if p is None or not p[1]:
                continue
            end = p[0]
            operand = re.sub(r"\s+", " ", self.text[i:end])
            operand = operand if len(operand) <= 40 else operand[:37] + "..."
            after = self._ws(end)
            op = next((o for o in _OPS if self.text.startswith(o, after)), None)
            if op and op not in _NOT_COMPUTE and op not in _UNARY_ONLY and after < hi:
                found.setdefault(after, TensorOperator(after, op, operand))
            j = i
            while j > lo and self.text[j - 1].isspace():
                j -= 1
            run = _OP_CHARS.search(self.text[max(lo, j - 8) : j])
            if run is None:
                continue
            op = next((o for o in _OPS if run.group(0).endswith(o)), None)
            if op is None or op in _NOT_COMPUTE:
                continue
            at = j - len(op)
            if op in _AMBIGUOUS_PREFIX:
                rest = self._before(at, lo)
                word = re.search(r"[A-Za-z_]\w*$", rest)
                if not rest or (rest[-1] not in ")]" and word is None):
                    continue  # `&x`, `*p`: address-of and dereference
                if word and (
                    word.group(0) in _DECLARING
                    or word.group(0).endswith("_t")
                    or word.group(0) in _KEYWORDS_BEFORE_EXPR
                ):
                    continue  # `Tensor& x`, `scalar_t* x`, `return &x`
                if op in "<>" and rest[-1] not in ")]" and word and word.group(0) not in self.tensors:
                    if not re.search(r"[\w)\]]\s*$", rest) or re.search(r"\b[A-Z]\w*$|::\w+$", rest):
                        continue  # `std::vector<x` / `Foo<x`: template brackets
            found.setdefault(at, TensorOperator(at, op, operand))
        return sorted(found.values(), key=lambda o: o.offset)


def tensor_operators(
    header: str, body: str, roots: set[str], tensor_fns: set[str] | frozenset[str] = frozenset()
) -> list[TensorOperator]:
    """Every arithmetic, comparison, bitwise or compound-assignment operator in `body` (a host
    function's body) with a tensor operand; offsets are in `body`. `roots` are the names of ATen's
    namespaces (`aten_namespaces`), `tensor_fns` the file's own functions that return a tensor."""
    tensors, containers = _grown_tensors(header, body, roots, tensor_fns)
    return _Scan(body, tensors, containers, set(tensor_fns), roots).operators(0, len(body))


def tensor_names(
    header: str, body: str, roots: set[str], tensor_fns: set[str] | frozenset[str] = frozenset()
) -> tuple[set[str], set[str]]:
    """(tensor names, tensor container names) of a host function (declared, or `auto` bound to a
    tensor expression), as `tensor_operators` infers them."""
    return _grown_tensors(header, body, roots, tensor_fns)


def _grown_tensors(
    header: str, body: str, roots: set[str], tensor_fns: set[str] | frozenset[str]
) -> tuple[set[str], set[str]]:
    tensors, containers = declared_tensors(header + "\n" + body, roots)
    auto = re.compile(r"\bauto\s*(?:const\b\s*)?(?:&&|&)?\s*([A-Za-z_]\w*)\s*=(?!=)")
    for _ in range(3):  # `auto y = x.contiguous(); auto z = y;`
        scan = _Scan(body, tensors, containers, set(tensor_fns), roots)
        grown = set(tensors)
        for m in auto.finditer(body):
            if m.group(1) in grown:
                continue
            start = scan._ws(m.end())
            semi = _statement_end(body, start)
            p = scan.primary(start)
            if (p is not None and p[1] and scan._ws(p[0]) >= semi) or scan.operators(start, semi):
                grown.add(m.group(1))
        if grown == tensors:
            break
        tensors = grown
    return tensors, containers


def method_receiver_is_tensor(
    body: str, dot: int, tensors: set[str], containers: set[str] | frozenset[str] = frozenset()
) -> bool:
    """Whether the receiver of the member access whose `.` (or `->`'s `-`) is at `dot` is a tensor:
    a tensor name, an element of a tensor container (`ts[0]`), or a chain of tensor-returning
    methods on one (`x.contiguous().view(-1)`)."""
    i = dot - 1
    subscripted = False
    while True:
        while i >= 0 and body[i].isspace():
            i -= 1
        if i >= 0 and body[i] in ")]":
            close, depth = body[i], 0
            opening = "(" if close == ")" else "["
            while i >= 0:
                depth += {close: 1, opening: -1}.get(body[i], 0)
                if depth == 0:
                    break
                i -= 1
            i -= 1
            while i >= 0 and body[i].isspace():
                i -= 1
            if close == "]":
                subscripted = True
                continue  # `ts[0]`: the container's name decides
            if i >= 0 and body[i] == ">":  # `data_ptr<float>()`: skip the template arguments
                depth = 0
                while i >= 0:
                    depth += {">": 1, "<": -1}.get(body[i], 0)
                    if depth == 0:
                        break
                    i -= 1
                i -= 1
                while i >= 0 and body[i].isspace():
                    i -= 1
            end = i + 1
            while i >= 0 and (body[i].isalnum() or body[i] == "_"):
                i -= 1
            method = body[i + 1 : end]
            j = i
            while j >= 0 and body[j].isspace():
                j -= 1
            if j >= 0 and body[j] == "." and method in TENSOR_METHODS:
                i = j - 1
                continue
            if j >= 1 and body[j - 1 : j + 1] == "->" and method in TENSOR_METHODS:
                i = j - 2
                continue
            return False  # a call of something else (`f(x).size()`): not inferred
        end = i + 1
        while i >= 0 and (body[i].isalnum() or body[i] == "_"):
            i -= 1
        name = body[i + 1 : end]
        known = name in tensors or (subscripted and name in containers)
        return bool(name) and known and not (i >= 0 and body[i] in ".>:")


def _statement_end(text: str, i: int) -> int:
    depth = 0
    for j in range(i, len(text)):
        ch = text[j]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth < 0:
                return j
        elif ch == ";" and depth == 0:
            return j
    return len(text)
