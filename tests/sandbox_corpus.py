"""The sandbox's two-sided corpus (data only; tests/test_sandbox_corpus.py runs it).

``ORDINARY``: analysis code written the way current models write it.  Every
snippet must run; each checks its own results with ``assert``.  ``PROBES``:
attacks grouped by route, each of which must be refused.  A policy change
shows its cost on both sides here.
"""

from __future__ import annotations

CONTEXT = """\
2024-03-01 10:00:01 INFO user=alice action=login ip=10.0.0.1
2024-03-01 10:02:13 ERROR user=bob action=upload size=1024 msg="disk full"
2024-03-01 10:05:00 WARN user=alice action=download size=2048
2024-03-02 09:15:42 INFO user=carol action=login ip=10.0.0.7
2024-03-02 11:20:05 ERROR user=alice action=upload size=512 msg="timeout"
{"event": "summary", "count": 5, "users": ["alice", "bob", "carol"]}
"""

ORDINARY: dict[str, str] = {
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


#: Attacks by route.  Each must fail with an error (and leak nothing).
PROBES: dict[str, list[str]] = {
    # The review's language-layer bypass: the Enum functional API, reachable from
    # any enum's mro(), defined classes with refused magic methods and so handed
    # a raw traceback to __exit__.
    "enum functional api": [
        "import re\nE = re.RegexFlag.mro()[5]\n"
        "X = E('X', {'__exit__': lambda *a: a[3], '__enter__': lambda s: s})",
        "import re\nE = re.RegexFlag.mro()[5]\n"
        "X = E('X', [('__getattr__', lambda s, n: n), ('A', 1)])",
        "import re\nE = re.RegexFlag.mro()[5]\nX = E('X', '__iter__ A')",
        "from enum import Enum\nX = Enum('X', {'_missing_': 1})",
        "from enum import IntFlag\nX = IntFlag('X', [('__reduce_ex__', 1)])",
        "import enum\nclass S(str):\n    def startswith(self, p):\n        return False\n"
        "X = enum.Enum('X', [(S('__exit__'), 1)])\nprint(X.__exit__)",
    ],
    "tracebacks through __exit__": [
        "class C:\n    def __enter__(self):\n        return self\n"
        "    def __exit__(self, *exc):\n        global tb\n        tb = exc[2]\n"
        "        return True\n"
        "with C():\n    1 / 0\nprint(tb.tb_frame)",
        "class C:\n    def __enter__(self):\n        return self\n"
        "    def __exit__(self, t, e, tb):\n        global frame\n        frame = tb.tb_frame\n"
        "        return True\nwith C():\n    1 / 0\nprint(frame)",
        "class C:\n    def __enter__(self):\n        return self\n"
        "    def __exit__(self, t, e, tb):\n        global keep\n        keep = e\n"
        "        return True\n"
        "with C():\n    1 / 0\nprint(keep.__traceback__)",
        "class C:\n    __exit__ = print\n    def __enter__(self):\n        return self",
    ],
    "metaclasses": [
        "import enum\nprint(enum.EnumType)",
        "import enum\nprint(enum.EnumMeta)",
        "import typing\nprint(typing.NamedTupleMeta)",
        "import typing\nprint(typing.ABCMeta)",
        "from collections.abc import ABCMeta",
        "import enum\nclass C(enum.Enum):\n    A = 1\nprint(type(C))",
        "import enum\nclass C(enum.Enum):\n    A = 1\nprint(C.__class__)",
        "import re\nprint(re.RegexFlag.__class__)",
        "class M(type):\n    pass",
        "class X(metaclass=type):\n    pass",
        "type('X', (), {'__exit__': print})",
        "class A:\n    pass\nprint(A.__class__.__call__)",
    ],
    "magic methods a class may not define": [
        "class A:\n    def __init_subclass__(cls, **kw):\n        pass",
        "class A:\n    def __class_getitem__(cls, item):\n        return item",
        "class A:\n    def __set_name__(self, owner, name):\n        pass",
        "class A:\n    def __getattribute__(self, name):\n        return name",
        "class A:\n    def __getattr__(self, name):\n        return name",
        "class A:\n    def __setattr__(self, name, value):\n        pass",
        "class A:\n    def __reduce_ex__(self, protocol):\n        return (print, ())",
        "class A:\n    def __getstate__(self):\n        return (None, {'__class__': int})",
        "class A:\n    def __deepcopy__(self, memo):\n        return memo",
        "class A:\n    def __new__(cls):\n        return object.__new__(cls)",
        "class A:\n    def __del__(self):\n        pass",
        "class A:\n    __slots__ = ('a',)",
        "class A:\n    __match_args__ = ('__class__',)",
        "class A:\n    pass\nA.__exit__ = print",
        "class A:\n    pass\nsetattr(A, '__exit__', print)",
        "class A:\n    pass\nsetattr(A, '__getattr__', lambda s, n: n)",
    ],
    "class factories": [
        "from dataclasses import make_dataclass",
        "import dataclasses\ndataclasses.make_dataclass('X', [], namespace={'__exit__': print})",
        "import typing, dataclasses\nT = typing.TypedDict('T', {'a=print(1)': int})\n"
        "dataclasses.dataclass(T)",
        "import collections, dataclasses\nP = collections.namedtuple('P', 'a')\n"
        "dataclasses.dataclass(P)",
        "import collections\ncollections.namedtuple('P', ['__exit__'])",
        "import typing\ntyping.NamedTuple('P', [('__exit__', int)])",
    ],
    "getattr by a chosen name": [
        "import operator\nprint(operator.attrgetter('__globals__')(print))",
        "import operator\nprint(operator.attrgetter('real.__class__.__base__')(1))",
        "import operator\nprint(operator.methodcaller('__subclasses__')(object))",
        "import operator\ng = (i for i in [1])\nprint(operator.attrgetter('gi_frame')(g))",
        "import typing\nprint(typing.get_type_hints)",
        "import typing\nprint(typing.List.__getattr__('append'))",
        "import copy\nprint(copy.dispatch_table)",
        "import copy\nm = {}\ncopy.deepcopy([1], m)",
        "import copy\nprint(copy.deepcopy(llm_query))",
        "import typing\ntyping.no_type_check(int)",
        "import enum\nenum.global_enum",
    ],
    "dunder reads": [
        "def f():\n    pass\nprint(f.__globals__)",
        "print(().__class__.__base__.__subclasses__())",
        "print(int.__mro__)",
        "print(int.__bases__)",
        "class A:\n    pass\nprint(A().__dict__)",
        "print(getattr(1, '__reduce_ex__')(4))",
        "print('x'.__getattribute__('__class__'))",
        "print(object.__setattr__)",
        "print(int.__init_subclass__)",
        "print(int.__class__)",
        "print(getattr(int, '__class__'))",
        "print(llm_query.__self__)",
        "print(llm_query.__func__)",
        "x = 1\nprint(x.__class__.__dict__)",
        "print(__builtins__)",
        "__name__ = 'x'",
        "del __name__",
        "print(__metaclass__)",
        "print(__import__('os'))",
    ],
    "private attributes": [
        "import re\nprint(re._compile)",
        "import random\nprint(random._inst)",
        "print((1)._x)",
        "import random\nclass R(random.Random):\n    pass\nprint(R()._randbelow)",
        "import string\nclass T(string.Template):\n    pass\nprint(T('x')._invalid)",
        "import json\nclass D(json.JSONDecoder):\n    def f(self):\n        return super()._x\n"
        "print(D().f())",
        "import json\nprint(getattr(json, '_default_encoder'))",
        "import json\njson.JSONDecoder._x = 1",
        "import json\nsetattr(json.JSONDecoder, '_x', 1)",
        "import json\nd = json.JSONDecoder()\nd._x = 1",
        "from collections import Counter\nc = Counter()\nc._keep_positive = print",
        "from collections import UserDict\nd = UserDict()\ndel d._x",
        "import collections\nprint(collections.Counter()._keep_positive)",
        "class A:\n    pass\nprint(A.__x)",
        "_getattr_ = 1",
        "def f():\n    nonlocal _write_",
        "_write_: int = 1",
        "x: __import__('os') = 1",
        "_print = 1",
        "_tmp0 = 1",
        "FINAL_VAR('_getattr_')",
    ],
    "match patterns read without guards": [
        "g = (i for i in [1])\nG = type(g)\nmatch g:\n    case G(gi_frame=f):\n        print(f)",
        "g = (i for i in [1])\nG = type(g)\nmatch g:\n    case G(gi_code=c):\n        print(c)",
        "try:\n    (1).nope\nexcept AttributeError as e:\n    match e:\n"
        "        case AttributeError(obj=o):\n            print(o)",
        "import re\nmatch 1:\n    case re._compiler:\n        pass",
        "import json\nD = json.JSONDecoder\nmatch D():\n    case D(scan_once=s):\n        print(s)",
        "import random\nmatch random.Random():\n    case random.Random(gauss_next=g):\n"
        "        print(g)",
        "match 1:\n    case int(_getattr_):\n        pass",
        "match {}:\n    case {**_write_}:\n        pass",
        "match [1]:\n    case [*_apply_]:\n        pass",
    ],
}
