"""frozen_record (rlm/_records.py) makes the class @dataclass(frozen=True) would make.

Each check builds the same class both ways and compares what a user of the class sees.
"""

from __future__ import annotations

import dataclasses
from dataclasses import InitVar, dataclass, field
from typing import Any

import pytest

from rlm._records import frozen_record, record


@dataclass(frozen=True)
class Plain:
    name: str
    size: int = 3
    tags: list[str] = field(default_factory=list)
    secret: str | None = field(default=None, repr=False)
    note: str = field(default="", compare=False)


@frozen_record
class Record:
    name: str
    size: int = 3
    tags: list[str] = field(default_factory=list)
    secret: str | None = field(default=None, repr=False)
    note: str = field(default="", compare=False)


def both(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
    return Plain(*args, **kwargs), Record(*args, **kwargs)


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [(("a",), {}), (("a", 5), {"tags": ["x"]}), ((), {"name": "b", "secret": "k", "note": "n"})],
)
def test_fields_defaults_and_repr_are_the_dataclasss(args: Any, kwargs: Any) -> None:
    plain, record = both(*args, **kwargs)
    assert vars(record) == vars(plain)
    assert list(vars(record)) == list(vars(plain))  # in field order
    assert repr(record) == repr(plain).replace("Plain(", "Record(")
    assert dataclasses.asdict(record) == dataclasses.asdict(plain)
    names = [f.name for f in dataclasses.fields(plain)]
    assert [f.name for f in dataclasses.fields(record)] == names


def test_each_instance_gets_its_own_default_factory_value() -> None:
    first, second = Record("a"), Record("b")
    assert first.tags == [] and first.tags is not second.tags


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((), {}, "missing 1 required argument: 'name'"),
        (("a",), {"colour": 1}, "unexpected keyword argument 'colour'"),
        (("a", 1, [], None, "", 9), {}, "takes 6 positional arguments but 7 were given"),
        (("a",), {"name": "b"}, "multiple values for argument 'name'"),
    ],
)
def test_wrong_arguments_are_type_errors_as_for_a_dataclass(
    args: Any, kwargs: Any, message: str
) -> None:
    with pytest.raises(TypeError):
        Plain(*args, **kwargs)
    with pytest.raises(TypeError, match=message):
        Record(*args, **kwargs)


def test_records_are_frozen() -> None:
    record = Record("a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.name = "b"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.other = 1  # type: ignore[attr-defined]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del record.name
    assert dataclasses.replace(record, size=4) == Record("a", 4)


def test_equality_and_hash_follow_compare() -> None:
    assert Record("a", note="x") == Record("a", note="y")  # note: compare=False
    assert Record("a") != Record("a", 4)
    assert Record("a") != Plain("a")  # type: ignore[comparison-overlap]  # never equal
    assert hash(Record("a", tags=())) == hash(Plain("a", tags=()))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        hash(Record("a"))  # a list field: unhashable, as the dataclass


def test_keyword_only_records_take_no_positional_arguments() -> None:
    @frozen_record(kw_only=True)
    class Base:
        t: float = 0.0

    @frozen_record(kw_only=True)
    class Child(Base):
        name: str

    assert vars(Child(name="x")) == {"t": 0.0, "name": "x"}
    with pytest.raises(TypeError, match="takes 1 positional argument"):
        Child("x")  # type: ignore[call-arg, arg-type]
    with pytest.raises(TypeError, match="missing 1 required argument: 'name'"):
        Child()  # type: ignore[call-arg]


def test_post_init_runs_after_the_fields_are_set() -> None:
    @frozen_record
    class Normalised:
        items: tuple[str, ...] = ()

        def __post_init__(self) -> None:
            object.__setattr__(self, "items", tuple(self.items))

    assert Normalised(["a"]).items == ("a",)  # type: ignore[arg-type]


def test_dataclasses_subclass_a_record_as_a_frozen_dataclass() -> None:
    @dataclass(frozen=True, kw_only=True)
    class Extended(Record):
        extra: int = 0

    extended = Extended(name="a", extra=2)
    assert (extended.name, extended.size, extended.extra) == ("a", 3, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        extended.extra = 3  # type: ignore[misc]
    with pytest.raises(TypeError, match="non-frozen"):

        @dataclass
        class Mutable(Record):  # type: ignore[misc]  # refused, as the test checks
            pass


def test_what_a_record_cannot_be_is_refused_when_it_is_defined() -> None:
    with pytest.raises(TypeError, match="InitVar"):

        @frozen_record
        class WithInitVar:
            seed: InitVar[int]

    with pytest.raises(TypeError, match="__slots__"):

        @frozen_record
        class WithSlots:
            __slots__ = ("a",)


def test_without_eq_and_repr_records_are_compared_by_identity() -> None:
    @frozen_record(eq=False, repr=False)
    class Ticket:
        amount: int
        items: list[int] = field(default_factory=list)

    first, second = Ticket(1), Ticket(1)
    assert first != second and first == first
    assert len({first, second}) == 2  # hashable by identity, list field or not
    assert repr(first).startswith("<")
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.amount = 2  # type: ignore[misc]


def test_an_undocumented_record_is_documented_by_its_fields() -> None:
    @frozen_record(eq=False, repr=False)
    class Statistics:
        total: int
        waiting: int = 0

    assert Statistics.__doc__ == "Statistics(total, waiting)"


def test_a_mutable_record_is_the_mutable_dataclass() -> None:
    @dataclass
    class PlainTally:
        name: str
        hits: list[int] = field(default_factory=list)

    @record
    class Tally:
        name: str
        hits: list[int] = field(default_factory=list)

    tally = Tally("a")
    tally.name = "b"  # mutable
    tally.hits.append(1)
    assert vars(tally) == vars(PlainTally("b", [1]))
    assert repr(tally).endswith(".Tally(name='b', hits=[1])")
    assert tally == Tally("b", [1]) and tally != Tally("c")
    assert vars(Tally)["__hash__"] is None  # eq without frozen: unhashable, as the dataclass
    with pytest.raises(TypeError):
        hash(tally)
    with pytest.raises(TypeError, match="missing 1 required argument: 'name'"):
        Tally()  # type: ignore[call-arg]


def test_a_mutable_record_cannot_subclass_a_frozen_one() -> None:
    with pytest.raises(TypeError, match="non-frozen"):

        @record
        class Mutable(Record):  # type: ignore[misc]  # refused, as the test checks
            extra: int = 0
