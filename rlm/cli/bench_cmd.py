"""``rlm bench``: realistic workloads measured against their physical limit."""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from rlm.bench.figures import Figures
    from rlm.bench.run import ScenarioResult
    from rlm.bench.scenarios import AnyScenario

__all__ = ["bench"]


@click.command("bench")
@click.option("--scenario", "names", multiple=True, metavar="NAME",
              help="Run only this scenario, of any set (repeatable); --list shows the names.")
@click.option("--large", is_flag=True,
              help="Also run volley-1M: a million tasks, then 100,000 (several minutes).")
@click.option("--micro", is_flag=True,
              help="The micro scenarios instead: the runtime's own machinery, no targets.")
@click.option("--quick", is_flag=True, help="A smoke set of micro scenarios (seconds).")
@click.option("--no-baseline", is_flag=True,
              help="Micro scenarios: skip the sequential llm_query runs (no speedup column).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead.")
@click.option("--markdown", is_flag=True, help="Print the table as GitHub markdown.")
@click.option("--list", "list_only", is_flag=True, help="List the scenarios and exit.")
def bench(names: tuple[str, ...], large: bool, micro: bool, quick: bool, no_baseline: bool,
          as_json: bool, markdown: bool, list_only: bool) -> None:
    """Run realistic workloads and compare each with its physical limit.

    Everything runs offline on the scripted fixture model with simulated
    latencies (seeded draws), over HTTP to the fixture server in a process of
    its own; no API key is needed.  Each scenario prints its figures against
    its target: mostly η = T*/T, where T* is the same work (rebuilt from the
    run's own trace) on a zero-overhead runtime with the same slots and rate.
    See docs/bench.md.

    \b
    The default set (a few minutes on 2 cores):
      hosted        200 sub-queries, lognormal latency (median 1.2 s), 32 slots,
                    a rate limit announced in response headers   η ≥ 0.97
      local-server  2,000 sub-queries, lognormal (median 0.4 s), 64 slots
                                                                 η ≥ 0.95
      wide-tree     depth 2, 16 child calls at once              η ≥ 0.9
      volley-local  5,000 tasks at 0.4 s, 64 slots, with the journal and without
                                                  η ≥ 0.95, journal ≤ 5 %
      sequential-loop  16 chunks at 0.3 s, 16 slots: a sequential llm_query loop,
                    auto-batched, against llm_query_batched and one call at a time
                                 speedup ≥ 0.8 of batched, fan-out ≤ 0.45 s
    --large adds volley-1M (1,000,000 tasks through `rlm volley -f`: peak
    memory ≤ 300 MiB, time per task linear in N), which takes several minutes.

    \b
    Examples:
      rlm bench                          # the default set
      rlm bench --scenario wide-tree --json
      rlm bench --large --markdown
      rlm bench --micro                  # the machinery's micro scenarios
    """
    # Imported here: the benchmark is never loaded by another command (or by `rlm --help`).
    from rlm.bench.scenarios import DEFAULT, EVERY, LARGE, MICRO, QUICK, by_name

    try:
        chosen = by_name(names) if names else (
            QUICK if quick else MICRO if micro else (*DEFAULT, *(LARGE if large else ())))
    except KeyError as exc:
        known = ", ".join(s.name for s in EVERY)
        click.echo(f"Error: unknown scenario {exc.args[0]}; choose from: {known}", err=True)
        sys.exit(2)
    if list_only:
        for title, group in (("default", DEFAULT), ("--large", LARGE), ("--micro", MICRO),
                             ("--quick", QUICK)):
            click.echo(f"{title}:")
            for s in group:
                click.echo(f"  {s.name:<26} {s.about}")
        return
    _run_and_print(chosen, baseline=not no_baseline, as_json=as_json, markdown=markdown)


def _run_and_print(chosen: tuple[AnyScenario, ...], *, baseline: bool, as_json: bool,
                   markdown: bool) -> None:
    from rich.console import Console

    from rlm.bench.figures import Figures
    from rlm.bench.report import bench_json, markdown_table, render_figures, render_table
    from rlm.cli._progress import stderr_console

    err = stderr_console()  # no hard wrap when redirected, NO_COLOR
    started = time.perf_counter()
    results: list[Figures | ScenarioResult] = []
    for s in chosen:
        if not as_json:
            err.print(f"[dim]running {s.name}: {s.about}[/dim]")
        results.extend(_run_one(s, baseline))
    elapsed = time.perf_counter() - started
    if as_json:
        click.echo(json.dumps(bench_json(results, elapsed_s=elapsed), indent=1))
    elif markdown:
        click.echo(markdown_table(results))
    else:
        # Piped output (a file, CI logs) gets a width that fits every column.
        console = Console() if sys.stdout.isatty() else Console(width=200)
        figures = [r for r in results if isinstance(r, Figures)]
        micro = [r for r in results if not isinstance(r, Figures)]
        if figures:
            render_figures(figures, console)
        if micro:
            render_table(micro, console)
        err.print(f"[dim]{len(results)} runs in {elapsed:.1f} s[/dim]")
    if not all(r.correct for r in results):
        click.echo("Error: a scenario gave a wrong answer; see the met (or ok) column", err=True)
        sys.exit(1)


def _run_one(s: AnyScenario, baseline: bool) -> list[Figures | ScenarioResult]:
    from rlm.bench.large import run_large_volley
    from rlm.bench.loop import loop_figures
    from rlm.bench.run import run_figures, run_scenario
    from rlm.bench.scenarios import DEFAULT, LargeVolleyScenario, LoopScenario, VolleyScenario
    from rlm.bench.volley import run_volley_scenario, volley_figures

    if isinstance(s, LargeVolleyScenario):
        return [run_large_volley(s)]
    if isinstance(s, LoopScenario):
        return [loop_figures(s)]
    if isinstance(s, VolleyScenario):
        return [volley_figures(s)] if s in DEFAULT else list(run_volley_scenario(s))
    return [run_figures(s)] if s in DEFAULT else list(run_scenario(s, baseline=baseline))
