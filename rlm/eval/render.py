"""A report as text (the table ``rlm eval`` prints), as JSON lines, and a comparison as text."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from rlm.eval.report import Report

__all__ = ["compare_text", "report_lines", "report_text"]


def _usd(value: float | None) -> str:
    if value is None:
        return "—"
    if value == 0:
        return "$0"
    return f"${value:.4f}" if value < 1 else f"${value:,.2f}"


def _share(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _interval(ci: Sequence[float | None]) -> str:
    low, high = ci
    return "—" if low is None or high is None else f"[{low:.2f}, {high:.2f}]"


def _secs(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def _number(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            for row in rows]


def report_text(report: Report) -> str:
    """The report as a person reads it: per arm, then accuracy by tier."""
    head = report.head
    arms = report.arms
    items = arms[0]["items"] if arms else 0
    status = "complete" if report.complete else "incomplete: " + ", ".join(
        f"{arm['name']} {arm['pending']} pending" for arm in arms if arm["pending"])
    lines = [f"eval {head['eval_id']} · {head['dataset']} · {_count(items, 'item')} × "
             f"{_count(len(arms), 'arm')} · "
             f"{head.get('provider')} {head.get('model')} · {status}", ""]
    rows = [["arm", "accuracy", "95% CI", "cost/item", "cost", "tokens", "calls/item",
             "p50", "p95", "failures"]]
    for arm in arms:
        tokens = arm["tokens_input"] + arm["tokens_output"]
        failures = ", ".join(f"{kind} {n}" for kind, n in arm["failures"].items()) or "—"
        rows.append([arm["name"], _share(arm["accuracy"]), _interval(arm["ci95"]),
                     _usd(arm["cost_mean"]), _usd(arm["cost_total"]), f"{tokens:,}",
                     _number(arm["calls_mean"]), _secs(arm["latency_p50"]),
                     _secs(arm["latency_p95"]), failures])
    lines += _table(rows)
    if len(report.tiers) > 1 or report.tiers != [""]:
        lines += ["", "accuracy by context size (characters)"]
        tier_rows = [["arm", *report.tiers]]
        for arm in arms:
            tier_rows.append([arm["name"], *(_share(t["accuracy"]) for t in arm["tiers"])])
        lines += _table(tier_rows)
    lines += ["", "arms: " + "; ".join(f"{arm['name']} = {arm['arm']}" for arm in arms)]
    lines.append(_scoring_line(head["scoring"]))
    return "\n".join(lines)


def _scoring_line(scoring: dict[str, Any]) -> str:
    line = f"scorer: {scoring['scorer']}"
    judge = scoring.get("judge")
    if judge:
        line += (f" · judge {judge['model']}: {judge['verdicts']} verdicts, {judge['calls']} "
                 f"sent, {judge['cached']} from the cache, {_usd(judge['cost'])}")
    return line


def report_lines(report: Report) -> Iterator[str]:
    """JSON lines: the eval, then one line per item under each arm, then one per arm."""
    data = report.to_dict()
    head = {k: v for k, v in data.items() if k not in ("arms", "items")}
    yield json.dumps({"type": "eval", **head})
    for outcome in data["items"]:
        yield json.dumps({"type": "item", **outcome})
    for arm in data["arms"]:
        yield json.dumps({"type": "arm", **arm})


def compare_text(data: dict[str, Any]) -> str:
    """``rlm eval compare`` as text: per arm, each eval's accuracy and cost, and the change."""
    lines = [f"eval {data['a']} (A) · eval {data['b']} (B)", ""]
    rows = [["arm", "A accuracy", "B accuracy", "B − A", "95% CI", "items", "A cost/item",
             "B cost/item"]]
    for row in data["arms"]:
        a, b = row["a"] or {}, row["b"] or {}
        delta = row.get("accuracy_delta")
        rows.append([row["arm"], _share(a.get("accuracy")), _share(b.get("accuracy")),
                     "—" if delta is None else f"{delta:+.3f}",
                     _interval(row.get("delta_ci95", [None, None])),
                     str(row.get("paired_items", "—")), _usd(a.get("cost_mean")),
                     _usd(b.get("cost_mean"))])
    lines += _table(rows)
    return "\n".join(lines)
