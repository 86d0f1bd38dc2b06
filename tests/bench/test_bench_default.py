"""``rlm bench``'s default set: the issue's shapes, and each runner at a tiny size.

Nothing here judges a figure (a test never asserts a duration): each runner is
run small, and what it reports must be whole and consistent.
"""

from __future__ import annotations

import json
from dataclasses import replace

import httpx2
import pytest
import trio
from click.testing import CliRunner

from rlm.bench.figures import Check, Figures
from rlm.bench.large import run_large_volley
from rlm.bench.loop import loop_figures
from rlm.bench.report import FIGURE_COLUMNS, bench_json, figure_rows, markdown_table
from rlm.bench.run import run_figures
from rlm.bench.scenarios import (
    DEFAULT,
    LARGE,
    LargeVolleyScenario,
    LoopScenario,
    Scenario,
    VolleyScenario,
)
from rlm.bench.server import drawn_latency
from rlm.bench.volley import volley_figures
from rlm.cli import main
from rlm.testing.server import FixtureServer, FixtureServerOptions


def _named(name: str) -> Scenario | VolleyScenario | LargeVolleyScenario | LoopScenario:
    return next(s for s in (*DEFAULT, *LARGE) if s.name == name)


def _run(name: str) -> Scenario:
    found = _named(name)
    assert isinstance(found, Scenario)
    return found


def _volley(name: str) -> VolleyScenario:
    found = _named(name)
    assert isinstance(found, VolleyScenario)
    return found


def test_the_default_set_has_the_issues_shapes_and_targets() -> None:
    hosted, local, wide, volley = (_named(n) for n in
                                   ("hosted", "local-server", "wide-tree", "volley-local"))
    assert isinstance(hosted, Scenario) and isinstance(local, Scenario)
    assert isinstance(wide, Scenario) and isinstance(volley, VolleyScenario)
    assert (hosted.n, hosted.c, hosted.sub_latency, hosted.sigma) == (200, 32, 1.2, 0.5)
    assert hosted.announced and hosted.rpm and hosted.transport == "http"
    assert hosted.target_eta == 0.97
    assert (local.n, local.c, local.sub_latency, local.sigma) == (2000, 64, 0.4, 0.5)
    assert local.transport == "http" and local.target_eta == 0.95
    assert (wide.depth, wide.n, wide.child_n, wide.sub_latency, wide.root_latency) == (
        2, 16, 4, 0.3, 0.3)
    assert wide.target_eta == 0.9
    assert (volley.n, volley.c, volley.latency, volley.transport) == (5000, 64, 0.4, "http")
    assert volley.journal and volley.target_eta == 0.95 and volley.target_journal == 0.05
    large = _named("volley-1M")
    assert isinstance(large, LargeVolleyScenario)
    assert (large.n, large.small, large.target_peak_mib) == (1_000_000, 100_000, 300.0)


async def test_the_fixture_server_draws_latencies_and_announces_its_limit() -> None:
    options = FixtureServerOptions(sub_latency=0.01, latency_sigma=0.5, seed=3, rpm=600,
                                   rpm_burst=4, announce_rpm=True)
    body = {"model": "fixture", "messages": [{"role": "user", "content": "What is x?"}]}
    async with trio.open_nursery() as nursery:
        port = await nursery.start(FixtureServer(options).serve)
        async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}/v1") as client:
            replies = [await client.post("/chat/completions", json=body) for _ in range(3)]
        nursery.cancel_scope.cancel()
    drawn = [drawn_latency({"metadata": {"id": r.json()["id"]}}) for r in replies]
    assert all(d is not None and d > 0 for d in drawn) and len(set(drawn)) == 3
    assert [r.headers["x-ratelimit-limit-requests"] for r in replies] == ["600"] * 3
    assert all(0 <= int(r.headers["x-ratelimit-remaining-requests"]) <= 4 for r in replies)


