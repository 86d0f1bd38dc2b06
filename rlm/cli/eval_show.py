"""``rlm eval show`` and ``rlm eval compare``: evals read back from the journal, reported.

A report is made from the verdicts the journal holds: ``show`` of an eval still
running reports what is finished, and ``--scorer`` (or ``--judge-model``)
re-scores the stored outputs without running any arm again; the judge's verdicts
are kept in the journal, so showing a judged eval again pays for none.
"""

from __future__ import annotations

import json
import sys
from functools import partial
from typing import Any

import click
import trio

from rlm._config import RunConfig
from rlm.cli._progress import stderr_console
from rlm.cli._settings_cli import command_settings, given_flag, settings_options
from rlm.cli._volley_run import fixture_providers, open_volleys, resumed_fixture, volley_settings
from rlm.errors import RLMError
from rlm.eval.plan import EvalRecord
from rlm.eval.run import Scoring
from rlm.providers.fixture import FixtureOptions
from rlm.volley.journaled import JournaledVolley

__all__ = ["compare_cmd", "print_report", "show_cmd"]

_FORMAT = click.option("--output-format", type=click.Choice(["text", "json", "jsonl"]),
                       default="text", show_default=True,
                       help="stdout: a table, one JSON object, or JSON lines.")


def _fail(exc: RLMError) -> None:
    click.echo(f"Error: {exc}", err=True)
    sys.exit(exc.exit_code)


def print_report(journal: JournaledVolley, eval_id: str, config: RunConfig,
                 fixture: FixtureOptions | None, output_format: str, page_path: str | None, *,
                 scoring: Scoring) -> None:
    """Score eval ``eval_id`` as ``scoring`` says, print its report, write its page."""
    from rlm.eval.render import report_lines, report_text
    from rlm.eval.run import find_eval, report_eval

    record = find_eval(journal, eval_id)
    report = trio.run(partial(report_eval, record, scoring, config=config, journal=journal,
                              providers=fixture_providers(config, fixture)))
    if output_format == "json":
        click.echo(json.dumps(report.to_dict(), indent=2))
    elif output_format == "jsonl":
        for line in report_lines(report):
            click.echo(line)
    else:
        click.echo(report_text(report))
    if page_path is not None:
        from rlm.eval.page import write_eval_page

        written = write_eval_page(report, page_path)
        click.echo(f"page: {written}", err=True)


def _scoring(record: EvalRecord) -> Scoring:
    """The stored scoring, with the flags given now on top (a re-score)."""
    import dataclasses

    from rlm._config import EvalOptions
    from rlm._settings import settings_of
    from rlm.eval.run import read_judge_prompt

    stored = Scoring.stored(record)
    values = command_settings(("eval",), "eval show").scope(settings_of(EvalOptions))
    changes: dict[str, Any] = {}
    if given_flag("scorer"):
        from rlm.eval.scorers import make_scorer

        make_scorer(values["scorer"])  # an unknown one is a usage error, said now
        changes["scorer"] = values["scorer"]
    if given_flag("judge_model"):
        changes["judge_model"] = values["judge_model"]
    if given_flag("judge_prompt"):
        changes["judge_prompt"] = read_judge_prompt(values["judge_prompt"])
    return dataclasses.replace(stored, **changes)


@click.command("show")
@click.argument("ref", metavar="ID|last")
@_FORMAT
@click.option("--page", "page_path", metavar="PATH",
              help="Write the eval's page (one HTML file, no network) to PATH.")
@settings_options("eval show")
def show_cmd(ref: str, output_format: str, page_path: str | None) -> None:
    """Report eval ID (or the latest) from the journal; --scorer re-scores its outputs."""
    from rlm.eval.run import find_eval

    try:
        with open_volleys("eval show", stderr_console(), existing=True) as journal:
            record = find_eval(journal, ref)
            stored = journal.load(record.eval_id)
            config, _ = volley_settings("eval show", stored=stored.settings)
            print_report(journal, record.eval_id, config,
                         resumed_fixture(stored.settings, None), output_format, page_path,
                         scoring=_scoring(record))
    except RLMError as exc:
        _fail(exc)


@click.command("compare")
@click.argument("first", metavar="A")
@click.argument("second", metavar="B")
@click.option("--output-format", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="stdout: a table or one JSON object.")
@settings_options("eval compare")
def compare_cmd(first: str, second: str, output_format: str) -> None:
    """Compare evals A and B (ids, or last) arm by arm: accuracy, the paired change with its
    95 % interval over the items both finished, and cost."""
    from rlm.eval.compare import compare_reports
    from rlm.eval.render import compare_text
    from rlm.eval.run import find_eval, report_eval

    try:
        with open_volleys("eval compare", stderr_console(), existing=True) as journal:
            reports = []
            for ref in (first, second):
                record = find_eval(journal, ref)
                stored = journal.load(record.eval_id)
                config, _ = volley_settings("eval compare", stored=stored.settings)
                fixture = fixture_providers(config, resumed_fixture(stored.settings, None))
                reports.append(trio.run(partial(report_eval, record, Scoring.stored(record),
                                                config=config, journal=journal,
                                                providers=fixture)))
    except RLMError as exc:
        _fail(exc)
    data = compare_reports(*reports)
    click.echo(json.dumps(data, indent=2) if output_format == "json" else compare_text(data))
