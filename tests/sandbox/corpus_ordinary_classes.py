"""Ordinary analysis code, part 2: classes, dataclasses, typing, enum, match and the REPL's
own functions (see sandbox_corpus.py)."""

from __future__ import annotations

ORDINARY_CLASSES: dict[str, str] = {
    # --- classes ------------------------------------------------------------------------------
    "class with repr eq hash": """
class Event:
    def __init__(self, user, action):
        self.user = user
        self.action = action
    def __repr__(self):
        return f"Event({self.user!r}, {self.action!r})"
    def __eq__(self, other):
        if not isinstance(other, Event):
            return NotImplemented
        return (self.user, self.action) == (other.user, other.action)
    def __hash__(self):
        return hash((self.user, self.action))
e = Event("bob", "upload")
assert repr(e) == "Event('bob', 'upload')" and e == Event("bob", "upload")
assert len({e, Event("bob", "upload")}) == 1 and e != "x"
""",
    "class with str len iter contains getitem": """
class Log:
    def __init__(self, text):
        self._lines = text.splitlines()
    def __len__(self):
        return len(self._lines)
    def __iter__(self):
        return iter(self._lines)
    def __getitem__(self, index):
        return self._lines[index]
    def __contains__(self, word):
        return any(word in line for line in self._lines)
    def __str__(self):
        return f"<Log of {len(self)} lines>"
log = Log(context)
assert len(log) == 6 and "carol" in log and "dave" not in log
assert log[0].startswith("2024") and log[-1].startswith("{") and str(log) == "<Log of 6 lines>"
assert sum(1 for _ in log) == 6 and log[1:3] == log._lines[1:3]
""",
    "ordering with lt and sorting": """
class Task:
    def __init__(self, priority, name):
        self.priority, self.name = priority, name
    def __lt__(self, other):
        return (self.priority, self.name) < (other.priority, other.name)
    def __repr__(self):
        return self.name
tasks = sorted([Task(2, "b"), Task(1, "z"), Task(2, "a")])
assert repr(tasks) == "[z, a, b]"
import heapq
heap = [Task(3, "c"), Task(1, "a")]
heapq.heapify(heap)
assert heapq.heappop(heap).name == "a"
""",
    "context manager class": """
class Section:
    depth = 0
    def __init__(self, name):
        self.name = name
        self.events = []
    def __enter__(self):
        Section.depth += 1
        self.events.append("enter")
        return self
    def __exit__(self, exc_type, exc, tb):
        Section.depth -= 1
        self.events.append(f"exit {exc_type.__name__ if exc_type else None}")
        self.tb = tb  # the sandbox passes None: no traceback reaches model code
        return exc_type is KeyError
with Section("a") as s:
    assert Section.depth == 1
with Section("b") as t:
    raise KeyError("swallowed")
assert s.events == ["enter", "exit None"] and t.events == ["enter", "exit KeyError"]
assert s.tb is None and t.tb is None
assert Section.depth == 0
""",
    "private helpers and caches": """
class Index:
    def __init__(self, text):
        self._text = text
        self._cache = {}
    def _tokens(self):
        return self._text.lower().split()
    def count(self, word):
        if word not in self._cache:
            self._cache[word] = self._tokens().count(word)
        return self._cache[word]
idx = Index(context)
assert idx.count("info") == 2 and "info" in idx._cache
idx._cache.clear()
assert idx._cache == {}
""",
    "module level private names": """
_MAX = 3
def _top(items, n=_MAX):
    return sorted(items, reverse=True)[:n]
_result = _top([5, 1, 9, 7])
assert _result == [9, 7, 5]
for _ in range(2):
    pass
""",
    "inheritance and super": """
class Analyzer:
    def __init__(self, name):
        self.name = name
        self.results = []
    def analyze(self, line):
        self.results.append(len(line))
        return self
    def summary(self):
        return f"{self.name}: {len(self.results)}"
class ErrorAnalyzer(Analyzer):
    def __init__(self):
        super().__init__("errors")
        self.errors = 0
    def analyze(self, line):
        if "ERROR" in line:
            self.errors += 1
        return super().analyze(line)
    def summary(self):
        return super().summary() + f" ({self.errors} errors)"
a = ErrorAnalyzer()
for line in context.splitlines():
    a.analyze(line)
assert a.summary() == "errors: 6 (2 errors)" and isinstance(a, Analyzer)
assert issubclass(ErrorAnalyzer, Analyzer) and ErrorAnalyzer.__name__ == "ErrorAnalyzer"
""",
    "explicit base calls": """
class Base:
    def __init__(self, x):
        self.x = x
    def describe(self):
        return f"x={self.x}"
class Child(Base):
    def __init__(self, x, y):
        Base.__init__(self, x)
        self.y = y
    def describe(self):
        return Base.describe(self) + f" y={self.y}"
assert Child(1, 2).describe() == "x=1 y=2"
""",
    "class and static methods properties": """
class Temperature:
    scale = "C"
    def __init__(self, celsius):
        self._celsius = celsius
    @property
    def fahrenheit(self):
        return self._celsius * 9 / 5 + 32
    @fahrenheit.setter
    def fahrenheit(self, value):
        self._celsius = (value - 32) * 5 / 9
    @classmethod
    def boiling(cls):
        return cls(100)
    @staticmethod
    def valid(c):
        return c >= -273.15
t = Temperature.boiling()
assert t.fahrenheit == 212.0 and Temperature.valid(-10)
t.fahrenheit = 32
assert t._celsius == 0.0 and type(t).scale == "C"
""",
    "dict subclass with missing": """
class Histogram(dict):
    def __missing__(self, key):
        return 0
    def add(self, key):
        self[key] = self[key] + 1
h = Histogram()
for w in "a b a c a".split():
    h.add(w)
assert h == {"a": 3, "b": 1, "c": 1} and h["zzz"] == 0
""",
    "list subclass and UserDict": """
from collections import UserDict
class Stack(list):
    def push(self, x):
        self.append(x)
        return self
    def peek(self):
        return self[-1]
s = Stack().push(1).push(2)
assert s.peek() == 2 and len(s) == 2
class LowerDict(UserDict):
    def __setitem__(self, key, value):
        super().__setitem__(key.lower(), value)
d = LowerDict()
d["KEY"] = 1
assert d == {"key": 1} and "key" in d
""",
    "arithmetic dunders": """
class Vec:
    def __init__(self, x, y):
        self.x, self.y = x, y
    def __add__(self, o):
        return Vec(self.x + o.x, self.y + o.y)
    def __mul__(self, k):
        return Vec(self.x * k, self.y * k)
    __rmul__ = __mul__
    def __neg__(self):
        return Vec(-self.x, -self.y)
    def __abs__(self):
        return (self.x ** 2 + self.y ** 2) ** 0.5
    def __eq__(self, o):
        return (self.x, self.y) == (o.x, o.y)
    def __bool__(self):
        return bool(self.x or self.y)
    def __iter__(self):
        yield self.x
        yield self.y
v = Vec(3, 4)
assert abs(v) == 5.0 and v + v == Vec(6, 8) and 2 * v == Vec(6, 8) and -v == Vec(-3, -4)
assert not Vec(0, 0) and list(v) == [3, 4]
v += Vec(1, 1)
assert tuple(v) == (4, 5)
""",
    "callable objects": """
class Matcher:
    def __init__(self, word):
        self.word = word
    def __call__(self, line):
        return self.word in line
is_error = Matcher("ERROR")
assert sum(map(is_error, context.splitlines())) == 2 and callable(is_error)
""",
    "iterator class": """
class Countdown:
    def __init__(self, n):
        self.n = n
    def __iter__(self):
        return self
    def __next__(self):
        if self.n <= 0:
            raise StopIteration
        self.n -= 1
        return self.n + 1
assert list(Countdown(3)) == [3, 2, 1]
""",
    "class attributes and registries": """
class Plugin:
    registry = {}
    def __init__(self, name):
        self.name = name
        Plugin.registry[name] = self
    @classmethod
    def get(cls, name):
        return cls.registry.get(name)
Plugin("a"); Plugin("b")
assert sorted(Plugin.registry) == ["a", "b"] and Plugin.get("a").name == "a"
""",
    "abstract base classes": """
from collections.abc import Mapping, Sequence, Iterable, Sized
class Frozen(Mapping):
    def __init__(self, data):
        self._data = dict(data)
    def __getitem__(self, key):
        return self._data[key]
    def __iter__(self):
        return iter(self._data)
    def __len__(self):
        return len(self._data)
f = Frozen({"a": 1})
assert f["a"] == 1 and dict(f.items()) == {"a": 1} and f.get("b", 2) == 2
assert isinstance(f, Mapping) and isinstance([], Sequence) and isinstance("x", Iterable)
assert not isinstance(3, Sized)
""",
    "collections.abc import forms": """
import collections.abc
import collections.abc as cabc
from collections import abc
assert collections.abc.Mapping is cabc.Mapping is abc.Mapping
def total(xs):
    if isinstance(xs, cabc.Mapping):
        return sum(xs.values())
    return sum(xs)
assert total({"a": 1, "b": 2}) == 3 and total([1, 2]) == 3
""",
    "type names of values": """
values = [1, "a", 2.5, None, [1], {"k": 1}]
names = [type(v).__name__ for v in values]
assert names == ["int", "str", "float", "NoneType", "list", "dict"]
assert [v.__class__.__name__ for v in values[:2]] == ["int", "str"]
assert int.__name__ == "int" and str.__qualname__ == "str"
def f():
    pass
assert f.__name__ == "f" and (lambda: 0).__name__ == "<lambda>"
""",
    "isinstance dispatch": """
def describe(x):
    if isinstance(x, bool):
        return "bool"
    if isinstance(x, (int, float)):
        return "number"
    if isinstance(x, str):
        return "text"
    if isinstance(x, (list, tuple, set)):
        return f"collection of {len(x)}"
    if isinstance(x, dict):
        return "mapping"
    return type(x).__name__
assert [describe(v) for v in (True, 1, 2.0, "s", [1, 2], {}, None)] == \\
    ["bool", "number", "number", "text", "collection of 2", "mapping", "NoneType"]
""",
    "hasattr getattr setattr": """
class Config:
    pass
cfg = Config()
for key, value in {"depth": 2, "verbose": True}.items():
    setattr(cfg, key, value)
assert getattr(cfg, "depth") == 2 and hasattr(cfg, "verbose") and not hasattr(cfg, "x")
assert getattr(cfg, "missing", "default") == "default" and hasattr([], "__len__")
assert hasattr("x", "upper") and callable(getattr("x", "upper"))
""",
    # --- dataclasses, typing, enum -------------------------------------------------------------
    "dataclass basics": """
from dataclasses import dataclass, field, asdict, astuple, replace, fields
@dataclass
class Record:
    user: str
    action: str
    size: int = 0
    tags: list[str] = field(default_factory=list)
r = Record("bob", "upload", 1024)
r.tags.append("big")
assert asdict(r) == {"user": "bob", "action": "upload", "size": 1024, "tags": ["big"]}
assert astuple(replace(r, size=1)) == ("bob", "upload", 1, ["big"])
assert [f.name for f in fields(Record)] == ["user", "action", "size", "tags"]
assert repr(Record("a", "b")) == "Record(user='a', action='b', size=0, tags=[])"
""",
    "dataclass frozen ordered": """
from dataclasses import dataclass, FrozenInstanceError
@dataclass(frozen=True, order=True)
class Version:
    major: int
    minor: int = 0
assert sorted([Version(1, 2), Version(1, 0), Version(0, 9)])[0] == Version(0, 9)
assert len({Version(1), Version(1)}) == 1
try:
    Version(1).major = 2
except FrozenInstanceError:
    frozen = True
assert frozen
""",
    "dataclass post_init and methods": """
from dataclasses import dataclass, field
@dataclass
class Window:
    start: int
    end: int
    length: int = field(init=False)
    _cache: dict = field(default_factory=dict, repr=False)
    def __post_init__(self):
        if self.end < self.start:
            raise ValueError("end before start")
        self.length = self.end - self.start
    def contains(self, x):
        return self.start <= x < self.end
w = Window(2, 10)
assert w.length == 8 and w.contains(5) and not w.contains(10) and w._cache == {}
assert "cache" not in repr(w)
""",
    "dataclass slots and kw_only": """
from dataclasses import dataclass
@dataclass(slots=True, kw_only=True)
class Point:
    x: float
    y: float = 0.0
    def norm(self):
        return (self.x ** 2 + self.y ** 2) ** 0.5
p = Point(x=3, y=4)
p.x = 6
assert p.norm() == (36 + 16) ** 0.5 and not hasattr(p, "__dict__") or True
""",
    "dataclass inheritance": """
from dataclasses import dataclass
@dataclass
class Base:
    id: int
@dataclass
class Item(Base):
    name: str = ""
    def label(self):
        return f"{self.id}:{self.name}"
assert Item(1, "x").label() == "1:x" and Item(2) == Item(2, "")
""",
    "type hints everywhere": """
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple, Union
Number = Union[int, float]
def apply(fn: Callable[[str], int], items: Iterable[str]) -> List[int]:
    return [fn(x) for x in items]
def split_pair(s: str, sep: str = "=") -> Tuple[str, Optional[str]]:
    key, _, value = s.partition(sep)
    return key, value or None
def walk(d: Dict[str, Any], prefix: str = "") -> Iterator[str]:
    for k, v in d.items():
        if isinstance(v, dict):
            yield from walk(v, prefix + k + ".")
        else:
            yield prefix + k
total: Number = 0
counts: dict[str, int] = {}
assert apply(len, ["ab", "c"]) == [2, 1] and split_pair("a=") == ("a", None)
assert list(walk({"a": {"b": 1}, "c": 2})) == ["a.b", "c"]
""",
    "typing generics protocols typeddict": """
from typing import TypeVar, Generic, Protocol, TypedDict, Literal, cast, TYPE_CHECKING
T = TypeVar("T")
class Box(Generic[T]):
    def __init__(self, item: T) -> None:
        self.item = item
    def get(self) -> T:
        return self.item
class HasLen(Protocol):
    def __len__(self) -> int: ...
class Movie(TypedDict):
    title: str
    year: int
def size(x: HasLen) -> int:
    return len(x)
Mode = Literal["r", "w"]
m: Movie = {"title": "x", "year": 1999}
assert Box[int](3).get() == 3 and size("abc") == 3 and m["year"] == 1999
assert cast(int, "x") == "x" and not TYPE_CHECKING
""",
    "typing functional forms": """
import typing
Pair = typing.NamedTuple("Pair", [("a", int), ("b", int)])
Opts = typing.TypedDict("Opts", {"depth": int})
UserId = typing.NewType("UserId", int)
assert Pair(1, 2).b == 2 and Opts(depth=3) == {"depth": 3} and UserId(5) == 5
assert typing.get_args(typing.Dict[str, int]) == (str, int)
assert typing.get_origin(typing.List[int]) is list
""",
    "enum classes": """
from enum import Enum, IntEnum, Flag, auto, unique
@unique
class Level(IntEnum):
    INFO = 1
    WARN = 2
    ERROR = 3
class Perm(Flag):
    R = auto()
    W = auto()
levels = [Level[line.split()[2]] for line in context.splitlines()[:5]]
assert max(levels) is Level.ERROR and Level.WARN > Level.INFO and Level(2).name == "WARN"
assert (Perm.R | Perm.W) & Perm.W and [l.name for l in Level] == ["INFO", "WARN", "ERROR"]
class Color(Enum):
    RED = "r"
    GREEN = "g"
    def describe(self):
        return f"{self.name.lower()}={self.value}"
assert Color("g").describe() == "green=g" and Color.RED in Color
""",
    "enum functional api": """
from enum import Enum
Status = Enum("Status", "OPEN CLOSED")
Kind = Enum("Kind", {"A": 1, "B": 2})
assert Status.CLOSED.value == 2 and Kind.B.name == "B" and len(Status) == 2
""",
    "copy shallow and deep": """
import copy
orig = {"a": [1, 2], "b": {"c": 3}}
shallow = copy.copy(orig)
deep = copy.deepcopy(orig)
orig["a"].append(9)
assert shallow["a"] == [1, 2, 9] and deep["a"] == [1, 2]
class Node:
    def __init__(self, children):
        self.children = children
n = Node([Node([])])
n2 = copy.deepcopy(n)
assert n2 is not n and n2.children[0] is not n.children[0]
""",
    "difflib comparisons": """
import difflib
a = ["alpha", "beta", "gamma"]
b = ["alpha", "beta2", "gamma"]
diff = list(difflib.unified_diff(a, b, lineterm=""))
assert "-beta" in diff and "+beta2" in diff
ratio = difflib.SequenceMatcher(None, "kitten", "sitting").ratio()
assert round(ratio, 2) == 0.62
assert difflib.get_close_matches("alise", ["alice", "bob"]) == ["alice"]
""",
    # --- match ------------------------------------------------------------------------------
    "match on tokens": """
def handle(line):
    match line.split():
        case [date, time_, "ERROR", *rest]:
            return ("error", date)
        case [_, _, ("INFO" | "WARN") as level, *_]:
            return (level.lower(), None)
        case []:
            return ("empty", None)
        case _:
            return ("other", None)
results = [handle(l) for l in context.splitlines()]
assert results[1] == ("error", "2024-03-01") and results[2] == ("warn", None)
assert results[-1] == ("other", None) and handle("") == ("empty", None)
""",
    "match on dicts from json": """
import json
def kind(obj):
    match obj:
        case {"event": "summary", "count": int(n)} if n > 3:
            return f"big summary {n}"
        case {"event": str(name)}:
            return name
        case [first, *_]:
            return f"list starting {first}"
        case str() | bytes():
            return "text"
        case None:
            return "nothing"
    return "?"
assert kind(json.loads(context.splitlines()[-1])) == "big summary 5"
assert kind({"event": "x"}) == "x" and kind([1, 2]) == "list starting 1"
assert kind("s") == "text" and kind(None) == "nothing" and kind(3.5) == "?"
""",
    "match on classes and enums": """
from dataclasses import dataclass
from enum import Enum
class Op(Enum):
    ADD = "+"
    SUB = "-"
@dataclass
class BinOp:
    op: Op
    left: int
    right: int
def evaluate(node):
    match node:
        case BinOp(op=Op.ADD, left=l, right=r):
            return l + r
        case BinOp(Op.SUB, l, r):
            return l - r
        case int(n) | float(n):
            return n
        case _:
            raise ValueError(node)
assert evaluate(BinOp(Op.ADD, 2, 3)) == 5 and evaluate(BinOp(Op.SUB, 2, 3)) == -1
assert evaluate(7) == 7
""",
    "match with namedtuple and nested": """
from collections import namedtuple
P = namedtuple("P", "x y")
def quadrant(p):
    match p:
        case P(0, 0):
            return "origin"
        case P(x, y) if x > 0 and y > 0:
            return "I"
        case P(x=x) if x < 0:
            return "left"
        case (a, b):
            return "tuple"
    return "?"
assert [quadrant(P(0, 0)), quadrant(P(1, 2)), quadrant(P(-1, 5)), quadrant((1, 1))] == \\
    ["origin", "I", "left", "tuple"]
""",
    # --- the REPL functions -------------------------------------------------------------------
    "llm_query over chunks": """
chunks = [context[i:i + 120] for i in range(0, len(context), 120)]
answers = llm_query_batched([f"Summarise: {c}" for c in chunks])
assert len(answers) == len(chunks) and all(isinstance(a, str) for a in answers)
one = llm_query("Which users had errors?", context=context[:200])
assert isinstance(one, str)
""",
    "map reduce with llm": """
from collections import Counter
lines = context.splitlines()
prompts = [f"Classify this log line: {line}" for line in lines]
labels = llm_query_batched(prompts)
tally = Counter(label.split("=")[0] for label in labels)
final_answer = f"{len(lines)} lines, {len(tally)} label kinds"
FINAL_VAR("final_answer")
""",
    "FINAL after analysis": """
errors = [l for l in context.splitlines() if "ERROR" in l]
users = sorted({l.split("user=")[1].split()[0] for l in errors})
FINAL(f"{len(errors)} errors, users: {', '.join(users)}")
""",
    "print progress": """
for i, line in enumerate(context.splitlines()):
    if i % 2 == 0:
        print(f"[{i}] {line[:30]}")
print("done", end="\\n")
print("a", "b", sep=", ")
""",
    "budget check": """
left = budget()
assert isinstance(left, dict)
""",
    "printed variable": """
print("hello")
assert printed == "hello\\n"
""",
    "long output": """
for i in range(400):
    print(f"line {i:04d}: " + "x" * 30)
""",
}
