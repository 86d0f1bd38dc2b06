"""The sandbox REPL loop: read frames, run model code, answer with results.

One worker serves one call.  It reads ``init`` (the context and the output
cap), answers ``ready``, then runs each ``exec`` frame in one persistent
namespace and answers with a ``result`` frame.  While model code waits in
``llm_query`` the worker sends a ``bridge`` frame and blocks until the host's
matching ``reply``.  Exit codes: 0 after ``shutdown`` or end of input, 3 after
a frame that breaks the protocol.

Frames go only to ``out_fd``; model code prints into a buffer, never to fd 1
or 2.  The worker holds no secrets and reads no environment variables.
"""

from __future__ import annotations

import json
import os
import traceback
import types
import weakref
from collections import deque
from typing import Any, NoReturn, cast

from rlm_sandbox import concurrency
from rlm_sandbox.plaindata import export_namespace
from rlm_sandbox.policy import (
    REPL_FILENAME,
    PrintSink,
    compile_code,
    is_model_name,
    new_namespace,
)
from rlm_sandbox.protocol import (
    CHILD_FRAME_MAX_BYTES,
    HOST_FRAME_MAX_BYTES,
    BridgeFn,
    BridgeFrame,
    ExportedFrame,
    FrameDecoder,
    FrameError,
    HardenedFrame,
    ReadyFrame,
    ReplyFrame,
    ResultFrame,
    encode_bridge,
    encode_frame,
)
from rlm_sandbox.shared_context import ContextError, receive_context
from rlm_sandbox.speculation import Speculator, guard_names

__all__ = ["BudgetExceeded", "Channel", "Repl", "serve", "warm_up"]

READ_CHUNK_BYTES = 1 << 20
ERROR_MAX_LINES = 20
ERROR_MAX_CHARS = 8_000

EXIT_OK = 0
EXIT_PROTOCOL = 3


class ProtocolError(Exception):
    """The host sent something the protocol does not allow."""


class Channel:
    """Blocking frame I/O on two pipe file descriptors."""

    def __init__(self, in_fd: int, out_fd: int) -> None:
        self.in_fd = in_fd
        self.out_fd = out_fd
        self._decoder = FrameDecoder(HOST_FRAME_MAX_BYTES)
        self._pending: deque[dict[str, Any]] = deque()

    def send(self, message: HardenedFrame | ReadyFrame | BridgeFrame | ResultFrame | ExportedFrame
             ) -> None:
        """Write one frame (a bridge request too large for one: in parts); raises
        FrameError if it cannot be encoded or is too large."""
        frames = (encode_bridge(message, CHILD_FRAME_MAX_BYTES) if message["t"] == "bridge"
                  else [encode_frame(message, CHILD_FRAME_MAX_BYTES)])
        for frame in frames:
            view = memoryview(frame)
            while view:
                written = os.write(self.out_fd, view)
                view = view[written:]

    def receive(self) -> dict[str, Any] | None:
        """Next frame, or None at a clean end of input; ProtocolError on garbage."""
        while not self._pending:
            data = os.read(self.in_fd, READ_CHUNK_BYTES)
            if not data:
                if self._decoder.pending_bytes:
                    raise ProtocolError("input ended inside a frame")
                return None
            try:
                self._pending.extend(self._decoder.feed(data))
            except FrameError as exc:
                raise ProtocolError(str(exc)) from exc
        return self._pending.popleft()


class BudgetExceeded(Exception):
    """The run's budget (calls, tokens, cost or time) is spent; no more sub-queries."""

    __module__ = "builtins"  # tracebacks show "BudgetExceeded: ...", a name model code knows


class ToolError(Exception):
    """A host tool refused its arguments, failed, or timed out."""

    __module__ = "builtins"


_TYPE_NAMES = {str: "str", int: "int", float: "float", bool: "bool", list: "list", dict: "dict",
               type(None): "none"}


