"""Attacks on the sandbox policy, grouped by route: each must be refused (see sandbox_corpus.py)."""

from __future__ import annotations

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
    # async def is allowed (issue 28: asyncio.gather over asyncio.to_thread runs); what it
    # makes, and the stand-ins that run it, hand out no frame, loop, thread or internal.
    "coroutines and concurrency stand-ins": [
        "async def f():\n    pass\nprint(f().cr_frame)",
        "async def f():\n    pass\nprint(getattr(f(), 'cr_code'))",
        "async def f():\n    pass\nc = f()\nc.send(None)\nprint(c.cr_await)",
        "async def f():\n    yield 1",
        "async def f():\n    return [x async for x in g()]",
        "class A:\n    def __await__(self):\n        return iter([])",
        "class A:\n    async def __aenter__(self):\n        return self",
        "import asyncio\nasync def main():\n    await (i for i in [1])\nasyncio.run(main())",
        "import asyncio\nasync def f():\n    return 1\nasync def main():\n"
        "    t = asyncio.create_task(f())\n    await t\n    return t\n"
        "print(asyncio.run(main())._coro)",
        "import asyncio\nprint(asyncio.new_event_loop()._calls)",
        "import asyncio\nprint(asyncio.get_event_loop()._ready)",
        "import asyncio\nprint(asyncio.run.__closure__)",
        "import asyncio\nprint(asyncio.run.__globals__)",
        "import asyncio\nprint(asyncio.Task.__init__.__globals__)",
        "import asyncio\nprint(type(asyncio.get_event_loop()).__dict__)",
        "import asyncio\nclass T(asyncio.Task):\n    pass",
        "import asyncio\ns = asyncio.Semaphore()\ns._value = 10",
        "import asyncio\nasync def main():\n    loop = asyncio.get_running_loop()\n"
        "    return loop.run_in_executor(None, len, 'x')._call\nprint(asyncio.run(main()))",
        "from concurrent.futures import ThreadPoolExecutor\n"
        "print(ThreadPoolExecutor.submit.__globals__)",
        "from concurrent.futures import ThreadPoolExecutor\nclass P(ThreadPoolExecutor):\n"
        "    pass",
        "from concurrent.futures import ThreadPoolExecutor\nex = ThreadPoolExecutor()\n"
        "print(ex.submit(len, 'x')._executor)",
        "from concurrent.futures import ThreadPoolExecutor\nThreadPoolExecutor().x = 1",
        "from concurrent.futures import ThreadPoolExecutor\nprint(ThreadPoolExecutor()._pending)",
        "import concurrent.futures.thread",
        "import concurrent.futures\nprint(concurrent.futures.thread)",
        "import threading",
        "import _thread",
        # The auto-batching rewrite's names are the policy's, and its objects stay inside.
        "print(_ab_for_)",
        "_ab_helper_(print, print)",
        "for _ab_tick_ in [1]:\n    pass",
        "FINAL_VAR('_ab_predict_call_')",
        "print(llm_query.__self__)",
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
