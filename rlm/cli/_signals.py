"""Ctrl-C and SIGTERM for ``rlm run``.

The first signal stops the run gracefully: no new work starts, in-flight
requests are cancelled, every sandbox is killed, the trace is flushed, and the
run returns with status ``interrupted`` (exit 130).  A second signal exits at
once with 130, killing any sandbox process group still known.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

import trio

from rlm._api import RLM
from rlm._events import Event
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


async def _main(
    model: RLM, query: str, context: Context, on_event: Callable[[Event], None] | None
) -> RunResult:
    outcome: RunResult | RLMError | None = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_watch, model)
        try:
            if on_event is None:
                outcome = await model.acompletion(query, context)
            else:
                from rlm.streaming import StreamMerger, drain  # --stream only

                merger = StreamMerger()
                async with trio.open_nursery() as consumer:
                    consumer.start_soon(drain, merger, on_event)
                    try:
                        outcome = await model.acompletion(query, context, stream=merger)
                    finally:
                        merger.close()  # the consumer drains what is left, then ends
        except RLMError as exc:  # raised outside the nursery, so not in an exception group
            outcome = exc
        finally:
            nursery.cancel_scope.cancel()
    if isinstance(outcome, RLMError):
        raise outcome
    assert outcome is not None
    return outcome


def run_with_signals(
    model: RLM,
    query: str,
    context: Context,
    on_event: Callable[[Event], None] | None = None,
) -> RunResult:
    """Run ``model`` to its end in a fresh trio loop, handling SIGINT/SIGTERM.

    With ``on_event`` the run streams: every event, streamed text included,
    goes to ``on_event`` as it happens (``rlm run --stream``).
    """
    return trio.run(_main, model, query, context, on_event)
