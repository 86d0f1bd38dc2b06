"""Security suite, the other side: ordinary analysis code keeps working in a hardened sandbox."""

from __future__ import annotations

import pytest

from tests.sandbox.security_harness import open_sandbox

ORDINARY = {
    "slicing and str methods": (
        "print(context[:3], context.upper().count('T'), context.split()[-1])", "the 3 context\n"),
    "comprehensions and sorting": (
        "w = sorted({x: len(x) for x in context.split()}.items(), key=lambda kv: -kv[1])\n"
        "print(w[0])", "('context', 7)\n"),
    "classes with state": (
        "class Acc:\n    def __init__(self):\n        self.n = 0\n"
        "    def add(self, k):\n        self.n += k\n        return self\n"
        "a = Acc().add(2).add(3)\nprint(a.n)", "5\n"),
    "format with own attributes and items": (
        "class P:\n    name = 'p'\nprint('{0.name} {1[k]} {n:>3}'.format(P(), {'k': 1}, n=7))",
        "p 1   7\n"),
    "f-strings": ("x = 3.14159\nprint(f'{x:.2f} {len(context)=}')", "3.14 len(context)=11\n"),
    "re and json": (
        "import re, json\nprint(json.dumps(re.findall(r'\\w+', context)))",
        '["the", "context"]\n'),
    "collections and itertools": (
        "from collections import Counter, defaultdict\nimport itertools\n"
        "c = Counter('abracadabra')\nd = defaultdict(list)\nd['a'].append(1)\n"
        "print(c.most_common(1), dict(d), list(itertools.islice(itertools.count(), 3)))",
        "[('a', 5)] {'a': [1]} [0, 1, 2]\n"),
    "math, statistics, random": (
        "import math, statistics, random\nrandom.seed(1)\n"
        "print(math.sqrt(16), statistics.median([3, 1, 2]), 0 <= random.random() < 1)",
        "4.0 2 True\n"),
    "datetime": (
        "import datetime\nprint(datetime.date(2024, 2, 29).strftime('%Y-%m-%d'),"
        " datetime.timedelta(days=1))", "2024-02-29 1 day, 0:00:00\n"),
    "generators and exceptions": (
        "def chunks(s, n):\n    for i in range(0, len(s), n):\n        yield s[i:i + n]\n"
        "try:\n    raise ValueError('v')\nexcept ValueError as e:\n    m = str(e)\n"
        "print(list(chunks(context, 4)), m)", "['the ', 'cont', 'ext'] v\n"),
    "textwrap, string, heapq, bisect, functools": (
        "import textwrap, string, heapq, bisect, functools\n"
        "print(textwrap.shorten('a b c d e f', 7), string.ascii_lowercase[:3],"
        " heapq.nsmallest(2, [5, 1, 3]), bisect.bisect([1, 3], 2),"
        " functools.reduce(lambda a, b: a + b, [1, 2, 3]))", "a [...] abc [1, 3] 1 6\n"),
    "llm_query round trip": (
        "print(llm_query('q', context[:3]), llm_query_batched(['a', 'bb']))",
        "len=1 ['len=1', 'len=2']\n"),
    "FINAL_VAR": ("answer = 'forty-two'\nFINAL_VAR('answer')", ""),
    "parsing log timestamps": (
        "import datetime, time\n"
        "d = datetime.datetime.strptime('2024-03-05 10:11:12', '%Y-%m-%d %H:%M:%S')\n"
        "print(d.isoformat(), time.strptime('05/03/2024', '%d/%m/%Y').tm_mon)",
        "2024-03-05T10:11:12 3\n"),
}


@pytest.mark.parametrize("name", sorted(ORDINARY))
async def test_ordinary_code_works(name: str) -> None:
    code, expected = ORDINARY[name]
    async with open_sandbox("the context") as box:
        assert await box.ok(code) == expected


async def test_namespace_persists_and_errors_do_not_reset_it() -> None:
    async with open_sandbox(["doc one", "doc two"]) as box:
        await box.ok("total = sum(len(d) for d in context)")
        await box.fails("1 / 0", "ZeroDivisionError")
        assert await box.ok("print(total, hasattr(total, 'real'), getattr(total, 'nope', 0))") \
            == "14 True 0\n"
        await box.fails("print(total.nope)", "AttributeError")
