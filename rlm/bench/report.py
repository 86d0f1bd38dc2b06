"""``rlm bench`` output: one JSON shape for machines, a rich table for people.

The default set prints one row per scenario: its figures against their
targets (:class:`~rlm.bench.figures.Figures`).  ``--micro`` and ``--quick``
print the machinery's table: T against T* and where the difference went.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from rlm.bench.figures import Figures
from rlm.bench.run import ScenarioResult

__all__ = [
    "COLUMNS",
    "FIGURE_COLUMNS",
    "bench_json",
    "figure_rows",
    "machine",
    "markdown_table",
    "render_figures",
    "render_table",
    "table_rows",
]

FIGURE_COLUMNS = ("scenario", "N", "C", "T s", "T* s", "figures", "targets", "met", "also")

COLUMNS = ("scenario", "via", "N", "C", "L s", "rpm", "T s", "T* s", "η", "η to return",
           "ovh/sub ms", "speedup", "subq/s", "mem MiB", "ok")


def machine() -> dict[str, Any]:
    """Where the numbers came from (the load average as the bench ended)."""
    return {"python": platform.python_version(), "platform": platform.platform(),
            "cpus": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()]}


def figure_rows(results: Sequence[Figures]) -> list[list[str]]:
    """The default set's table as text, one row per scenario, in ``FIGURE_COLUMNS`` order."""
    rows = []
    for r in results:
        met = {True: "✓", False: "✗", None: "—"}[r.met]
        if not r.correct:
            met += " WRONG"
        rows.append([
            r.name, f"{r.n:,}", str(r.c), _num(r.t, ".2f"), _num(r.t_star, ".2f"),
            " · ".join(c.shown for c in r.checks),
            " · ".join(c.target for c in r.checks if c.target) or "—", met,
            " · ".join(r.notes),
        ])
    return rows


def render_figures(results: Sequence[Figures], console: Console) -> None:
    table = Table(title="rlm bench: realistic workloads against their physical limit",
                  title_justify="left")
    for i, column in enumerate(FIGURE_COLUMNS):
        table.add_column(column, justify="right" if 0 < i < 5 else "left", no_wrap=i == 0)
    for row in figure_rows(results):
        table.add_row(*row)
    console.print(table)
    console.print(
        "η = T*/T: T* is the same work on a zero-overhead runtime with the same slots and "
        "rate, rebuilt from the run's own trace (docs/bench.md) · T ends at the answer "
        "(a volley: its last verdict)", style="dim")


def _num(value: float | None, fmt: str) -> str:
    return "—" if value is None else format(value, fmt)


def table_rows(results: Sequence[ScenarioResult]) -> list[list[str]]:
    """The table's cells as text, one row per result, in ``COLUMNS`` order."""
    rows = []
    for r in results:
        verdict = "ok" if r.correct else "WRONG"
        if r.met is not None:
            verdict += " ✓" if r.met else " ✗ target"
        # η to return carries its own judgement: a target met at the answer can be missed
        # once the teardown an API caller waits for is counted.
        eta_return = _num(r.eta_return, ".3f") + (" ✗" if r.met_return is False else "")
        mem = r.peak_mib if r.peak_mib is not None else None
        rows.append([
            r.name, "http" if r.transport == "http" else "in-proc", str(r.n), str(r.c),
            r.latency, _num(r.rpm, "g"), f"{r.t:.3f}", f"{r.t_star:.3f}", _num(r.eta, ".3f"),
            eta_return,
            f"{r.overhead_ms:.2f}", _num(r.speedup, ".2f") + ("×" if r.speedup else ""),
            f"{r.rate:,.0f}", _num(mem, ".1f"), verdict,
        ])
    return rows


def render_table(results: Sequence[ScenarioResult], console: Console) -> None:
    table = Table(title="rlm bench: measured makespan T vs physical limit T*", title_justify="left")
    for i, column in enumerate(COLUMNS):
        table.add_column(column, justify="left" if i < 2 else "right", no_wrap=i == 0)
    for row in table_rows(results):
        table.add_row(*row)
    console.print(table)
    console.print(
        "η = T*/T (T* replays the run's own trace on a zero-overhead runtime: docs/bench.md; "
        "T ends at the answer, as `rlm run` prints it) · "
        "η to return = T*/(T + teardown_s) (until acompletion returns, sandboxes reaped; "
        "✗ = misses the target) · "
        "ovh/sub = (T − T*)/N · speedup = T of the sequential llm_query loop / T · "
        "mem = peak Python heap (tracemalloc)", style="dim")


def markdown_table(results: Sequence[ScenarioResult | Figures]) -> str:
    """The tables in GitHub markdown (for docs/bench.md): the default set's, then the micro one."""
    tables = []
    figures = [r for r in results if isinstance(r, Figures)]
    micro = [r for r in results if isinstance(r, ScenarioResult)]
    for columns, rows in ((FIGURE_COLUMNS, figure_rows(figures)), (COLUMNS, table_rows(micro))):
        if rows:
            lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
            lines += ["| " + " | ".join(row) + " |" for row in rows]
            tables.append("\n".join(lines))
    return "\n\n".join(tables)


def bench_json(results: Sequence[ScenarioResult | Figures], *, elapsed_s: float
               ) -> dict[str, Any]:
    """The ``--json`` document: the default set's scenarios, and micro ones if any ran."""
    figures = [r for r in results if isinstance(r, Figures)]
    micro = [r for r in results if isinstance(r, ScenarioResult)]
    document: dict[str, Any] = {
        "machine": machine(),
        "elapsed_s": round(elapsed_s, 3),
        "scenarios": [r.as_json() for r in figures],
        "all_correct": all(r.correct for r in results),
        "targets_met": all(r.met is not False for r in figures),
    }
    if micro:
        document["micro"] = [r.as_json() for r in micro]
    return document
