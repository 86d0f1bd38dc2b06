"""The RestrictedPython policy of the sandbox REPL.

:func:`compile_code` compiles model code; :func:`new_namespace` builds the
globals whose guards decide at run time what it may touch:

* ``_getattr_`` (:func:`guarded_getattr`) refuses ``_`` names, frame/code names
  (``gi_frame``, ``f_globals`` ...) and any *value* that is a module, frame,
  code object, traceback or namespace dict; ``str.format``/``format_map`` come
  back routed through :class:`SafeFormatter`, whose field lookup is guarded too.
* ``_write_`` (:func:`write_guard`) allows writes to lists, dicts, sets,
  bytearrays, deques and to classes (and instances) defined by model code.
* ``__import__`` hands out read-only module proxies (``modules.py``).

Beyond RestrictedPython: ``obj.attr += v`` and ``obj[k] += v`` become calls to
``_inplace_attr_``/``_inplace_item_`` (target and index evaluated once; unlike
plain Python, ``v`` is evaluated before the current value is read), and every
``print`` lands in one shared :class:`PrintSink`.
"""

from __future__ import annotations

import ast
import builtins
import collections
import importlib
import operator
import string
import types
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from RestrictedPython.compile import compile_restricted_exec
from RestrictedPython.Guards import guarded_iter_unpack_sequence, guarded_unpack_sequence
from RestrictedPython.transformer import (
    INSPECT_ATTRIBUTES,
    IOPERATOR_TO_STR,
    RestrictingNodeTransformer,
)

from rlm_sandbox.modules import guarded_import, is_forbidden_value, plain_str

__all__ = [
    "REPL_FILENAME",
    "PrintSink",
    "SafeFormatter",
    "build_builtins",
    "compile_code",
    "guarded_getattr",
    "new_namespace",
    "write_guard",
]

REPL_FILENAME = "<repl>"

_FIELD_NAME_SPLIT: Callable[[str], tuple[Any, Iterable[tuple[bool, Any]]]] = (
    importlib.import_module("_string").formatter_field_name_split
)


# --- compilation ---------------------------------------------------------------------------


class SandboxTransformer(RestrictingNodeTransformer):
    """RestrictedPython's transformer, plus augmented assignment to attributes and items."""

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST | Iterable[ast.AST] | None:
        target = node.target
        if not isinstance(target, ast.Attribute | ast.Subscript):
            return super().visit_AugAssign(node)
        op = ast.Constant(IOPERATOR_TO_STR[type(node.op)])
        value = self.visit(node.value)
        if isinstance(target, ast.Attribute):
            # Visit a load of the same attribute: this runs RestrictedPython's
            # name checks and yields `_getattr_(obj, 'attr')`.
            probe = ast.copy_location(ast.Attribute(target.value, target.attr, ast.Load()), target)
            loaded = self.visit(probe)
            args = [loaded.args[0], ast.Constant(target.attr), op, value]
            helper = "_inplace_attr_"
        else:
            args = [self.visit(target.value), self.visit(target.slice), op, value]
            helper = "_inplace_item_"
        call = ast.Call(ast.Name(helper, ast.Load()), args, [])
        return ast.fix_missing_locations(ast.copy_location(ast.Expr(call), node))


def compile_code(source: str, filename: str = REPL_FILENAME) -> types.CodeType:
    """Compile model code under the sandbox policy.

    Raises SyntaxError whose message lists every syntax or policy error with
    its line number, one per line.
    """
    try:
        result = compile_restricted_exec(source, filename, policy=SandboxTransformer)
    except ValueError as exc:  # e.g. "source code string cannot contain null bytes"
        raise SyntaxError(f"Line 1: {exc}") from None
    if result.errors:
        raise SyntaxError("\n".join(result.errors))
    code: types.CodeType | None = result.code
    if code is None:  # pragma: no cover - RestrictedPython returns errors instead
        raise SyntaxError("the code could not be compiled")
    return code


# --- reading attributes --------------------------------------------------------------------

_INTROSPECTION_TYPES = (
    types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType,
    types.FrameType, types.TracebackType, types.CodeType,
)
_INTROSPECTION_PREFIXES = ("gi_", "cr_", "ag_", "f_", "tb_", "co_")
_SUSPECT_PREFIXES = ("_", *_INTROSPECTION_PREFIXES)


