"""Security suite, language layer: what model code may reach through RestrictedPython.

Each test runs hostile snippets in a real, hardened sandbox and asserts that
they fail with an error the model can read, that the sandbox still serves
the next block, and that the host's canary secret never comes back.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rlm_sandbox.protocol import QueryRequest
from tests.sandbox.security_harness import open_sandbox

ATTRIBUTE_WALKS = [
    "().__class__.__bases__[0].__subclasses__()",
    "getattr(getattr((), '__class__'), '__bases__')",
    "getattr(getattr, '__globals__')",
    "type(()).mro()[-1].__subclasses__()",
    "object.__subclasses__()",
    "(lambda: 0).__globals__",
    "getattr(llm_query, '__self__')",
    "llm_query.__func__",
    "str.mro()",  # fine on its own, but the walk from here needs dunders:
    "getattr(str.mro()[1], '__subclasses__')()",
    "type('X', (), {})",
    "vars()",
    "dir()",
    "globals()",
    "setattr(str, 'upper', 1)",
]


@pytest.mark.parametrize("code", ATTRIBUTE_WALKS)
async def test_attribute_walks_to_internals_are_refused(code: str) -> None:
    async with open_sandbox() as box:
        result = await box.run(f"x = {code}\nprint(x)")
        if code == "str.mro()":
            assert result.ok  # harmless by itself
            return
        assert not result.ok and result.error
        assert "subclasses" not in result.output and "function" not in result.output
        assert await box.ok("print('still serving')") == "still serving\n"


async def test_frame_generator_and_traceback_introspection_is_refused() -> None:
    async with open_sandbox() as box:
        await box.ok("g = (i for i in range(3))")
        for name in ("gi_frame", "gi_code", "gi_yieldfrom"):
            await box.fails(f"print(g.{name})", "not accessible", "restricted name")
        await box.ok("def f():\n    yield 1\nh = f()")
        await box.fails("print(h.gi_frame.f_globals)", "not accessible", "restricted name")
        await box.fails("try:\n    1/0\nexcept Exception as e:\n    print(e.__traceback__)",
                        "SyntaxError", "not accessible")
        await box.fails("async def c():\n    pass\nprint(c().cr_frame)", "not accessible",
                        "SyntaxError", "restricted name")
        await box.fails("print(getattr(h, 'gi_' + 'frame'))", "not accessible")


FORMAT_TRAVERSALS = [
    "'{0.__class__.__base__}'.format(1)",
    "'{0.__globals__}'.format(FINAL)",
    "'{0.gi_frame}'.format((i for i in []))",
    "'{x.__init__.__globals__}'.format_map({'x': 1})",
    "str.format('{0.__class__.__mro__}', 1)",
    "'{0.__self__}'.format(print)",
    "'{a.b.__class__}'.format(a=__import__('json'))",
]


@pytest.mark.parametrize("code", FORMAT_TRAVERSALS)
async def test_format_string_traversal_is_refused(code: str) -> None:
    async with open_sandbox() as box:
        error = await box.fails(f"print({code})", "not accessible", "withholds", "SyntaxError",
                                "has no attribute")
        assert "class 'int'" not in error


IMPORTS = [
    "import os", "import sys", "import subprocess", "import socket", "import ctypes",
    "import pickle", "import marshal", "import importlib", "import builtins", "import io; io.open",
    "import threading", "import multiprocessing", "import signal", "import posix",
    "import gc", "import inspect", "import types", "import code", "import _thread",
    "import collections.abc; collections.abc.sys", "from json import decoder",
    "from re import enum",
    "from datetime import sys", "__import__('os')", "__import__('json').decoder",
    "from . import x", "import json; json.codecs", "import random; random.os",
    "import functools; functools.update_wrapper", "import string; string.Formatter",
    "import re; re._compiler", "import statistics; statistics.sys",
]


@pytest.mark.parametrize("code", IMPORTS)
async def test_dangerous_imports_and_module_gadgets_are_refused(code: str) -> None:
    async with open_sandbox() as box:
        await box.fails(code, "not allowed", "not accessible", "no attribute", "SyntaxError",
                        "ImportError", "cannot import")


@pytest.mark.parametrize("code", [
    "eval('1+1')", "exec('x = 1')", "compile('1', 'f', 'eval')", "open('/etc/passwd')",
    "open('/proc/1/environ').read()", "open('/tmp/rlm-sec-write', 'w')", "breakpoint()",
    "input()", "memoryview(b'x')", "help()",
])
async def test_eval_exec_compile_and_file_access_are_refused(code: str) -> None:
    async with open_sandbox() as box:
        await box.fails(code, "not available", "SyntaxError")


async def test_files_outside_are_not_written(tmp_path: Path) -> None:
    target = str(tmp_path / "written")
    async with open_sandbox() as box:
        for code in (f"open({target!r}, 'w').write('x')",
                     f"import json; json.dump({{}}, open({target!r}, 'w'))"):
            await box.fails(code, "not available")
    assert not (tmp_path / "written").exists()


@pytest.mark.parametrize("code", [
    "raise SystemExit(0)", "raise KeyboardInterrupt", "raise GeneratorExit", "exit()", "quit()",
    "raise BaseException('out')", "import sys; sys.exit(1)",
    "class E(BaseException):\n    pass\nraise E()",
])
async def test_exit_tricks_are_errors_and_the_worker_keeps_serving(code: str) -> None:
    async with open_sandbox() as box:
        result = await box.run(code)
        assert not result.ok
        assert await box.ok("print(1)") == "1\n"
        assert box.box.alive


async def test_bridge_abuse_is_refused_or_contained() -> None:
    async with open_sandbox() as box:
        await box.fails("llm_query(123)", "must be a str")
        await box.fails("llm_query(['a', 'b'])", "must be a str")
        await box.fails("llm_query('q', context=7)", "must be a str")
        await box.fails("llm_query_batched('abc')", "must be a list")
        await box.fails("llm_query_batched([1, 2])", "must be a str")
        await box.fails("llm_query_batched(['a'], ['b', 'c'])", "contexts")
        await box.fails("llm_query('x' * 20_000_000)", "too large")
        out = await box.ok("print(llm_query_batched(['a'] * 5000)[-1])")
        assert out == "len=1\n"
        out = await box.ok("n = 0\nfor i in range(300):\n    n += len(llm_query('q'))\nprint(n)")
        assert out == "1500\n"
        await box.ok("class S(str):\n    def upper(self):\n        return 0\n"
                     "print(llm_query(S('abc')))")
        await box.ok("g = (llm_query('q') for _ in range(2))")
        assert await box.ok("print(list(g))") == "['len=1', 'len=1']\n"
        queries = [r for r in box.bridge_requests if isinstance(r, QueryRequest)]
        assert queries and all(isinstance(p, str) for r in queries for p in r.prompts)


async def test_mutating_context_changes_only_the_sandbox_copy() -> None:
    documents = ["alpha", "beta"]
    async with open_sandbox(documents) as box:
        await box.ok("context.append('gamma')\ncontext[0] = 'changed'")
        assert await box.ok("print(context)") == "['changed', 'beta', 'gamma']\n"
    assert documents == ["alpha", "beta"]
    async with open_sandbox("text") as box:
        await box.ok("context += '!'")
        await box.fails("context.upper = 1", "cannot modify", "has no attribute", "read-only")
        assert await box.ok("print(context)") == "text!\n"


async def test_forged_frames_in_output_are_plain_text() -> None:
    async with open_sandbox() as box:
        forged = "'\\x00\\x00\\x00\\x10' + '\\x82\\xa1t\\xa6result\\xa2ok\\xc3'"
        result = await box.run(f"print({forged})\nFINAL('x')")
        assert result.ok and result.final == "x"
        assert "result" in result.output
        assert await box.ok("print(2)") == "2\n"
