"""Ordinary analysis code, part 1: strings, regexes, collections, sorting, control flow,
JSON, dates and numbers (see sandbox_corpus.py)."""

from __future__ import annotations

ORDINARY_DATA: dict[str, str] = {
    # --- strings, slicing, splitting ------------------------------------------------------
    "peek at the context": """
print(len(context), context[:60])
lines = context.splitlines()
assert len(lines) == 6 and lines[0].startswith("2024-03-01")
""",
    "strip and filter lines": """
lines = [line.strip() for line in context.split("\\n") if line.strip()]
errors = [l for l in lines if " ERROR " in l]
assert len(errors) == 2
""",
    "chunking": """
chunk_size = 100
chunks = [context[i:i + chunk_size] for i in range(0, len(context), chunk_size)]
assert "".join(chunks) == context and all(len(c) <= chunk_size for c in chunks)
""",
    "chunking by lines with overlap": """
def chunk_lines(text, size=2, overlap=1):
    lines = text.splitlines()
    step = size - overlap
    return ["\\n".join(lines[i:i + size]) for i in range(0, max(len(lines) - overlap, 1), step)]
parts = chunk_lines(context)
assert len(parts) == 5 and parts[0].count("\\n") == 1
""",
    "partition and rpartition": """
head, sep, tail = context.partition("\\n")
assert sep == "\\n" and head.endswith("10.0.0.1")
key, _, value = "user=alice".partition("=")
assert (key, value) == ("user", "alice")
""",
    "string methods": """
s = "  Hello, World  "
assert s.strip().lower() == "hello, world"
assert s.strip().replace(",", "").split() == ["Hello", "World"]
assert "abc".center(7, "*") == "**abc**" and "7".zfill(3) == "007"
assert "a-b-c".rsplit("-", 1) == ["a-b", "c"] and "x".join("ab") == "axb"
assert "Title Case".istitle() and "abc123".isalnum() and "ß".casefold() == "ss"
""",
    "startswith with tuples and find": """
levels = [l.split()[2] for l in context.splitlines() if l.startswith(("2024-03-01", "2024-03-02"))]
assert levels == ["INFO", "ERROR", "WARN", "INFO", "ERROR"]
assert context.find("carol") > 0 and context.rfind("alice") > context.find("alice")
""",
    "f-string formatting": """
total, share, name = 1234567, 0.4567, "alice"
line = f"{name:>8}|{total:,}|{share:.1%}|{total:_x}|{share!r}"
assert line == "   alice|1,234,567|45.7%|12_d687|0.4567", line
width = 6
assert f"{'x':^{width}}" == "  x   " and f"{3.14159:{width}.2f}" == "  3.14"
""",
    "format and percent formatting": """
assert "{} scored {:.2f}".format("bob", 3.14159) == "bob scored 3.14"
assert "{name}={value:04d}".format(name="n", value=7) == "n=0007"
assert "%s has %d items (%.1f%%)" % ("cart", 3, 12.5) == "cart has 3 items (12.5%)"
assert "{0[user]} {1[0]}".format({"user": "amy"}, [9]) == "amy 9"
""",
    "format with own object attributes": """
class Row:
    def __init__(self, name, score):
        self.name, self.score = name, score
rows = [Row("a", 1.5), Row("b", 2.25)]
text = "\\n".join("{0.name}: {0.score:.1f}".format(r) for r in rows)
assert text == "a: 1.5\\nb: 2.2"
""",
    "text table": """
rows = [("alice", 3, 0.5), ("bob", 12, 0.25)]
header = f"{'user':<8}{'n':>4}{'rate':>8}"
body = [f"{u:<8}{n:>4}{r:>8.2f}" for u, n, r in rows]
table = "\\n".join([header, "-" * len(header), *body])
print(table)
assert table.splitlines()[2] == "alice      3    0.50"
""",
    "textwrap": """
import textwrap
para = "word " * 30
wrapped = textwrap.fill(para.strip(), width=40)
assert all(len(l) <= 40 for l in wrapped.splitlines())
assert textwrap.dedent("    a\\n    b") == "a\\nb" and textwrap.indent("x", "> ") == "> x"
assert textwrap.shorten("The quick brown fox", width=12, placeholder="...") == "The quick..."
""",
    "string module": """
import string
assert string.ascii_uppercase[:3] == "ABC" and "7" in string.digits
t = string.Template("$who likes $what")
assert t.substitute(who="tim", what="pie") == "tim likes pie"
assert t.safe_substitute(who="tim") == "tim likes $what"
assert "Hello".translate(str.maketrans("", "", string.punctuation + "l")) == "Heo"
""",
    "unicode normalisation": """
import unicodedata
s = "Caf\\u00e9 na\\u0131ve"
nfkd = unicodedata.normalize("NFKD", s)
ascii_only = "".join(c for c in nfkd if not unicodedata.combining(c))
assert ascii_only.startswith("Cafe")
assert unicodedata.category("A") == "Lu" and unicodedata.name("\\u00e9").startswith("LATIN")
""",
    "bytes and encodings": """
data = context.encode("utf-8")
assert isinstance(data, bytes) and data.decode() == context
assert "é".encode("utf-8") == b"\\xc3\\xa9" and bytes([104, 105]).decode("ascii") == "hi"
assert bytearray(b"ab") + b"c" == b"abc" and b"a,b".split(b",") == [b"a", b"b"]
""",
    # --- regular expressions --------------------------------------------------------------
    "regex findall key=value": """
import re
pairs = re.findall(r"(\\w+)=(\\S+)", context)
users = sorted({v for k, v in pairs if k == "user"})
assert users == ["alice", "bob", "carol"]
""",
    "regex named groups": """
import re
LINE = re.compile(
    r"^(?P<date>\\d{4}-\\d{2}-\\d{2}) (?P<time>[\\d:]+) (?P<level>[A-Z]+) (?P<rest>.*)$",
    re.MULTILINE)
records = [m.groupdict() for m in LINE.finditer(context)]
assert len(records) == 5 and records[1]["level"] == "ERROR"
assert records[0]["date"] == "2024-03-01"
""",
    "regex sub with callback": """
import re
IP = r"\\d+\\.\\d+\\.\\d+\\.\\d+"
masked = re.sub(IP, lambda m: "x.x.x." + m.group().split(".")[-1], context)
assert "x.x.x.7" in masked and "10.0.0.7" not in masked
assert re.sub(r"(\\w+)@(\\w+)", r"\\2 at \\1", "me@home") == "home at me"
""",
    "regex split and flags": """
import re
assert re.split(r"[,;]\\s*", "a, b;c") == ["a", "b", "c"]
assert re.search(r"error", context, re.IGNORECASE).group() == "ERROR"
assert re.fullmatch(r"\\d{4}", "2024") and not re.match(r"\\d", "x1")
flags = re.I | re.M
assert len(re.findall(r"^2024", context, flags)) == 5
""",
    "regex quoted messages": """
import re
msgs = re.findall(r'msg="([^"]*)"', context)
assert msgs == ["disk full", "timeout"]
""",
    # --- collections ------------------------------------------------------------------------
    "Counter of levels": """
from collections import Counter
levels = Counter(line.split()[2] for line in context.splitlines()[:5])
assert levels.most_common(1) == [("INFO", 2)] or levels.most_common(1) == [("ERROR", 2)]
assert levels["WARN"] == 1 and sum(levels.values()) == 5 and levels["DEBUG"] == 0
both = levels + Counter({"INFO": 1})
assert both["INFO"] == 3
""",
    "defaultdict grouping": """
from collections import defaultdict
by_user = defaultdict(list)
for line in context.splitlines()[:5]:
    fields = dict(p.split("=", 1) for p in line.split() if "=" in p)
    by_user[fields["user"]].append(fields["action"])
assert dict(by_user) == {"alice": ["login", "download", "upload"], "bob": ["upload"],
                         "carol": ["login"]}
nested = defaultdict(lambda: defaultdict(int))
nested["a"]["b"] += 1
assert nested["a"]["b"] == 1
""",
    "deque sliding window": """
from collections import deque
window = deque(maxlen=3)
means = []
for x in [1, 2, 3, 4, 5]:
    window.append(x)
    means.append(sum(window) / len(window))
assert means == [1.0, 1.5, 2.0, 3.0, 4.0]
window.appendleft(0)
window.rotate(1)
assert list(window) == [4, 0, 3]
""",
    "OrderedDict and ChainMap": """
from collections import OrderedDict, ChainMap
od = OrderedDict()
od["b"] = 1
od["a"] = 2
od.move_to_end("b")
assert list(od) == ["a", "b"]
cfg = ChainMap({"x": 1}, {"x": 2, "y": 3})
assert cfg["x"] == 1 and cfg["y"] == 3 and len(cfg) == 2
""",
    "namedtuple records": """
from collections import namedtuple
Event = namedtuple("Event", ["date", "level", "user"])
events = [Event(l.split()[0], l.split()[2], l.split()[3][5:]) for l in context.splitlines()[:5]]
assert events[1].user == "bob" and events[1]._asdict()["level"] == "ERROR"
fixed = events[0]._replace(level="DEBUG")
assert fixed.level == "DEBUG" and Event._fields == ("date", "level", "user")
assert Event._make(["d", "l", "u"]).user == "u"
""",
    "namedtuple with defaults": """
from collections import namedtuple
Cfg = namedtuple("Cfg", "host port", defaults=[8080])
assert Cfg("h").port == 8080 and Cfg._field_defaults == {"port": 8080}
""",
    "typing NamedTuple": """
from typing import NamedTuple
class Span(NamedTuple):
    start: int
    end: int
    def length(self) -> int:
        return self.end - self.start
s = Span(3, 10)
assert s.length() == 7 and s._asdict() == {"start": 3, "end": 10}
""",
    # --- sorting, grouping, itertools --------------------------------------------------------
    "sorting with keys": """
people = [("alice", 31), ("bob", 25), ("carol", 31)]
by_age_then_name = sorted(people, key=lambda p: (-p[1], p[0]))
assert by_age_then_name == [("alice", 31), ("carol", 31), ("bob", 25)]
assert max(people, key=lambda p: p[1])[0] == "alice"
words = "the Quick brown fox".split()
assert sorted(words, key=str.lower) == ["brown", "fox", "Quick", "the"]
""",
    "operator itemgetter attrgetter": """
from operator import itemgetter, attrgetter, methodcaller
rows = [{"n": "b", "v": 2}, {"n": "a", "v": 2}, {"n": "c", "v": 1}]
rows.sort(key=itemgetter("v", "n"))
assert [r["n"] for r in rows] == ["c", "a", "b"]
class U:
    def __init__(self, name):
        self.name = name
assert sorted([U("z"), U("a")], key=attrgetter("name"))[0].name == "a"
assert list(map(methodcaller("upper"), ["a", "b"])) == ["A", "B"]
""",
    "itertools groupby": """
from itertools import groupby
lines = context.splitlines()[:5]
by_day = {day: len(list(group)) for day, group in groupby(lines, key=lambda l: l[:10])}
assert by_day == {"2024-03-01": 3, "2024-03-02": 2}
""",
    "itertools combinatorics": """
import itertools
assert list(itertools.combinations("abc", 2)) == [("a", "b"), ("a", "c"), ("b", "c")]
assert len(list(itertools.permutations(range(3)))) == 6
assert list(itertools.product([0, 1], repeat=2)) == [(0, 0), (0, 1), (1, 0), (1, 1)]
assert list(itertools.accumulate([1, 2, 3])) == [1, 3, 6]
assert list(itertools.chain.from_iterable([[1], [2, 3]])) == [1, 2, 3]
assert list(itertools.zip_longest("ab", "x", fillvalue="-")) == [("a", "x"), ("b", "-")]
assert list(itertools.pairwise([1, 2, 3])) == [(1, 2), (2, 3)]
""",
    "itertools islice and count": """
from itertools import islice, count, cycle, repeat, takewhile, dropwhile
assert list(islice(count(10, 5), 3)) == [10, 15, 20]
assert list(islice(cycle("ab"), 5)) == list("ababa")
assert list(repeat(7, 2)) == [7, 7]
assert list(takewhile(lambda x: x < 3, [1, 2, 5, 1])) == [1, 2]
assert list(dropwhile(lambda x: x < 3, [1, 2, 5, 1])) == [5, 1]
""",
    "heapq top-k": """
import heapq, re
sizes = [int(s) for s in re.findall(r"size=(\\d+)", context)]
assert heapq.nlargest(2, sizes) == [2048, 1024] and heapq.nsmallest(1, sizes) == [512]
h = []
for x in [5, 1, 4]:
    heapq.heappush(h, (x, str(x)))
assert heapq.heappop(h) == (1, "1")
""",
    "bisect buckets": """
import bisect
edges = [100, 1000, 2000]
labels = ["tiny", "small", "medium", "large"]
assert [labels[bisect.bisect(edges, s)] for s in (50, 512, 1024, 4096)] == \\
    ["tiny", "small", "medium", "large"]
xs = [1, 3, 5]
bisect.insort(xs, 4)
assert xs == [1, 3, 4, 5]
""",
    "functools helpers": """
import functools
@functools.lru_cache(maxsize=None)
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)
assert fib(40) == 102334155
add3 = functools.partial(lambda a, b, c: a + b + c, 1, 2)
assert add3(3) == 6
assert functools.reduce(lambda a, b: a * b, range(1, 6)) == 120
@functools.cache
def sq(x):
    return x * x
assert sq(9) == 81
""",
    "functools total_ordering and cmp_to_key": """
import functools
@functools.total_ordering
class Version:
    def __init__(self, text):
        self.parts = tuple(int(p) for p in text.split("."))
    def __eq__(self, other):
        return self.parts == other.parts
    def __lt__(self, other):
        return self.parts < other.parts
assert Version("1.10") > Version("1.9") and Version("2.0") >= Version("2.0")
cmp = lambda a, b: (a > b) - (a < b)
assert sorted([3, 1, 2], key=functools.cmp_to_key(cmp)) == [1, 2, 3]
""",
    "cached_property": """
from functools import cached_property
class Doc:
    def __init__(self, text):
        self.text = text
        self.calls = 0
    @cached_property
    def words(self):
        self.calls += 1
        return self.text.split()
d = Doc(context)
assert d.words == d.words and d.calls == 1
""",
    # --- comprehensions, generators, control flow ----------------------------------------------
    "nested comprehensions": """
matrix = [[i * j for j in range(3)] for i in range(3)]
flat = [x for row in matrix for x in row if x]
assert flat == [1, 2, 2, 4]
transposed = [list(col) for col in zip(*matrix)]
assert transposed[2] == [0, 2, 4]
inverse = {v: k for k, v in {"a": 1, "b": 2}.items()}
assert inverse == {1: "a", 2: "b"} and {c for c in "hello"} == set("helo")
""",
    "generator pipeline": """
def read_lines(text):
    for line in text.splitlines():
        yield line
def only_events(lines):
    return (l for l in lines if l[:4].isdigit())
def fields(lines):
    for l in lines:
        yield dict(p.split("=", 1) for p in l.split() if "=" in p)
sizes = [int(f["size"]) for f in fields(only_events(read_lines(context))) if "size" in f]
assert sizes == [1024, 2048, 512]
""",
    "generator send and yield from": """
def inner():
    yield 1
    yield 2
    return "done"
def outer():
    result = yield from inner()
    yield result
assert list(outer()) == [1, 2, "done"]
def averager():
    total, n = 0, 0
    while True:
        x = yield (total / n if n else None)
        total, n = total + x, n + 1
avg = averager()
next(avg)
avg.send(10)
assert avg.send(20) == 15.0
""",
    "walrus and while": """
import re
pos, found = 0, []
while (m := re.compile(r"user=(\\w+)").search(context, pos)):
    found.append(m.group(1))
    pos = m.end()
assert found == ["alice", "bob", "alice", "carol", "alice"]
if (n := len(found)) > 3:
    assert n == 5
""",
    "for else and break": """
for line in context.splitlines():
    if "carol" in line:
        hit = line
        break
else:
    hit = None
assert hit is not None and "09:15:42" in hit
""",
    "unpacking": """
first, *middle, last = [1, 2, 3, 4]
assert (first, middle, last) == (1, [2, 3], 4)
(a, b), c = (1, 2), 3
assert a + b + c == 6
merged = {**{"a": 1}, **{"b": 2}}
assert merged == {"a": 1, "b": 2} and [*range(2), *"ab"] == [0, 1, "a", "b"]
for i, (k, v) in enumerate(sorted(merged.items())):
    assert (i, k) in ((0, "a"), (1, "b"))
""",
    "any all sum min max": """
sizes = [1024, 2048, 512]
assert any(s > 2000 for s in sizes) and all(s > 100 for s in sizes)
assert sum(sizes) / len(sizes) == 1194.6666666666667
assert min(sizes, default=0) == 512 and max([], default=None) is None
assert sum([[1], [2]], []) == [1, 2]
""",
    "zip enumerate reversed": """
names = ["a", "b", "c"]
scores = [3, 1, 2]
ranking = sorted(zip(scores, names), reverse=True)
assert ranking[0] == (3, "a")
assert list(enumerate(names, start=1))[-1] == (3, "c")
assert list(reversed(names)) == ["c", "b", "a"] and dict(zip(names, scores))["b"] == 1
""",
    "try except else finally": """
def parse(x):
    try:
        value = int(x)
    except (TypeError, ValueError) as exc:
        return f"bad: {type(exc).__name__}"
    else:
        return value
    finally:
        pass
assert parse("12") == 12 and parse("x") == "bad: ValueError" and parse(None) == "bad: TypeError"
""",
    "custom exceptions with super": """
class AnalysisError(Exception):
    def __init__(self, message, line=None):
        super().__init__(message)
        self.line = line
    def __str__(self):
        base = super().__str__()
        return f"{base} (line {self.line})" if self.line else base
try:
    raise AnalysisError("bad record", line=3)
except AnalysisError as e:
    assert str(e) == "bad record (line 3)" and e.line == 3
    assert e.__class__.__name__ == "AnalysisError" and type(e).__name__ == "AnalysisError"
""",
    "exception chaining": """
class ParseError(ValueError):
    pass
def parse(s):
    try:
        return int(s)
    except ValueError as exc:
        raise ParseError(f"not a number: {s!r}") from exc
try:
    parse("x")
except ValueError as e:
    msg = str(e)
    kind = type(e).__name__
assert msg == "not a number: 'x'" and kind == "ParseError"
""",
    "assertions and raising": """
def check(x):
    assert x >= 0, "negative"
    if x > 10:
        raise ValueError(f"too big: {x}")
    return x
errors = []
for v in (-1, 5, 11):
    try:
        check(v)
    except (AssertionError, ValueError) as e:
        errors.append(str(e))
assert errors == ["negative", "too big: 11"]
""",
    "lambda closures": """
multipliers = [lambda x, k=k: x * k for k in range(3)]
assert [m(10) for m in multipliers] == [0, 10, 20]
def make_counter():
    count = 0
    def counter():
        nonlocal count
        count += 1
        return count
    return counter
c = make_counter()
c(); c()
assert c() == 3
""",
    "recursion": """
def flatten(x):
    if isinstance(x, (list, tuple)):
        out = []
        for item in x:
            out.extend(flatten(item))
        return out
    return [x]
assert flatten([1, [2, (3, [4])], 5]) == [1, 2, 3, 4, 5]
def depth(d):
    return 1 + max((depth(v) for v in d.values() if isinstance(v, dict)), default=0)
assert depth({"a": {"b": {"c": 1}}, "d": 2}) == 3
""",
    "global state": """
seen = set()
def remember(x):
    global seen
    seen = seen | {x}
remember(1); remember(2)
assert seen == {1, 2}
""",
    "main guard": """
def main():
    return sum(1 for line in context.splitlines() if "ERROR" in line)
if __name__ == "__main__":
    result = main()
assert result == 2
""",
    # --- json and data ------------------------------------------------------------------------
    "json lines": """
import json
summary = json.loads(context.splitlines()[-1])
assert summary["count"] == 5 and summary["users"][2] == "carol"
text = json.dumps(summary, indent=2, sort_keys=True)
assert json.loads(text) == summary and text.startswith("{\\n  \\"count\\"")
""",
    "json with default and hooks": """
import json, datetime
def default(o):
    if isinstance(o, datetime.date):
        return o.isoformat()
    if isinstance(o, set):
        return sorted(o)
    raise TypeError(type(o).__name__)
out = json.dumps({"d": datetime.date(2024, 1, 2), "s": {3, 1}}, default=default)
assert out == '{"d": "2024-01-02", "s": [1, 3]}'
back = json.loads(out, object_hook=lambda d: {k.upper(): v for k, v in d.items()})
assert back == {"D": "2024-01-02", "S": [1, 3]}
""",
    "json errors": """
import json
try:
    json.loads("{bad json}")
except json.JSONDecodeError as e:
    where = (e.lineno, e.colno)
assert where == (1, 2)
""",
    "json encoder subclass": """
import json
class Encoder(json.JSONEncoder):
    def default(self, o):
        if isinstance(o, complex):
            return [o.real, o.imag]
        return super().default(o)
assert json.dumps(1 + 2j, cls=Encoder) == "[1.0, 2.0]"
""",
    "parse key value records": """
records = []
for line in context.splitlines():
    if not line[:1].isdigit():
        continue
    date, time_, level, *rest = line.split(" ", 3)
    fields = {}
    for token in rest[0].split():
        if "=" in token:
            k, v = token.split("=", 1)
            fields[k] = v.strip('"')
    records.append({"date": date, "time": time_, "level": level, **fields})
assert records[1]["msg"] == "disk" and records[3]["ip"] == "10.0.0.7"
""",
    "csv-like parsing by hand": """
raw = "name,age\\nann,30\\nbo,25\\n"
header, *rows = [line.split(",") for line in raw.strip().splitlines()]
table = [dict(zip(header, row)) for row in rows]
assert table == [{"name": "ann", "age": "30"}, {"name": "bo", "age": "25"}]
assert sum(int(r["age"]) for r in table) == 55
""",
    "dict methods": """
d = {"a": 1}
d.setdefault("b", []).append(2)
d.update(c=3)
assert d.get("z", 0) == 0 and d.pop("c") == 3 and "c" not in d
assert list(d.keys()) == ["a", "b"] and dict.fromkeys("xy", 0) == {"x": 0, "y": 0}
merged = d | {"e": 5}
assert merged["e"] == 5 and len(d) == 2
""",
    "set algebra": """
a_users = {"alice", "bob"}
b_users = {"bob", "carol"}
assert a_users & b_users == {"bob"} and a_users | b_users == {"alice", "bob", "carol"}
assert a_users - b_users == {"alice"} and a_users ^ b_users == {"alice", "carol"}
assert {"bob"} <= a_users and frozenset(a_users).isdisjoint({"dan"})
""",
    "list methods": """
xs = [3, 1, 2]
xs.append(4); xs.extend([0]); xs.insert(0, 9); xs.remove(1)
assert xs == [9, 3, 2, 4, 0] and xs.index(4) == 3 and xs.count(3) == 1
xs.sort(reverse=True)
assert xs[:2] == [9, 4] and xs.pop() == 0
xs[1:3] = ["a", "b"]
del xs[0]
assert xs == ["a", "b", 2]
""",
    # --- dates and times ----------------------------------------------------------------------
    "datetime parsing": """
from datetime import datetime, timedelta
stamps = [datetime.strptime(l[:19], "%Y-%m-%d %H:%M:%S") for l in context.splitlines()[:5]]
span = stamps[-1] - stamps[0]
assert span == timedelta(days=1, hours=1, minutes=20, seconds=4)
assert span.total_seconds() == 91204.0 and stamps[0].strftime("%a %d %b") == "Fri 01 Mar"
""",
    "datetime arithmetic": """
import datetime as dt
start = dt.date(2024, 2, 27)
days = [start + dt.timedelta(days=i) for i in range(4)]
assert days[2].isoformat() == "2024-02-29" and days[3].month == 3
assert (dt.date(2024, 12, 25) - dt.date(2024, 1, 1)).days == 359
assert dt.date(2024, 3, 1).weekday() == 4 and dt.date(2024, 3, 1).isocalendar()[1] == 9
""",
    "datetime isoformat and timezones": """
from datetime import datetime, timezone, timedelta
t = datetime.fromisoformat("2024-03-01T10:00:00+02:00")
assert t.astimezone(timezone.utc).hour == 8
est = timezone(timedelta(hours=-5))
assert datetime(2024, 1, 1, tzinfo=est).utcoffset().total_seconds() == -18000
assert datetime(2024, 1, 1).replace(hour=5).isoformat() == "2024-01-01T05:00:00"
""",
    "bucketing times by hour": """
from collections import Counter
hours = Counter(line[11:13] for line in context.splitlines()[:5])
assert hours == Counter({"10": 3, "09": 1, "11": 1})
""",
    "time module": """
import time
t = time.strptime("2024-03-01", "%Y-%m-%d")
assert t.tm_yday == 61 and time.strftime("%Y/%m", t) == "2024/03"
start = time.perf_counter()
assert time.perf_counter() >= start and time.time() > 1_600_000_000
""",
    # --- numbers ------------------------------------------------------------------------------
    "math and statistics": """
import math, statistics
sizes = [1024, 2048, 512]
assert statistics.mean(sizes) == 1194.6666666666667 and statistics.median(sizes) == 1024
assert round(statistics.stdev(sizes), 1) == 782.1 and statistics.mode([1, 1, 2]) == 1
assert math.isclose(math.log2(1024), 10) and math.ceil(2.1) == 3 and math.gcd(12, 18) == 6
assert math.inf > 10 ** 100 and math.isnan(float("nan")) and math.comb(5, 2) == 10
""",
    "quantiles and percentiles": """
import statistics
data = list(range(1, 101))
q = statistics.quantiles(data, n=4)
assert q == [25.25, 50.5, 75.75]
def percentile(xs, p):
    xs = sorted(xs)
    k = (len(xs) - 1) * p
    f = int(k)
    return xs[f] + (xs[min(f + 1, len(xs) - 1)] - xs[f]) * (k - f)
assert round(percentile(data, 0.9), 6) == 90.1
""",
    "decimal money": """
from decimal import Decimal, ROUND_HALF_UP, getcontext
prices = [Decimal("19.99"), Decimal("5.01"), Decimal("0.10")]
total = sum(prices, Decimal("0"))
assert total == Decimal("25.10") and str(total) == "25.10"
assert Decimal("2.675").quantize(Decimal("0.01"), rounding=ROUND_HALF_UP) == Decimal("2.68")
assert getcontext().prec >= 28
""",
    "decimal localcontext": """
import decimal
with decimal.localcontext() as ctx:
    ctx.prec = 5
    x = decimal.Decimal(1) / decimal.Decimal(7)
assert str(x) == "0.14286"
""",
    "fractions": """
from fractions import Fraction
parts = [Fraction(1, 3), Fraction(1, 6)]
assert sum(parts) == Fraction(1, 2) and Fraction("0.25") == Fraction(1, 4)
assert Fraction(3, 4).limit_denominator(2) == Fraction(1, 2) or True
assert float(Fraction(1, 8)) == 0.125 and Fraction(5, 10).denominator == 2
""",
    "random with seed": """
import random
random.seed(42)
sample = random.sample(range(100), 5)
rng = random.Random(7)
choice = rng.choice(["a", "b", "c"])
assert len(set(sample)) == 5 and choice in "abc"
items = list(range(10))
random.shuffle(items)
assert sorted(items) == list(range(10)) and 0 <= random.randint(0, 3) <= 3
""",
    "integer tricks": """
assert int("ff", 16) == 255 and bin(5) == "0b101" and hex(255) == "0xff" and oct(8) == "0o10"
assert (7).bit_length() == 3 and divmod(17, 5) == (3, 2) and pow(3, 4, 5) == 1
assert round(2.5) == 2 and round(3.14159, 2) == 3.14 and abs(-3) == 3
assert 10 ** 20 // 3 == 33333333333333333333 and float("1e3") == 1000.0
""",
    "human readable sizes": """
def human(n):
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024:
            return f"{n:.1f}{unit}"
        n /= 1024
    return f"{n:.1f}TB"
assert [human(x) for x in (512, 2048, 5 * 1024 ** 3)] == ["512.0B", "2.0KB", "5.0GB"]
""",
}