def _refusal(obj: object, name: str) -> str | None:
    if name == "obj" and isinstance(obj, AttributeError):
        # Since 3.10 AttributeError.obj holds the object the failed lookup was on,
        # which may be an interpreter internal (a module's dict, a worker function).
        return "attribute 'obj' of AttributeError is not accessible in the sandbox"
    if not name.startswith(_SUSPECT_PREFIXES) and name not in INSPECT_ATTRIBUTES:
        return None  # the common case, decided cheaply
    if name.startswith("_"):
        return f"attribute {name!r} is not accessible in the sandbox (names starting with '_')"
    if name in INSPECT_ATTRIBUTES or (
        name.startswith(_INTROSPECTION_PREFIXES) and isinstance(obj, _INTROSPECTION_TYPES)
    ):
        return f"attribute {name!r} is not accessible in the sandbox (interpreter internals)"
    return None


_MISSING = object()
#: Values of these exact types are returned without further checks (the hot path).
_PLAIN_VALUE_TYPES = frozenset({
    int, float, complex, bool, str, bytes, tuple, list, set, frozenset, type(None),
    types.FunctionType, types.MethodType,
})


def guarded_getattr(obj: object, name: str, default: object = _MISSING) -> object:
    """``getattr`` for model code (also what ``obj.name`` compiles to)."""
    if type(name) is not str:
        name = plain_str(name, "attribute name")
    refusal = _refusal(obj, name)
    if refusal is None:
        try:
            value = getattr(obj, name)
        except AttributeError:
            if default is _MISSING:
                raise
            return default
        kind = type(value)
        if kind in _PLAIN_VALUE_TYPES:
            return value
        if kind is types.BuiltinMethodType:  # d.get, s.split ...: only str.format matters
            if value.__name__ not in _FORMAT_NAMES:
                return value
        elif is_forbidden_value(value):
            refusal = f"attribute {name!r} holds a {kind.__name__}, which the sandbox withholds"
        if refusal is None:
            # Judge the value, not the route: super(S, s).format is str.format too.
            return _safe_format_method(value) or value
    if default is _MISSING:
        raise AttributeError(refusal)
    return default


def guarded_hasattr(obj: object, name: str) -> bool:
    """``hasattr`` that answers False for anything the guard refuses."""
    try:
        guarded_getattr(obj, name)
    except AttributeError:
        return False
    return True


