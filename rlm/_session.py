"""Sessions: a root call kept alive across queries.

A session keeps the root's sandbox (so its REPL variables survive), the loaded
context and the conversation; each query is still its own run, with its own
budget, events and trace (query n's in a file of its own: :func:`query_trace_path`).
The session can carry a total budget across its queries.  When the conversation
would pass ``max_history_chars``, its older steps are compacted into a summary by
the root model (a ``history_compacted`` event) while the REPL variables stay.

:class:`AsyncSession` is the trio form (``async with model.asession(ctx) as s:``, then
``await s.acompletion(query)``).
:class:`Session` is the blocking form: it runs an :class:`AsyncSession` in a
trio loop on a thread of its own, so it can live between calls of plain code.
``save(path)`` writes the conversation and the plain-data variables (str,
numbers, bools, None, lists, tuples, dicts, sets) as JSON; ``RLM.load_session``
resumes it in another process, over the same context.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import hashlib
import json
import math
import os
import tempfile
import threading
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Unpack

import trio

from rlm._config import RunConfig, SessionOptions, public_settings
from rlm._events import Event, EventBus
from rlm._files import ReadLimits, read_bytes
from rlm._result import RunResult
from rlm._run.assembly import default_launcher, open_telemetry
from rlm._run.call import SessionCarry
from rlm._run.context import Context
from rlm._sandbox.process import ExecResult, SandboxIdentity
from rlm._sandbox.slot import SandboxSlot
from rlm._settings_types import SessionSettings
from rlm._spelling import python_spelled
from rlm._traffic.budget import SessionTotals
from rlm._trio_only import require_trio
from rlm.errors import RLMError, UsageError
from rlm.providers.base import Message
from rlm_sandbox.protocol import BridgeAnswer, BridgeRequest, refusal

if TYPE_CHECKING:
    from rlm._run.query import QueryRunner

__all__ = [
    "AsyncSession", "SavedSession", "Session", "query_trace_path", "read_saved_session",
]

SESSION_FORMAT = 1


@dataclass(frozen=True, slots=True)
class SavedSession:
    """What a saved session file holds (see :meth:`AsyncSession.save`)."""

    settings: dict[str, Any]
    history: list[Message]
    variables: dict[str, Any]
    #: Queries asked before the save: the resumed session numbers its traces after them.
    queries: int = 0
    #: What those queries spent: the resumed session's totals start from it, so
    #: ``max_total_llm_calls`` / ``max_total_cost`` bound the whole conversation.
    spent_llm_calls: int = 0
    spent_cost: float = 0.0


class AsyncSession:
    """A root call kept alive across queries, in the caller's trio loop."""

    def __init__(
        self,
        runs: QueryRunner,
        context: Context = "",
        *,
        restore: SavedSession | None = None,
        **options: Unpack[SessionSettings],
    ) -> None:
        settings = SessionOptions(**options).validate()
        self._runs = runs.fork()  # its interrupt stops this session's question only
        self._context = context
        self._max_history_chars = settings.max_history_chars
        self._max_total_llm_calls = settings.max_total_llm_calls
        self._max_total_cost = settings.max_total_cost
        self._restore = restore
        self._carry: SessionCarry | None = None
        self._stack: AsyncExitStack | None = None
        self._lock = trio.Lock()
        self._launcher: Any = None
        self._spans: Callable[[Event], None] | None = None  # with otel: one trace for all
        #: What the session's queries have spent so far (a restored session's included).
        self.total_llm_calls = restore.spent_llm_calls if restore is not None else 0
        self.total_cost = restore.spent_cost if restore is not None else 0.0
        self.queries = 0
        # Queries asked, failed ones and those before a save included: query n's trace
        # is numbered n, so no query's trace replaces another's.
        self._asked = restore.queries if restore is not None else 0

    async def __aenter__(self) -> AsyncSession:
        require_trio("RLM.asession", "use the blocking RLM.session and run its completion in "
                     "a thread: `await asyncio.to_thread(chat.completion, query)`")
        stack = AsyncExitStack()
        try:
            # First in, so closed last: every question's spans are in before it is sent.
            telemetry = open_telemetry(self._runs.config, session=True)
            if telemetry is not None:
                stack.push_async_callback(telemetry.aclose)
                self._spans = telemetry.spans
            runs = self._runs
            # The session's own sandbox start and exit belong to no single query's trace.
            # RLM(sandboxes=...) is where every sandbox of the model comes from, a
            # session's included (its queries' child calls open theirs here too).
            events = EventBus(keep=False)
            injected = runs.launcher(runs.config, events)
            self._launcher = injected if injected is not None else default_launcher(
                runs.config, events, tools=runs.tools.names
            )
            await stack.enter_async_context(self._launcher.serving())
            slot = SandboxSlot(self._launcher, self._context, SandboxIdentity("root", None, 0))
            stack.push_async_callback(slot.discard)
            # Closed first, in this order: the nursery's tasks (a sandbox still starting
            # when a question was answered without code) are cancelled and waited for,
            # then the sandbox is discarded, then the launcher stops serving.
            nursery = await stack.enter_async_context(trio.open_nursery())
            stack.callback(nursery.cancel_scope.cancel)
            history = list(self._restore.history) if self._restore else []
            self._carry = SessionCarry(slot, nursery, history, self._max_history_chars)
            if self._restore is not None and self._restore.variables:
                await self._load_variables(self._restore.variables)
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Kill the session's sandbox and stop serving; safe to call twice."""
        stack, self._stack, self._carry = self._stack, None, None
        if stack is not None:  # the sandbox's and the launcher's exits shield themselves
            await stack.aclose()

    @property
    def closed(self) -> bool:
        return self._stack is None

    async def completion(self, query: str, *, schema: object = None) -> RunResult:
        """Answer ``query`` as the next turn of the session (one run of its own).

        Queries run one at a time; limits end the query with that status and
        leave the session usable.  ``schema`` is :meth:`RLM.completion`'s: this
        query's answer must be JSON fitting it, and ``result.data`` holds it.
        """
        async with self._lock:
            carry = self._open_carry()
            config, totals = self._query_config()
            self._asked += 1
            trace = self._runs.trace_path
            before = len(carry.history)
            try:
                result = await self._runs.run(
                    query, self._context, carry=carry, sandboxes=self._launcher, config=config,
                    schema=schema, trace_path=trace and query_trace_path(trace, self._asked),
                    session=totals, spans=self._spans,
                )
            except RLMError as exc:
                if exc.result is not None:
                    self._count(exc.result)
                raise
            self._count(result)
            if result.status == "interrupted":
                # A question stopped part-way leaves no half turn behind: asked again, it
                # is a new question, not a follow-up to one that never finished.
                del carry.history[before:]
            return result

    async def acompletion(self, query: str, *, schema: object = None) -> RunResult:
        """:meth:`completion` under the name :meth:`RLM.acompletion` has (both are awaited)."""
        return await self.completion(query, schema=schema)

    def interrupt(self) -> None:
        """Stop the query in progress (it ends ``interrupted``); the session stays open."""
        self._runs.interrupt()

    async def settle(self) -> None:
        """Return once no query is in progress (one interrupted has ended)."""
        async with self._lock:
            pass

    async def save(self, path: str | os.PathLike[str]) -> list[str]:
        """Write the conversation and the plain-data variables to ``path`` (JSON, atomic).

        Returns the names of variables left out because they are not plain data.
        The API key is never written.
        """
        async with self._lock:
            carry = self._open_carry()
            data, skipped = "{}", list[str]()
            if carry.slot.started:
                data, skipped = await carry.slot.export_variables()
            settings = public_settings(self._runs.config)
            fixture = self._runs.fixture_provider()
            if fixture is not None:  # the fixture model's pace: its own record, not a setting
                settings["fixture"] = dataclasses.asdict(fixture.options)
            document = {
                "rlm_session": SESSION_FORMAT,
                "settings": settings,
                "context_sha256": _digest(self._context),
                "history": carry.history,
                "queries": self._asked,
                "spent": {"llm_calls": self.total_llm_calls, "cost": self.total_cost},
                "variables": json.loads(data),
                "skipped": skipped,
            }
            try:
                await trio.to_thread.run_sync(_write_atomically, Path(path), json.dumps(document))
            except OSError as exc:
                raise UsageError(
                    f"cannot save the session to {path}: {exc.strerror or exc} (pick a "
                    "writable folder that exists)"
                ) from None
            return skipped

    # -- helpers ---------------------------------------------------------------------

    def _open_carry(self) -> SessionCarry:
        if self._carry is None:
            raise UsageError("the session is closed; start a new one with RLM(...).session()")
        return self._carry

    def _query_config(self) -> tuple[Any, SessionTotals]:
        """The model's settings, with the session's remaining total budget as this run's,
        and the totals that bound the query (so a refusal names them, not the query's)."""
        config = self._runs.config
        changes: dict[str, Any] = {}
        calls_total, cost_total = None, None
        if self._max_total_llm_calls is not None:
            left = max(0, self._max_total_llm_calls - self.total_llm_calls)
            mine = config.max_llm_calls
            changes["max_llm_calls"] = left if mine is None else min(mine, left)
            if mine is None or left <= mine:
                calls_total = self._max_total_llm_calls
        if self._max_total_cost is not None:
            left_cost = max(0.0, self._max_total_cost - self.total_cost)
            mine_cost = config.max_cost
            changes["max_cost"] = left_cost if mine_cost is None else min(mine_cost, left_cost)
            if mine_cost is None or left_cost <= mine_cost:
                cost_total = self._max_total_cost
        totals = SessionTotals(calls_total, cost_total, self.total_llm_calls, self.total_cost)
        return (dataclasses.replace(config, **changes) if changes else config), totals

    def _count(self, result: RunResult) -> None:
        self.queries += 1
        self.total_llm_calls += result.usage.llm_calls
        cost = result.usage_detail.get("cost")
        if isinstance(cost, int | float):
            self.total_cost += float(cost)

    async def _load_variables(self, variables: dict[str, Any]) -> None:
        """Assign restored variables in the new sandbox (as Python literals)."""
        carry = self._open_carry()
        code = restore_source(variables)

        async def no_bridge(request: BridgeRequest) -> BridgeAnswer:
            return refusal("restoring a session", "usage")

        result: ExecResult = await carry.slot.execute(
            code, carry.nursery, no_bridge, self._runs.config.exec_timeout
        )
        if not result.ok:
            raise UsageError(f"the saved variables could not be restored: {result.error}")


