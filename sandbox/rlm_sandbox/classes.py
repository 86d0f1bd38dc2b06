"""Classes made by model code, and every other way a class can be made in the sandbox.

Model code may define the ordinary magic methods on its own classes
(``__repr__``, ``__eq__``, ``__iter__``, ``__enter__``/``__exit__`` ...):
:data:`DEFINABLE_DUNDERS`.  Methods that steer attribute access, pickling,
copying or class creation (``__getattr__``, ``__getattribute__``,
``__setattr__``, ``__reduce__``, ``__getstate__``, ``__deepcopy__``, ``__new__``,
``__init_subclass__``, ``__set_name__``, ``__class_getitem__``, ``__del__`` ...)
are refused: stdlib code calls them with its own objects (``copy.deepcopy``
hands ``__deepcopy__`` a memo that keeps every object it copied).  This holds
on every path that makes a class:

* a ``class`` statement runs :func:`sandbox_metaclass` (RestrictedPython adds
  ``metaclass=__metaclass__``), which checks the namespace, strips the
  traceback argument of ``__exit__``, builds the class with the metaclass its
  bases need (EnumType, ABCMeta ...) and registers it as model-defined;
* ``type(name, bases, dict)`` is refused by the sandbox's ``type``, and no
  metaclass is ever handed to model code (:func:`rlm_sandbox.modules.is_metaclass`);
* the Enum functional API (``Enum('X', names)``, reachable from any enum's
  ``mro()``) refuses member names starting with ``_``: :func:`guard_enum_functional_api`;
* ``dataclasses.make_dataclass`` is not exposed; :func:`guarded_dataclass`
  takes only classes from class statements, whose field names are identifiers;
* ``collections.namedtuple`` refuses ``_`` names itself (on exact strings: it
  interns them).

Which private (``_x``) attributes model code may read is decided here too
(:func:`private_readable`): only those its own classes define, plus the
documented ``_asdict``/``_replace``/``_make``/``_fields`` of named tuples.
"""

from __future__ import annotations

import dataclasses
import enum
import sys
import types
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from rlm_sandbox.modules import plain_str, replace_attributes

__all__ = [
    "DEFINABLE_DUNDERS",
    "READABLE_DUNDERS",
    "guard_enum_functional_api",
    "guarded_dataclass",
    "is_sandbox_class",
    "is_sandbox_object",
    "private_readable",
    "sandbox_metaclass",
]

_OPERATORS = (
    "add", "sub", "mul", "matmul", "truediv", "floordiv", "mod", "divmod", "pow",
    "lshift", "rshift", "and", "xor", "or",
)

#: Magic methods model code may define (and assign, e.g. ``__hash__ = None``).
DEFINABLE_DUNDERS = frozenset({
    "__init__", "__post_init__", "__repr__", "__str__", "__format__", "__bytes__",
    "__hash__", "__bool__", "__len__", "__length_hint__", "__iter__", "__next__",
    "__reversed__", "__contains__", "__getitem__", "__setitem__", "__delitem__",
    "__missing__", "__enter__", "__exit__", "__call__", "__copy__",
    "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__",
    "__neg__", "__pos__", "__abs__", "__invert__", "__complex__", "__int__", "__float__",
    "__index__", "__round__", "__trunc__", "__floor__", "__ceil__",
    *(f"__{prefix}{op}__" for op in _OPERATORS for prefix in ("", "r", "i") if op != "divmod"
      or prefix != "i"),
})

#: Dunder attributes model code may read: the magic methods above (so
#: ``super().__init__(...)`` and ``Base.__eq__(self, other)`` work) and four
#: plain descriptions.  ``__class__`` reads as ``type(obj)``, and like
#: ``type()`` it is refused on classes (it would hand out a metaclass).
READABLE_DUNDERS = DEFINABLE_DUNDERS | {"__name__", "__qualname__", "__doc__", "__class__"}

#: Keys Python itself puts in a class namespace.
_CLASS_BOOKKEEPING = frozenset({
    "__module__", "__qualname__", "__doc__", "__classcell__", "__annotations__",
    "__orig_bases__", "__firstlineno__", "__static_attributes__", "__type_params__",
})

#: The documented underscore API of named tuples.
_NAMEDTUPLE_NAMES = frozenset({"_asdict", "_replace", "_make", "_fields", "_field_defaults"})

_SANDBOX_CLASSES: weakref.WeakSet[type] = weakref.WeakSet()
_MRO: Callable[[type], tuple[type, ...]] = type.__dict__["__mro__"].__get__
_CLASS_DICT: Callable[[type], Any] = type.__dict__["__dict__"].__get__
_SUPER_THISCLASS: Callable[[super], type] = super.__dict__["__thisclass__"].__get__
_SUPER_SELF_CLASS: Callable[[super], type | None] = super.__dict__["__self_class__"].__get__


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _check_namespace(name: str, namespace: dict[str, Any]) -> None:
    for key in namespace:
        key = plain_str(key, "class attribute name")
        if _is_dunder(key) and key not in DEFINABLE_DUNDERS | _CLASS_BOOKKEEPING:
            raise TypeError(f"class {name}: defining {key} is not allowed in the sandbox")


def _exit_without_traceback(method: object) -> Callable[..., object]:
    """``__exit__`` as model code wrote it, but called with ``None`` for the traceback."""
    if type(method) is not types.FunctionType:
        raise TypeError("__exit__ must be a plain method (def __exit__(self, *exc))")

    def __exit__(self: object, exc_type: object, exc: object, tb: object) -> object:
        return method(self, exc_type, exc, None)

    __exit__.__qualname__ = method.__qualname__
    return __exit__


