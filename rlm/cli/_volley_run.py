"""What the volley commands share: their settings, their journal, and how a volley runs
at a terminal (signals, the live status line, streamed text).

The durable volley itself is library code (:mod:`rlm.volley.journaled`); this module
turns flags into its arguments and its hooks into lines on stderr.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click
import trio
from rich.console import Console

from rlm._config import RunConfig, VolleyOptions, check_sub_endpoint
from rlm._settings import Layer, api_key_from_environment, settings_of
from rlm.cli._flags import model_or_blank
from rlm.cli._settings_cli import command_settings
from rlm.cli._signals import watch_stop_signals
from rlm.cli._stale_lines import lost_line, recovery_lines
from rlm.errors import UsageError
from rlm.journal import Recovered
from rlm.journal.volleys import StoredVolley, stored_fixture, stored_layer
from rlm.providers.base import Lane, Provider
from rlm.providers.fixture import FixtureOptions, FixtureProvider
from rlm.streaming import StreamMerger, drain
from rlm.volley.journaled import JournaledVolley, JournalHooks
from rlm.volley.progress import LiveStatus
from rlm.volley.records import VolleyResult

if TYPE_CHECKING:
    from rlm._events import Event
    from rlm._run.tools import ToolBox
    from rlm.volley.engine import VolleyRun

__all__ = [
    "Plan",
    "drive",
    "fixture_providers",
    "host_tools",
    "open_volleys",
    "require_key",
    "resumed_fixture",
    "volley_options",
    "volley_settings",
]


@dataclass(frozen=True)
class Plan:
    """A volley ready to work on: as the journal holds it, and how to run it now."""

    stored: StoredVolley
    config: RunConfig
    options: VolleyOptions
    fixture: FixtureOptions | None = None
    tools: ToolBox | None = None

    def engine(self) -> dict[str, Any]:
        """The Volley keyword arguments the plan decides (its providers and tools)."""
        return {"providers": fixture_providers(self.config, self.fixture), "tools": self.tools}


def volley_options(command: str) -> VolleyOptions:
    """``command``'s volley options (flag > environment > profile > config > default)."""
    resolved = command_settings(("volley",), command)
    return VolleyOptions(**resolved.scope(settings_of(VolleyOptions))).validate()


def open_volleys(command: str, console: Console, *, existing: bool) -> JournaledVolley:
    """The journal ``command`` names (``--journal``, RLM_JOURNAL, a profile, the default
    in the state directory), telling what happens in it on ``console``."""
    options = volley_options(command)

    def show(line: str) -> None:
        console.print(line, markup=False, highlight=False, soft_wrap=True)

    def recovered(found: list[Recovered]) -> None:
        for line in recovery_lines(found):  # one line per holder, not per task
            show(line)

    hooks = JournalHooks(
        recovered=recovered,
        lost=lambda volley_id, tasks, late: show(lost_line(volley_id, tasks, late)),
        waiting=lambda message: click.echo(f"note: {message}", err=True),
        retrying_live=lambda volley_id, count: show(
            f"volley {volley_id}: the provider batches failed {count} task(s); running them "
            "again as live requests (--retry-live)"
        ),
    )
    return JournaledVolley(options.journal, existing=existing,
                           stale_timeout=options.stale_timeout, hooks=hooks)


