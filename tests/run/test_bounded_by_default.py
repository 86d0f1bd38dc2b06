"""Bounded by default: a run has call and time ceilings with no flags, `none` lifts them,
refused calls count toward --exec-timeout, and a batch's host memory does not grow with it.

The review's three runaway loops (issue 10) run end to end on the fixture model, which runs
the code a query holds at every step (a model stuck in a loop).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import click
import pytest
import trio
from click.testing import CliRunner

from rlm import RLM
from rlm._config import DEFAULTS
from rlm._events import EventBus
from rlm._profiles import load_profile
from rlm._result import STATUS_EXIT_CODES
from rlm._run.assembly import make_budget
from rlm._run.bridge import Bridge
from rlm._run.call import Call
from rlm._traffic.budget import Budget, BudgetLimits
from rlm._traffic.gate import Gate
from rlm.cli import main
from rlm.cli._settings_cli import command_settings
from rlm.cli.run_cmd import run
from rlm.providers.base import Completion, CompletionRequest
from rlm.testing.provider import FunctionProvider
from rlm.testing.sandboxes import LineLauncher
from rlm_sandbox.protocol import QueryRequest
from tests.helpers import repl

# The review's three runaway loops, as model code.
SWALLOWS_REFUSALS = (
    "while True:\n    try:\n        llm_query('x')\n    except BaseException:\n        pass"
)
HUGE_BATCH = "llm_query_batched(['hi'] * 100000)"
MANY_QUERIES = "for i in range(100000):\n    llm_query('x')"


def test_a_run_has_finite_ceilings_by_default() -> None:
    assert DEFAULTS.max_llm_calls is not None and 0 < DEFAULTS.max_llm_calls <= 10_000
    assert DEFAULTS.timeout is not None and 0 < DEFAULTS.timeout <= 2 * 3600
    assert 1 << 30 <= DEFAULTS.sandbox_memory <= 2 << 30
    config = RLM(provider="fixture").config
    assert (config.max_llm_calls, config.timeout) == (DEFAULTS.max_llm_calls, DEFAULTS.timeout)
    assert make_budget(config).limits.max_llm_calls == DEFAULTS.max_llm_calls
    lifted = RLM(provider="fixture", max_llm_calls=None, timeout=None).config
    assert make_budget(lifted).calls_left() is None and lifted.timeout is None


def test_the_flags_state_the_ceilings_and_none_lifts_them() -> None:
    shown = " ".join(CliRunner().invoke(main, ["run", "--help"]).output.split())
    assert "[default: 5000]" in shown and "[default: 3600]" in shown
    assert shown.count("none lifts it") == 2 and "[default: 2GiB]" in shown

    def settings(*args: str) -> dict[str, Any]:
        with run.make_context("run", ["q", *args]) as ctx:
            return command_settings(("run",), "run", ctx=ctx).values

    defaults = settings()
    assert defaults["max_llm_calls"] == DEFAULTS.max_llm_calls
    assert defaults["timeout"] == DEFAULTS.timeout
    lifted = settings("--max-llm-calls", "none", "--timeout", "None", "--sandbox-memory", "1.5G")
    assert lifted["max_llm_calls"] is None and lifted["timeout"] is None
    assert lifted["sandbox_memory"] == 3 << 29
    assert settings("--timeout", "30m")["timeout"] == 1800.0
    for bad in (["--timeout", "soon"], ["--max-llm-calls", "many"], ["--sandbox-memory", "lots"]):
        with pytest.raises(click.BadParameter):
            run.make_context("run", ["q", *bad])


def test_a_config_file_lifts_a_ceiling_with_none(tmp_path: Path) -> None:
    (tmp_path / "rlm.toml").write_text('max_llm_calls = "none"\ntimeout = "none"\n')
    profile = load_profile(None, cwd=tmp_path, user_file=tmp_path / "absent.toml")
    assert profile.values == {"max_llm_calls": None, "timeout": None}


def _line_model(steps: list[str], **settings: Any) -> tuple[RLM, FunctionProvider]:
    provider = FunctionProvider.scripted(steps, **settings.pop("provider_options", {}))
    model = RLM(
        providers={"root": provider, "sub": provider},
        sandboxes=lambda config, events: LineLauncher(),
        **settings,
    )
    return model, provider


async def test_a_run_with_no_flags_enforces_the_default_call_ceiling(autojump_clock: Any) -> None:
    assert DEFAULTS.max_llm_calls is not None
    model, provider = _line_model([repl(f"batch {DEFAULTS.max_llm_calls}"), "FINAL(gave up)"])
    result = await model.acompletion("q", "ctx")
    assert result.answer == "gave up" and len(provider.requests) == 2  # the batch sent nothing
    refusal = next(e for e in result.trace if e["event"] == "budget_refused")
    assert f"only {DEFAULTS.max_llm_calls - 1} of max_llm_calls=" in refusal["reason"]


async def test_a_run_with_no_flags_stops_at_the_default_timeout(autojump_clock: Any) -> None:
    assert DEFAULTS.timeout is not None
    step = DEFAULTS.timeout / 3
    model, _ = _line_model(
        [repl("query")], provider_options={"latency": lambda request: step}
    )
    result = await model.acompletion("q", "ctx")
    assert result.status == "timeout" and STATUS_EXIT_CODES[result.status] == 3
    assert "timeout=None lifts it" in (result.error or "")
    assert trio.current_time() < DEFAULTS.timeout * 1.01


def _runaway_query(code: str) -> str:
    """A query the fixture model answers by running ``code`` at every step."""
    return f"Run this.\n```repl\n{code}\n```"


async def test_swallowed_refusals_count_toward_the_exec_timeout_and_are_paced() -> None:
    model = RLM(provider="fixture", max_llm_calls=20, exec_timeout=1.0)
    with trio.fail_after(30):  # before the fix, refused calls stretched the limit forever
        result = await model.acompletion(_runaway_query(SWALLOWS_REFUSALS))
    assert result.status == "budget_exceeded" and STATUS_EXIT_CODES[result.status] == 3
    assert result.usage.llm_calls == 20
    executed = [e for e in result.trace if e["event"] == "code_executed"]
    assert len(executed) == 1 and "(exec_timeout;" in (executed[0]["error"] or "")
    refused = [e for e in result.trace if e["event"] == "budget_refused" and e["scope"] == "batch"]
    assert 1 <= len(refused) <= 1 + 1.0 / 0.1 + 1  # answered at once, then 0.1 s apart


async def test_a_loop_of_100k_queries_ends_at_the_call_ceiling() -> None:
    model = RLM(provider="fixture", max_llm_calls=20)
    with trio.fail_after(30):
        result = await model.acompletion(_runaway_query(MANY_QUERIES))
    assert result.status == "budget_exceeded" and STATUS_EXIT_CODES[result.status] == 3
    assert result.usage.llm_calls == 20
    executed = [e for e in result.trace if e["event"] == "code_executed"]
    assert len(executed) == 1 and "BudgetExceeded" in (executed[0]["error"] or "")


class _CountingGate:
    """Answers every request after a second, without any limit of its own, and counts
    how many requests exist at once: what the bridge itself keeps alive."""

    def __init__(self) -> None:
        self.alive = 0
        self.peak = 0
        self.sent = 0
        self.cache = None  # no response cache: every item is sent

    async def complete(self, request: CompletionRequest) -> Completion:
        self.alive += 1
        self.sent += 1
        self.peak = max(self.peak, self.alive)
        try:
            await trio.sleep(1)
        finally:
            self.alive -= 1
        return Completion(text="ok", model=request.model, input_tokens=1, output_tokens=1)


def _bridge(gate: _CountingGate, max_llm_calls: int | None,
            call_limit: int | None = None) -> Bridge:
    config = RLM(provider="fixture", max_llm_calls=max_llm_calls).config
    return Bridge(
        call_limit=call_limit,
        config=config,
        events=EventBus(keep=False),
        gate=cast(Gate, gate),
        budget=Budget(limits=BudgetLimits(max_llm_calls=max_llm_calls)),
        abort=lambda exc: None,
        deadline=lambda: float("inf"),
    )


def _batch(n: int) -> QueryRequest:
    return QueryRequest(1, True, ["hi"] * n, None, None)


async def test_a_huge_batch_streams_through_a_bounded_window(autojump_clock: Any) -> None:
    gate = _CountingGate()
    asker = cast(Call, SimpleNamespace(call_id="root", parent_id=None, depth=0, iteration=1))
    answer = await _bridge(gate, None).serve(asker, _batch(3_000))
    assert answer["ok"] and answer["value"] == ["ok"] * 3_000
    assert gate.sent == 3_000
    assert gate.peak <= max(64, 4 * DEFAULTS.max_concurrent)


async def test_a_batch_over_what_is_left_is_refused_before_anything_is_sent() -> None:
    gate = _CountingGate()
    asker = cast(Call, SimpleNamespace(call_id="root", parent_id=None, depth=0, iteration=1))
    answer = await _bridge(gate, DEFAULTS.max_llm_calls).serve(asker, _batch(100_000))
    assert not answer["ok"] and answer["kind"] == "budget" and gate.sent == 0


def test_a_100k_batch_with_no_budget_flag_is_refused_and_the_run_exits_3() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_"))}
    done = subprocess.run(
        [sys.executable, "-m", "rlm", "run", _runaway_query(HUGE_BATCH), "--provider", "fixture",
         "--no-history", "--max-iterations", "2"],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )
    assert done.returncode == 3, done.stderr
    assert "a batch of 100000 sub-queries needs 100000 LLM calls" in done.stderr
    assert "--max-iterations" in done.stderr and done.stdout == ""


async def test_an_rlm_volley_task_has_its_own_call_ceiling(autojump_clock: Any) -> None:
    # A volley has no ledger wall by default (it may hold 100,000 tasks); each --rlm
    # task's code is still bounded like one run.
    gate = _CountingGate()
    asker = cast(Call, SimpleNamespace(call_id="t1", parent_id=None, depth=0, iteration=1))
    bridge = _bridge(gate, None, call_limit=30)
    assert (await bridge.serve(asker, _batch(20)))["ok"]
    refused = await bridge.serve(asker, _batch(20))
    assert not refused["ok"] and refused["kind"] == "budget" and gate.sent == 20
    assert "this task's ceiling of 30 requests" in refused["error"]
    assert (await bridge.serve(asker, _batch(10)))["ok"] and gate.sent == 30


async def test_a_runaway_rlm_volley_task_ends_at_the_run_limit_and_only_it_fails() -> None:
    # Served answers never count toward --exec-timeout, and the ledger is lifted here:
    # only the run's wall-clock limit, applied to each task, can end this loop.
    looping = _runaway_query("while True:\n    llm_query('x')")
    model = RLM(provider="fixture", timeout=2, max_llm_calls=None)
    with trio.fail_after(60):
        result = await model.avolley([looping, "What is the magic number?"],
                                     "the magic number is 42. " * 10, mode="rlm")
    runaway, fine = result.tasks
    assert runaway.status == "failed" and runaway.error == "timed out after 2s"
    assert fine.status == "succeeded" and fine.output == "42"
