"""Host tools: the user's own Python functions, callable from sandbox code by name.

A tool is **host code with host privileges**: it runs in the rlm process, not in
the sandbox.  What keeps the boundary is what crosses it: arguments and results
are plain msgpack data only (never objects), arguments are checked against the
function's type hints (as JSON Schemas, :mod:`rlm._run.schema`) before the
function runs, and the result must be plain data too.  Each tool runs under its
own timeout and concurrency limit; a sync function runs in a worker thread (a
timed-out thread is abandoned: its result is discarded), an ``async def`` one in
the run's trio loop.  Any failure comes back to model code as a
:class:`ToolFailure` message, never as a host exception.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import trio

from rlm._run.schema import JsonSchema, SchemaError, is_plain_data, schema_from_hint
from rlm._run.schema import validation_error as _validation_error
from rlm.errors import UsageError

__all__ = ["HostTool", "ToolBox", "ToolFailure", "load_tool", "make_tool"]

DEFAULT_TOOL_TIMEOUT_S = 30.0
DEFAULT_TOOL_CONCURRENCY = 4
#: Names the sandbox namespace already uses: a tool may not shadow them.
RESERVED_NAMES = frozenset(
    {"context", "llm_query", "llm_query_batched", "FINAL", "FINAL_VAR", "budget", "print",
     "BudgetExceeded", "ToolError", "tools"}
)


class ToolFailure(Exception):
    """A tool call that did not produce a value; the message is shown to model code."""


@dataclass(slots=True)
class HostTool:
    """One registered tool: its function, its checked signature and its limits."""

    name: str
    function: Callable[..., Any]
    signature: inspect.Signature
    parameters: dict[str, JsonSchema]
    returns: JsonSchema | None
    doc: str
    timeout_s: float = DEFAULT_TOOL_TIMEOUT_S
    limiter: trio.CapacityLimiter = field(
        default_factory=lambda: trio.CapacityLimiter(DEFAULT_TOOL_CONCURRENCY)
    )

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.function)

    def describe(self) -> str:
        """One entry of the system prompt's tool list: signature, then the docstring."""
        head = f"{self.name}{self.signature}"
        return f"- `{head}`" + (f": {self.doc}" if self.doc else "")

    def bind(self, args: Sequence[object], kwargs: Mapping[str, object]) -> dict[str, object]:
        """Arguments by parameter name, each checked against its type; ToolFailure if not."""
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise ToolFailure(f"{self.name}{self.signature}: {exc}") from None
        bound.apply_defaults()
        for name, value in bound.arguments.items():
            if not is_plain_data(value):
                raise ToolFailure(
                    f"{self.name}: argument {name!r} is a {type(value).__name__}; tools take "
                    "plain data only (str, numbers, bool, None, lists, dicts)"
                )
            schema = self.parameters.get(name)
            problem = None if schema is None else _validation_error(_jsonable(value), schema)
            if problem is not None:
                raise ToolFailure(f"{self.name}: argument {name!r}: {problem}")
        return dict(bound.arguments)

    async def call(self, args: Sequence[object], kwargs: Mapping[str, object]) -> object:
        """Run the tool on checked arguments, within its timeout and concurrency limit."""
        arguments = self.bind(args, kwargs)
        try:
            with trio.fail_after(self.timeout_s):
                async with self.limiter:
                    if self.is_async:
                        value = await self.function(**arguments)
                    else:
                        value = await trio.to_thread.run_sync(
                            lambda: self.function(**arguments), abandon_on_cancel=True
                        )
        except trio.TooSlowError:
            raise ToolFailure(f"{self.name} timed out after {self.timeout_s:g} s") from None
        except ToolFailure:
            raise
        except Exception as exc:  # the tool's own failure is the model's information
            raise ToolFailure(f"{self.name} raised {type(exc).__name__}: {exc}") from None
        if not is_plain_data(value):
            raise ToolFailure(
                f"{self.name} returned a {type(value).__name__}, which cannot cross to the "
                "sandbox (tools must return plain data)"
            )
        if self.returns is not None:
            problem = _validation_error(_jsonable(value), self.returns)
            if problem is not None:
                raise ToolFailure(f"{self.name} returned a value that breaks its annotation: "
                                  f"{problem}")
        return value