def volley_settings(
    command: str, *, stored: Mapping[str, Any] | None = None, file_cap: int | None = None,
    task_file: str = "the task file",
) -> tuple[RunConfig, VolleyOptions]:
    """The run settings and volley options of ``command``: a new volley's (``file_cap``, the
    ``max_concurrent`` of ``task_file``, between the environment and the profile), or, with
    ``stored``, a volley read back from its journal (flags and the profile on top of what
    it stored).

    The key comes from this process's environment; a volley reserves no root permits.
    """
    layers: list[Layer] = [] if file_cap is None else [({"max_concurrent": file_cap}, task_file)]
    resolved = command_settings(
        ("run", "volley"), command, before_profile=layers,
        stored=None if stored is None else (stored_layer(stored), "stored with the volley"),
    )
    run = resolved.scope(settings_of(RunConfig))
    if resolved.sources["model"] == "default":
        run["model"] = model_or_blank(run["provider"], None)
    run["root_permits"] = 0
    config = RunConfig(**run, api_key=api_key_from_environment(run["provider"]))
    options = VolleyOptions(**resolved.scope(settings_of(VolleyOptions)))
    # No model, a bad URL: said before anything runs or is stored.
    config, options = config.validate().validate_endpoint(), options.validate()
    check_sub_endpoint(config, options)
    return config, options


def fixture_providers(
    config: RunConfig, fixture: FixtureOptions | None
) -> dict[Lane, Provider] | None:
    """The fixture model at the volley's pace, when it is the volley's provider (None:
    the providers ``config`` names are opened as usual)."""
    if config.over_http:  # not the fixture, or a real sub-model: opened as usual
        return None
    model = FixtureProvider.paced(fixture)
    return {"root": model, "sub": model}


def resumed_fixture(stored: Mapping[str, Any], latency: float | None) -> FixtureOptions | None:
    """The fixture's stored pace, with a ``--fixture-latency`` given now on top."""
    fixture = stored_fixture(stored)
    if latency is None:
        return fixture
    return dataclasses.replace(fixture or FixtureOptions(), sub_latency=latency)


def host_tools(specs: tuple[str, ...], options: VolleyOptions) -> ToolBox | None:
    """The ``--tools`` functions for a volley's ``--rlm`` tasks (None without any).

    Not kept in the journal (a function is not data): a resumed volley or another
    worker is given them again.
    """
    if not specs:
        return None
    if options.mode != "rlm":
        raise UsageError(
            "--tools needs --rlm: only a task that is a whole RLM call runs code that can "
            "call a tool"
        )
    from rlm._run.tools import ToolBox, load_tool

    return ToolBox(load_tool(spec) for spec in specs)


def require_key(config: RunConfig, options: VolleyOptions | None = None) -> None:
    """A hosted API and no key: stop before anything is sent (exit 4), as `rlm run` does.
    (With ``options`` sending through a batch service, a provider that has none is
    refused too, a usage error.)

    Without it every task would send its request and fail on its own (a 401, or
    no network), instead of one line naming the variables to set.
    """
    if options is not None and options.batch_api:
        from rlm.providers.open import check_batch_service

        check_batch_service(config)
    if config.api_key or not config.over_http:
        return
    from rlm.providers.keys import missing_key_message  # httpx: not for fixture volleys

    problem = missing_key_message(config)
    if problem:
        click.echo(f"Error: {problem}", err=True)
        sys.exit(4)


async def drive(run: VolleyRun, *, status: LiveStatus | None = None,
                merger: StreamMerger | None = None,
                on_event: Callable[[Event], None] | None = None) -> VolleyResult:
    """Run ``run`` at a terminal: Ctrl-C and SIGTERM stop it (a second one exits at
    once), the live status line ``status`` under it (a live volley's), and with
    ``merger`` every streamed event handed to ``on_event`` as it comes."""
    from rlm.volley.engine import Volley

    async with trio.open_nursery() as nursery:
        # Ctrl-C, SIGTERM, SIGHUP: stop, give unfinished claims back, print what completed.
        nursery.start_soon(watch_stop_signals, run.interrupt, run.kill_sandboxes)
        if status is not None and isinstance(run, Volley):
            nursery.start_soon(status.run, run)
        try:
            if merger is None:
                return await run.run()
            async with trio.open_nursery() as consumer:  # --stream: drain every event
                consumer.start_soon(drain, merger, on_event or (lambda event: None))
                try:
                    return await run.run()
                finally:
                    merger.close()
        finally:
            nursery.cancel_scope.cancel()
