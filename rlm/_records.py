"""Dataclasses that cost next to nothing to define.

``@dataclass(frozen=True)`` compiles an ``__init__``, ``__setattr__``,
``__delattr__``, ``__eq__``, ``__hash__`` and ``__repr__`` with ``exec`` for
every class, at import (a mutable one its ``__init__``, ``__eq__`` and
``__repr__``): for the 55 records a plain ``rlm run`` imports (events,
settings, results, the budget's, the call loop's) that was 43-45 ms of CPU on
this loaded machine, about an eighth of the host's.  :func:`frozen_record`
(and :func:`record`, mutable) makes the same class for its users (fields,
defaults, ``field(default_factory=...)``, ``dataclasses.fields/replace/asdict``,
keyword-only fields, ``__post_init__``, immutability, equality, hashing and
``repr`` by the dataclass rules), with each of those methods written once here
and shared by every record class.  Type checkers see a dataclass
(``dataclass_transform``), so constructors and assignments are checked as
before.  An instance is about as fast to create as a dataclass's.

Not supported (refused when the class is defined): ``InitVar`` fields,
``__slots__``, ordering.
"""

from __future__ import annotations

import dataclasses
import reprlib
from collections.abc import Callable
from dataclasses import field
from typing import Any, TypeVar, dataclass_transform, overload

__all__ = ["frozen_record", "record"]

_T = TypeVar("_T", bound=type)

_REQUIRED = object()  # a template slot no argument filled
_FACTORY = object()  # a template slot its default factory fills


class _Spec:
    """What the shared methods need to know of one record class, computed once."""

    def __init__(self, cls: type) -> None:
        fields = dataclasses.fields(cls)
        self.name = cls.__qualname__
        # Every field __init__ sets, in order, with its default (or _REQUIRED / _FACTORY).
        self.template: dict[str, Any] = {}
        self.factories: list[tuple[str, Callable[[], Any]]] = []
        for f in fields:
            if f.default is not dataclasses.MISSING:
                self.template[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                self.template[f.name] = _FACTORY
                self.factories.append((f.name, f.default_factory))
            elif f.init:
                self.template[f.name] = _REQUIRED
        self.accepted = frozenset(f.name for f in fields if f.init)
        self.required = tuple(f.name for f in fields if self.template.get(f.name) is _REQUIRED)
        # As a dataclass's __init__ takes them: keyword-only fields after the others.
        self.positional = tuple(f.name for f in fields if f.init and not f.kw_only)
        self.compared = tuple(f.name for f in fields if f.compare)
        self.hashed = tuple(
            f.name for f in fields if (f.compare if f.hash is None else f.hash)
        )
        self.shown = tuple(f.name for f in fields if f.repr)
        self.post_init = hasattr(cls, "__post_init__")


_SPECS: dict[type, _Spec] = {}


def _spec(cls: type) -> _Spec:
    spec = _SPECS.get(cls)
    if spec is None:
        spec = _SPECS[cls] = _Spec(cls)
    return spec


def _init(self: Any, *args: Any, **values: Any) -> None:
    spec = _spec(type(self))
    if args:
        if len(args) > len(spec.positional):
            raise TypeError(
                f"{spec.name}.__init__() takes {len(spec.positional) + 1} positional "
                f"arguments but {len(args) + 1} were given"
            )
        for name in spec.positional[: len(args)]:
            if name in values:
                raise TypeError(f"{spec.name}.__init__() got multiple values for argument "
                                f"{name!r}")
        values.update(zip(spec.positional, args, strict=False))
    if not spec.accepted.issuperset(values):
        unknown = min(values.keys() - spec.accepted)
        raise TypeError(f"{spec.name}.__init__() got an unexpected keyword argument {unknown!r}")
    record = spec.template.copy()
    record.update(values)
    for name in spec.required:
        if record[name] is _REQUIRED:
            raise TypeError(f"{spec.name}.__init__() missing 1 required argument: {name!r}")
    for name, factory in spec.factories:
        if record[name] is _FACTORY:
            record[name] = factory()
    object.__setattr__(self, "__dict__", record)  # self.x = ... would refuse: it is frozen
    if spec.post_init:
        self.__post_init__()


def _setattr(self: Any, name: str, value: Any) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _delattr(self: Any, name: str) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


def _eq(self: Any, other: object) -> object:  # bool, or NotImplemented
    if other.__class__ is not self.__class__:
        return NotImplemented
    names = _spec(type(self)).compared
    equal: bool = tuple(getattr(self, n) for n in names) == tuple(getattr(other, n) for n in names)
    return equal


def _hash(self: Any) -> int:
    return hash(tuple(getattr(self, name) for name in _spec(type(self)).hashed))


@reprlib.recursive_repr()
def _repr(self: Any) -> str:
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in _spec(type(self)).shown)
    return f"{type(self).__qualname__}({shown})"


