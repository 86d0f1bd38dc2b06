"""Pipelined execution: a step's code runs while the rest of its reply still streams."""

from __future__ import annotations

import pytest
import trio

from rlm import RLM
from rlm._events import CodeExecuted, Event, StepCompleted
from rlm._run.call import Call
from rlm.providers.base import Completion, CompletionRequest, TextSink
from tests.helpers import assistant_turns, is_root_request
from tests.run.test_scheduler import Run

PROSE = [f"more words {i:02d} " for i in range(20)]  # 20 pieces, 0.1 s each: 2 s of text


class PacedScript:
    """Root replies by step, generated at ``delay`` s per piece, streamed or whole."""

    name = "paced-script"

    def __init__(self, steps: list[list[str]], delay: float = 0.1) -> None:
        self.steps = steps
        self.delay = delay
        self.requests: list[CompletionRequest] = []

    def _pieces(self, request: CompletionRequest) -> list[str]:
        self.requests.append(request)
        if not is_root_request(request):
            return ["sub-answer"]
        return self.steps[min(assistant_turns(request), len(self.steps) - 1)]

    async def complete(self, request: CompletionRequest) -> Completion:
        pieces = self._pieces(request)
        await trio.sleep(self.delay * len(pieces))
        return Completion(text="".join(pieces), model=request.model)

    async def stream(self, request: CompletionRequest, on_text: TextSink) -> Completion:
        pieces = self._pieces(request)
        for piece in pieces:
            await trio.sleep(self.delay)
            await on_text(piece)
        return Completion(text="".join(pieces), model=request.model)

    async def aclose(self) -> None:
        return None


def step_one(code: str) -> list[str]:
    return ["Let me look.\n```re", f"pl\n{code}\n``", "`\n", *PROSE]


@pytest.mark.parametrize("stream", [False, True])
async def test_pipelining_saves_the_overlap_in_virtual_time(
    stream: bool, autojump_clock: trio.abc.Clock
) -> None:
    provider = PacedScript([step_one("sleep 1"), ["FINAL(done)"]])
    run = Run(provider, stream=stream)
    outcome = await Call.root(run.parts, "q", "ctx").run()
    assert outcome.answer == "done"
    # The block closes at 0.3 s; its code takes 1 s; the reply ends at 2.3 s.
    executed = [e for e in run.events.events if isinstance(e, CodeExecuted)]
    steps = [e for e in run.events.events if isinstance(e, StepCompleted)]
    assert [e.pipelined for e in executed] == [stream]
    if stream:
        assert executed[0].t == pytest.approx(1.3) and steps[0].t == pytest.approx(2.3)
        assert steps[1].t == pytest.approx(2.4)  # the next step starts as the reply ends
    else:
        assert executed[0].t == pytest.approx(3.3) and steps[1].t == pytest.approx(3.4)
    # Either way the model saw the same feedback.
    assert "Code executed" in provider.requests[-1].messages[-1]["content"]


async def test_later_blocks_run_after_earlier_ones_and_a_final_block_stops_them(
    autojump_clock: trio.abc.Clock,
) -> None:
    reply = [
        "```repl\nsleep 1\n```\n",
        "```repl\nfinal early\n```\n",
        "```repl\nsleep 5\n```\n",
        *PROSE,
    ]
    run = Run(PacedScript([reply]), stream=True)
    outcome = await Call.root(run.parts, "q", "ctx").run()
    assert outcome.answer == "early"
    executed = [e for e in run.events.events if isinstance(e, CodeExecuted)]
    assert [(e.block, e.final, e.pipelined) for e in executed] == [
        (1, False, True),
        (2, True, True),
    ]
    assert executed[0].t == pytest.approx(1.1) and executed[1].t == pytest.approx(1.1)
    assert run.launcher.opened[0].executed == ["sleep 1\n", "final early\n"]


class UntilExecuted(PacedScript):
    """Streams the first root reply's 2 s of prose, then keeps writing until code ran.

    The real clock and a real sandbox: how long the block takes depends on the
    machine, so the reply does not end at a fixed time.  It goes on (at most
    ``patience`` s more) until a ``code_executed`` event has been seen: with
    pipelining that comes while the reply streams; without it, it never would
    (the block would wait for the reply's end), and the assertions fail.
    """

    def __init__(self, steps: list[list[str]], patience: float = 60.0) -> None:
        super().__init__(steps)
        self.patience = patience
        self.executed = trio.Event()
        self.extra = 0

    def watch(self, event: Event) -> None:
        if isinstance(event, CodeExecuted):
            self.executed.set()

    async def stream(self, request: CompletionRequest, on_text: TextSink) -> Completion:
        first = is_root_request(request) and assistant_turns(request) == 0
        completion = await super().stream(request, on_text)
        if not first:
            return completion
        with trio.move_on_after(self.patience):
            while not self.executed.is_set():
                await trio.sleep(self.delay)
                await on_text(" still writing")
                self.extra += 1
        return Completion(
            text=completion.text + " still writing" * self.extra, model=request.model
        )


async def test_a_block_streamed_before_two_seconds_of_text_finishes_before_the_reply_ends() -> None:
    """The issue's check, with a real sandbox process on the real clock."""
    provider = UntilExecuted([step_one("n = len(context)\nprint(n * 2)"), ["FINAL(done)"]])
    model = RLM(providers={"root": provider, "sub": provider}, stream=True, sinks=[provider.watch])
    result = await model.acompletion("How long?", "x" * 1234)
    assert result.answer == "done"
    trace = result.trace
    executed = [e for e in trace if e["event"] == "code_executed"]
    first_step = next(e for e in trace if e["event"] == "step_completed")
    assert executed[0]["pipelined"] is True and executed[0]["output"].strip() == "2468"
    # The code had finished while the reply was still being written (its 2 s of prose
    # and whatever a loaded machine's sandbox start-up added); then the reply ended.
    assert executed[0]["t"] < first_step["t"]
    assert first_step["reply_chars"] == len(provider.requests[-1].messages[-2]["content"])
    assert "2468" in provider.requests[-1].messages[-1]["content"]
