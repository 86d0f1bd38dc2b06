"""Ctrl-C and SIGTERM for ``rlm run``.

The first signal stops the run gracefully: no new work starts, in-flight
requests are cancelled, every sandbox is killed, the trace is flushed, and the
run returns with status ``interrupted`` (exit 130).  A second signal exits at
once with 130, killing any sandbox process group still known.
"""

from __future__ import annotations

import os
import signal

import trio

from rlm._api import RLM
from rlm._result import RunResult
from rlm._run.context import Context
from rlm.errors import RLMError

__all__ = ["run_with_signals"]


async def _watch(model: RLM) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        count = 0
        async for _ in signals:
            count += 1
            if count == 1:
                model.interrupt()
            else:
                model.kill_sandboxes()
                os._exit(130)


async def _main(model: RLM, query: str, context: Context) -> RunResult:
    outcome: RunResult | RLMError | None = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_watch, model)
        try:
            outcome = await model.acompletion(query, context)
        except RLMError as exc:  # raised outside the nursery, so not in an exception group
            outcome = exc
        finally:
            nursery.cancel_scope.cancel()
    if isinstance(outcome, RLMError):
        raise outcome
    assert outcome is not None
    return outcome


def run_with_signals(model: RLM, query: str, context: Context) -> RunResult:
    """Run ``model`` to its end in a fresh trio loop, handling SIGINT/SIGTERM."""
    return trio.run(_main, model, query, context)
