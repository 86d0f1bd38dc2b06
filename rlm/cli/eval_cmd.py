"""``rlm eval``: does the recursive strategy pay on my data, with my model, within my budget?

The command parses, calls the eval library (:mod:`rlm.eval`) and prints: the dataset
and arms become one journaled volley (recorded before anything runs, resumable with
``--resume``), this process works on it, then the report is printed.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import click
import trio

from rlm.cli._flags import usage_message
from rlm.cli._history import RunKeeper
from rlm.cli._progress import stderr_console
from rlm.cli._settings_cli import command_settings, current_profile, settings_options
from rlm.cli._terminal import say
from rlm.cli._volley_input import go_ahead
from rlm.cli._volley_run import (
    drive,
    fixture_providers,
    open_volleys,
    require_key,
    resumed_fixture,
    volley_settings,
)
from rlm.cli.eval_show import compare_cmd, print_report, show_cmd
from rlm.cli.volley_cmd import fixture_latency_option
from rlm.cli.volley_group import DefaultCommandGroup
from rlm.errors import RLMError, UsageError
from rlm.history.record import volley_summary
from rlm.volley.journaled import JournaledVolley
from rlm.volley.records import VolleyResult

if TYPE_CHECKING:
    from rlm._events import Event

__all__ = ["eval_group"]

_SUBCOMMANDS = """
\b
Subcommands:
  rlm eval show ID|last        an eval's report again (--scorer re-scores, --page)
  rlm eval compare A B         two evals side by side, arm by arm