_init.__name__ = _init.__qualname__ = "__init__"
_setattr.__name__ = _setattr.__qualname__ = "__setattr__"
_delattr.__name__ = _delattr.__qualname__ = "__delattr__"
_eq.__name__ = _eq.__qualname__ = "__eq__"
_hash.__name__ = _hash.__qualname__ = "__hash__"
_repr.__name__ = _repr.__qualname__ = "__repr__"


def _make(cls: _T, *, frozen: bool, kw_only: bool, eq: bool, repr: bool) -> _T:
    if "__slots__" in vars(cls):
        raise TypeError(f"{cls.__qualname__}: a record cannot have __slots__")
    # A frozen record is marked frozen for dataclasses (below), so that a frozen dataclass
    # may subclass it and a mutable one may not, as with @dataclass(frozen=True); the
    # dataclass under it is not (that would exec the frozen methods), so its record bases
    # are unmarked while dataclasses processes it.
    bases = [base for base in cls.__mro__[1:] if base in _SPECS] if frozen else []
    for base in bases:
        base.__dataclass_params__.frozen = False  # type: ignore[attr-defined]
    # Without a docstring dataclasses writes one from inspect.signature(cls): 3-4 ms the
    # first time in a process, and the signature it would see is object's.
    undocumented = not vars(cls).get("__doc__")
    if undocumented:
        cls.__doc__ = cls.__name__
    try:
        dataclasses.dataclass(init=False, repr=False, eq=False, kw_only=kw_only)(cls)
    finally:
        for base in bases:
            base.__dataclass_params__.frozen = True  # type: ignore[attr-defined]
    if undocumented:
        names = ", ".join(f.name for f in dataclasses.fields(cls))
        cls.__doc__ = f"{cls.__name__}({names})"
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    params.init, params.repr, params.eq, params.frozen = True, repr, eq, frozen
    own = vars(cls)
    if any(f._field_type is dataclasses._FIELD_INITVAR  # type: ignore[attr-defined]
           for f in own["__dataclass_fields__"].values()):
        raise TypeError(f"{cls.__qualname__}: a record cannot have InitVar fields")
    explicit_hash = "__hash__" in own and not (own["__hash__"] is None and "__eq__" in own)
    methods: dict[str, Any] = {"__init__": _init}
    if frozen:
        methods.update(__setattr__=_setattr, __delattr__=_delattr)
    if eq:
        methods["__eq__"] = _eq
    if repr:
        methods["__repr__"] = _repr
    for name, method in methods.items():
        if name not in own:
            setattr(cls, name, method)
    if eq and not explicit_hash:
        # As dataclasses: a frozen record hashes by its fields, a mutable one is unhashable.
        cls.__hash__ = _hash if frozen else None  # type: ignore[assignment]
    _spec(cls)  # a misdeclared class fails here, not at its first instance
    return cls


@overload
def frozen_record(cls: _T, /) -> _T: ...


@overload
def frozen_record(
    *, kw_only: bool = False, eq: bool = True, repr: bool = True
) -> Callable[[_T], _T]: ...


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def frozen_record(
    cls: _T | None = None, /, *, kw_only: bool = False, eq: bool = True, repr: bool = True
) -> Any:
    """``@dataclass(frozen=True, kw_only=..., eq=..., repr=...)`` without ``exec`` (see above).

    Methods the class body defines itself (say ``__repr__``) are kept, as
    dataclasses keeps them.  With ``eq=False`` instances compare and hash by
    identity; with ``repr=False`` they have object's ``repr``.
    """

    def make(cls: _T) -> _T:
        return _make(cls, frozen=True, kw_only=kw_only, eq=eq, repr=repr)

    return make if cls is None else make(cls)


@overload
def record(cls: _T, /) -> _T: ...


@overload
def record(
    *, kw_only: bool = False, eq: bool = True, repr: bool = True
) -> Callable[[_T], _T]: ...


@dataclass_transform(field_specifiers=(field,))
def record(
    cls: _T | None = None, /, *, kw_only: bool = False, eq: bool = True, repr: bool = True
) -> Any:
    """``@dataclass(kw_only=..., eq=..., repr=...)``, mutable, without ``exec`` (see above)."""

    def make(cls: _T) -> _T:
        return _make(cls, frozen=False, kw_only=kw_only, eq=eq, repr=repr)

    return make if cls is None else make(cls)