class Session:
    """A blocking session (see :class:`AsyncSession`): its trio loop runs on a thread."""

    def __init__(
        self,
        runs: QueryRunner,
        context: Context = "",
        *,
        restore: SavedSession | None = None,
        **options: Unpack[SessionSettings],
    ) -> None:
        self._async = AsyncSession(runs, context, restore=restore, **options)
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._done: trio.Event | None = None
        # The caller's context goes with the loop (how messages spell settings, for one).
        self._thread = threading.Thread(target=contextvars.copy_context().run,
                                        args=(self._serve,), name="rlm-session", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._failure is not None:
            self._thread.join()
            raise self._failure

    def _serve(self) -> None:
        async def main() -> None:
            self._token = trio.lowlevel.current_trio_token()
            self._done = trio.Event()
            try:
                async with self._async:
                    self._ready.set()
                    await self._done.wait()
            except BaseException as exc:
                if not self._ready.is_set():
                    self._failure = exc
                    self._ready.set()
                    return
                raise

        trio.run(main)

    def completion(self, query: str, *, schema: object = None) -> RunResult:
        """Answer ``query`` as the session's next turn (blocks until it is answered);
        with ``schema``, ``result.data`` holds the answer as validated data."""
        return trio.from_thread.run(
            functools.partial(self._async.completion, query, schema=schema),
            trio_token=self._open(),
        )

    def interrupt(self) -> None:
        """Stop the query in progress (from another thread, e.g. on Ctrl-C) and wait until
        it has ended (its sandbox stopped, its trace written)."""
        token = self._open()
        trio.from_thread.run_sync(self._async.interrupt, trio_token=token)
        trio.from_thread.run(self._async.settle, trio_token=token)

    def save(self, path: str | os.PathLike[str]) -> list[str]:
        """See :meth:`AsyncSession.save`."""
        return trio.from_thread.run(self._async.save, path, trio_token=self._open())

    @property
    def total_llm_calls(self) -> int:
        return self._async.total_llm_calls

    @property
    def total_cost(self) -> float:
        return self._async.total_cost

    def close(self) -> None:
        """Kill the session's sandbox and end its thread; safe to call twice."""
        if self._token is not None and self._thread.is_alive():
            done = self._done
            assert done is not None
            trio.from_thread.run_sync(done.set, trio_token=self._token)
        self._thread.join()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open(self) -> trio.lowlevel.TrioToken:
        if self._token is None or not self._thread.is_alive() or self._async.closed:
            raise UsageError("the session is closed; start a new one with RLM(...).session()")
        return self._token


def read_saved_session(path: str | os.PathLike[str], context: Context) -> SavedSession:
    """The saved session at ``path``; UsageError if unreadable, newer, or for another context."""
    # Bounded and refused in one line like every file a person names: /dev/zero, a pipe.
    what = "the saved session" if python_spelled() else "--load"
    data = read_bytes(os.fspath(path), what, ReadLimits.file_only())
    try:
        document = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"cannot read the saved session {path}: {exc}") from None
    if not isinstance(document, dict) or "rlm_session" not in document:
        raise UsageError(f"{path} is not a saved rlm session")
    if document["rlm_session"] != SESSION_FORMAT:
        raise UsageError(
            f"{path} was saved by a newer rlm (format {document['rlm_session']}); upgrade rlm"
        )
    if document.get("context_sha256") != _digest(context):
        raise UsageError(
            f"the context differs from the one {path} was saved with; pass the same context "
            "(its variables were computed from it)"
        )
    history = document.get("history")
    variables = document.get("variables")
    settings = document.get("settings")
    if not (isinstance(history, list) and isinstance(variables, dict)
            and isinstance(settings, dict)):
        raise UsageError(f"{path} is damaged: history, variables or settings are missing")
    if not all(isinstance(m, dict) and m.keys() == {"role", "content"}
               and m["role"] in ("system", "user", "assistant") and isinstance(m["content"], str)
               for m in history):
        raise UsageError(f"{path} is damaged: its history holds something that is not a message")
    # Settings this rlm no longer has (a saved session outlives a release) are dropped;
    # the ones it has are checked when the model is made from them.
    known = {f.name for f in dataclasses.fields(RunConfig)}
    settings = {k: v for k, v in settings.items() if k in known}
    queries = document.get("queries", 0)  # absent from sessions saved before traces were numbered
    if type(queries) is not int or queries < 0:
        raise UsageError(f"{path} is damaged: its query count is not a whole number")
    # Absent from sessions saved before the totals were kept: nothing known spent.
    spent = document.get("spent", {"llm_calls": 0, "cost": 0.0})
    calls: object = spent.get("llm_calls") if isinstance(spent, dict) else None
    cost: object = spent.get("cost") if isinstance(spent, dict) else None
    if not (type(calls) is int and calls >= 0 and type(cost) in (int, float)
            and isinstance(cost, int | float) and math.isfinite(cost) and cost >= 0):
        raise UsageError(f"{path} is damaged: what its queries spent is not two amounts")
    return SavedSession(settings=settings, history=history, variables=variables,
                        queries=queries, spent_llm_calls=calls, spent_cost=float(cost))