def test_a_run_scenario_reports_eta_against_drawn_latencies_and_a_learned_limit() -> None:
    tiny = replace(_run("hosted"), n=6, c=4, sub_latency=0.02, root_latency=0.02, rpm=600,
                   burst=8, context_chars=6_000)
    figures = run_figures(tiny)
    assert figures.correct and figures.t and figures.t_star
    [eta] = figures.checks
    assert eta.what == "η" and eta.target == "η ≥ 0.97" and eta.value is not None
    assert eta.met == (eta.value >= 0.97)
    assert figures.notes[0].startswith("client CPU ")
    assert figures.detail["n"] == 6 and figures.detail["rpm"] == 600


def test_a_volley_scenario_runs_with_the_journal_and_without() -> None:
    tiny = replace(_volley("volley-local"), n=40, c=8, latency=0.02)
    figures = volley_figures(tiny)
    assert figures.correct and figures.t_star == pytest.approx(5 * 0.02)
    assert [c.what for c in figures.checks] == ["η", "journal"]
    assert figures.detail["journal_wall_s"] > 0 and figures.detail["plain_wall_s"] > 0


def test_the_large_volley_measures_rlm_volley_at_two_sizes() -> None:
    tiny = LargeVolleyScenario("tiny-volley", "two small sizes", n=600, small=200, c=16)
    figures = run_large_volley(tiny)
    assert figures.correct, figures
    peak, ratio = figures.checks
    assert peak.what == "peak memory" and peak.value is not None and peak.value > 10
    assert ratio.what == "time per task" and ratio.value is not None and ratio.value > 0
    assert set(figures.detail["runs"]) == {"200", "600"}


def test_the_sequential_loop_is_measured_against_its_batched_form_and_one_by_one() -> None:
    loop = _named("sequential-loop")
    assert isinstance(loop, LoopScenario)
    assert (loop.run.n, loop.run.c, loop.run.sub_latency) == (16, 16, 0.3)
    assert loop.target_share == 0.8 and loop.target_fan_out_s == 0.45
    tiny = replace(loop, run=replace(loop.run, n=4, c=4, sub_latency=0.02, root_latency=0.02,
                                     context_chars=6_000))
    figures = loop_figures(tiny)
    assert figures.correct and figures.t and figures.t_star
    share, fan_out = figures.checks
    assert share.what == "loop speedup" and share.value is not None
    assert share.met == (share.value >= 0.8)
    assert fan_out.what == "loop fan-out" and fan_out.value is not None
    runs = figures.detail
    assert runs["loop"]["variant"] == runs["one_by_one"]["variant"] == "sequential"
    assert runs["batched"]["variant"] == "batched"
    assert runs["loop"]["n"] == runs["batched"]["n"] == runs["one_by_one"]["n"] == 4


def test_the_table_json_and_markdown_of_the_default_set() -> None:
    figures = [
        Figures("a", "about a", 10, 4, 2.0, 1.9, (Check("η", 0.95, "η 0.950", "η ≥ 0.9", True),),
                True, ("client CPU 1.00 ms/request",)),
        Figures("b", "about b", 10, 4, None, None,
                (Check("peak memory", 400.0, "peak 400 MiB", "≤ 300 MiB", False),), True),
    ]
    rows = figure_rows(figures)
    assert [len(row) for row in rows] == [len(FIGURE_COLUMNS)] * 2
    assert rows[0][5:8] == ["η 0.950", "η ≥ 0.9", "✓"] and rows[1][3:5] == ["—", "—"]
    assert rows[1][7] == "✗"
    document = bench_json(figures, elapsed_s=1.0)
    assert document["targets_met"] is False and "micro" not in document
    assert json.loads(json.dumps(document))["scenarios"][0]["checks"][0]["met"] is True
    assert markdown_table(figures).splitlines()[0].count("|") == len(FIGURE_COLUMNS) + 1


def test_help_says_what_the_default_set_and_large_take() -> None:
    text = CliRunner().invoke(main, ["bench", "--help"]).output
    assert "--large" in text and "volley-1M" in text and "--micro" in text