class SafeFormatter(string.Formatter):
    """``str.format`` semantics with guarded ``{0.attr}`` field lookups."""

    def get_field(
        self, field_name: str, args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> tuple[Any, Any]:
        first, rest = _FIELD_NAME_SPLIT(field_name)
        obj = self.get_value(first, args, kwargs)
        for is_attr, key in rest:
            obj = guarded_getattr(obj, key) if is_attr else obj[key]
        return obj, first


_FORMATTER = SafeFormatter()
_FORMAT_NAMES = frozenset({"format", "format_map"})
_STR_FORMAT = str.format
_STR_FORMAT_MAP = str.format_map


def _format(template: object, args: Sequence[Any], mapping: Mapping[str, Any],
            use_map: bool) -> str:
    template = plain_str(template, "the format template")
    if "." not in template and "[" not in template:
        # No attribute or item lookups are possible: the native path is safe (and fast).
        return template.format_map(mapping) if use_map else template.format(*args, **mapping)
    return _FORMATTER.vformat(template, args, mapping)


def _safe_format_method(value: object) -> Callable[..., str] | None:
    """The guarded stand-in when ``value`` is ``str.format``/``format_map``, else None."""
    if value is _STR_FORMAT:
        return lambda template, *args, **kwargs: _format(template, args, kwargs, False)
    if value is _STR_FORMAT_MAP:
        return lambda template, mapping: _format(template, (), mapping, True)
    if type(value) is types.BuiltinMethodType and value.__name__ in _FORMAT_NAMES:
        template = value.__self__
        if isinstance(template, str):
            if value.__name__ == "format":
                return lambda *args, **kwargs: _format(template, args, kwargs, False)
            return lambda mapping: _format(template, (), mapping, True)
    return None


# --- writing -------------------------------------------------------------------------------

_SANDBOX_CLASSES: weakref.WeakSet[type] = weakref.WeakSet()
_WRITABLE_TYPES = frozenset({
    list, dict, set, bytearray, collections.deque, collections.ChainMap,
    collections.UserDict, collections.UserList,
})


def sandbox_metaclass(name: str, bases: tuple[type, ...], namespace: dict[str, Any],
                      **kwargs: Any) -> type:
    """The ``__metaclass__`` of every class statement: builds it and marks it writable."""
    cls = type(name, bases, namespace, **kwargs)
    _SANDBOX_CLASSES.add(cls)
    return cls


def is_sandbox_object(obj: object) -> bool:
    """True for classes defined by model code and for their instances."""
    if isinstance(obj, type):
        return obj in _SANDBOX_CLASSES
    return type(obj) in _SANDBOX_CLASSES


def write_guard(obj: object) -> object:
    """``_write_``: return ``obj`` if model code may modify it, else raise TypeError."""
    # The real MRO, not isinstance/issubclass: ABC checks consult obj.__class__
    # and a registry that model code can extend (UserDict.register(object)).
    if not _WRITABLE_TYPES.isdisjoint(type(obj).__mro__) or is_sandbox_object(obj):
        return obj
    raise TypeError(
        f"cannot modify a {type(obj).__name__} object in the sandbox; only lists, dicts, "
        "sets, bytearrays, deques and objects of classes defined in your code are writable"
    )


def guarded_setattr(obj: object, name: str, value: object) -> None:
    """``setattr`` for model code: public names on writable objects only."""
    name = plain_str(name, "attribute name")
    refusal = _refusal(obj, name)
    if refusal is not None:
        raise AttributeError(refusal)
    setattr(write_guard(obj), name, value)


_INPLACE_OPERATORS: dict[str, Callable[[Any, Any], Any]] = {
    "+=": operator.iadd, "-=": operator.isub, "*=": operator.imul, "/=": operator.itruediv,
    "//=": operator.ifloordiv, "%=": operator.imod, "**=": operator.ipow,
    "<<=": operator.ilshift, ">>=": operator.irshift, "|=": operator.ior,
    "^=": operator.ixor, "&=": operator.iand, "@=": operator.imatmul,
}


def inplace_var(op: str, target: object, value: object) -> object:
    """``_inplacevar_``: ``x += v`` becomes ``x = _inplacevar_('+=', x, v)``."""
    return _INPLACE_OPERATORS[op](target, value)


def inplace_attr(obj: object, name: str, op: str, value: object) -> None:
    """``obj.name op= value`` with ``obj`` evaluated once."""
    result = inplace_var(op, guarded_getattr(obj, name), value)
    setattr(write_guard(obj), name, result)


def inplace_item(obj: Any, index: object, op: str, value: object) -> None:
    """``obj[index] op= value`` with ``obj`` and ``index`` evaluated once."""
    result = inplace_var(op, obj[index], value)
    target: Any = write_guard(obj)
    target[index] = result


# --- builtins and namespace ----------------------------------------------------------------


class SafeType:
    """``type`` for model code: one argument only, and never a metaclass back."""

    def __call__(self, obj: object, *rest: object) -> type:
        if rest:
            raise TypeError("type() takes one argument in the sandbox; use a class statement")
        kind = type(obj)
        if issubclass(kind, type):
            raise TypeError("type() of a class is not available in the sandbox")
        return kind

    def __instancecheck__(self, obj: object) -> bool:
        return isinstance(obj, type)

    def __subclasscheck__(self, cls: type) -> bool:
        return issubclass(cls, type)

    def __repr__(self) -> str:
        return "<class 'type'>"


class PrintSink:
    """The one print buffer of a sandbox: keeps ``max_chars`` characters, counts all."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max(0, max_chars)
        self.total_chars = 0
        self._parts: list[str] = []
        self._stored = 0

    def reset(self) -> None:
        """Forget everything printed so far (called before each exec)."""
        self.total_chars = 0
        self._parts.clear()
        self._stored = 0

    def write(self, text: str) -> None:
        text = plain_str(text, "printed text")
        self.total_chars += len(text)
        room = self.max_chars - self._stored
        if room > 0 and text:
            part = text[:room]
            self._parts.append(part)
            self._stored += len(part)

    def text(self) -> str:
        """What was printed, cut at ``max_chars``."""
        return "".join(self._parts)

    def __call__(self) -> str:  # RestrictedPython's `printed`
        return self.text()

    def _call_print(self, *objects: object, sep: str | None = " ", end: str | None = "\n",
                    file: object = None, flush: bool = False) -> None:
        if file is not None:
            raise TypeError("print(file=...) is not supported in the sandbox; just print()")
        sep = " " if sep is None else sep
        end = "\n" if end is None else end
        if not isinstance(sep, str) or not isinstance(end, str):
            raise TypeError("print() sep and end must be str or None")
        self.write(str.join(sep, [str(item) for item in objects]) + end)


_BUILTIN_NAMES = (
    "abs", "all", "any", "ascii", "bin", "bool", "bytearray", "bytes", "callable", "chr",
    "classmethod", "complex", "dict", "divmod", "enumerate", "filter", "float", "format",
    "frozenset", "hash", "hex", "id", "int", "isinstance", "issubclass", "iter", "len",
    "list", "map", "max", "min", "next", "object", "oct", "ord", "pow", "property", "range",
    "repr", "reversed", "round", "set", "slice", "sorted", "staticmethod", "str", "sum",
    "super", "tuple", "zip", "None", "True", "False", "Ellipsis", "NotImplemented",
    "ArithmeticError", "AssertionError", "AttributeError", "BaseException", "EOFError",
    "Exception", "FloatingPointError", "GeneratorExit", "ImportError", "IndexError",
    "KeyError", "KeyboardInterrupt", "LookupError", "MemoryError", "ModuleNotFoundError",
    "NameError", "NotImplementedError", "OSError", "OverflowError", "RecursionError",
    "RuntimeError", "StopIteration", "SystemExit", "TimeoutError", "TypeError",
    "UnboundLocalError", "UnicodeDecodeError", "UnicodeEncodeError", "UnicodeError",
    "ValueError", "ZeroDivisionError", "Warning", "UserWarning", "DeprecationWarning",
)
_REFUSED_NAMES = (
    "eval", "exec", "compile", "open", "input", "globals", "locals", "vars", "dir", "help",
    "memoryview", "breakpoint", "exit", "quit",
)


def _refused(name: str) -> Callable[..., None]:
    def refused(*args: object, **kwargs: object) -> None:
        raise NameError(f"{name}() is not available in the sandbox")
    refused.__name__ = refused.__qualname__ = name
    return refused


def build_builtins() -> dict[str, object]:
    """The ``__builtins__`` mapping of the sandbox namespace."""
    table: dict[str, object] = {name: getattr(builtins, name) for name in _BUILTIN_NAMES}
    table.update({name: _refused(name) for name in _REFUSED_NAMES})
    table.update({
        "__build_class__": builtins.__build_class__,
        "__import__": guarded_import,
        "getattr": guarded_getattr,
        "hasattr": guarded_hasattr,
        "setattr": guarded_setattr,
        "type": SafeType(),
    })
    return table


def new_namespace(sink: PrintSink, extra: Mapping[str, object] | None = None) -> dict[str, Any]:
    """A fresh globals dict for model code, printing into ``sink``, plus ``extra`` names."""
    namespace: dict[str, Any] = {
        "__builtins__": build_builtins(),
        "__name__": "__main__",  # model classes read as __main__.X, as in a REPL
        "__metaclass__": sandbox_metaclass,
        "_getattr_": guarded_getattr,
        "_getitem_": operator.getitem,
        "_getiter_": iter,
        "_write_": write_guard,
        "_print_": lambda _getattr=None: sink,
        "_apply_": lambda func, *args, **kwargs: func(*args, **kwargs),
        "_inplacevar_": inplace_var,
        "_inplace_attr_": inplace_attr,
        "_inplace_item_": inplace_item,
        "_iter_unpack_sequence_": guarded_iter_unpack_sequence,
        "_unpack_sequence_": guarded_unpack_sequence,
    }
    namespace.update(extra or {})
    return namespace
