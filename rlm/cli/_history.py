"""``rlm run``'s side of the run history and of ``--view``."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import click

from rlm._api import RLM
from rlm._config import RunConfig
from rlm._result import RunResult
from rlm._symbols import symbol
from rlm.errors import RLMError, UsageError
from rlm.history import RunEntry, RunHistory, history_enabled, summary_of
from rlm.history.record import keep_trace

__all__ = ["RunKeeper", "volley_label"]


class RunKeeper:
    """Keeps one run in the history and writes its page (``--view``) when it ends.

    ``attach`` is called once the run's settings are valid (a usage error
    leaves no entry behind); ``close`` once the run is over, whatever the
    outcome, after the trace file is in place.
    """

    def __init__(self, *, keep: bool, view: bool, trace_path: str | None, query: str) -> None:
        self.keep = history_enabled(keep)
        self.view = view
        self.user_trace = str(Path(trace_path).resolve()) if trace_path else None
        self.query = query
        self.entry: RunEntry | None = None
        self.history: RunHistory | None = None
        self.meta = False  # --trace-content meta: the history keeps no answer either

    def attach(self, model: RLM) -> None:
        """Open the run's history entry; its trace goes there unless --trace says elsewhere."""
        trace = self.open(model.config)
        if model.trace_path is None:
            model.trace_path = trace

    def open(self, config: RunConfig, *, kind: str = "run",
             query: str | None = None) -> str | None:
        """Open the history entry of a run (or volley); the trace path it should write."""
        self.query = query if query is not None else self.query
        self.meta = config.trace_content == "meta"
        if self.view and self.user_trace is None and not self.keep:
            raise UsageError("--view writes the page next to the trace: pass --trace PATH, "
                             "or keep the run history on")
        if not self.keep:
            return self.user_trace
        self.history = RunHistory()
        self.entry = self.history.begin({
            "kind": kind, "query": self.query[:500], "model": config.model,
            "sub_model": config.effective_sub_model, "provider": config.provider,
            "max_depth": config.max_depth, "user_trace": self.user_trace})
        return self.user_trace or str(self.entry.trace_path)

    def close(self, result: RunResult | None, error: str | None = None, *,
              page: bool = True, summary: dict[str, Any] | None = None) -> None:
        """Record how the run ended; write the page if asked.  Never hides the run's outcome.

        ``summary`` replaces the one built from ``result`` (a volley brings its own).
        """
        if self.entry is not None and self.history is not None:
            try:
                self._record(self.entry, self.history, result, error, summary)
            except OSError as exc:
                click.echo(f"note: the run history could not be updated: {exc}", err=True)
        if self.view and page:
            self._write_page()

    def _record(self, entry: RunEntry, history: RunHistory, result: RunResult | None,
                error: str | None, ended: dict[str, Any] | None) -> None:
        summary = entry.summary()
        summary.pop("trace", None)
        summary.update(status="error", error=error, pid=None)
        if result is not None:
            summary.update(summary_of(result))
        if ended is not None:
            summary.update(ended)
        if self.meta:  # the answer comes from the input the user chose not to record
            summary["answer"] = None
        if self.user_trace and Path(self.user_trace).exists():
            keep_trace(Path(self.user_trace), entry.trace_path)
        entry.write_summary(summary)
        history.prune(keep=entry)

    def _write_page(self) -> None:
        from rlm.view import load_trace, write_page  # only when --view asks for it

        trace = Path(self.user_trace) if self.user_trace else (
            self.entry.trace_path if self.entry is not None else None)
        if trace is None or not trace.exists():
            click.echo("note: no trace was written, so there is no page to write", err=True)
            return
        try:
            page = write_page(load_trace(trace), trace.with_suffix(".html"))
        except RLMError as exc:
            click.echo(f"note: the page could not be written: {exc}", err=True)
            return
        click.echo(f"page: {page}  (open it in a browser; `rlm view --help`)", err=True)


def volley_label(prompts: Iterable[str]) -> str:
    """A volley's line in the history: its first three prompts (and a mark when more)."""
    first = list(itertools.islice(prompts, 4))
    sep = f" {symbol('sep')} "
    return sep.join(first[:3]) + (f"{sep}{symbol('more')}" if len(first) > 3 else "")