def query_trace_path(path: str, number: int) -> str:
    """Where a session's query ``number`` (1-based) writes its trace, given the model's
    ``trace_path``: ``chat.jsonl`` → ``chat.2.jsonl``, ``trace`` → ``trace.2``.

    One file per query, not one file for all: ``rlm view`` draws one run per file
    (every query's root is call ``root``, its clock starting at 0), so queries
    appended to one file would show as the last one only.
    """
    target = Path(path)
    return str(target.with_name(f"{target.stem}.{number}{target.suffix}"))


def restore_source(variables: dict[str, Any]) -> str:
    """Python code that assigns each saved variable from its tagged tree
    (``sandbox/rlm_sandbox/plaindata.py``); UsageError for anything else."""
    lines = []
    for name, tree in variables.items():
        if not isinstance(name, str) or not name.isidentifier() or name.startswith("_"):
            raise UsageError(f"the saved session names a variable {name!r}, which is not allowed")
        lines.append(f"{name} = {_literal(tree, 0)}")
    lines.append("print(" + repr(f"restored {len(variables)} variable(s)") + ")")
    return "\n".join(lines) + "\n"


def _literal(tree: Any, depth: int) -> str:
    if depth > 64 or not isinstance(tree, list) or len(tree) != 2:
        raise UsageError("the saved session's variables are damaged")
    tag, payload = tree
    if tag == "v" and (payload is None or isinstance(payload, bool | int | float | str)):
        return repr(payload)
    if tag == "x" and payload in ("inf", "-inf", "nan"):
        return f"float({payload!r})"
    if tag in ("l", "t", "s", "f") and isinstance(payload, list):
        items = [_literal(item, depth + 1) for item in payload]
        if tag == "l":
            return "[" + ", ".join(items) + "]"
        if tag == "t":
            return "(" + "".join(f"{item}, " for item in items) + ")"
        body = "[" + ", ".join(items) + "]"
        return f"set({body})" if tag == "s" else f"frozenset({body})"
    if tag == "d" and isinstance(payload, list):
        pairs = []
        for pair in payload:
            if not isinstance(pair, list) or len(pair) != 2:
                raise UsageError("the saved session's variables are damaged")
            pairs.append(f"{_literal(pair[0], depth + 1)}: {_literal(pair[1], depth + 1)}")
        return "{" + ", ".join(pairs) + "}"
    raise UsageError("the saved session's variables are damaged")


def _digest(context: Context) -> str:
    digest = hashlib.sha256()
    for doc in [context] if isinstance(context, str) else context:
        digest.update(doc.encode("utf-8", "surrogatepass"))
        digest.update(b"\0")
    return digest.hexdigest()


def _write_atomically(path: Path, text: str) -> None:
    directory = path.parent if str(path.parent) else Path(".")
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