def make_tool(
    function: Callable[..., Any],
    *,
    name: str | None = None,
    timeout_s: float = DEFAULT_TOOL_TIMEOUT_S,
    max_concurrent: int = DEFAULT_TOOL_CONCURRENCY,
) -> HostTool:
    """A HostTool from a plain function; UsageError if it cannot be offered to model code."""
    tool_name: str = name or str(getattr(function, "__name__", ""))
    if not tool_name.isidentifier() or tool_name.startswith("_"):
        raise UsageError(f"tool name {tool_name!r} must be a public Python identifier")
    if tool_name in RESERVED_NAMES:
        raise UsageError(f"tool name {tool_name!r} is taken by the sandbox; rename the tool")
    if timeout_s <= 0 or max_concurrent < 1:
        raise UsageError(f"tool {tool_name}: timeout must be > 0 and max_concurrent >= 1")
    try:
        signature = inspect.signature(function, eval_str=True)
        hints = typing.get_type_hints(function)
    except (TypeError, ValueError, NameError) as exc:
        raise UsageError(f"tool {tool_name}: cannot read its signature: {exc}") from None
    parameters: dict[str, JsonSchema] = {}
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise UsageError(f"tool {tool_name}: *args/**kwargs are not supported; name them")
        if param.name in hints:
            try:
                parameters[param.name] = schema_from_hint(hints[param.name])
            except SchemaError as exc:
                raise UsageError(f"tool {tool_name}, parameter {param.name}: {exc}") from None
    returns = None
    if "return" in hints:
        try:
            returns = schema_from_hint(hints["return"])
        except SchemaError as exc:
            raise UsageError(f"tool {tool_name}, return type: {exc}") from None
    doc = inspect.cleandoc(function.__doc__ or "").split("\n\n")[0].replace("\n", " ")
    return HostTool(
        name=tool_name,
        function=function,
        signature=signature,
        parameters=parameters,
        returns=returns,
        doc=doc,
        timeout_s=timeout_s,
        limiter=trio.CapacityLimiter(max_concurrent),
    )


def load_tool(spec: str, *, flag: str = "--tools") -> Callable[..., Any]:
    """The function named by ``module:function`` (``--tools``, or the ``flag`` that names
    it); UsageError if absent."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"{flag} {spec!r}: expected module:function, e.g. mytools:lookup")
    # The rlm console script's sys.path starts at its own bin folder, not where the
    # person runs it: a mytools.py next to them is found as `python -m` would find it
    # (appended, so it never shadows an installed module).
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(
            f"{flag} {spec!r}: cannot import {module_name!r}: {exc} (run rlm from the folder "
            "that holds it, or add that folder to PYTHONPATH)"
        ) from None
    except Exception as exc:  # the user's module failed while importing: its own error
        raise UsageError(
            f"{flag} {spec!r}: importing {module_name} failed: {type(exc).__name__}: {exc}"
        ) from None
    function = getattr(module, attr, None)
    if not callable(function):
        raise UsageError(f"{flag} {spec!r}: {module_name} has no function {attr!r}")
    return function  # type: ignore[no-any-return]


class ToolBox:
    """The tools of one run, by name."""

    def __init__(self, tools: Iterable[HostTool | Callable[..., Any]] = ()) -> None:
        self._tools: dict[str, HostTool] = {}
        for item in tools:
            if not isinstance(item, HostTool) and not callable(item):
                raise UsageError(
                    f"tools=[...] takes functions; got the {type(item).__name__} {item!r} "
                    "(for a function named by module:function, import it first)"
                )
            tool = item if isinstance(item, HostTool) else make_tool(item)
            if tool.name in self._tools:
                raise UsageError(f"two tools are named {tool.name!r}")
            self._tools[tool.name] = tool

    def __bool__(self) -> bool:
        return bool(self._tools)

    @property
    def names(self) -> list[str]:
        return sorted(self._tools)

    def describe(self) -> str:
        """The system prompt's section listing every tool (empty when there are none)."""
        if not self._tools:
            return ""
        lines = [self._tools[name].describe() for name in self.names]
        return (
            "## Host tools\n\nThese functions run on the host; call them by name from your "
            "code (plain data in and out; a failure raises ToolError):\n" + "\n".join(lines)
        )

    async def call(self, name: str, args: Sequence[object], kwargs: Mapping[str, object]) -> object:
        tool = self._tools.get(name)
        if tool is None:
            known = ", ".join(self.names) or "none"
            raise ToolFailure(f"no tool named {name!r} (tools: {known})")
        return await tool.call(args, kwargs)


def _jsonable(value: object) -> object:
    """Tuples as lists, so JSON Schema's array checks see them (msgpack sends lists too)."""
    if isinstance(value, tuple | list):
        return [_jsonable(item) for item in value]
    if isinstance(value, dict):
        return {key: _jsonable(item) for key, item in value.items()}
    return value
