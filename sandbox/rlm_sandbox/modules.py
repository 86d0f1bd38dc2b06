"""Read-only proxies for the few standard modules model code may import.

Model code never receives a real module object: a real module leads to its
``__dict__``, to other modules (``json.codecs``, ``datetime.sys``) and from
there to ``os``.  A :class:`ModuleProxy` exposes only the public attributes of
one module whose values are not modules, metaclasses or interpreter plumbing
(nor other objects that lead out of the sandbox), minus a short list of known
gadgets: callables that look up or set attributes by a caller-chosen name with
plain ``getattr``/``setattr`` (``string.Formatter``, ``functools.update_wrapper``,
``copy.dispatch_table``), that ``eval`` annotations (``functools.singledispatch``,
``typing.get_type_hints``) or that build classes from a caller's namespace
(``dataclasses.make_dataclass``).  A few callables are replaced by guarded
equivalents that the policy registers (:func:`replace_attributes`):
``operator.attrgetter``/``methodcaller`` and ``dataclasses.dataclass``.

``from X import Y`` resolves ``Y`` with plain ``getattr`` (the RestrictedPython
guard is not involved), so the proxy is safe under plain attribute access on
its own: every attribute lookup, dunder names included, goes through
``ModuleProxy.__getattribute__`` and sees only the exposed mapping.  The one
extra, ``__name__``, is "re (sandbox)" rather than "re": when ``from re import
enum`` fails, CPython falls back to ``sys.modules[__name__ + ".enum"]``, and
the real name would hand out the real submodule (``collections.abc``).
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Mapping

__all__ = [
    "ALLOWED_MODULES",
    "ModuleProxy",
    "guarded_import",
    "import_module",
    "is_forbidden_value",
    "is_metaclass",
    "plain_str",
    "replace_attributes",
]

#: Modules model code may import (and the one submodule, ``collections.abc``).
ALLOWED_MODULES = frozenset({
    "bisect", "collections", "collections.abc", "copy", "dataclasses", "datetime", "decimal",
    "difflib", "enum", "fractions", "functools", "heapq", "itertools", "json", "math",
    "operator", "random", "re", "statistics", "string", "textwrap", "typing", "unicodedata",
    # datetime.strftime imports time from C through the sandbox's __import__.
    "time",
})

#: Submodules reachable as attributes of their parent's proxy (``collections.abc``).
_SUBMODULES: dict[str, tuple[str, ...]] = {"collections": ("abc",)}

#: For these modules only the listed names are exposed.
ONLY_ATTRIBUTES: dict[str, frozenset[str]] = {
    # copy.dispatch_table is copyreg's: a reducer registered there makes
    # copy() call setattr(any object, any name, any value).
    "copy": frozenset({"copy", "deepcopy", "Error", "error"}),
}

#: Public attributes withheld even though their values are not modules.
EXCLUDED_ATTRIBUTES: dict[str, frozenset[str]] = {
    # Formatter.get_field walks attributes named in the format string.
    "string": frozenset({"Formatter"}),
    # UserString.format/format_map are plain Python methods that call the real
    # str.format on the wrapped text: a route around the guarded formatter.
    "collections": frozenset({"UserString"}),
    # update_wrapper/wraps read and write attributes named by the caller (a
    # route to a function's __globals__); singledispatch evaluates string
    # annotations with eval(); the rest is plumbing nobody analysing text needs.
    "functools": frozenset({
        "update_wrapper", "wraps", "singledispatch", "singledispatchmethod",
        "RLock", "get_cache_token",
    }),
    # get_type_hints eval()s string annotations with real builtins; the others
    # set attributes on whatever they are given, or print to the real stderr.
    "typing": frozenset({
        "get_type_hints", "no_type_check", "no_type_check_decorator", "reveal_type",
        "dataclass_transform", "get_overloads", "clear_overloads",
    }),
    # make_dataclass copies a caller's namespace (any dunder) into a new class
    # and pastes field names into the source it exec()s.
    "dataclasses": frozenset({"make_dataclass"}),
    # global_enum writes members into sys.modules[cls.__module__].__dict__.
    "enum": frozenset({
        "global_enum", "global_enum_repr", "global_flag_repr", "global_str",
        "pickle_by_enum_name", "pickle_by_global_name",
    }),
}

#: Guarded stand-ins the policy registers before any proxy is built.
_REPLACEMENTS: dict[str, dict[str, object]] = {}

#: Interpreter plumbing: constructors of functions, methods and descriptors,
#: and GenericAlias, which forwards attribute reads to any object it wraps.
_PLUMBING: tuple[object, ...] = (
    types.GenericAlias, types.FunctionType, types.MethodType, types.BuiltinFunctionType,
    types.MethodWrapperType, types.WrapperDescriptorType, types.MethodDescriptorType,
    types.ClassMethodDescriptorType, types.GetSetDescriptorType, types.MemberDescriptorType,
    types.CellType,
)

_FORBIDDEN_TYPES: tuple[type, ...] = (
    types.ModuleType,
    types.FrameType,
    types.CodeType,
    types.TracebackType,
)


def plain_str(value: object, what: str) -> str:
    """``value`` as an exact ``str``, or TypeError.

    Guards must never call methods of a str subclass from model code: it could
    override ``startswith`` or ``__contains__`` and lie about its content.
    """
    if type(value) is str:
        return value
    if isinstance(value, str):
        return str.__str__(value)  # an exact copy, made without calling model code
    raise TypeError(f"{what} must be a str, not {type(value).__name__}")


def is_metaclass(value: object) -> bool:
    """True for ``type`` and its subclasses (EnumType, ABCMeta ...).

    Calling a metaclass builds a class from any namespace, dunders included,
    past the checks a class statement gets.
    """
    return issubclass(type(value), type) and type in type.__dict__["__mro__"].__get__(value)


def is_forbidden_value(value: object) -> bool:
    """True for objects model code must never hold.

    Modules, frames, code objects, tracebacks, C capsules, metaclasses and
    namespace dicts (a dict holding ``__builtins__`` is some function's or
    module's globals).
    """
    if isinstance(value, _FORBIDDEN_TYPES):
        return True
    kind = type(value)
    if issubclass(kind, type):
        return is_metaclass(value)
    if kind.__name__ == "PyCapsule" and kind.__module__ == "builtins":
        return True
    return type(value) is dict and "__builtins__" in value


class ModuleProxy:
    """An immutable, attribute-only view of a module's safe public names."""

    __slots__ = ("_proxy_label", "_proxy_names")

    def __init__(self, label: str, names: Mapping[str, object]) -> None:
        object.__setattr__(self, "_proxy_label", label)
        object.__setattr__(self, "_proxy_names", types.MappingProxyType(dict(names)))

    def __getattribute__(self, name: str) -> object:
        names: Mapping[str, object] = object.__getattribute__(self, "_proxy_names")
        try:
            return names[name]
        except KeyError:
            label = object.__getattribute__(self, "_proxy_label")
        if name == "__name__":
            # Read only by CPython's `from X import missing` error path: no
            # "re (sandbox).enum" key exists in sys.modules, so the fallback
            # lookup fails and the ImportError names the module.
            return f"{label} (sandbox)"
        raise AttributeError(f"module {label!r} has no attribute {name!r} in the sandbox")

    def __setattr__(self, name: str, value: object) -> None:
        raise TypeError("sandbox modules are read-only")

    def __delattr__(self, name: str) -> None:
        raise TypeError("sandbox modules are read-only")

    def __repr__(self) -> str:
        return f"<sandbox module {object.__getattribute__(self, '_proxy_label')!r}>"

    def __dir__(self) -> list[str]:
        names: Mapping[str, object] = object.__getattribute__(self, "_proxy_names")
        return sorted(names)


_PROXIES: dict[str, ModuleProxy] = {}


def replace_attributes(module: str, values: Mapping[str, object]) -> None:
    """Expose ``values`` instead of the module's own attributes of those names.

    Called by the policy at import time, before any proxy of ``module`` exists.
    """
    if module in _PROXIES:
        raise RuntimeError(f"the proxy of {module!r} was built before its replacements")
    _REPLACEMENTS.setdefault(module, {}).update(values)


def _exposed_names(name: str, module: types.ModuleType) -> dict[str, object]:
    excluded = EXCLUDED_ATTRIBUTES.get(name, frozenset())
    only = ONLY_ATTRIBUTES.get(name)
    replaced = _REPLACEMENTS.get(name, {})
    exposed: dict[str, object] = {}
    for attr in dir(module):
        if attr.startswith("_") or attr in excluded or (only is not None and attr not in only):
            continue
        value = replaced.get(attr, getattr(module, attr))
        if not is_forbidden_value(value) and not any(value is p for p in _PLUMBING):
            exposed[attr] = value
    for sub in _SUBMODULES.get(name, ()):
        exposed[sub] = import_module(f"{name}.{sub}")
    return exposed


def import_module(name: str) -> ModuleProxy:
    """Return the (cached) proxy of an allowed module; ImportError otherwise."""
    proxy = _PROXIES.get(name)
    if proxy is not None:
        return proxy
    if name not in ALLOWED_MODULES:
        allowed = ", ".join(sorted(ALLOWED_MODULES))
        raise ImportError(f"import of {name!r} is not allowed in the sandbox; allowed: {allowed}")
    module = importlib.import_module(name)
    proxy = ModuleProxy(name, _exposed_names(name, module))
    _PROXIES[name] = proxy
    return proxy


def guarded_import(
    name: str,
    globals: Mapping[str, object] | None = None,
    locals: Mapping[str, object] | None = None,
    fromlist: tuple[str, ...] | list[str] | None = (),
    level: int = 0,
) -> object:
    """The ``__import__`` seen by model code: allow-listed modules only.

    ``import collections.abc`` binds the ``collections`` proxy (whose ``abc``
    is the submodule's proxy); ``from collections.abc import X`` gets the
    submodule's proxy, as in plain Python.

    C functions also import through it (``datetime.strptime`` and
    ``time.strptime`` run ``import _strptime`` in the caller's builtins).  Those
    few internal modules are handed over as they are: model code cannot name
    them (names starting with ``_`` do not compile, and ``__import__`` is not
    reachable by name), so only the interpreter's own C code ever asks.
    """
    if level != 0:
        raise ImportError("relative imports are not allowed in the sandbox")
    name = plain_str(name, "module name")
    if name in C_INTERNAL_IMPORTS and not fromlist:
        return sys.modules[name]
    if "." in name and not fromlist:
        import_module(name)  # refuses what is not allowed
        return import_module(name.partition(".")[0])
    return import_module(name)


#: Modules that C code in allowed modules imports at call time.  They are
#: imported here, when the sandbox starts and before it is hardened, so they
#: are in ``sys.modules`` and need no file access later.
C_INTERNAL_IMPORTS = frozenset({"_strptime"})
for _name in C_INTERNAL_IMPORTS:
    importlib.import_module(_name)
