"""A binding for `load_inline` modules without pybind11: the C API of CPython, in the candidate's `cuda.cu`.

Role: `load_inline` compiles a `main.cpp` per candidate that holds `cpp_sources` and a pybind11
module binding `functions` — seconds of pybind11 and torch's Python headers per candidate
(docs/benchmarks.md), for what is, in the KernelBench style, only a list of declarations. When every
`cpp_sources` line is an `#include`, a comment or a declaration of a bound function, and every
type in those declarations is one this module converts (`signatures()`), build/compile.py builds
`cuda.cu` with `shim()` appended instead, and links it alone: a plain CPython extension of the
same name (loaded as the pybind11 one is) whose functions convert arguments the way pybind11's
casters do, call the bound function through a pointer of its *declared* type (overloads resolve
as pybind11's `&f` does; a declared but undefined function is an undefined symbol at load, as
in the pybind11 build), and return the result:

- `torch::Tensor` / `at::Tensor` (by value, `const&`, `&`): a `torch.Tensor` (subclasses too);
  `c10::optional`/`std::optional` of one: a tensor or None; `std::vector<torch::Tensor>`: any
  sequence of tensors but a string;
- `double`/`float`: anything `float()` of the C API takes; `int64_t`/`long`/`int`: an int or an
  object with `__index__` (or `__int__`), never a float, range-checked; `bool`: `True`/`False`,
  None, or an object with `__bool__`;
- results: a tensor (an undefined one is None), `void` (None), the scalar types,
  `std::vector<torch::Tensor>` (a list) and `std::tuple` of tensors (a tuple).

A call that no caster takes is a TypeError in pybind11's words; keyword arguments are refused
(pybind11's `m.def` without `py::arg` takes none either). C++ exceptions become the Python
exceptions torch's and pybind11's translators raise (c10::IndexError -> IndexError,
c10::ValueError -> ValueError, c10::Error -> RuntimeError with the message without the C++
backtrace, std::out_of_range -> IndexError, ...).

Not covered (these modules take the pybind11 build): `cpp_sources` that define anything,
overloaded or templated bound names, bound names defined `static`, `inline` or `extern "C"` or
in an unnamed namespace, other parameter or result types (`at::Scalar`, `IntArrayRef`,
`std::vector<int64_t>`, `std::string`, ...), `functions=None` (the candidate writes its own
PYBIND11_MODULE), and `TORCH_WARN` (printed to stderr by c10 instead of raised as a Python
warning by `torch::wrap_pybind_function`). The GIL is held during the call, as in pybind11.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

_TENSOR = r"(?:torch|at)::Tensor"
# declared type text -> kind; `const` and references are stripped first (see _kind)
_PARAM_KINDS: dict[str, str] = {
    "torch::Tensor": "tensor",
    "at::Tensor": "tensor",
    "double": "double",
    "float": "float",
    "int64_t": "int64",
    "long": "int64",
    "long int": "int64",
    "std::int64_t": "int64",
    "int": "int32",
    "bool": "bool",
}
_OPTIONAL = re.compile(rf"^(?:c10|std)::optional<\s*{_TENSOR}\s*>$")
_VECTOR = re.compile(rf"^std::vector<\s*{_TENSOR}\s*>$")
_TUPLE = re.compile(rf"^std::tuple<\s*({_TENSOR}\s*(?:,\s*{_TENSOR}\s*)*)>$")
_DECL = re.compile(
    r"^\s*(?P<ret>[\w:<>,\s]+?[\s&*>])\s*(?P<name>[A-Za-z_]\w*)\s*\((?P<params>[^()]*)\)\s*;\s*$"
)


@dataclass(frozen=True, slots=True)
class Signature:
    """One bound function: its name, declared result kind and parameter kinds, and the declaration text."""

    name: str
    result: (
        str  # "tensor", "void", "double", "float", "int64", "int32", "bool", "tensor_list", "tensor_tuple:N"
    )
    params: tuple[
        str, ...
    ]  # kinds: "tensor", "tensor_ref" (non-const &), "opt_tensor", "tensor_list", scalars
    cpp_result: str
    cpp_params: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "result": self.result,
            "params": list(self.params),
            "cpp_result": self.cpp_result,
            "cpp_params": list(self.cpp_params),
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Signature:
        return Signature(
            str(d["name"]),
            str(d["result"]),
            tuple(str(p) for p in d["params"]),
            str(d["cpp_result"]),
            tuple(str(p) for p in d["cpp_params"]),
        )


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def _norm(t: str) -> str:
    return re.sub(r"\s*([<>,:&*])\s*", r"\1", " ".join(t.split())).replace(",", ", ")


def _param_type(param: str) -> str | None:
    """The type of one declared parameter (its name, if any, and a default value dropped)."""
    p = param.split("=")[0].strip()
    m = re.match(r"^(.*?[\w>&*\s])\s*\b([A-Za-z_]\w*)$", p)
    if (
        m
        and m.group(2) not in _PARAM_KINDS
        and m.group(2) not in ("Tensor", "int", "long", "double", "float", "bool", "int64_t")
    ):
        p = m.group(1)
    return _norm(p) if p else None


def _param_kind(t: str) -> str | None:
    const = bool(re.match(r"^const\b", t)) or bool(re.search(r"\bconst\s*&?$", t))
    ref = t.endswith("&")
    base = _norm(re.sub(r"\bconst\b", "", t).rstrip("&").strip())
    if "*" in base or t.endswith("&&"):
        return None
    if base in _PARAM_KINDS:
        kind = _PARAM_KINDS[base]
        if kind == "tensor" and ref and not const:
            return "tensor_ref"
        return kind if (not ref or const or kind == "tensor") else None
    if _OPTIONAL.match(base):
        return "opt_tensor" if (const or not ref) else None
    if _VECTOR.match(base):
        return "tensor_list" if (const or not ref) else None
    return None


def _result_kind(t: str) -> str | None:
    base = _norm(t)
    if base == "void":
        return "void"
    if base in _PARAM_KINDS:
        return _PARAM_KINDS[base]
    if _VECTOR.match(base):
        return "tensor_list"
    m = _TUPLE.match(base)
    if m:
        return f"tensor_tuple:{m.group(1).count(',') + 1}"
    return None


def signatures(
    cpp_sources: Sequence[str], functions: Sequence[str] | None, cuda_sources: Sequence[str] = ()
) -> tuple[Signature, ...] | None:
    """The bound functions' signatures when `cpp_sources` only declares them in types this module converts.

    None means "use the pybind11 build": a definition, a macro, a namespace, an overload, an
    undeclared or unknown bound name, or a type outside the list in the module docstring; also
    when `cuda_sources` could define a bound name so that only a call from its own file reaches
    it (`static`, `inline`, `extern "C"`, an unnamed namespace): pybind11's `main.cpp` would
    then meet an undefined symbol, and the shim in `cuda.cu` would not.
    """
    if not functions or len(set(functions)) != len(functions):
        return None
    cuda = _strip_comments("\n".join(cuda_sources))
    if re.search(r'\bnamespace\s*\{|extern\s*"C"', cuda):
        return None
    for f in functions:
        if re.search(rf"\b(?:static|inline|constexpr|consteval)\b[^;{{}}()]*\b{re.escape(f)}\s*\(", cuda):
            return None
    decls: dict[str, Signature] = {}
    for line in _strip_comments("\n".join(cpp_sources)).replace(";", ";\n").split("\n"):
        s = line.strip()
        if not s or re.match(r"^#\s*(include\s*[<\"][\w./]+[>\"]|pragma\s+once)\s*$", s):
            continue
        m = _DECL.match(s)
        if m is None:
            return (
                None  # a definition, a macro, a namespace, a using-declaration, a multi-line declaration...
            )
        name, ret = m.group("name"), _norm(m.group("ret").strip())
        params = [p for p in (x.strip() for x in m.group("params").split(",")) if p and p != "void"]
        ptypes = [_param_type(p) for p in params]
        kinds = [_param_kind(t) if t else None for t in ptypes]
        rkind = _result_kind(ret)
        if name in decls or rkind is None or any(k is None for k in kinds):
            return None
        decls[name] = Signature(name, rkind, tuple(k for k in kinds if k), ret, tuple(t for t in ptypes if t))
    if set(decls) != set(functions):
        return None  # pybind11 binds only `functions`; an unbound declaration is harmless there but rare
    return tuple(decls[f] for f in functions)


_SHIM_PRELUDE = r"""
// ---- cudice binding (verifier/build/cabi.py): the functions through Python's C API, no pybind11 ----
#include <Python.h>
#include <cstdint>
#include <exception>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>
namespace cudice_cabi {
using Impl = c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;
PyObject* tensor_type = nullptr;  // torch.Tensor
PyObject* wrap = nullptr;         // torch._C._wrap_tensor_impl
PyObject* cdata = nullptr;        // "_cdata"
PyObject* oom = nullptr;          // torch.OutOfMemoryError
struct Bad {};                    // an argument no caster of pybind11 would take
inline at::Tensor in(PyObject* o) {  // pybind11's tensor caster: a torch.Tensor (or subclass) only
  int is = PyObject_IsInstance(o, tensor_type);
  if (is != 1) { if (is < 0) PyErr_Clear(); throw Bad{}; }
  PyObject* h = PyObject_GetAttr(o, cdata);  // the TensorImpl address (torch/_tensor.py `_cdata`)
  if (!h) { PyErr_Clear(); throw Bad{}; }
  void* p = PyLong_AsVoidPtr(h);
  Py_DECREF(h);
  if (!p) { PyErr_Clear(); throw Bad{}; }
  return at::Tensor::wrap_tensor_impl(Impl::unsafe_reclaim_from_nonowning(static_cast<c10::TensorImpl*>(p)));
}
inline std::optional<at::Tensor> in_opt(PyObject* o) {
  if (o == Py_None) return std::nullopt;
  return in(o);
}
inline std::vector<at::Tensor> in_list(PyObject* o) {  // pybind11's list caster: any sequence but str/bytes
  if (PyUnicode_Check(o) || PyBytes_Check(o) || !PySequence_Check(o)) throw Bad{};
  PyObject* seq = PySequence_Fast(o, "");
  if (!seq) { PyErr_Clear(); throw Bad{}; }
  std::vector<at::Tensor> v;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  v.reserve(static_cast<size_t>(n));
  try {
    for (Py_ssize_t j = 0; j < n; ++j) v.push_back(in(PySequence_Fast_GET_ITEM(seq, j)));
  } catch (...) { Py_DECREF(seq); throw; }
  Py_DECREF(seq);
  return v;
}
inline double in_double(PyObject* o) {  // pybind11's float caster (convert mode)
  double d = PyFloat_AsDouble(o);
  if (d == -1.0 && PyErr_Occurred()) { PyErr_Clear(); throw Bad{}; }
  return d;
}
inline long long in_long(PyObject* o) {  // pybind11's integer caster: never a float; __index__, then int()
  if (PyFloat_Check(o)) throw Bad{};
  long long v = PyLong_AsLongLong(o);
  if (v == -1 && PyErr_Occurred()) {
    bool type_error = PyErr_ExceptionMatches(PyExc_TypeError);
    PyErr_Clear();
    if (!type_error || !PyNumber_Check(o)) throw Bad{};
    PyObject* i = PyNumber_Long(o);
    if (!i) { PyErr_Clear(); throw Bad{}; }
    v = PyLong_AsLongLong(i);
    Py_DECREF(i);
    if (v == -1 && PyErr_Occurred()) { PyErr_Clear(); throw Bad{}; }
  }
  return v;
}
inline int in_int(PyObject* o) {
  long long v = in_long(o);
  if (v < INT32_MIN || v > INT32_MAX) throw Bad{};
  return static_cast<int>(v);
}
inline bool in_bool(PyObject* o) {  // pybind11's bool caster (convert mode): None is false, else __bool__
  if (o == Py_True) return true;
  if (o == Py_False || o == Py_None) return false;
  PyNumberMethods* nb = Py_TYPE(o)->tp_as_number;
  int r = nb && nb->nb_bool ? nb->nb_bool(o) : -1;
  if (r == 0 || r == 1) return r == 1;
  PyErr_Clear();
  throw Bad{};
}
inline PyObject* py(at::Tensor t) {  // a new reference to the Python tensor (None when undefined)
  if (!t.defined()) Py_RETURN_NONE;
  c10::TensorImpl* p = t.unsafeReleaseTensorImpl();
  PyObject* cap = PyCapsule_New(p, nullptr, nullptr);
  // the Python tensor takes its own reference
  PyObject* obj = cap ? PyObject_CallOneArg(wrap, cap) : nullptr;
  Py_XDECREF(cap);
  Impl::reclaim(p);  // and ours goes
  return obj;
}
inline PyObject* py(double v) { return PyFloat_FromDouble(v); }
inline PyObject* py(long long v) { return PyLong_FromLongLong(v); }
inline PyObject* py_bool(bool v) { return PyBool_FromLong(v ? 1 : 0); }
inline PyObject* py_list(std::vector<at::Tensor> v) {
  PyObject* list = PyList_New(static_cast<Py_ssize_t>(v.size()));
  for (size_t j = 0; list && j < v.size(); ++j) {
    PyObject* item = py(std::move(v[j]));
    if (!item) { Py_DECREF(list); return nullptr; }
    PyList_SET_ITEM(list, static_cast<Py_ssize_t>(j), item);
  }
  return list;
}
template <typename T, size_t... J> PyObject* py_tuple(T v, std::index_sequence<J...>) {
  PyObject* items[] = {py(std::move(std::get<J>(v)))...};
  PyObject* tuple = PyTuple_New(sizeof...(J));
  bool ok = tuple != nullptr;
  for (PyObject* o : items) ok = ok && o != nullptr;
  if (!ok) { for (PyObject* o : items) Py_XDECREF(o); Py_XDECREF(tuple); return nullptr; }
  for (size_t j = 0; j < sizeof...(J); ++j) PyTuple_SET_ITEM(tuple, static_cast<Py_ssize_t>(j), items[j]);
  return tuple;
}
inline PyObject* bad_args(const char* name, const char* signature, PyObject* const* args, Py_ssize_t n) {
  std::string given;
  for (Py_ssize_t j = 0; j < n; ++j) given += std::string(j ? ", " : "") + Py_TYPE(args[j])->tp_name;
  PyErr_Format(PyExc_TypeError, "%s(): incompatible function arguments. The following argument types are "
               "supported:\n    1. %s\n\nInvoked with: %s", name, signature, given.c_str());
  return nullptr;
}
inline PyObject* fail() noexcept {  // the exception torch's and pybind11's translators raise for it
  PyObject* type = PyExc_RuntimeError;
  std::string m;
  try { throw; }
  catch (const c10::IndexError& e) { type = PyExc_IndexError; m = e.what_without_backtrace(); }
  catch (const c10::ValueError& e) { type = PyExc_ValueError; m = e.what_without_backtrace(); }
  catch (const c10::TypeError& e) { type = PyExc_TypeError; m = e.what_without_backtrace(); }
  catch (const c10::NotImplementedError& e) {
    type = PyExc_NotImplementedError; m = e.what_without_backtrace();
  }
  catch (const c10::OutOfMemoryError& e) {
    type = oom ? oom : PyExc_MemoryError; m = e.what_without_backtrace();
  }
  catch (const c10::Error& e) { m = e.what_without_backtrace(); }
  catch (const std::bad_alloc& e) { type = PyExc_MemoryError; m = e.what(); }
  catch (const std::out_of_range& e) { type = PyExc_IndexError; m = e.what(); }
  catch (const std::invalid_argument& e) { type = PyExc_ValueError; m = e.what(); }
  catch (const std::domain_error& e) { type = PyExc_ValueError; m = e.what(); }
  catch (const std::length_error& e) { type = PyExc_ValueError; m = e.what(); }
  catch (const std::range_error& e) { type = PyExc_ValueError; m = e.what(); }
  catch (const std::overflow_error& e) { type = PyExc_OverflowError; m = e.what(); }
  catch (const std::exception& e) { m = e.what(); }
  catch (...) { m = "Caught an unknown exception!"; }
  PyErr_SetString(type, m.c_str());
  return nullptr;
}
inline bool init() {
  PyObject* torch = PyImport_ImportModule("torch");
  if (!torch) return false;
  tensor_type = PyObject_GetAttrString(torch, "Tensor");
  PyObject* c = PyObject_GetAttrString(torch, "_C");
  wrap = c ? PyObject_GetAttrString(c, "_wrap_tensor_impl") : nullptr;
  oom = PyObject_GetAttrString(torch, "OutOfMemoryError");
  if (!oom) PyErr_Clear();
  Py_XDECREF(c);
  Py_DECREF(torch);
  cdata = PyUnicode_InternFromString("_cdata");
  return tensor_type && wrap && cdata;
}
}  // namespace cudice_cabi
#define CUDICE_CABI_CAT2(a, b) a##b
#define CUDICE_CABI_CAT(a, b) CUDICE_CABI_CAT2(a, b)
#define CUDICE_CABI_STR2(a) #a
#define CUDICE_CABI_STR(a) CUDICE_CABI_STR2(a)
"""

_IN = {
    "tensor": "in",
    "tensor_ref": "in",
    "opt_tensor": "in_opt",
    "tensor_list": "in_list",
    "double": "in_double",
    "float": "in_double",
    "int64": "in_long",
    "int32": "in_int",
    "bool": "in_bool",
}


def _c_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def shim(sigs: Sequence[Signature]) -> str:
    """The C++ appended to `cuda.cu`: the declarations again, a METH_FASTCALL wrapper per function, PyInit.

    A wrapper converts its arguments as pybind11's casters do (a TypeError in pybind11's words
    when one does not fit), calls the function through a pointer of its declared type, and
    returns the Python result, or NULL with the translated exception set. The module is a plain
    CPython extension named TORCH_EXTENSION_NAME, loaded like the pybind11 one.
    """
    out = [_SHIM_PRELUDE]
    table = []
    for sig in sigs:
        decl = ", ".join(sig.cpp_params)
        shown = f"({', '.join(f'arg{i}: {t}' for i, t in enumerate(sig.cpp_params))}) -> {sig.cpp_result}"
        out.append(f"{sig.cpp_result} {sig.name}({decl});")
        body, args = [], []
        for i, k in enumerate(sig.params):
            cast = {"float": "static_cast<float>", "int64": "static_cast<int64_t>"}.get(k, "")
            body.append(f"auto t{i} = cudice_cabi::{_IN[k]}(args[{i}]);")
            args.append(f"{cast}(t{i})" if cast else f"t{i}")
        call = f"static_cast<{sig.cpp_result} (*)({decl})>(&{sig.name})({', '.join(args)})"
        r = sig.result
        if r == "void":
            body += [f"{call};", "Py_RETURN_NONE;"]
        elif r == "tensor":
            body.append(f"return cudice_cabi::py({call});")
        elif r in ("double", "float"):
            body.append(f"return cudice_cabi::py(static_cast<double>({call}));")
        elif r in ("int64", "int32"):
            body.append(f"return cudice_cabi::py(static_cast<long long>({call}));")
        elif r == "bool":
            body.append(f"return cudice_cabi::py_bool({call});")
        elif r == "tensor_list":
            body.append(f"return cudice_cabi::py_list({call});")
        else:
            body.append(
                f"return cudice_cabi::py_tuple({call}, std::make_index_sequence<{int(r.split(':')[1])}>{{}});"
            )
        n = len(sig.params)
        out.append(
            f"static PyObject* cudice_cabi_{sig.name}(PyObject*, PyObject* const* args, Py_ssize_t nargs) "
            "noexcept {\n"
            f"  static const char* shown = {_c_string(shown)};\n"
            f"  if (nargs != {n}) return cudice_cabi::bad_args({_c_string(sig.name)}, shown, args, nargs);\n"
            "  try {\n    " + "\n    ".join(body) + "\n"
            "  } catch (const cudice_cabi::Bad&) { "
            f"return cudice_cabi::bad_args({_c_string(sig.name)}, shown, args, nargs); }}\n"
            "  catch (...) { return cudice_cabi::fail(); }\n}"
        )
        doc = _c_string(f"{sig.name}{shown}")
        table.append(
            f"  {{{_c_string(sig.name)}, reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>("
            f"cudice_cabi_{sig.name})), METH_FASTCALL, {doc}}},"
        )
    out.append(
        "static PyMethodDef cudice_cabi_methods[] = {\n"
        + "\n".join(table)
        + "\n  {nullptr, nullptr, 0, nullptr}\n};"
    )
    out.append(
        "static PyModuleDef cudice_cabi_module = {PyModuleDef_HEAD_INIT, "
        "CUDICE_CABI_STR(TORCH_EXTENSION_NAME), nullptr, -1, cudice_cabi_methods, nullptr, nullptr, "
        "nullptr, nullptr};"
    )
    out.append(
        "PyMODINIT_FUNC CUDICE_CABI_CAT(PyInit_, TORCH_EXTENSION_NAME)(void) {\n"
        "  if (!cudice_cabi::init()) return nullptr;\n  return PyModule_Create(&cudice_cabi_module);\n}"
    )
    return "\n".join(out) + "\n"
