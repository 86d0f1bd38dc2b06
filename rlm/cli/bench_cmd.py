"""``rlm bench``: speedup of the runtime measured against the physical limit."""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from rlm.bench.run import ScenarioResult

__all__ = ["bench"]


@click.command("bench")
@click.option("--scenario", "names", multiple=True, metavar="NAME",
              help="Run only this scenario (repeatable); --list shows the names.")
@click.option("--quick", is_flag=True, help="A fast smoke set (a few seconds) instead.")
@click.option("--no-baseline", is_flag=True,
              help="Skip the sequential llm_query runs (no speedup column; much faster).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead.")
@click.option("--markdown", is_flag=True, help="Print the table as GitHub markdown.")
@click.option("--list", "list_only", is_flag=True, help="List the scenarios and exit.")
def bench(names: tuple[str, ...], quick: bool, no_baseline: bool, as_json: bool,
          markdown: bool, list_only: bool) -> None:
    """Run fixture scenarios and compare each makespan T with its physical limit T*.

    Everything runs offline on the scripted fixture model with simulated
    latency, in-process and over loopback HTTP; no API key is needed.  T* is
    the same work (from the run's own trace) on a zero-overhead runtime with the
    same permits and rate; η = T*/T.  See docs/bench.md.

    \b
    Examples:
      rlm bench                      # the default set (about 1.5 minutes)
      rlm bench --quick              # a smoke set
      rlm bench --scenario batched-32 --json
    """
    # Imported here: the benchmark is never loaded by another command (or by `rlm --help`).
    from rich.console import Console

    from rlm.bench.report import bench_json, markdown_table, render_table
    from rlm.bench.run import run_scenario
    from rlm.bench.scenarios import DEFAULT, QUICK, VolleyScenario, by_name
    from rlm.bench.volley import run_volley_scenario
    from rlm.cli._progress import stderr_console

    try:
        scenarios = by_name(names) if names else (QUICK if quick else DEFAULT)
    except KeyError as exc:
        known = ", ".join(s.name for s in (*DEFAULT, *QUICK))
        click.echo(f"Error: unknown scenario {exc.args[0]}; choose from: {known}", err=True)
        sys.exit(2)
    if list_only:
        for s in (*DEFAULT, *QUICK):
            click.echo(f"{s.name:<20} {s.about}")
        return
    err = stderr_console()  # no hard wrap when redirected, NO_COLOR
    started = time.perf_counter()
    results: list[ScenarioResult] = []
    for s in scenarios:
        if not as_json:
            err.print(f"[dim]running {s.name}: {s.about}[/dim]")
        if isinstance(s, VolleyScenario):
            results.extend(run_volley_scenario(s))
        else:
            results.extend(run_scenario(s, baseline=not no_baseline))
    elapsed = time.perf_counter() - started
    if as_json:
        click.echo(json.dumps(bench_json(results, elapsed_s=elapsed), indent=1))
    elif markdown:
        click.echo(markdown_table(results))
    else:
        # Piped output (a file, CI logs) gets a width that fits every column.
        render_table(results, Console() if sys.stdout.isatty() else Console(width=150))
        err.print(f"[dim]{len(results)} runs in {elapsed:.1f} s[/dim]")
    if not all(r.correct for r in results):
        click.echo("Error: a scenario gave a wrong answer; see the ok column", err=True)
        sys.exit(1)
