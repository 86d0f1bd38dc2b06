"""Both sides of the sandbox policy, in real hardened sandboxes (the data is in sandbox_corpus.py).

Every ordinary snippet must run (each checks its own results); every probe
must fail with an error the model can read, leave the sandbox serving and
bring back nothing of the host's.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

from rlm._events import EventBus
from rlm._sandbox.launcher import Sandbox, SandboxLauncher
from tests.sandbox.corpus_ordinary_stdlib import ORDINARY_STDLIB
from tests.sandbox.sandbox_corpus import CONTEXT, ORDINARY, PROBES
from tests.sandbox.security_harness import OWNER, assert_no_canary, echo_bridge, open_sandbox

#: What no refused probe may print: the objects the policy withholds.
LEAKS = ("<module", "<frame", "<code", "<traceback", "function_globals", "EnumType",
         "ABCMeta", "'__builtins__'", "<class 'type'>")


def test_the_corpus_is_large_enough() -> None:
    assert len(ORDINARY) >= 100
    assert sum(len(probes) for probes in PROBES.values()) >= 80


async def test_every_ordinary_snippet_runs() -> None:
    failures: dict[str, str | None] = {}
    async with open_sandbox(CONTEXT, max_output_chars=20_000) as box:
        for name, code in ORDINARY.items():
            result = await box.run(code.strip("\n"))
            if not result.ok:
                failures[name] = result.error
        assert await box.ok("print('still serving')") == "still serving\n"
    assert failures == {}, "\n\n".join(f"{name}:\n{error}" for name, error in failures.items())


def _plain_python(code: str) -> str:
    """What ``code`` prints when plain Python runs it (the same ``context``)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "<plain>", "exec"), {"context": CONTEXT, "__name__": "__main__"})
    return out.getvalue()


async def test_stdlib_snippets_print_what_plain_python_prints() -> None:
    differences: dict[str, str] = {}
    async with open_sandbox(CONTEXT, max_output_chars=50_000) as box:
        for name, code in ORDINARY_STDLIB.items():
            code = code.strip("\n")
            expected = _plain_python(code)
            result = await box.run(code)
            if not result.ok:
                differences[name] = f"failed: {result.error}"
            elif result.output != expected:
                differences[name] = f"printed:\n{result.output}\nplain Python:\n{expected}"
    assert differences == {}, "\n\n".join(f"{name}: {why}" for name, why in differences.items())


@asynccontextmanager
async def fresh_sandboxes() -> AsyncIterator[tuple[SandboxLauncher, trio.Nursery]]:
    launcher = SandboxLauncher(events=EventBus(), max_output_chars=2_000, pool_size=1,
                               memory_bytes=1 << 30)
    async with launcher.serving(), trio.open_nursery() as nursery:
        yield launcher, nursery


async def _refused(box: Sandbox, code: str) -> str | None:
    """None if ``code`` was refused as it should be, else what went wrong."""
    result = await box.execute(code, echo_bridge, limit=5.0)
    assert_no_canary(result.output, result.error, result.final)
    if result.ok:
        return f"ran and printed {result.output!r}"
    leaked = [mark for mark in LEAKS if mark in result.output]
    if leaked:
        return f"failed but printed {leaked}: {result.output!r}"
    after = await box.execute("print('alive')", echo_bridge, limit=5.0)
    if after.output != "alive\n":
        return f"the sandbox stopped serving: {after.error}"
    return None


@pytest.mark.parametrize("route", sorted(PROBES))
async def test_every_probe_is_refused(route: str) -> None:
    problems: dict[str, str] = {}
    async with fresh_sandboxes() as (launcher, nursery):
        for code in PROBES[route]:
            box = await launcher.open(nursery, context="the context", owner=OWNER)
            try:
                problem = await _refused(box, code)
            finally:
                await box.aclose()
            if problem is not None:
                problems[code] = problem
    assert problems == {}, "\n\n".join(f"{code}\n  -> {why}" for code, why in problems.items())
