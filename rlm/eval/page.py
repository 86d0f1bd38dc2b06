"""An eval's page: one self-contained HTML file, built with ``rlm view``'s page helpers.

The page shows each arm's figures, two plots — accuracy against context size per
arm, and accuracy against mean cost per item — and every item under every arm,
linked to its run in the trace (the ``rlm view`` page of the trace its task's
events went to, written beside that trace, opened at the task's call).  Like
``rlm view``'s, it needs no network: style, script and data are inline.
"""

from __future__ import annotations

import html
import os
from pathlib import Path
from urllib.parse import quote

from rlm.eval.report import Report
from rlm.view.page import assemble, asset, json_for_script, write_html

__all__ = ["render_eval_page", "write_eval_page"]

_OUTPUT_CHARS = 400  # of each output on the page (the trace has all of it)


def render_eval_page(report: Report, links: dict[str, str] | None = None) -> str:
    """The page for ``report``; ``links`` maps a trace file to the page that shows it."""
    data = report.to_dict()
    for item in data["items"]:
        output = item.get("output")
        if isinstance(output, str) and len(output) > _OUTPUT_CHARS:
            item["output"] = output[:_OUTPUT_CHARS] + f"… ({len(output):,} chars)"
        # A task that sent nothing (its context did not fit) has no call in the trace.
        page = (links or {}).get(item.get("trace") or "") if item.get("calls") else None
        item["link"] = f"{page}#call=t{item['task']}" if page else None
    title = f"rlm eval · {data['eval_id']} · {data['dataset']} · {data['status']}"
    parts = {
        "title": html.escape(title),
        "style": asset("view.css") + asset("eval.css"),
        "data": json_for_script(data),
        "blobs": "[]",
        "script": asset("base.js") + "\n" + asset("eval.js"),
    }
    return assemble(asset("eval.html"), parts)


def write_eval_page(report: Report, out: str | os.PathLike[str]) -> Path:
    """Write the page to ``out``, and the ``rlm view`` page of every trace it links to."""
    target = Path(out)
    links = {trace: _link(page, target) for trace, page in _trace_pages(report).items()}
    return write_html(render_eval_page(report, links), target)


def _trace_pages(report: Report) -> dict[str, Path]:
    """Each trace the report's items ran in, and its ``rlm view`` page (written now)."""
    from rlm._trace import half_written
    from rlm.errors import UsageError
    from rlm.view import load_trace, write_page

    pages: dict[str, Path] = {}
    for trace in sorted({o.trace for o in report.items if o.trace}):
        source = Path(trace)
        if not source.exists():  # a killed process leaves its trace half-written
            source = half_written(source) or source
        if not source.exists():
            continue
        page = Path(trace).with_suffix(".html")
        try:
            write_page(load_trace(source), page)
        except UsageError:
            continue  # a trace that cannot be read or shown: its items have no link
        pages[trace] = page
    return pages


def _link(page: Path, target: Path) -> str:
    relative = os.path.relpath(page.resolve(), target.resolve().parent)
    return quote(Path(relative).as_posix())

