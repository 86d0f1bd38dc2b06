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

Names: model code may use private names of its own (``_helper``, ``self._cache``)
and define the magic methods listed in ``classes.py``; names starting with
``__`` or of the form ``_x_`` stay the policy's (``_getattr_``, ``_write_`` ...),
and so do RestrictedPython's ``_print`` and ``_tmpN``.  ``match`` statements
are rewritten so the values and classes their patterns name are read through
the guards first (:meth:`SandboxTransformer.visit_Match`).
"""

from __future__ import annotations

import builtins
import collections
import contextlib
import copy
import decimal
import importlib
import operator
import string
import sys
import types
import xml.etree.ElementTree
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from RestrictedPython.Guards import guarded_iter_unpack_sequence, guarded_unpack_sequence
from RestrictedPython.transformer import (
    INSPECT_ATTRIBUTES,
)

from rlm_sandbox.classes import (
    READABLE_DUNDERS,
    is_sandbox_class,
    is_sandbox_object,
    private_readable,
    sandbox_metaclass,
)
from rlm_sandbox.compiling import (
    _INTROSPECTION_PREFIXES,
    REPL_FILENAME,
    _is_dunder,
    compile_code,
    is_model_name,
)
from rlm_sandbox.modules import guarded_import, is_forbidden_value, plain_str, replace_attributes

__all__ = [
    "REPL_FILENAME",
    "PrintSink",
    "SafeFormatter",
    "build_builtins",
    "compile_code",
    "guarded_getattr",
    "is_model_name",
    "new_namespace",
    "write_guard",
]

_FIELD_NAME_SPLIT: Callable[[str], tuple[Any, Iterable[tuple[bool, Any]]]] = (
    importlib.import_module("_string").formatter_field_name_split
)


# --- reading attributes --------------------------------------------------------------------

_INTROSPECTION_TYPES = (
    types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType,
    types.FrameType, types.TracebackType, types.CodeType,
)
_SUSPECT_PREFIXES = ("_", *_INTROSPECTION_PREFIXES)
_DESCRIPTIONS = frozenset({"__name__", "__qualname__", "__doc__"})


def _refusal(obj: object, name: str) -> str | None:
    if name == "obj" and isinstance(obj, AttributeError):
        # Since 3.10 AttributeError.obj holds the object the failed lookup was on,
        # which may be an interpreter internal (a module's dict, a worker function).
        return "attribute 'obj' of AttributeError is not accessible in the sandbox"
    if not name.startswith(_SUSPECT_PREFIXES) and name not in INSPECT_ATTRIBUTES:
        return None  # the common case, decided cheaply
    if _is_dunder(name):
        if name in READABLE_DUNDERS:
            return None
        return (f"attribute {name!r} is not accessible in the sandbox (of the dunder "
                "attributes only magic methods, __name__, __qualname__, __doc__ and "
                "__class__ can be read)")
    if name.startswith("_"):
        if not name.startswith("__") and private_readable(obj, name):
            return None
        return (f"attribute {name!r} is not accessible in the sandbox (names starting with "
                "'_' can be read only on objects of classes your code defined)")
    if name in INSPECT_ATTRIBUTES or (
        name.startswith(_INTROSPECTION_PREFIXES) and isinstance(obj, _INTROSPECTION_TYPES)
    ):
        return f"attribute {name!r} is not accessible in the sandbox (interpreter internals)"
    return None


def _class_of(obj: object) -> type:
    """``obj.__class__`` as the sandbox answers it: ``type(obj)``, never a metaclass."""
    if issubclass(type(obj), type):
        raise AttributeError("attribute '__class__' of a class is not accessible in the "
                             "sandbox (it is the metaclass); use the class itself")
    return type(obj)


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
            value = _class_of(obj) if name == "__class__" else getattr(obj, name)
        except AttributeError:
            if default is _MISSING:
                raise
            return default
        kind = type(value)
        if name in _DESCRIPTIONS and kind is not str and value is not None:
            refusal = f"attribute {name!r} is not a str here; the sandbox withholds it"
        elif kind in _PLAIN_VALUE_TYPES:
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

_WRITABLE_TYPES = frozenset({
    list, dict, set, bytearray, collections.deque, collections.ChainMap,
    collections.UserDict, collections.UserList,
    decimal.Context,  # ctx.prec = 5 inside decimal.localcontext()
    xml.etree.ElementTree.Element,  # el.text = "x" (a C type: tag, text, tail, attrib only)
})


def write_guard(obj: object) -> object:
    """``_write_``: return ``obj`` if model code may modify it, else raise TypeError."""
    # The real MRO, not isinstance/issubclass: ABC checks consult obj.__class__
    # and a registry that model code can extend (UserDict.register(object)).
    if not _WRITABLE_TYPES.isdisjoint(type(obj).__mro__) or is_sandbox_object(obj):
        return obj
    raise TypeError(
        f"cannot modify a {type(obj).__name__} object in the sandbox; only lists, dicts, "
        "sets, bytearrays, deques, decimal contexts, XML elements and objects of classes "
        "defined in your code are writable"
    )


def _write_refusal(obj: object, name: str) -> str | None:
    if name.startswith("__"):
        return f"attribute {name!r} cannot be set in the sandbox"
    if name.startswith("_"):
        if is_sandbox_object(obj):
            return None
        return (f"attribute {name!r} cannot be set in the sandbox (names starting with '_' "
                "are writable only on objects of classes your code defined)")
    return _refusal(obj, name)


def private_write_guard(obj: object) -> object:
    """``_write_private_``: the target of ``obj._x = v`` (or ``del obj._x``)."""
    if is_sandbox_object(obj):
        return obj
    raise TypeError(f"cannot set private attributes of a {type(obj).__name__} object in the "
                    "sandbox; only objects of classes defined in your code have them")


def guarded_setattr(obj: object, name: str, value: object) -> None:
    """``setattr`` for model code: public names on writable objects, ``_x`` on its own."""
    name = plain_str(name, "attribute name")
    refusal = _write_refusal(obj, name)
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
    refusal = _write_refusal(obj, name)
    if refusal is not None:
        raise AttributeError(refusal)
    result = inplace_var(op, guarded_getattr(obj, name), value)
    setattr(write_guard(obj), name, result)


def inplace_item(obj: Any, index: object, op: str, value: object) -> None:
    """``obj[index] op= value`` with ``obj`` and ``index`` evaluated once."""
    result = inplace_var(op, obj[index], value)
    target: Any = write_guard(obj)
    target[index] = result


# --- match patterns and guarded stand-ins ------------------------------------------------

#: Classes whose one positional pattern binds the subject itself (``case int(n)``).
_SELF_MATCHING = frozenset({bool, bytearray, bytes, dict, float, frozenset, int, list, set, str,
                            tuple})


def match_values(*values: object) -> types.SimpleNamespace:
    """``_match_values_``: the holder a rewritten ``match`` reads its pattern values from."""
    return types.SimpleNamespace(**{f"v{index}": value for index, value in enumerate(values)})


def match_class(cls: object, reads_attributes: bool) -> object:
    """``_match_class_``: a class a pattern may read attributes through, or TypeError.

    Python reads those attributes with no guard, so only classes whose
    attributes are the model's own data qualify: its classes, named tuples
    (any tuple subclass) and the built-ins that match themselves.
    """
    if reads_attributes and issubclass(type(cls), type):
        kind: type = cls  # type: ignore[assignment]
        if not (kind in _SELF_MATCHING or is_sandbox_class(kind) or tuple in kind.__mro__):
            raise TypeError(
                f"a class pattern on {kind.__name__} cannot read attributes in the sandbox; "
                f"match {kind.__name__}() and read the attributes in the case body")
    return cls


def guarded_attrgetter(attr: str, *attrs: str) -> Callable[[object], object]:
    """``operator.attrgetter`` whose every (dotted) lookup goes through the guard."""
    paths = [plain_str(name, "attribute name").split(".") for name in (attr, *attrs)]

    def get(obj: object) -> object:
        found = []
        for path in paths:
            value = obj
            for part in path:
                value = guarded_getattr(value, part)
            found.append(value)
        return found[0] if len(found) == 1 else tuple(found)

    return get


def guarded_methodcaller(name: str, /, *args: object, **kwargs: object
                         ) -> Callable[[object], object]:
    """``operator.methodcaller`` that looks the method up through the guard."""
    method = plain_str(name, "method name")

    def call(obj: object) -> object:
        function: Any = guarded_getattr(obj, method)
        return function(*args, **kwargs)

    return call


def deepcopy_without_memo(value: object) -> object:
    """``copy.deepcopy(x)``: the memo (``memo[id(memo)]`` keeps every original
    it traversed, stdlib internals included) never reaches model code."""
    return copy.deepcopy(value)


replace_attributes("operator", {"attrgetter": guarded_attrgetter,
                                "methodcaller": guarded_methodcaller})
replace_attributes("copy", {"deepcopy": deepcopy_without_memo})


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
        self._is_stdout = False

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

    def flush(self) -> None:
        """Nothing to flush (stdlib code that writes to ``sys.stdout`` may ask)."""

    @contextlib.contextmanager
    def as_stdout(self) -> Iterator[None]:
        """Be ``sys.stdout`` while model code runs: what the stdlib writes there
        (``pprint.pprint``, ``calendar.prmonth``, ``ET.dump``) is printed output too,
        and ``print()`` follows ``contextlib.redirect_stdout`` as in plain Python.
        Both streams are put back after, whatever model code redirected."""
        saved = sys.stdout, sys.stderr
        sys.stdout = self  # it writes text, as a stream does
        self._is_stdout = True
        try:
            yield
        finally:
            sys.stdout, sys.stderr = saved
            self._is_stdout = False

    def text(self) -> str:
        """What was printed, cut at ``max_chars``."""
        return "".join(self._parts)

    def __call__(self) -> str:  # RestrictedPython's `printed`
        return self.text()

    def _call_print(self, *objects: object, sep: str | None = " ", end: str | None = "\n",
                    file: object = None, flush: bool = False) -> None:
        sep = " " if sep is None else sep
        end = "\n" if end is None else end
        if not isinstance(sep, str) or not isinstance(end, str):
            raise TypeError("print() sep and end must be str or None")
        stream: object = file
        if stream is None:
            stream = sys.stdout if self._is_stdout else self
        if stream is self:
            self.write(str.join(sep, [str(item) for item in objects]) + end)
        elif stream is not None:
            _print_to(stream, objects, sep, end, flush)


def _print_to(stream: object, objects: tuple[object, ...], sep: str, end: str,
              flush: bool) -> None:
    """``print`` to the model's own stream (``print(file=buf)``, or ``sys.stdout`` under
    ``contextlib.redirect_stdout``), write by write as plain Python does, its methods
    read as if model code called ``stream.write(text)`` itself."""
    write: Any = guarded_getattr(stream, "write")
    for index, item in enumerate(objects):
        if index:
            write(sep)
        write(str(item))
    write(end)
    if flush:
        stream_flush: Any = guarded_getattr(stream, "flush")
        stream_flush()


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


def _importer(stand_ins: Mapping[str, object]) -> Callable[..., object]:
    """``__import__`` that hands out ``stand_ins`` (by module name) before real modules."""
    if not stand_ins:
        return guarded_import

    def import_(name: str, globals: Mapping[str, object] | None = None,
                locals: Mapping[str, object] | None = None,
                fromlist: tuple[str, ...] | list[str] | None = (), level: int = 0) -> object:
        name = plain_str(name, "module name")
        if level == 0 and name in stand_ins:
            # `import concurrent.futures` binds `concurrent`; `from ... import` the module.
            return stand_ins[name if fromlist else name.partition(".")[0]]
        return guarded_import(name, globals, locals, fromlist, level)

    return import_


def build_builtins(stand_ins: Mapping[str, object] | None = None) -> dict[str, object]:
    """The ``__builtins__`` mapping of the sandbox namespace; ``stand_ins``: modules
    imported by name instead of real ones (``concurrency.py``)."""
    table: dict[str, object] = {name: getattr(builtins, name) for name in _BUILTIN_NAMES}
    table.update({name: _refused(name) for name in _REFUSED_NAMES})
    table.update({
        "__build_class__": builtins.__build_class__,
        "__import__": _importer(stand_ins or {}),
        "getattr": guarded_getattr,
        "hasattr": guarded_hasattr,
        "setattr": guarded_setattr,
        "type": SafeType(),
    })
    return table


def new_namespace(sink: PrintSink, extra: Mapping[str, object] | None = None,
                  stand_ins: Mapping[str, object] | None = None) -> dict[str, Any]:
    """A fresh globals dict for model code, printing into ``sink``, plus ``extra`` names
    (and ``stand_ins``: see :func:`build_builtins`)."""
    namespace: dict[str, Any] = {
        "__builtins__": build_builtins(stand_ins),
        "__name__": "__main__",  # model classes read as __main__.X, as in a REPL
        "__metaclass__": sandbox_metaclass,
        "_getattr_": guarded_getattr,
        "_getitem_": operator.getitem,
        "_getiter_": iter,
        "_write_": write_guard,
        "_write_private_": private_write_guard,
        "_print_": lambda _getattr=None: sink,
        "_apply_": lambda func, *args, **kwargs: func(*args, **kwargs),
        "_inplacevar_": inplace_var,
        "_inplace_attr_": inplace_attr,
        "_inplace_item_": inplace_item,
        "_match_values_": match_values,
        "_match_class_": match_class,
        "_iter_unpack_sequence_": guarded_iter_unpack_sequence,
        "_unpack_sequence_": guarded_unpack_sequence,
    }
    namespace.update(extra or {})
    return namespace