"""


@click.command("run")
@click.argument("dataset", required=False, metavar="DATASET")
@click.option("--arm", "arm_specs", multiple=True, metavar="NAME=SPEC",
              help="An arm: rlm, direct, NAME=rlm|direct|profile:NAME[,key=value...] "
              "(repeatable; default: rlm and direct).")
@click.option("--resume", metavar="ID|last", help="Work on eval ID (or the latest) until "
              "every item has its verdict, then report it.")
@click.option("--rerun-failed", is_flag=True, help="With --resume: run failed items again.")
@click.option("--estimate", "estimate_only", is_flag=True,
              help="Print the estimate (tokens, cost, time) and exit; nothing is sent.")
@click.option("-y", "--yes", is_flag=True, help="Do not ask before a large eval.")
@click.option("--output-format", type=click.Choice(["text", "json", "jsonl"]), default="text",
              show_default=True, help="stdout: a table, one JSON object, or JSON lines.")
@click.option("--page", "page_path", metavar="PATH",
              help="Write the eval's page (one HTML file, no network) to PATH.")
@click.option("--trace", "trace_path", metavar="PATH", help="Write every event as JSONL to PATH.")
@fixture_latency_option
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
@click.option("--history/--no-history", default=True, show_default=True,
              help="Keep this eval's trace in the run history (`rlm runs`); its page links "
              "each item to it.")
@settings_options("eval")
def eval_run(dataset: str | None, arm_specs: tuple[str, ...], resume: str | None,
             rerun_failed: bool, estimate_only: bool, yes: bool, output_format: str,
             page_path: str | None, trace_path: str | None, fixture_latency: float | None,
             quiet: bool, history: bool) -> None:
    """Run every item of DATASET under every arm, score it, and report per arm and tier.

    DATASET is a JSONL file (id, question, context or context_path, answer or
    answers, scorer) or a built-in generator: needle, oolong or multidoc, made
    at each of --tiers (characters) with --per-tier items from --seed.  An arm
    is `rlm` (an RLM call over the item's context), `direct` (one completion
    with the whole context; an item longer than the model's window fails, never
    cut) or settings of its own; see docs/eval.md.  The eval is one journaled
    volley: --resume ID|last after any stop runs only what is not done.

    \b
    Examples:
      rlm eval needle --provider fixture --tiers 2k,20k,200k -y
      rlm eval needle --provider fixture --arm rlm --arm d2=max_depth=2 --page eval.html
      RLM_API_KEY=... rlm eval data.jsonl --model gpt-4.1-mini --max-cost 5 \\
          --arm rlm --arm direct --arm nano=rlm,sub_model=gpt-4.1-nano,max_cost=1

    \b
    Exit codes: 0 every item has its verdict (failed items are data, not errors) ·
    2 usage error · 3 a budget or limit stopped it · 4 credentials refused · 130 interrupted.
    """
    console = stderr_console()
    keeper = RunKeeper(keep=history, view=False, trace_path=trace_path, query="")
    try:
        if resume is not None and (dataset or arm_specs):
            raise UsageError("--resume works on the stored eval: give no DATASET or --arm "
                             "(a new dataset is a new eval)")
        record = None
        if resume is None:
            # Read and checked before the journal is opened: a refused command leaves no
            # journal file behind.
            record = _created(dataset, arm_specs, fixture_latency,
                              partial(go_ahead, only=estimate_only, yes=yes, quiet=quiet))
            if record is None:  # the estimate was all that was asked for, or declined
                return
        with open_volleys("eval", console, existing=resume is not None) as journal:
            if record is not None:
                plan = record(journal)
            else:
                assert resume is not None
                plan = _resumed(journal, resume, rerun_failed, fixture_latency)
            result = _work(journal, plan, keeper, quiet, console)
            assert journal.volley is not None
            calls = journal.volley.ledger.spent.calls
            print_report(journal, plan["eval_id"], plan["config"], plan["fixture"],
                         output_format, page_path, scoring=plan["scoring"])
    except RLMError as exc:
        keeper.close(None, str(exc), page=False)
        message = usage_message(exc, eval_run) if isinstance(exc, UsageError) else str(exc)
        click.echo(f"Error: {message}", err=True)
        sys.exit(exc.exit_code)
    keeper.close(None, summary=volley_summary(result, calls))
    # Failed items are results, not errors; a stop (budget, credentials, Ctrl-C) is one.
    sys.exit(0 if result.status in ("succeeded", "failed") else result.exit_code)


def _eval_options() -> Any:
    from rlm._config import EvalOptions
    from rlm._settings import settings_of

    resolved = command_settings(("eval",), "eval")
    return EvalOptions(**resolved.scope(settings_of(EvalOptions))).validate()


def _created(dataset: str | None, arm_specs: tuple[str, ...], fixture_latency: float | None,
             ask: Callable[..., bool]) -> Callable[[JournaledVolley], dict[str, Any]] | None:
    """A new eval from the flags, read and checked (None: the estimate was all that was
    asked for, or declined); what it returns records it in a journal."""
    from rlm._profiles import load_profile
    from rlm._run.assembly import load_prices
    from rlm.eval import load_dataset
    from rlm.eval.arms import default_arms, parse_arm
    from rlm.eval.estimate import estimate_eval
    from rlm.eval.plan import eval_volley_options, plan_eval
    from rlm.eval.run import Scoring, create_eval, read_judge_prompt
    from rlm.eval.scorers import make_scorer
    from rlm.providers.fixture import FixtureOptions

    if dataset is None:
        raise UsageError("give a DATASET (a JSONL file, or needle, oolong or multidoc), or "
                         "--resume ID")
    config, options = volley_settings("eval")
    own = _eval_options()
    values = {**dataclasses.asdict(config), **dataclasses.asdict(options)}
    profile = current_profile()
    arms = [parse_arm(spec, eval_values=values,
                      profiles=lambda name: load_profile(name) if name != profile.name
                      else profile) for spec in arm_specs] or default_arms()
    items = load_dataset(dataset, tiers=own.tiers, per_tier=own.per_tier, seed=own.seed,
                         max_context_bytes=config.max_context_bytes)
    for spec in {own.scorer, *(i.scorer for i in items if i.scorer)}:
        make_scorer(spec)  # an unknown scorer is said now, not after paying for the answers
    prompt = read_judge_prompt(own.judge_prompt)
    prices = load_prices(config)
    plan = plan_eval(items, arms, config=config, prices=prices, dataset=dataset,
                     options=own, judge_prompt=prompt)
    fixture = FixtureOptions(sub_latency=fixture_latency or 0.0)
    latency = fixture.sub_latency if config.provider == "fixture" else 2.0
    if not ask(estimate_eval(plan.tasks, plan.documents, config, prices, latency=latency),
               billed=config.provider != "fixture"):
        return None
    require_key(config)
    options = eval_volley_options(options, arms)

    def record(journal: JournaledVolley) -> dict[str, Any]:
        eval_id = create_eval(journal, plan, config, options, fixture)
        return {"eval_id": eval_id, "stored": journal.load(eval_id), "config": config,
                "options": options, "fixture": fixture, "scoring": Scoring.of(own, prompt)}

    return record


def _resumed(journal: JournaledVolley, ref: str, rerun_failed: bool,
             fixture_latency: float | None) -> dict[str, Any]:
    """An eval read back from the journal; its failed items run again if asked."""
    from rlm.eval.plan import EvalRecord
    from rlm.eval.run import Scoring, find_eval

    record = find_eval(journal, ref)
    stored = journal.load(record.eval_id)
    config, options = volley_settings("eval", stored=stored.settings)
    require_key(config)
    if rerun_failed:
        stored = journal.reopen_failed(stored)
    return {"eval_id": record.eval_id, "stored": stored, "config": config, "options": options,
            "fixture": resumed_fixture(stored.settings, fixture_latency),
            "scoring": Scoring.stored(EvalRecord.from_stored(stored))}


def _work(journal: JournaledVolley, plan: dict[str, Any], keeper: RunKeeper, quiet: bool,
          console: Any) -> VolleyResult:
    """Work on the eval here until every item has its verdict (or a stop)."""
    from rlm.eval.plan import EvalRecord
    from rlm.volley.events import TaskFinished
    from rlm.volley.progress import LiveStatus, ProgressLines

    stored, config = plan["stored"], plan["config"]
    record = EvalRecord.from_stored(stored)
    titles = {index: f"{item['id']} · {arm.name}" for item in record.items
              for arm, index in zip(record.arms, item["tasks"], strict=True)}
    progress = ProgressLines(len(stored.tasks), console, done=len(stored.earlier))

    def labelled(event: Event) -> None:  # a task is shown as its item and arm
        if isinstance(event, TaskFinished):
            event = dataclasses.replace(event, title=titles.get(event.index, event.title))
        progress(event)

    sinks = [] if quiet else [labelled]
    trace_path = keeper.open(config, kind="eval", query=f"eval {record.dataset}")
    main = partial(drive, status=None if quiet or not console.is_terminal
                   else LiveStatus(console))
    result = trio.run(partial(
        journal.work, stored, config, plan["options"], main=main, sinks=sinks,
        trace_path=trace_path, providers=fixture_providers(config, plan["fixture"]),
    ))
    if result.status == "interrupted":  # what the person did, not an error
        say(f"interrupted: the report counts what finished; `rlm eval --resume "
            f"{record.eval_id}` runs the rest (nothing finished is paid for again)")
    elif result.error and result.status not in ("succeeded", "failed"):
        click.echo(f"Error: {result.error}", err=True)
        s = result.summary
        left = s.total_tasks - s.succeeded - s.failed
        if left and result.status == "budget_exceeded":
            say(f"stopped with {left:,} of {s.total_tasks:,} tasks left: `rlm eval --resume "
                f"{record.eval_id}` with a larger budget runs them (nothing finished is "
                "paid for again)")
    return result


eval_group = DefaultCommandGroup(eval_run, name="eval", listing=_SUBCOMMANDS)
eval_group.short_help = "Does the RLM pay on your data? Arms × items, scored, with intervals."
for _command in (show_cmd, compare_cmd):
    eval_group.add_command(_command)
