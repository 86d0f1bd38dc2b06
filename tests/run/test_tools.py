"""Host tools: signatures become checked schemas; failures come back as messages."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import pytest
import trio

from rlm._run.tools import ToolBox, ToolFailure, load_tool, make_tool
from rlm.errors import UsageError


def lookup(key: str, limit: int = 3, tags: list[str] | None = None) -> dict[str, object]:
    """Look up a key in the host's table.

    More text that the prompt does not need.
    """
    return {"key": key, "limit": limit, "tags": tags or []}


async def test_arguments_are_bound_checked_and_the_result_returned() -> None:
    box = ToolBox([lookup])
    assert await box.call("lookup", ["a"], {"tags": ["x"]}) == {
        "key": "a", "limit": 3, "tags": ["x"],
    }


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ([1], {}, "argument 'key': 1 is not of type 'string'"),
        (["a"], {"limit": "3"}, "argument 'limit': '3' is not of type 'integer'"),
        (["a"], {"limit": True}, "argument 'limit': True is not of type 'integer'"),
        (["a"], {"tags": [1]}, "argument 'tags'"),
        ([], {}, "missing a required argument: 'key'"),
        (["a"], {"nope": 1}, "unexpected keyword argument 'nope'"),
    ],
)
async def test_wrong_arguments_are_clear_errors(
    args: list[object], kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ToolFailure, match=message.replace("(", r"\(").replace("[", r"\[")):
        await ToolBox([lookup]).call("lookup", args, kwargs)


async def test_a_tool_is_never_handed_an_object() -> None:
    def anything(value):  # type: ignore[no-untyped-def]  # no hints: still plain data only
        return "ok"

    box = ToolBox([anything])
    assert await box.call("anything", [[1, {"a": (2, None)}]], {}) == "ok"
    with pytest.raises(ToolFailure, match="plain data only"):
        await box.call("anything", [object()], {})
    with pytest.raises(ToolFailure, match="plain data only"):
        await box.call("anything", [{1: "int key"}], {})


async def test_a_raising_tool_comes_back_as_its_error() -> None:
    def broken(x: int) -> int:
        raise KeyError(x)

    with pytest.raises(ToolFailure, match="broken raised KeyError: 5"):
        await ToolBox([broken]).call("broken", [5], {})


async def test_results_must_be_plain_data_and_fit_the_annotation() -> None:
    def leaks() -> str:
        return open  # type: ignore[return-value]

    def lies() -> int:
        return "five"  # type: ignore[return-value]

    box = ToolBox([leaks, lies])
    with pytest.raises(ToolFailure, match="cannot cross to the sandbox"):
        await box.call("leaks", [], {})
    with pytest.raises(ToolFailure, match="breaks its annotation"):
        await box.call("lies", [], {})


async def test_timeout_and_concurrency_limit(autojump_clock: trio.abc.Clock) -> None:
    running = peak = 0

    async def slow(seconds: float) -> float:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        try:
            await trio.sleep(seconds)
        finally:
            running -= 1
        return seconds

    box = ToolBox([make_tool(slow, timeout_s=5, max_concurrent=2)])
    with pytest.raises(ToolFailure, match="timed out after 5 s"):
        await box.call("slow", [60], {})
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        for _ in range(4):
            nursery.start_soon(box.call, "slow", [1.0], {})
    assert peak == 2
    assert trio.current_time() - start == pytest.approx(2.0)


async def test_sync_tools_run_in_a_thread() -> None:
    import threading

    def where() -> str:
        return threading.current_thread().name

    assert await ToolBox([where]).call("where", [], {}) != threading.current_thread().name


def test_the_prompt_lists_signature_and_first_paragraph_of_the_docstring() -> None:
    def pick(mode: Literal["a", "b"]) -> str:
        """Choose a mode."""
        return mode

    text = ToolBox([lookup, pick]).describe()
    assert "- `lookup(key: str, limit: int = 3, tags: list[str] | None = None)" in text
    assert "Look up a key in the host's table." in text
    assert "More text" not in text
    assert "pick(mode: Literal['a', 'b']) -> str`: Choose a mode." in text
    assert ToolBox().describe() == ""


class Thing:
    pass


def test_tools_that_cannot_be_offered_are_refused_at_registration() -> None:
    def takes_object(x: Thing) -> None: ...

    def star(*args: int) -> None: ...

    def print(x: str) -> None: ...  # shadows a sandbox name

    refused: list[tuple[Callable[..., Any], str]] = [
        (takes_object, "parameter x: .*cannot cross the bridge"),
        (star, r"\*args/\*\*kwargs are not supported"),
        (print, "taken by the sandbox"),
    ]
    for function, message in refused:
        with pytest.raises(UsageError, match=message):
            make_tool(function)
    with pytest.raises(UsageError, match="two tools are named 'lookup'"):
        ToolBox([lookup, lookup])
    with pytest.raises(UsageError, match="takes functions; got the str 'lookup'"):
        ToolBox(["lookup"])  # type: ignore[list-item]


async def test_an_unknown_tool_name_lists_the_tools() -> None:
    with pytest.raises(ToolFailure, match=r"no tool named 'lookpu' \(tools: lookup\)"):
        await ToolBox([lookup]).call("lookpu", [], {})


def test_load_tool_by_module_and_name() -> None:
    assert load_tool("os.path:join").__name__ == "join"
    for spec, message in [
        ("nocolon", "expected module:function"),
        ("no_such_module_xyz:f", "cannot import"),
        ("os.path:no_such_function", "has no function"),
    ]:
        with pytest.raises(UsageError, match=message):
            load_tool(spec)
