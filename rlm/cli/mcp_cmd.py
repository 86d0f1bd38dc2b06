"""``rlm mcp``: serve rlm to coding agents over the Model Context Protocol (stdio).

The command parses and checks what ``rlm run`` checks before it reads anything
(settings, the key, the isolation asked for, the roots), then serves
(:mod:`rlm.cli._mcp_server`).  The MCP SDK is the optional extra ``rlm[mcp]``; it is
imported only here, once the command runs.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import TYPE_CHECKING

import click

from rlm._settings import api_key_from_environment, settings_of
from rlm.cli._errors import fail
from rlm.cli._flags import model_or_blank, usage_message
from rlm.cli._settings_cli import command_settings, settings_options
from rlm.errors import UsageError

if TYPE_CHECKING:
    from rlm.cli._mcp_calls import ServerSetup

__all__ = ["mcp"]


@click.command()
@click.option("--root", "roots", multiple=True, metavar="DIR",
              help="A directory whose files the tools may read (repeatable; default: the "
              "current directory). Paths outside every root are refused, links followed.")
@click.option("--history/--no-history", default=True, show_default=True,
              help="Keep every call's trace and summary in the run history (`rlm runs`, and "
              "the rlm://runs resources); RLM_HISTORY=off turns it off for good.")
@settings_options("mcp")
def mcp(roots: tuple[str, ...], history: bool) -> None:
    """Serve rlm over the Model Context Protocol on stdin and stdout.

    A coding agent (an MCP client) hands rlm a question over files too large for
    its own window: the `run` tool answers it as `rlm run` would, the `volley`
    tool runs many tasks over the same files, and the resources rlm://runs,
    rlm://runs/ID and rlm://runs/ID/page give the run history and each run's
    `rlm view` page.  Every setting below, the config file's and a --profile's
    are each call's defaults; a call may pick its models and lower
    --max-llm-calls, --max-cost and --timeout, never raise them.  The sandbox,
    budgets and --max-context-bytes apply as on the command line, and paths
    outside the --root directories are refused.  Needs the extra: pip install
    'rlm[mcp]'.

    \b
    Register it with a coding agent, e.g. in the client's JSON config
    (.mcp.json, mcp.json or claude_desktop_config.json):
      {
        "mcpServers": {
          "rlm": {
            "command": "rlm",
            "args": ["mcp", "--root", "/path/to/project",
                     "--model", "gpt-4.1", "--sub-model", "gpt-4.1-mini",
                     "--max-cost", "2"],
            "env": {"RLM_API_KEY": "sk-..."}
          }
        }
      }

    \b
    Examples:
      rlm mcp --root . --provider fixture          # try it with the fixture model
      rlm mcp --root ~/logs --profile fast-local --max-llm-calls 500

    The key is read from RLM_API_KEY (or OPENAI_API_KEY / ANTHROPIC_API_KEY),
    never from the command line, and never appears in a tool result or a log.
    stdout carries the protocol only; notes go to stderr.

    \b
    Exit codes: 0 the client closed the connection · 1 the server could not start ·
    2 usage error · 4 no key for a hosted API · 130 stopped by a signal.
    """
    if importlib.util.find_spec("mcp") is None:
        fail("rlm mcp needs the MCP SDK: pip install 'rlm[mcp]'", 1)
    try:
        setup = _setup(roots, history)
    except UsageError as exc:
        fail(usage_message(exc, mcp), exc.exit_code)
    import anyio

    from rlm.cli._mcp_server import serve

    stopped = anyio.run(serve, setup, backend="trio")
    sys.exit(130 if stopped else 0)


def _setup(roots: tuple[str, ...], history: bool) -> ServerSetup:
    """What every call starts from, checked as ``rlm run`` checks it before a run."""
    from rlm._api import RLM
    from rlm._config import RunConfig, VolleyOptions
    from rlm.cli._mcp_calls import ServerSetup
    from rlm.cli._mcp_roots import Roots

    served = Roots(roots)
    resolved = command_settings(("run", "volley"), "mcp")
    run = resolved.scope(settings_of(RunConfig))
    if run["cache_path"] is None and resolved.sources["cache_mode"] != "default":
        raise click.UsageError("--cache-mode needs --cache PATH: the journal to replay from")
    if resolved.sources["model"] == "default":
        run["model"] = model_or_blank(run["provider"], None)
    volley = resolved.scope(settings_of(VolleyOptions))
    VolleyOptions(**volley).validate()
    api_key = api_key_from_environment(run["provider"])
    if run["provider"] != "fixture":  # httpx loads now, not in the first call
        importlib.import_module("rlm.providers._http").load_http_transport()
    config = RLM(api_key=api_key, **run).config  # a bad setting stops here, not in a call
    if not api_key and run["provider"] != "fixture":
        from rlm.providers.keys import missing_key_message

        problem = missing_key_message(config)
        if problem:
            fail(problem, 4)
    if run["require_isolation"]:
        from rlm.cli.doctor_cmd import require_isolation

        require_isolation(run["require_isolation"])
    return ServerSetup(run=run, volley=volley, roots=served, history=history,
                       api_key=api_key)