def _schema_json(spec: object) -> str:
    """A schema spec as JSON text; Python types (``{"name": str}``) become their names."""
    def plain(value: object) -> object:
        if isinstance(value, type):
            if value in _TYPE_NAMES:
                return _TYPE_NAMES[value]
            raise TypeError(f"schema: type {value.__name__} is not plain data")
        if isinstance(value, dict):
            return {str(k): plain(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        return value
    try:
        return json.dumps(plain(spec))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"schema must be a dict of field -> type name (or a JSON Schema): {exc}"
                        ) from None


def _structured(item: object) -> object:
    """One slot of a structured answer: the value, or its ``Error:`` string."""
    if isinstance(item, dict) and "value" in item:
        return item["value"]
    error = item.get("error") if isinstance(item, dict) else item
    return f"Error: {error}"


def _type_name(value: object) -> str:
    return type(value).__name__


class Repl:
    """One persistent namespace and the functions model code calls in it."""

    def __init__(self, channel: Channel, context: str | list[str], max_output_chars: int,
                 tools: list[str] | None = None, answer_json: bool = False) -> None:
        self.channel = channel
        self.answer_json = answer_json
        self._answer_json_now = False  # the running execution's own flag (its exec frame)
        self.sink = PrintSink(max_output_chars)
        self.final: str | None = None
        self._bridge_id = 0
        self._executing = False
        self._waiting = False
        self._sources: weakref.WeakKeyDictionary[types.CodeType, list[str]] = (
            weakref.WeakKeyDictionary()
        )
        query = self.llm_query  # one bound method: the speculator knows it by identity
        self.speculator = Speculator(self._speculation_frame, query, _schema_json)
        self.namespace = new_namespace(self.sink, {
            **guard_names(self.speculator),
            "context": context,
            "llm_query": query,
            "llm_query_batched": self.llm_query_batched,
            "budget": self.budget,
            "FINAL": self.FINAL,
            "FINAL_VAR": self.FINAL_VAR,
            "BudgetExceeded": BudgetExceeded,
            "ToolError": ToolError,
            **{name: self._tool(name) for name in tools or []},
        }, stand_ins=concurrency.modules(self.speculator))
        self.reserved = set(self.namespace)

    # --- running code ---------------------------------------------------------------------

    def execute(self, exec_id: int, source: str, answer_json: bool = False, window: int = 0
                ) -> ResultFrame:
        """Run one code block; return its ``result`` frame.  ``answer_json``: its
        FINAL_VAR of a dict or list answers JSON (see ``ExecFrame``); ``window``: how many
        sub-queries its loops may send ahead (0: none, the code runs as written)."""
        self.sink.reset()
        self.final = None
        self._answer_json_now = answer_json
        error: str | None = None
        self._executing = True
        try:
            code = compile_code(source, autobatch=window > 0, helpers=self._helpers())
        except SyntaxError as exc:
            error = f"SyntaxError: {exc.msg}"
        except BaseException as exc:  # RecursionError/MemoryError while compiling
            error = self._format_error(exc)
        else:
            self._remember_source(code, source)
            self.speculator.begin(window)
            try:
                with self.sink.as_stdout():
                    exec(code, self.namespace)
            except BaseException as exc:  # model code may raise anything, SystemExit included
                error = self._format_error(exc)
            finally:
                self.speculator.finish()  # while executing: it may still send frames
        finally:
            self._executing = False
        return ResultFrame(
            t="result", id=exec_id, ok=error is None, output=self.sink.text(),
            output_chars=self.sink.total_chars, error=error, final=self.final,
        )

    def _helpers(self) -> frozenset[str]:
        """Names bound to functions of earlier blocks whose prompts are known."""
        return frozenset(name for name, value in self.namespace.items()
                         if self.speculator.is_helper(value))

    def _remember_source(self, code: types.CodeType, source: str) -> None:
        lines = source.splitlines()
        stack = [code]
        while stack:
            current = stack.pop()
            self._sources[current] = lines
            stack.extend(c for c in current.co_consts if isinstance(c, types.CodeType))

    def _format_error(self, exc: BaseException) -> str:
        try:
            frames = []
            for frame, lineno in traceback.walk_tb(exc.__traceback__):
                code = frame.f_code
                if code.co_filename != REPL_FILENAME:
                    continue  # hide the worker's and the guards' frames
                lines = self._sources.get(code, [])
                line = lines[lineno - 1].strip() if 0 < lineno <= len(lines) else ""
                frames.append(traceback.FrameSummary(
                    REPL_FILENAME, lineno, code.co_name, lookup_line=False, line=line))
            parts = ["Traceback (most recent call last):\n"] if frames else []
            parts += traceback.StackSummary.from_list(frames).format()
            parts += traceback.format_exception_only(type(exc), exc)
        except (MemoryError, RecursionError):
            return type(exc).__name__
        lines = "".join(parts).rstrip("\n").split("\n")
        if len(lines) > ERROR_MAX_LINES:
            lines = [lines[0], "  ...", *lines[-(ERROR_MAX_LINES - 2):]]
        text = "\n".join(lines)
        return text if len(text) <= ERROR_MAX_CHARS else text[:ERROR_MAX_CHARS] + " ..."

    def __deepcopy__(self, memo: object) -> NoReturn:
        # copy.deepcopy(llm_query) would copy the Repl, channel and namespace included.
        raise TypeError("the sandbox's functions cannot be copied")

    def __reduce_ex__(self, protocol: object) -> NoReturn:
        raise TypeError("the sandbox's functions cannot be copied")

    # --- functions seen by model code -----------------------------------------------------

    def llm_query(self, prompt: str, context: str | None = None, schema: object = None
                  ) -> object:
        """Ask a sub-model one question (about ``context``, if given); returns its answer.

        With ``schema`` (a dict of field -> type name, or a JSON Schema) the answer is
        validated data (a dict or list), or an ``Error:`` string.
        """
        if not isinstance(prompt, str):
            raise TypeError(
                f"llm_query(prompt, context=None): prompt must be a str, not {_type_name(prompt)}"
                "; for many prompts use llm_query_batched(prompts)")
        if context is not None and not isinstance(context, str):
            raise TypeError(
                f"llm_query: context must be a str or None, not {_type_name(context)}"
                "; join the pieces into one string first")
        extra = {} if schema is None else {"schema": _schema_json(schema)}
        if type(prompt) is str and (context is None or type(context) is str):
            spec = self.speculator.take((prompt, context, extra.get("schema")))
            if spec is not None:  # sent ahead by auto-batching: its answer, when it comes
                reply = self._bridge("collect", [], [], spec=[spec])
                if reply.get("kind") != "unsent":
                    return self._query_value(reply, schema)
        return self._query_value(self._bridge("llm_query", [prompt], [context], **extra), schema)

    def _query_value(self, reply: ReplyFrame, schema: object) -> object:
        """What ``llm_query`` returns for ``reply``."""
        if not reply.get("ok"):
            return "Error: " + str(reply.get("error"))
        value = reply.get("value")
        if schema is not None:
            return self._structured_items(value, 1)[0]
        return value if isinstance(value, str) else str(value)

    def llm_query_batched(self, prompts: list[str], contexts: list[str | None] | None = None,
                          schema: object = None) -> list[object]:
        """Ask many questions at once; answers come back in the same order.

        A failed item holds a string starting with ``Error:``; budget
        exhaustion raises BudgetExceeded.  With ``schema`` each answer is
        validated data, as for ``llm_query``.
        """
        if not isinstance(prompts, list | tuple):
            raise TypeError(
                "llm_query_batched(prompts, contexts=None): prompts must be a list of str, "
                f"not {_type_name(prompts)}; for one prompt use llm_query(prompt)")
        for index, prompt in enumerate(prompts):
            if not isinstance(prompt, str):
                raise TypeError(f"llm_query_batched: prompts[{index}] must be a str, "
                                f"not {_type_name(prompt)}")
        if contexts is None:
            contexts = [None] * len(prompts)
        elif not isinstance(contexts, list | tuple):
            raise TypeError("llm_query_batched: contexts must be None or a list with one "
                            f"str (or None) per prompt, not {_type_name(contexts)}")
        elif len(contexts) != len(prompts):
            raise ValueError(f"llm_query_batched: got {len(prompts)} prompts but "
                             f"{len(contexts)} contexts; pass one context (or None) per prompt")
        for index, context in enumerate(contexts):
            if context is not None and not isinstance(context, str):
                raise TypeError(f"llm_query_batched: contexts[{index}] must be a str or None, "
                                f"not {_type_name(context)}")
        if not prompts:
            return []
        extra = {} if schema is None else {"schema": _schema_json(schema)}
        reply = self._bridge("llm_query_batched", list(prompts), list(contexts), **extra)
        if not reply.get("ok"):
            raise RuntimeError(str(reply.get("error")))
        value = reply.get("value")
        if schema is not None:
            return self._structured_items(value, len(prompts))
        if not isinstance(value, list) or len(value) != len(prompts):
            raise RuntimeError("llm_query_batched: the host sent a malformed reply")
        return [item if isinstance(item, str) else str(item) for item in value]

    def budget(self) -> dict[str, Any]:
        """What is left of the run's budget (calls, tokens, cost, time)."""
        reply = self._bridge("budget", [], [])
        if not reply.get("ok"):
            raise RuntimeError(str(reply.get("error")))
        value = reply.get("value")
        return dict(value) if isinstance(value, dict) else {}

    def FINAL(self, text: object) -> None:  # the name model code uses
        """Record the final answer of this call (the code block still runs to its end)."""
        self.final = str(text)

    def FINAL_VAR(self, name: object) -> None:
        """Record the value of the variable ``name`` as the final answer."""
        if not isinstance(name, str):
            self.final = str(name)  # lenient: the model passed the value itself
            return
        text = str.__str__(name)  # an exact str: a subclass from model code could lie
        key = text.strip()
        if not key.isidentifier():
            self.final = text  # not a variable name: take the text as the answer
        elif not is_model_name(key) or key not in self.namespace:  # _x_ names are the policy's
            raise NameError(f"FINAL_VAR: no variable named {key!r}; assign it first")
        else:
            value = self.namespace[key]
            if (self.answer_json or self._answer_json_now) and type(value) in (dict, list):
                try:  # a structured answer: JSON the host validates against its schema
                    self.final = json.dumps(value)
                    return
                except (TypeError, ValueError):
                    pass  # not JSON data: the host reports it does not fit the schema
            self.final = str(value)

    def _structured_items(self, value: object, count: int) -> list[object]:
        """Decode a structured reply: JSON text of ``[{"value": v} | {"error": e}, ...]``."""
        try:
            items = json.loads(value) if isinstance(value, str) else None
        except ValueError:
            items = None
        if not isinstance(items, list) or len(items) != count:
            raise RuntimeError("structured answers: the host sent a malformed reply")
        return [_structured(item) for item in items]

    def _tool(self, name: str) -> Any:
        """The function model code calls for host tool ``name``."""
        def tool(*args: object, **kwargs: object) -> object:
            try:
                payload = json.dumps({"args": args, "kwargs": kwargs})
            except (TypeError, ValueError):
                raise TypeError(f"{name}(): arguments must be plain data (str, numbers, bool, "
                                "None, lists, dicts)") from None
            reply = self._bridge("tool", [], [], tool=name, arguments=payload)
            if not reply.get("ok"):
                raise ToolError(str(reply.get("error")))
            value = reply.get("value")
            return json.loads(value) if isinstance(value, str) else None
        tool.__name__ = tool.__qualname__ = name
        return tool

    def export(self) -> tuple[str, list[str]]:
        """The namespace's plain-data variables, for a saved session."""
        return export_namespace(self.namespace, self.reserved)

    # --- the bridge -----------------------------------------------------------------------

    def _speculation_frame(self, fn: BridgeFn, prompts: list[str], contexts: list[str | None],
                           **extra: object) -> dict[str, Any]:
        """A frame of the speculator: sent while code runs; otherwise nothing is sent (a loop
        collected between executions: the host cancelled its calls when it ended)."""
        if not self._executing or self._waiting:
            return {}
        return cast(dict[str, Any], self._bridge(fn, prompts, contexts, **extra))

    def _bridge(self, fn: BridgeFn, prompts: list[str], contexts: list[str | None],
                **extra: object) -> ReplyFrame:
        if not self._executing or self._waiting:
            raise RuntimeError(f"{fn}() can only be called from running code, one call at a time")
        self._bridge_id += 1
        request_id = self._bridge_id
        message = BridgeFrame(t="bridge", id=request_id, fn=fn, prompts=prompts,
                              contexts=contexts, **extra)  # type: ignore[typeddict-item]
        self._waiting = True
        try:
            try:
                self.channel.send(message)
            except FrameError as exc:
                raise ValueError(f"{fn}: the request is too large to send ({exc}); "
                                 "split the context into smaller chunks") from None
            except OSError:
                _terminate(EXIT_OK)  # the host is gone
            reply = self._await_reply(request_id)
        finally:
            self._waiting = False
        if not reply.get("ok") and reply.get("kind") == "budget":
            raise BudgetExceeded(str(reply.get("error")))
        return reply

    def _await_reply(self, request_id: int) -> ReplyFrame:
        # Model code is on the stack and may swallow any exception, so protocol
        # endings here leave with os._exit rather than by raising.
        try:
            message = self.channel.receive()
        except (ProtocolError, OSError):
            _terminate(EXIT_PROTOCOL)
        if message is None or message["t"] == "shutdown":
            _terminate(EXIT_OK)
        if message["t"] != "reply" or message.get("id") != request_id:
            _terminate(EXIT_PROTOCOL)
        return cast(ReplyFrame, message)  # the host is trusted; its fields are read with care


#: What model code typically does (import, loops, slices, f-strings, comprehensions, a
#: function, try/except, str methods), compiled and run once by :func:`warm_up`.
WARM_UP_CODE = """\
import collections
import re
docs = context if isinstance(context, list) else [context]
total = 0
for doc in docs:
    total = total + len(doc)
step = max(1, (total + 3) // 4)
chunks = []
for doc in docs:
    for start in range(0, max(len(doc), 1), step):
        chunks.append(doc[start:start + step + 10])
prompts = [f"Q?\\nText:\\n{chunk}" for chunk in chunks]
found = {}
def keep(a, seen=found):
    a = str(a).strip()
    if a and not a.upper().startswith("NOT FOUND") and not a.startswith("Error:"):
        seen[a] = seen.get(a, 0) + 1
    return a
try:
    for i, p in enumerate(prompts):
        keep(p.split("\\n")[0])
except (ValueError, KeyError) as exc:
    print(f"{exc!r}")
whole = sorted(found, key=len, reverse=True)
counts = collections.Counter(whole + [w.lower() for w in whole])
lines = [line for line in "a b\\nc".splitlines() if re.search(r"\\w", line)]
answer = {"n": len(lines), "top": counts.most_common(1)}
print(len(chunks), len(whole), answer["n"])
"""


def warm_up() -> None:
    """Compile and run :data:`WARM_UP_CODE` in a throwaway namespace.

    The zygote does it before it forks anything, so the code it loads is
    shared; each sandbox does it again once it answered ``ready``, so it takes
    its copy-on-write page faults while its call's first step is generated,
    not while the call waits for its first block (compiling a typical block
    touches hundreds of the zygote's heap pages, a trivial one only a few).
    """
    idle = Speculator(lambda *args, **kwargs: {}, None, _schema_json)
    namespace = new_namespace(PrintSink(1000), {"context": "warm up", **guard_names(idle)})
    exec(compile_code(WARM_UP_CODE, autobatch=True), namespace)  # (no sub-query: no planning)


def _terminate(code: int) -> NoReturn:
    os._exit(code)


def _parse_init(message: dict[str, Any] | None, ctx_fd: int | None
                ) -> tuple[str | list[str], int]:
    if message is None or message["t"] != "init":
        raise ProtocolError("the first frame must be 'init'")
    limit = message.get("max_output_chars")
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
        raise ProtocolError("init: max_output_chars must be a non-negative int")
    if message.get("context_fd") is True:
        try:
            return receive_context(ctx_fd), limit
        except (ContextError, OSError) as exc:
            raise ProtocolError(f"init: {exc}") from exc
    context = message.get("context")
    if not (isinstance(context, str) or (
            isinstance(context, list) and all(isinstance(item, str) for item in context))):
        raise ProtocolError("init: context must be a str or a list of str")
    return context, limit


def _parse_init_options(message: dict[str, Any]) -> tuple[list[str], bool]:
    """The host tools' names and whether FINAL_VAR answers structured data as JSON."""
    tools = message.get("tools", [])
    if not isinstance(tools, list) or not all(
            isinstance(name, str) and name.isidentifier() and not name.startswith("_")
            for name in tools):
        raise ProtocolError("init: tools must be a list of public identifiers")
    answer_json = message.get("answer_json", False)
    if not isinstance(answer_json, bool):
        raise ProtocolError("init: answer_json must be a bool")
    return tools, answer_json


def _utf8(text: str) -> str:
    """``text`` as UTF-8 can carry it: a lone surrogate becomes its escape."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _send_result(channel: Channel, result: ResultFrame) -> None:
    """Send ``result``; one that cannot travel is sent as a failed step saying why."""
    try:
        channel.send(result)
        return
    except FrameError as exc:
        problem = exc
    output = _utf8(result["output"])
    texts = (result["output"], result["error"] or "", result["final"] or "")
    if any(_utf8(text) != text for text in texts):  # as plain Python's print would fail
        why = ("the step's output or answer holds a lone surrogate, which UTF-8 cannot "
               "encode (text decoded with errors='surrogateescape'?): encode it with "
               "errors='backslashreplace' or 'replace' first")
    else:  # e.g. a FINAL answer larger than the frame cap
        why = f"the result is too large to send back ({problem})"
    channel.send(ResultFrame(
        t="result", id=result["id"], ok=False, final=None,
        output_chars=result["output_chars"],
        output=output[: CHILD_FRAME_MAX_BYTES // 8], error=why))


def serve(in_fd: int, out_fd: int, ctx_fd: int | None = None,
          isolation: dict[str, str] | None = None, announce: bool = False,
          warm_after_ready: bool = True) -> int:
    """Run the REPL protocol on two file descriptors; return the exit code.

    ``ctx_fd`` is the socket a shared context arrives on; ``isolation`` (the
    hardening report) is sent back in the ``ready`` frame, and first in a
    ``hardened`` frame when ``announce`` (a forked sandbox tells its pool).
    ``warm_after_ready``: run :func:`warm_up` once ``ready`` is sent (a pool's
    sandbox did before it was announced).
    """
    channel = Channel(in_fd, out_fd)
    try:
        if announce:
            channel.send(HardenedFrame(t="hardened", pid=os.getpid(), isolation=isolation or {}))
        first = channel.receive()
        if first is None:
            return EXIT_OK
        context, max_output_chars = _parse_init(first, ctx_fd)
        tools, answer_json = _parse_init_options(first)
        repl = Repl(channel, context, max_output_chars, tools, answer_json)
        del context, first  # the namespace holds the only reference
        ready = ReadyFrame(t="ready", pid=os.getpid())
        if isolation is not None:
            ready["isolation"] = isolation
        channel.send(ready)
        if warm_after_ready:
            # While the call's first step is still being generated: no code arrives
            # before it, and a block that does waits in the pipe meanwhile.
            warm_up()
        while True:
            message = channel.receive()
            if message is None or message["t"] == "shutdown":
                return EXIT_OK
            code, exec_id = message.get("code"), message.get("id")
            if message["t"] == "export" and type(exec_id) is int:
                data, skipped = repl.export()
                channel.send(ExportedFrame(t="exported", id=exec_id, data=data, skipped=skipped))
                continue
            if message["t"] != "exec" or not isinstance(code, str) or type(exec_id) is not int:
                raise ProtocolError(f"unexpected {message['t']!r} frame")
            answer_json, window = message.get("answer_json", False), message.get("window", 0)
            if not isinstance(answer_json, bool):
                raise ProtocolError("exec: answer_json must be a bool")
            if type(window) is not int or window < 0:
                raise ProtocolError("exec: window must be a non-negative int")
            _send_result(channel, repl.execute(exec_id, code, answer_json, window))
    except ProtocolError:
        return EXIT_PROTOCOL
    except BrokenPipeError:
        return EXIT_OK  # the host closed its end; nobody is listening