def _metaclass_of(bases: tuple[type, ...]) -> type:
    """The most derived metaclass of ``bases``, as ``type.__new__`` would pick it."""
    winner: type = type
    for base in bases:
        candidate = type(base)
        if issubclass(winner, candidate):
            continue
        if not issubclass(candidate, winner):
            raise TypeError("metaclass conflict: the bases' metaclasses are unrelated")
        winner = candidate
    return winner


def sandbox_metaclass(name: str, bases: tuple[type, ...], namespace: dict[str, Any],
                      **kwargs: Any) -> type:
    """The ``__metaclass__`` of every class statement: checks, builds and registers it."""
    name = plain_str(name, "class name")
    _check_namespace(name, namespace)
    if "__exit__" in namespace:
        namespace["__exit__"] = _exit_without_traceback(namespace["__exit__"])
    metaclass = _metaclass_of(bases)
    if metaclass is type:
        cls = type(name, bases, namespace, **kwargs)
    else:  # Enum, ABC, Protocol, NamedTuple ... need their own namespace type
        prepared = metaclass.__prepare__(name, bases, **kwargs)
        for key, value in namespace.items():
            prepared[key] = value
        cls = metaclass(name, bases, prepared, **kwargs)
    _SANDBOX_CLASSES.add(cls)
    return cls


def is_sandbox_class(cls: type) -> bool:
    """True for classes made by model code's class statements (and dataclasses of them)."""
    return cls in _SANDBOX_CLASSES


def is_sandbox_object(obj: object) -> bool:
    """True for classes defined by model code and for their instances."""
    if issubclass(type(obj), type):
        return obj in _SANDBOX_CLASSES
    return type(obj) in _SANDBOX_CLASSES


def _definer(mro: Iterable[type], name: str) -> type | None:
    for cls in mro:
        if name in _CLASS_DICT(cls):
            return cls
    return None


def private_readable(obj: object, name: str) -> bool:
    """May model code read the ``_name`` attribute of ``obj``?

    Yes on its own classes and their instances, when the class that defines
    the attribute is one of the model's too (a stdlib base's private helpers
    stay out of reach); yes for the named-tuple API; never on modules, module
    proxies or built-ins.
    """
    kind = type(obj)
    is_class = issubclass(kind, type)
    owner: type = obj if is_class else kind  # type: ignore[assignment]
    if name in _NAMEDTUPLE_NAMES and tuple in _MRO(owner):
        return True
    if issubclass(kind, super) and not is_class:
        self_class = _SUPER_SELF_CLASS(obj)  # type: ignore[arg-type]
        if self_class is None or self_class not in _SANDBOX_CLASSES:
            return False
        mro = _MRO(self_class)
        after = mro[mro.index(_SUPER_THISCLASS(obj)) + 1:]  # type: ignore[arg-type]
        definer = _definer(after, name)
        return definer is not None and definer in _SANDBOX_CLASSES
    if owner not in _SANDBOX_CLASSES:
        return False
    definer = _definer(_MRO(owner), name)
    return definer is None or definer in _SANDBOX_CLASSES


# --- dataclasses ---------------------------------------------------------------------------


def _check_fields(cls: type) -> None:
    annotations = _CLASS_DICT(cls).get("__annotations__", {})
    for key in annotations:
        if type(key) is not str or not key.isidentifier():
            raise TypeError(f"dataclass(): field name {key!r} is not an identifier")


def guarded_dataclass(cls: type | None = None, /, **options: Any) -> Any:
    """``dataclasses.dataclass`` for classes from class statements only.

    dataclass pastes field names into source code it ``exec``s; a class
    statement's annotations are identifiers, a class made some other way
    (``TypedDict('X', {...})``) could carry any string.
    """
    def wrap(target: type) -> type:
        if not isinstance(target, type) or target not in _SANDBOX_CLASSES:
            raise TypeError("dataclass() works on classes defined with a class statement")
        _check_fields(target)
        made: type = dataclasses.dataclass(target, **options)
        _SANDBOX_CLASSES.add(made)  # slots=True makes a new class
        return made

    return wrap if cls is None else wrap(cls)


# --- the Enum functional API ---------------------------------------------------------------


def _checked_members(names: object) -> list[Any]:
    if isinstance(names, str):
        names = plain_str(names, "enum member names").replace(",", " ").split()
    if isinstance(names, list | tuple) and names and isinstance(names[0], str):
        members: list[Any] = [plain_str(item, "enum member name") for item in names]
        checked = members
    else:
        members = []
        for item in names:  # type: ignore[attr-defined]
            key, value = (item, names[item]) if isinstance(item, str) else item  # type: ignore[index]
            members.append((plain_str(key, "enum member name"), value))
        checked = [key for key, _ in members]
    for member in checked:
        if member.startswith("_"):
            raise ValueError(f"enum member names cannot start with '_' in the sandbox: {member!r}")
    return members


def guard_enum_functional_api() -> None:
    """Make ``Enum('X', names)`` refuse names starting with ``_`` (dunders above all).

    Patched on the class, not in a proxy: every memberless enum is reachable
    from any enum's ``mro()`` (``re.RegexFlag.mro()[5]`` is Enum).
    """
    original = enum.EnumType.__dict__["_create_"]
    if getattr(original, "sandbox_guarded", False):
        return

    def _create_(cls: type, class_name: str, names: object, *, module: str | None = None,
                 **kwargs: Any) -> Any:
        if module is None:  # what _create_ itself would find, one frame further up
            module = sys._getframe(2).f_globals.get("__name__")
        return original(cls, class_name, _checked_members(names), module=module, **kwargs)

    _create_.sandbox_guarded = True  # type: ignore[attr-defined]
    enum.EnumType._create_ = _create_  # type: ignore[attr-defined]


guard_enum_functional_api()
replace_attributes("dataclasses", {"dataclass": guarded_dataclass})
