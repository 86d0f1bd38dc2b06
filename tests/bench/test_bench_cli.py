"""``rlm bench``: the shape of its output and T* measured from a real (tiny) run's trace.

The micro scenarios' machinery (T, T*, phases, the sequential twin); the default set's
runners at tiny sizes are in test_bench_default.py.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import trio
from click.testing import CliRunner

from rlm import RLM, RunResult
from rlm.bench.provider import BenchProvider
from rlm.bench.report import COLUMNS, bench_json, markdown_table, table_rows
from rlm.bench.run import measure, run_scenario
from rlm.bench.scenarios import EVERY, Scenario
from rlm.bench.timer import precise_sleep
from rlm.cli import main
from rlm.providers.base import CompletionRequest
from rlm.providers.fixture import FixtureProvider

TINY = Scenario("tiny", "4 sub-queries of 10 ms at C=2", n=4, c=2, sub_latency=0.01,
                context_chars=5_000)


def test_t_star_of_a_real_batched_run_is_computed_from_its_trace() -> None:
    [result] = run_scenario(replace(TINY, baseline=False))
    assert result.correct and result.status == "answered"
    assert result.n == 4
    assert result.t_star == result.t_formula == 0.02  # ⌈4/2⌉ · 10 ms, no root latency
    assert result.eta is not None and result.eta == result.t_star / result.t
    assert result.overhead_ms == 1000 * (result.t - result.t_star) / 4
    assert result.speedup is None
    phases = result.phases
    assert set(phases) == {"startup_s", "fanout_overhead_s", "tail_s", "sandbox_start_s",
                           "zygote_boot_s", "teardown_s"}
    assert phases["zygote_boot_s"] > 0  # the run adopted a zygote started (and timed) before it
    assert phases["teardown_s"] > 0  # its sandboxes were reaped after the answer, outside T
    split = phases["startup_s"] + phases["fanout_overhead_s"] + phases["tail_s"]
    assert split == pytest.approx(result.t - result.t_star, abs=1e-5)


def test_the_sequential_twin_gives_the_speedup() -> None:
    main_result, twin = run_scenario(replace(TINY, root_latency=0.005))
    assert twin.name == "tiny/seq" and twin.variant == "sequential"
    # one root step, then one sub-query at a time
    assert twin.t_star == pytest.approx(0.005 + 4 * 0.01)
    assert main_result.t_star == pytest.approx(0.005 + 0.02)
    assert main_result.t_seq == twin.t and main_result.speedup == twin.t / main_result.t


def test_the_json_has_one_entry_per_run_and_every_field() -> None:
    result = CliRunner().invoke(main, ["bench", "--scenario", "quick-batched", "--no-baseline",
                                       "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data) == {"machine", "elapsed_s", "scenarios", "all_correct", "targets_met",
                         "micro"}
    assert data["scenarios"] == [] and data["targets_met"] is True
    assert len(data["machine"]["load_average"]) == 3
    [row] = data["micro"]
    assert row["name"] == "quick-batched" and row["n"] == 8 and row["c"] == 4
    assert row["t_star"] == 0.1 and 0 < row["eta"] <= 1
    # What an API caller waits for: acompletion returns only after the teardown.
    assert 0 < row["eta_return"] <= row["eta"]
    assert row["eta_return"] == pytest.approx(
        row["t_star"] / (row["t"] + row["phases"]["teardown_s"]), rel=1e-4)
    assert {"t", "overhead_ms", "speedup", "rate", "correct", "met", "met_return",
            "peak_mib"} <= set(row)


def test_table_and_markdown_have_every_column() -> None:
    with_memory = replace(TINY, baseline=False, memory=True, target_rate=1.0)
    results = run_scenario(with_memory)
    rows = table_rows(results)
    assert len(rows) == 1 and len(rows[0]) == len(COLUMNS)
    assert rows[0][0] == "tiny" and rows[0][-1] == "ok ✓"
    markdown = markdown_table(results).splitlines()
    assert len(markdown) == 3 and markdown[0].count("|") == len(COLUMNS) + 1
    assert "| η | η to return |" in markdown[0]  # both figures, side by side
    [result] = results
    at = COLUMNS.index("η to return")
    assert rows[0][at] == f"{result.eta_return:.3f}" and result.eta_return is not None
    assert bench_json(results, elapsed_s=1.0)["micro"][0]["met"] is True


def test_list_and_unknown_scenario() -> None:
    listed = CliRunner().invoke(main, ["bench", "--list"])
    assert listed.exit_code == 0
    assert all(s.name in listed.stdout for s in EVERY)
    assert "--large:" in listed.stdout and "--micro:" in listed.stdout
    bad = CliRunner().invoke(main, ["bench", "--scenario", "nope"])
    assert bad.exit_code == 2 and "unknown scenario nope" in bad.stderr


async def test_bench_provider_uses_latencies_in_dispatch_order(autojump_clock: object) -> None:
    provider = BenchProvider(sub_latencies=[0.3, 0.1], root_latency=2.0)
    sub = CompletionRequest(messages=[{"role": "user", "content": "What is the x?\nthe x is 4"}],
                            model="fixture")
    seen = []
    for _ in range(3):
        start = trio.current_time()
        completion = await provider.complete(sub)
        seen.append((round(trio.current_time() - start, 6),
                     completion.metadata["nominal_latency_s"], completion.text))
    assert seen == [(0.3, 0.3, "4"), (0.1, 0.1, "4"), (0.3, 0.3, "4")]


async def test_precise_sleep_never_wakes_early_and_can_be_cancelled() -> None:
    start = trio.current_time()
    await precise_sleep(0.02)
    assert trio.current_time() - start >= 0.02
    with trio.move_on_after(0.01) as scope:
        await precise_sleep(30)
    assert scope.cancelled_caught


def _fixture_run() -> RunResult:
    """A real run of 2 sub-queries on the fixture model (no nominal latencies in its trace)."""
    fixture = FixtureProvider(sub_latency=0.01)
    model = RLM(model="fixture:2", providers={"root": fixture, "sub": fixture}, max_concurrent=3)
    return model.completion("What is the magic number?", "the magic number is 7")


def test_runs_without_nominal_latencies_are_measured_from_the_scenario() -> None:
    # Over HTTP the trace has no nominal latencies: the scenario's own are used.

    run = _fixture_run()
    http = replace(TINY, n=2, transport="http")
    assert measure(http, run).t_star == 0.01


def test_eta_to_return_counts_the_teardown_after_the_answer() -> None:
    # T (duration_s) ends at the answer; acompletion returns only after run_finished's
    # teardown_s more.  η to return must count it, η must not.
    run = _fixture_run()
    trace = tuple({**e, "teardown_s": 0.5} if e["event"] == "run_finished" else e
                  for e in run.trace)
    result = measure(replace(TINY, n=2, transport="http"), replace(run, trace=trace))
    assert result.phases["teardown_s"] == 0.5
    assert result.eta == result.t_star / run.duration_s
    assert result.eta_return == result.t_star / (run.duration_s + 0.5)
    assert result.eta_return < result.eta
    # A target between the two is met at the answer, not at the return.
    result = replace(result, target_eta=(result.eta + result.eta_return) / 2)
    assert result.met is True and result.met_return is False
    [row] = table_rows([result])
    assert row[COLUMNS.index("ok")].endswith(" ✓")  # (not the needle's answer: "WRONG ✓")
    assert row[COLUMNS.index("η to return")] == f"{result.eta_return:.3f} ✗"
    assert bench_json([result], elapsed_s=1.0)["micro"][0]["met_return"] is False
