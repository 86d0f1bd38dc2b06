"""Security suite, review findings: attacks tried against a real sandbox, by route.

Each test asserts the attack is refused (or harmless), that the worker keeps
serving and that the host's canary never comes back.  Several were escapes
or host crashes when found (UserString.format with AttributeError.obj,
forged result frames, container amplification in frames, System V IPC left
behind, unencodable output); they stay here as regression tests.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlm.errors import SandboxError
from rlm_sandbox.protocol import HEADER, FrameDecoder, FrameError, encode_frame
from tests.sandbox.security_harness import CANARY, open_sandbox

ROOT = Path(__file__).resolve().parents[2]

#: The language-layer escape found in review: collections.UserString.format is a
#: plain Python method (so the guard hands it out as-is) that calls the *real*
#: str.format, whose field lookups walk any attribute; the AttributeError raised
#: at the end of the walk carries the object it failed on in ``.obj``.
USERSTRING_ESCAPE = (
    "from collections import UserString\n"
    "try:\n"
    "    UserString('{0.__init__.__globals__[_sys].modules.nope}').format(UserString(''))\n"
    "except AttributeError as e:\n"
    "    mods = e.obj\n"
    "os = mods['os']\n"
    "print(os.getpid() > 0, os)\n"
)


# --- escapes that currently succeed --------------------------------------------------------


async def test_userstring_format_does_not_walk_dunder_attributes() -> None:
    async with open_sandbox() as box:
        result = await box.run(
            "from collections import UserString\n"
            "print(UserString('{0.__class__.__mro__}').format(1))\n"
            "print(UserString('{m[x].__self__}').format_map({'m': {'x': FINAL}}))")
        assert "class 'object'" not in result.output
        assert "Repl" not in result.output
        assert not result.ok


async def test_userstring_and_attribute_error_obj_do_not_give_real_modules() -> None:
    async with open_sandbox() as box:
        result = await box.run(USERSTRING_ESCAPE)
        assert "<module 'os'" not in result.output
        assert not result.ok
        assert await box.ok("print('still serving')") == "still serving\n"


def test_frame_decoder_refuses_container_amplification() -> None:
    count = 1 << 20
    payload = (b"\x82\xa1t\xa6bridge\xa7prompts\xdd" + count.to_bytes(4, "big")
               + b"\x90" * count)
    with pytest.raises(FrameError):
        FrameDecoder().feed(HEADER.pack(len(payload)) + payload)


def _nested(depth: int) -> list[object]:
    return functools.reduce(lambda inner, _: [inner], range(depth), [])


FORGED_RESULTS: dict[str, dict[str, object]] = {
    "output_chars not a number": {"output_chars": "abc"},
    "output_chars a list": {"output_chars": [1]},
    "output_chars infinite": {"output_chars": float("inf")},
    "output nested 1000 deep": {"output": _nested(1000)},
}


@pytest.mark.parametrize("name", sorted(FORGED_RESULTS))
async def test_forged_result_frame_fields_cost_only_the_call(name: str) -> None:
    frame: dict[str, object] = {"t": "result", "id": 1, "ok": True, "output": "x",
                                "output_chars": 1, "error": None, "final": None,
                                **FORGED_RESULTS[name]}
    async with open_sandbox() as box:
        # Play the compromised child: write straight into the host's receive pipe.
        fd = os.open(f"/proc/{box.box.pid}/fd/4", os.O_WRONLY)
        try:
            os.write(fd, encode_frame(frame))
        finally:
            os.close(fd)
        try:
            result = await box.run("print(1)")
        except SandboxError:
            return
        assert isinstance(result.output, str) and isinstance(result.output_chars, int)


SYSV_IPC_ATTEMPT = r'''
import ctypes, json
from rlm_sandbox.isolation import Limits, harden, preload
preload()
report = harden({0, 1, 2}, Limits(memory_bytes=512 << 20), parent=None)
libc = ctypes.CDLL(None, use_errno=True)
IPC_CREAT, IPC_PRIVATE = 0o1000, 0
made = {
    "shm": libc.shmget(IPC_PRIVATE, 1 << 20, IPC_CREAT | 0o600),
    "msg": libc.msgget(IPC_PRIVATE, IPC_CREAT | 0o600),
    "sem": libc.semget(IPC_PRIVATE, 1, IPC_CREAT | 0o600),
}
print(json.dumps({"report": report, "made": made}))
'''


def _sysv_ids(kind: str) -> set[int]:
    try:
        with open(f"/proc/sysvipc/{kind}") as table:
            rows = table.read().splitlines()[1:]
    except OSError:
        return set()
    return {int(row.split()[1]) for row in rows if row.strip()}


def _remove_sysv(kind: str, ident: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    ipc_rmid = 0
    if kind == "shm":
        libc.shmctl(ident, ipc_rmid, None)
    elif kind == "msg":
        libc.msgctl(ident, ipc_rmid, None)
    else:
        libc.semctl(ident, 0, ipc_rmid)


def test_a_hardened_process_leaves_no_sysv_ipc_objects_behind() -> None:
    before = {kind: _sysv_ids(kind) for kind in ("shm", "msg", "sem")}
    done = subprocess.run(
        [sys.executable, "-c", SYSV_IPC_ATTEMPT],
        env={"PYTHONPATH": str(ROOT / "sandbox"), "PATH": "/usr/bin:/bin"},
        capture_output=True, timeout=30, text=True, check=False,
    )
    after = {kind: _sysv_ids(kind) for kind in ("shm", "msg", "sem")}
    leftover = {kind: sorted(after[kind] - before[kind]) for kind in after}
    for kind, idents in leftover.items():
        for ident in idents:
            _remove_sysv(kind, ident)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)["report"]
    if report["seccomp"] != "active":  # pragma: no cover - a weaker kernel
        pytest.skip(f"seccomp unavailable here: {report['seccomp']}")
    assert leftover == {"shm": [], "msg": [], "sem": []}


async def test_a_lone_surrogate_in_output_is_an_error_not_a_crash() -> None:
    async with open_sandbox() as box:
        result = await box.run("print('a' + chr(0xd800) + 'b')")
        assert not result.ok  # as plain Python's print to a UTF-8 stream fails
        assert result.error is not None and "lone surrogate" in result.error
        assert "too large" not in result.error
        assert await box.ok("print('alive')") == "alive\n"


# --- attacks that are refused --------------------------------------------------------------

FORMAT_ROUTES = [
    "class S(str):\n    pass\nprint(super(S, S('{0.__class__.__base__}')).format(1))",
    "print(list(map(str.format, ['{0.__class__.__base__}'], [1])))",
    "import functools\nprint(functools.partial(str.format, '{0.__class__.__base__}')(1))",
    "import functools\n"
    "print(functools.partial(getattr(str, 'format_map'), '{x.__class__.__base__}')({'x': 1}))",
    "print(format(1, '{0.__class__}'))",
    "print(f'{1:{\"{0.__class__}\"}}')",
    "print('{0.gi_frame}'.format((i for i in [])))",
]


@pytest.mark.parametrize("code", FORMAT_ROUTES)
async def test_other_routes_to_str_format_stay_guarded(code: str) -> None:
    async with open_sandbox() as box:
        error = await box.fails(code, "not accessible", "Invalid format specifier")
        assert "class 'int'" not in error
        assert await box.ok("print('still serving')") == "still serving\n"


GADGETS = [
    # Guarded getattr reached through higher-order helpers.
    "import functools\nprint(functools.partial(getattr, (i for i in [1]))('gi_frame'))",
    "import functools\nprint(functools.reduce(getattr, ['gi_code'], (i for i in [1])))",
    "print(sorted(['gi_frame'], key=lambda n: getattr((i for i in []), n)))",
    # namedtuple evals its field names: dunders and lying str subclasses are refused.
    "import collections\ncollections.namedtuple('A', ['__class__'])",
    "import collections\nclass S(str):\n    def isidentifier(self):\n        return True\n"
    "collections.namedtuple('A', [S('a=().__class__')])",
    # Constructors of types model code can name.
    "t = type(lambda: 0)\nt(None, {})",
    "type(type)('X', (), {})",
    # ABC registration does not make foreign objects writable.
    "import collections\ncollections.UserDict.register(object)\nx = object()\nx.a = 1",
    "import collections\nclass D(collections.UserDict):\n    pass\n"
    "D.register(str)\nstr.upper = 1",
    # Rebinding the policy's names by any binding form.
    "match 1:\n    case _getattr_:\n        pass",
    "try:\n    pass\nexcept* ValueError as _getattr_:\n    pass",
    "(_apply_ := 1)",
    "for _write_ in [1]:\n    pass",
    "with open('x') as _getiter_:\n    pass",
    "import json as _getattr_",
    "def f(_getattr_=1):\n    return 1",
    # Magic methods that steer pickling or attribute access are not definable;
    # no metaclass, no coroutine internals (async def runs: issue 28), no names of the
    # policy's form.
    "class E(Exception):\n    def __reduce__(self):\n        return 'x'",
    "class X(metaclass=lambda n, b, ns: ns):\n    pass",
    "async def f():\n    pass\nprint(f().cr_frame)",
    "class _Hidden_:\n    pass",
    # Reading the policy's namespace through FINAL_VAR.
    "FINAL_VAR('__builtins__')",
    "FINAL_VAR(' _getattr_ ')",
    # Clock, time zone and tzinfo hooks.
    "import time\ntime.clock_settime(0, 0.0)",
    "import datetime\nclass Z(datetime.tzinfo):\n    def utcoffset(self, dt):\n"
    "        return 'x'\ndatetime.datetime.now(Z())",
    # print's sink and bound methods' owners.
    "x = [print]\nprint(x[0].__self__)",
    "print('x', file=[])",
]


@pytest.mark.parametrize("code", GADGETS)
async def test_gadgets_are_refused(code: str) -> None:
    async with open_sandbox() as box:
        result = await box.run(code)
        assert not result.ok, f"should have failed: {code!r} printed {result.output!r}"
        assert "<module" not in result.output and "<frame" not in result.output
        assert await box.ok("print('still serving')") == "still serving\n"


async def test_a_forged_module_proxy_opens_nothing() -> None:
    async with open_sandbox() as box:
        out = await box.ok("import json\nP = type(json)\np = P('os', {'system': 1})\n"
                           "print(p, p.system)")
        assert out == "<sandbox module 'os'> 1\n"
        await box.fails("import os", "not allowed")
        assert await box.ok("import json\nprint(json.dumps([1]))") == "[1]\n"


async def test_exceptions_give_no_tracebacks_by_plain_names() -> None:
    async with open_sandbox() as box:
        out = await box.ok(
            "try:\n    1 / 0\nexcept ZeroDivisionError as exc:\n    e = exc\n"
            "print(e.with_traceback(None) is e, e.args, getattr(e, 'tb_frame', 'none'),"
            " hasattr(e, 'tb_next'))")
        assert out == "True ('division by zero',) none False\n"
        await box.fails("print(e.with_traceback(None).tb_frame)", "restricted name",
                        "has no attribute")


async def test_hooks_in_json_re_heapq_and_random_see_only_plain_objects() -> None:
    async with open_sandbox() as box:
        out = await box.ok(
            "import json, re, heapq, functools, random\n"
            "a = json.loads('{\"k\": [1]}', object_hook=lambda d: sorted(d))\n"
            "b = json.dumps(object(), default=lambda o: str(type(o)))\n"
            "c = re.sub('a', lambda m: str(type(m.re)), 'a')\n"
            "d = heapq.nsmallest(2, [3, 1, 2], key=functools.cmp_to_key(lambda x, y: x - y))\n"
            "class R(random.Random):\n    def random(self):\n        return 0.0\n"
            "e = R().choice([7, 8])\n"
            "print(a, b, c, d, e)")
        assert out == "['k'] \"<class 'object'>\" <class 're.Pattern'> [1, 2] 7\n"


async def test_base_exceptions_raised_while_formatting_an_error_keep_the_worker() -> None:
    # str(exc) runs model code (a property behind UserList.__repr__) that raises
    # SystemExit / KeyboardInterrupt while the worker formats the error.
    async with open_sandbox() as box:
        for raised in ("SystemExit(9)", "KeyboardInterrupt()", "GeneratorExit()"):
            result = await box.run(
                "from collections import UserList\n"
                f"def boom(self):\n    raise {raised}\n"
                "def keep(self, value):\n    pass\n"
                "class L(UserList):\n    data = property(boom, keep)\n"
                "raise ValueError(L())")
            assert not result.ok and result.error is not None
            assert await box.ok("print('alive')") == "alive\n"


@pytest.mark.parametrize("code", ["FINAL(chr(0xdcff))", "raise ValueError(chr(0xdcff))",
                                  "FINAL_VAR('x' + chr(0xd800))"])
async def test_lone_surrogates_in_final_and_errors_are_errors(code: str) -> None:
    async with open_sandbox() as box:
        result = await box.run(code)
        assert not result.ok
        assert await box.ok("print('alive')") == "alive\n"


async def test_a_prompt_with_a_lone_surrogate_is_refused_in_the_sandbox() -> None:
    async with open_sandbox() as box:
        await box.fails("llm_query('q' + chr(0xd800))", "cannot encode", "too large")
        assert box.bridge_requests == []
        assert await box.ok("print(llm_query('ok'))") == "len=2\n"


async def test_bridge_calls_from_hooks_outside_an_execution_are_refused() -> None:
    async with open_sandbox() as box:
        # A lazy iterator built in one block and driven by json in the next still
        # runs inside an execution; nothing reaches the host between executions.
        await box.ok("import functools\nlater = functools.partial(llm_query, 'q')")
        assert await box.ok("print(later())") == "len=1\n"
        assert len(box.bridge_requests) == 1
        assert CANARY not in str(box.bridge_requests)
