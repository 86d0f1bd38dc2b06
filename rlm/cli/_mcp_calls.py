"""What one tool call of ``rlm mcp`` does: its settings, then a run or a volley through
the library (``RLM.acompletion``, ``RLM.avolley``), kept in the run history as
``rlm run`` and ``rlm volley`` keep theirs.

A call's settings are the server's (flags > environment > profile > config file >
defaults, resolved once when it started) with the call's own arguments on top.  A
call may choose its models and tighten a budget; it may not loosen one: a
``max_llm_calls``, ``max_cost`` or ``timeout`` above the server's is refused, so the
limits the person who started the server chose hold for every call an agent makes.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio

from rlm._api import RLM
from rlm._config import SETTINGS
from rlm.cli._history import RunKeeper, volley_label
from rlm.cli._mcp_roots import Roots
from rlm.errors import RLMError, UsageError
from rlm.history.record import volley_summary

if TYPE_CHECKING:
    from rlm._events import Event
    from rlm._result import RunResult
    from rlm._run.context import Context
    from rlm.volley.records import VolleyResult

__all__ = ["CEILINGS", "Outcome", "ServerSetup", "ask", "call_settings", "volley"]

#: The budgets a call may lower but never raise above the server's.
CEILINGS = ("max_llm_calls", "max_cost", "timeout")
#: A volley that ended like this answered nothing the agent can rely on.
_STOPPED = ("budget_exceeded", "credentials_refused", "interrupted")
_CANCELLED = "cancelled: the MCP client cancelled the call, or the server stopped"
_NO_ANSWER = {
    "iterations": "the root call gave no final answer within max_iterations steps (raise "
                  "max_iterations, or ask a narrower question)",
}


@dataclass(frozen=True)
class ServerSetup:
    """What the server was started with: its settings, its roots, its key (never shown)."""

    run: Mapping[str, Any]
    volley: Mapping[str, Any]
    roots: Roots
    history: bool = True
    api_key: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Outcome:
    """A tool call's result: its text, its data, and whether it is the protocol's error."""

    text: str
    data: dict[str, Any] | None = None
    error: bool = False


def refused(message: str) -> Outcome:
    """A tool error: one line, ``Error: ...``."""
    return Outcome(" ".join(f"Error: {message}".split()), error=True)


def call_settings(setup: ServerSetup, given: Mapping[str, Any]) -> dict[str, Any]:
    """The server's run settings with the call's ``given`` ones (None: not given) on top."""
    settings = dict(setup.run)
    for name, value in given.items():
        if value is None:
            continue
        ceiling = setup.run[name]
        if name in CEILINGS and ceiling is not None and value > ceiling:
            flag = next(row.flag for row in SETTINGS if row.name == name)
            raise UsageError(
                f"{name} {value:g} is above the {ceiling:g} this server allows; ask for at "
                f"most {ceiling:g} (its limit is raised where it is started: {flag})"
            )
        settings[name] = value
    return settings


async def ask(setup: ServerSetup, question: str, paths: Sequence[str], *, glob: str,
              encoding: str, given: Mapping[str, Any]) -> Outcome:
    """Answer ``question`` over what ``paths`` hold, as ``rlm run`` would."""
    model, context = await _prepare(setup, paths, glob, encoding, given)
    keeper = RunKeeper(keep=setup.history, view=False, trace_path=None, query=question)
    keeper.attach(model)
    assert context is not None
    try:
        result = await model.acompletion(question, context)
    except RLMError as exc:
        keeper.close(exc.result, str(exc), page=False)
        return refused(str(exc))
    except BaseException:  # cancelled (in a group, from the run's nurseries): say so
        keeper.close(None, _CANCELLED, page=False, summary={"status": "interrupted"})
        raise
    keeper.close(result, page=False)
    return _answered(result, _links(keeper))


async def volley(setup: ServerSetup, tasks: Sequence[str], paths: Sequence[str], *,
                 glob: str, encoding: str, mode: str | None,
                 given: Mapping[str, Any]) -> Outcome:
    """Run ``tasks`` over what ``paths`` hold (none: no shared context), as a volley."""
    sent = _Requests()
    model, context = await _prepare(setup, paths or None, glob, encoding, given, sinks=[sent])
    keeper = RunKeeper(keep=setup.history, view=False, trace_path=None, query="")
    model.trace_path = keeper.open(model.config, kind="volley", query=volley_label(tasks))
    options = {**setup.volley, **({} if mode is None else {"mode": mode})}
    try:
        result = await model.avolley(list(tasks), context, **options)
    except RLMError as exc:
        keeper.close(None, str(exc), page=False)
        return refused(str(exc))
    except BaseException:
        keeper.close(None, _CANCELLED, page=False, summary={"status": "interrupted"})
        raise
    keeper.close(None, page=False, summary=volley_summary(result, sent.count))
    return _volleyed(result, _links(keeper))


async def _prepare(setup: ServerSetup, paths: Sequence[str] | None, glob: str, encoding: str,
                   given: Mapping[str, Any], sinks: list[Any] | None = None,
                   ) -> tuple[RLM, Context | None]:
    """The call's model (its settings checked) and the context ``paths`` hold (None: no
    context), read in a worker thread so the server keeps answering meanwhile."""
    settings = call_settings(setup, given)
    model = RLM(api_key=setup.api_key, sinks=sinks, **settings)
    if paths is None:
        return model, None
    read = functools.partial(setup.roots.read, paths, glob=glob, encoding=encoding,
                             max_bytes=model.config.max_context_bytes)
    return model, await trio.to_thread.run_sync(read)


class _Requests:
    """Counts the requests a volley sent (its history summary's ``llm_calls``)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, event: Event) -> None:
        self.count += event.kind == "llm_request"


def _links(keeper: RunKeeper) -> dict[str, str]:
    """Where the run is kept: its id in the history and its resources."""
    if keeper.entry is None:
        return {}
    ref = keeper.entry.id
    return {"run_id": ref, "summary": f"rlm://runs/{ref}", "page": f"rlm://runs/{ref}/page"}


def _answered(result: RunResult, links: dict[str, str]) -> Outcome:
    data = {**result.to_dict(), **links}
    data.pop("trace", None)  # a path on the server's disk: the page resource shows it
    if result.status == "answered":
        return Outcome(result.answer or "", data)
    reason = result.error or _NO_ANSWER.get(result.status, f"the run ended: {result.status}")
    return Outcome(refused(reason).text, data, error=True)


def _volleyed(result: VolleyResult, links: dict[str, str]) -> Outcome:
    data = {**result.to_dict(), **links}
    s = result.summary
    if result.status in _STOPPED or not s.succeeded:
        reason = result.error or f"no task succeeded ({s.failed} failed, {s.cancelled} cancelled)"
        return Outcome(refused(reason).text, data, error=True)
    blocks = [f"[{t.index}] {t.status}: {t.output if t.output is not None else t.error}"
              for t in result.tasks]
    return Outcome("\n\n".join(blocks), data)
