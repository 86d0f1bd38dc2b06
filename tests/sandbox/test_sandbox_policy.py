"""The RestrictedPython policy, in process: ordinary code runs, escapes do not."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from rlm_sandbox.modules import ALLOWED_MODULES, ModuleProxy, import_module
from rlm_sandbox.policy import PrintSink, compile_code, new_namespace


def run(source: str, max_chars: int = 100_000, namespace: dict[str, Any] | None = None) -> str:
    sink = PrintSink(max_chars)
    exec(compile_code(textwrap.dedent(source)), namespace or new_namespace(sink))
    return sink.text()


ORDINARY: list[tuple[str, str, str]] = [
    ("containers", "print([1, 2][1], {'a': 1}['a'], {3} | {4}, (5, 6)[0])", "2 1 {3, 4} 5\n"),
    ("comprehensions", "print([x * x for x in range(4) if x], {k: v for k, v in [(1, 2)]},"
     " {c for c in 'aa'}, sum(x for x in range(3)))", "[1, 4, 9] {1: 2} {'a'} 3\n"),
    ("builtins", "print(sorted([3, 1]), list(zip('ab', [1, 2])), list(enumerate('x')),"
     " min(2, 1), max([4, 5]), any([0, 1]), all([]), abs(-2), round(2.567, 1), len('abc'),"
     " list(reversed([1, 2])), list(map(str, [1])), list(filter(None, [0, 7])))",
     "[1, 3] [('a', 1), ('b', 2)] [(0, 'x')] 1 5 True True 2 2.6 3 [2, 1] ['1'] [7]\n"),
    ("conversions", "print(int('7'), float('1.5'), str(3), bool(0), repr('a'), chr(65), ord('A'),"
     " divmod(7, 2), pow(2, 3), hash(1) == hash(1), callable(len), frozenset([1]))",
     "7 1.5 3 False 'a' A 65 (3, 1) 8 True True frozenset({1})\n"),
    ("iterators and slices", "it = iter([1, 2])\nprint(next(it), next(it, 'end'), next(it, 'end'),"
     " [0, 1, 2, 3][slice(1, 3)], 'abcdef'[::2])", "1 2 end [1, 2] ace\n"),
    ("strings", "name = 'x'\nprint(f'{name!r}:{3.14159:.2f}', '{} {k}'.format(1, k=2),"
     " '{0[1]}'.format([5, 6]), '{a}'.format_map({'a': 9}), str.format('{}', 4),"
     " 'a,b'.split(','), '-'.join(['p', 'q']), '%s=%d' % ('n', 3))",
     "'x':3.14 1 2 6 9 4 ['a', 'b'] p-q n=3\n"),
    ("dict counting", """
        counts = {}
        for word in 'a b a'.split():
            counts[word] = counts.get(word, 0)
            counts[word] += 1
        grid = [[0, 0]]
        grid[0][1] += 5
        items = [1, 2, 3]
        items[0:2] += [9]
        print(counts, grid, items, sorted(counts.items()))
     """, "{'a': 2, 'b': 1} [[0, 5]] [1, 2, 9, 3] [('a', 2), ('b', 1)]\n"),
    ("classes", """
        class Counter:
            total = 0
            def __init__(self, start):
                self.value = start
            def bump(self, by=1):
                self.value += by
                Counter.total += 1
                return self.value
        c = Counter(10)
        c.bump()
        c.bump(5)
        c.label = 'ok'
        setattr(c, 'extra', 1)
        print(c.value, Counter.total, c.label, getattr(c, 'extra'), hasattr(c, 'nope'),
              isinstance(c, Counter), type(c) is Counter, isinstance(Counter, type))
     """, "16 2 ok 1 False True True True\n"),
    ("exception subclasses", """
        class Oops(ValueError):
            pass
        try:
            raise Oops('bad')
        except ValueError as exc:
            print('caught', exc, isinstance(exc, Exception))
     """, "caught bad True\n"),
    ("prints inside functions keep order", """
        def inner():
            print('inner')
        def outer():
            print('outer start')
            inner()
            print('outer end')
        print('top')
        outer()
        print('done', end='!\\n')
        print('a', 'b', sep='-')
     """, "top\nouter start\ninner\nouter end\ndone!\na-b\n"),
    ("generators and lambdas", """
        def gen(n):
            for i in range(n):
                yield i * 2
        double = lambda x: x * 2
        first, *rest = gen(4)
        print(first, rest, list(map(double, [1, 2])), sorted(['bb', 'a'], key=lambda s: len(s)))
     """, "0 [2, 4, 6] [2, 4] ['a', 'bb']\n"),
    ("try except finally", """
        out = []
        for exc in (ZeroDivisionError, KeyError, IndexError, TypeError, AttributeError,
                    StopIteration, RuntimeError, NameError, AssertionError):
            try:
                raise exc('x')
            except (ArithmeticError, LookupError) as e:
                out.append('lookup-or-math')
            except Exception as e:
                out.append('other')
            finally:
                out.append('.')
        print(''.join(o[0] for o in out))
     """, "l.l.l.o.o.o.o.o.o.\n"),
    ("star args", "def f(*args, **kwargs):\n    return args, kwargs\n"
     "print(f(*[1, 2], **{'k': 3}))", "((1, 2), {'k': 3})\n"),
    ("nested unpacking", "for i, (a, b) in enumerate([(1, 2)]):\n    print(i, a, b)", "0 1 2\n"),
    ("printed", "print('x')\nprint(printed == 'x\\n')", "x\nTrue\n"),
    ("globals and decorators", """
        total = 0
        def add(n):
            global total
            total += n
        class Box:
            def __init__(self, v):
                self.v = v
            @property
            def double(self):
                return self.v * 2
            @classmethod
            def make(cls):
                return cls(4)
        add(3)
        print(total, Box.make().double, f"{total=}")
     """, "3 8 total=3\n"),
    ("recursion", "def fact(n):\n    return 1 if n < 2 else n * fact(n - 1)\nprint(fact(10))",
     "3628800\n"),
]

IMPORTS: list[tuple[str, str]] = [
    ("import re\nprint(re.findall(r'\\d+', 'a1b22'), re.sub('a', 'b', 'aa'))", "['1', '22'] bb\n"),
    ("import json\nprint(json.dumps({'a': [1]}), json.loads('[2]'))", '{"a": [1]} [2]\n'),
    ("import math\nprint(math.sqrt(16), math.floor(2.5))", "4.0 2\n"),
    ("from collections import Counter, defaultdict, deque\nd = defaultdict(int)\nd['k'] += 2\n"
     "q = deque([1])\nq.append(2)\nprint(Counter('abca').most_common(1), dict(d), list(q))",
     "[('a', 2)] {'k': 2} [1, 2]\n"),
    ("import itertools\nprint(list(itertools.chain([1], [2])))", "[1, 2]\n"),
    ("import functools\nprint(functools.reduce(lambda a, b: a * b, [2, 3]))", "6\n"),
    ("import statistics\nprint(statistics.median([3, 1, 2]))", "2\n"),
    ("import datetime\nprint(datetime.date(2024, 1, 2).isoformat())", "2024-01-02\n"),
    ("import textwrap\nprint(textwrap.wrap('aa bb', 2))", "['aa', 'bb']\n"),
    ("import string\nprint(string.ascii_lowercase[:3], string.Template('$x').substitute(x=1))",
     "abc 1\n"),
    ("import heapq\nh = [3, 1]\nheapq.heapify(h)\nprint(heapq.heappop(h))", "1\n"),
    ("import bisect\nprint(bisect.bisect_left([1, 3], 2))", "1\n"),
    ("import random\nrandom.seed(0)\nr = random.Random(1)\nprint(0 <= r.random() < 1)", "True\n"),
    ("import time\nprint(time.strftime('%Y', time.gmtime(0)))", "1970\n"),
    ("import typing\nprint(typing.get_args(typing.Dict[str, int]))",
     "(<class 'str'>, <class 'int'>)\n"),
    ("import collections.abc\nprint(isinstance({}, collections.abc.Mapping))", "True\n"),
    ("import dataclasses\n@dataclasses.dataclass\nclass P:\n    x: int\nprint(P(1))",
     "P(x=1)\n"),
    ("import copy\na = [[1]]\nb = copy.deepcopy(a)\nb[0].append(2)\nprint(a, copy.copy(b))",
     "[[1]] [[1, 2]]\n"),
    ("import operator\nprint(operator.attrgetter('real')(2), operator.add(1, 2))", "2 3\n"),
    ("import decimal\nprint(decimal.Decimal('0.1') * 3)", "0.3\n"),
    ("import fractions\nprint(fractions.Fraction(2, 4))", "1/2\n"),
    ("import difflib\nprint(difflib.SequenceMatcher(None, 'ab', 'ab').ratio())", "1.0\n"),
    ("import unicodedata\nprint(unicodedata.category('a'))", "Ll\n"),
    ("import enum\nclass C(enum.Enum):\n    A = 1\nprint(C.A, C(1).name)", "C.A A\n"),
    ("import base64\nprint(base64.b64decode(base64.b64encode(b'hi')))", "b'hi'\n"),
    ("import binascii\nprint(binascii.hexlify(b'A'))", "b'41'\n"),
    ("import calendar\nprint(calendar.monthrange(2024, 2), calendar.isleap(2024))",
     "(3, 29) True\n"),
    ("import codecs\nprint(codecs.decode(b'caf\\xc3\\xa9', 'utf-8'), codecs.encode('ab', 'rot13'))",
     "caf\u00e9 no\n"),
    ("import contextlib\nwith contextlib.suppress(KeyError):\n    {}['x']\nprint('ok')", "ok\n"),
    ("import csv\nprint(list(csv.reader(['a,\"b,c\"'])))", "[['a', 'b,c']]\n"),
    ("import fnmatch\nprint(fnmatch.filter(['a.py', 'b.txt'], '*.py'))", "['a.py']\n"),
    ("import gzip\nprint(gzip.decompress(gzip.compress(b'x' * 3)))", "b'xxx'\n"),
    ("import hashlib\nprint(hashlib.sha256(b'').hexdigest()[:8])", "e3b0c442\n"),
    ("import html\nprint(html.unescape('&lt;a&gt; &amp;'))", "<a> &\n"),
    ("import html.parser\nclass P(html.parser.HTMLParser):\n    def handle_starttag(self, t, a):\n"
     "        print(t, a)\nP().feed('<a href=x>')", "a [('href', 'x')]\n"),
    ("import io\nb = io.StringIO()\nb.write('x')\nprint(b.getvalue(), io.BytesIO(b'y').read())",
     "x b'y'\n"),
    ("import pprint\nprint(pprint.pformat({'b': 1, 'a': [1, 2]}))", "{'a': [1, 2], 'b': 1}\n"),
    ("import shlex\nprint(shlex.split('a \"b c\"'), shlex.quote('x y'))", "['a', 'b c'] 'x y'\n"),
    ("import struct\nprint(struct.unpack('>HH', b'\\x00\\x01\\x00\\x02'))", "(1, 2)\n"),
    ("import urllib\nprint(urllib.parse.quote('a b'))", "a%20b\n"),
    ("import urllib.parse\nprint(urllib.parse.urlparse('http://h/p?q=1').query)", "q=1\n"),
    ("import uuid\nprint(uuid.uuid5(uuid.NAMESPACE_DNS, 'x').version, uuid.uuid1().node >> 40 & 1)",
     "5 1\n"),
    ("import xml\nprint(xml.etree.ElementTree.fromstring('<a>t</a>').text)", "t\n"),
    ("import xml.etree\nprint(xml.etree.ElementTree.fromstring('<a/>').tag)", "a\n"),
    ("import xml.etree.ElementTree as ET\nprint(ET.fromstring('<a><b x=\"1\"/></a>')[0].get('x'))",
     "1\n"),
    ("import zlib\nprint(zlib.decompress(zlib.compress(b'z' * 3)), zlib.crc32(b'a'))",
     "b'zzz' 3904355907\n"),
    ("import zoneinfo\nprint(zoneinfo.ZoneInfo('UTC'))", "UTC\n"),
]


@pytest.mark.parametrize(("source", "expected"), [(s, e) for _, s, e in ORDINARY],
                         ids=[name for name, _, _ in ORDINARY])
def test_ordinary_code_runs(source: str, expected: str) -> None:
    assert run(source) == expected


@pytest.mark.parametrize(("source", "expected"), IMPORTS, ids=[s.split()[1] for s, _ in IMPORTS])
def test_allowed_imports_work(source: str, expected: str) -> None:
    assert run(source) == expected


def test_every_allowed_module_is_covered() -> None:
    covered = {source.split()[1] for source, _ in IMPORTS}
    assert covered == set(ALLOWED_MODULES)


ESCAPES = [
    "().__class__.__bases__[0].__subclasses__()",
    "getattr((), '__reduce_ex__')",
    "getattr(len, '__self__')",
    "'{0.__class__.__base__}'.format(1)",
    "'{x.__class__.__base__}'.format_map({'x': 1})",
    "str.format('{0.__class__.__bases__}', 1)",
    "def g():\n    yield 1\ng().gi_frame",
    "def g():\n    yield 1\ngetattr(g(), 'gi_frame').f_globals",
    "def g():\n    yield 1\ngetattr(g(), 'gi_code')",
    "def g():\n    yield 1\n'{0.gi_frame}'.format(g())",
    "def g():\n    yield 1\n'{0.gi_frame.f_back}'.format(g())",
    "try:\n    1 / 0\nexcept Exception as e:\n    getattr(e, '__traceback__').tb_frame",
    "def f():\n    pass\ngetattr(f, '__globals__')",
    "import os",
    "import sys",
    "import collections.abc\ncollections.abc.sys",
    "from . import x",
    "__import__('os')",
    "import re\nre.enum",
    "from re import enum",
    "import json\njson.codecs",
    "import json\njson.decoder",
    "from json import decoder",
    "import datetime\ndatetime.sys",
    "import datetime\ndatetime.datetime_CAPI",
    "import collections\ncollections.abc.ABCMeta",
    "from collections.abc import ABCMeta",
    "import random\ngetattr(random, '_os')",
    "import string\nstring.Formatter",
    "from string import Formatter",
    "from functools import update_wrapper",
    "from functools import singledispatch",
    "import re\ngetattr(re, '__dict__')",
    "import re\ngetattr(re, '__loader__')",
    "eval('1')",
    "exec('1')",
    "f = eval\nf('1')",
    "compile('1', 'x', 'exec')",
    "open('/etc/passwd')",
    "input()",
    "globals()",
    "locals()",
    "vars()",
    "dir()",
    "breakpoint()",
    "memoryview(b'x')",
    "import re\nre.sub = None",
    "import math\nsetattr(math, 'pi', 3)",
    "def f():\n    pass\nf.x = 1",
    "len.x = 1",
    "'abc'.upper = 1",
    "str.upper = 1",
    "type('X', (), {})",
    "class A:\n    pass\ntype(A)",
    "type(type(1))",
    "class A(metaclass=type):\n    pass",
    "def f():\n    nonlocal x",
    "x = printed.__class__.__mro__",
    "print('x', file=1)",
    # routes to the native str.format that do not go through 'x'.format
    "class S(str):\n    pass\nsuper(S, S('{0.__class__.__base__}')).format(1)",
    "class S(str):\n    pass\nsuper(S, S).format('{0.__class__.__base__}', 1)",
    # str subclasses that lie to the guards
    "class N(str):\n    def startswith(self, *a):\n        return False\n"
    "getattr(1, N('__reduce_ex__'))",
    "class T(str):\n    def __contains__(self, x):\n        return False\n"
    "T('{0.__class__.__base__}').format(1)",
    "class T(str):\n    def __contains__(self, x):\n        return False\n"
    "str.format_map(T('{a.__class__.__base__}'), {'a': 1})",
]


@pytest.mark.parametrize("source", ESCAPES)
def test_escapes_are_refused(source: str) -> None:
    with pytest.raises((SyntaxError, AttributeError, ImportError, NameError, TypeError)):
        run(source)


def test_compile_errors_are_readable() -> None:
    with pytest.raises(SyntaxError) as info:
        compile_code("a = 1\nb = a.__globals__\n_c_ = 2\n")
    lines = str(info.value).splitlines()
    assert lines[0].startswith("Line 2:") and "__globals__" in lines[0]
    assert lines[1].startswith("Line 3:") and "_c_" in lines[1]


def test_import_error_lists_allowed_modules() -> None:
    with pytest.raises(ImportError, match=r"'os' is not allowed.*no files.*Allowed: base64"):
        run("import os")


def test_module_proxies_are_cached_read_only_and_module_free() -> None:
    proxy = import_module("json")
    assert proxy is import_module("json")
    assert isinstance(proxy, ModuleProxy)
    with pytest.raises(TypeError):
        proxy.loads = None
    for name in ALLOWED_MODULES:
        module_proxy = import_module(name)
        for attr in dir(module_proxy):
            assert not attr.startswith("_")
            assert type(getattr(module_proxy, attr)).__name__ not in ("module", "PyCapsule")


def test_print_sink_caps_storage_but_counts_everything() -> None:
    sink = PrintSink(5)
    ns = new_namespace(sink)
    exec(compile_code("for i in range(10):\n    print(i)"), ns)
    assert sink.text() == "0\n1\n2"
    assert sink.total_chars == 20
    sink.reset()
    assert sink.text() == "" and sink.total_chars == 0


def test_namespace_extras_are_visible() -> None:
    sink = PrintSink(100)
    ns = new_namespace(sink, {"context": "hello"})
    assert run("print(context.upper())", namespace=ns) == "" and sink.text() == "HELLO\n"
