"""``rlm config show``: every run setting, its value, and where the value came from."""

from __future__ import annotations

import json
from typing import Any

import click
from click.core import ParameterSource

from rlm._profiles import PROJECT_FILE, user_config_file
from rlm._url_userinfo import redact_url
from rlm.cli._profile_option import current_profile, profile_option
from rlm.providers.keys import default_base_url

__all__ = ["config_group"]

# Options of `rlm run` that describe one run's input and output, not a setting.
_NOT_SETTINGS = frozenset(
    {"query", "more_paths", "context_files", "glob_pattern", "encoding", "trace_path"}
    | {"as_json", "output_format", "quiet", "profile_name"}
)


@click.group("config")
def config_group() -> None:
    """Config files and profiles: settings you would otherwise repeat on every run.

    rlm reads config.toml in the user config directory, then rlm.toml in the
    working directory (its keys win).  Keys are `rlm run` settings with
    underscores (base_url, model, sub_model, max_concurrent, rpm, tpm, ...).
    Top-level keys apply to every run; a [profiles.NAME] table applies with
    --profile NAME (or RLM_PROFILE=NAME).  Precedence: flags > environment
    (RLM_MODEL, RLM_BASE_URL, RLM_PROVIDER) > profile > top-level keys >
    defaults.  API keys stay in the environment, never in these files.

    \b
    Example rlm.toml:
      max_iterations = 12
      [profiles.fast-local]
      base_url = "http://127.0.0.1:8000/v1"
      model = "qwen2.5-7b-instruct"
      max_concurrent = 16
      rpm = 600

    \b
    Then:
      rlm config show --profile fast-local
      rlm run "What changed?" --context-file notes.md --profile fast-local
    """


@config_group.command("show")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@profile_option
def show(as_json: bool) -> None:
    """Show each run setting's value and its source (flag, env, profile, default)."""
    from rlm.cli.run_cmd import run  # the settings are run's options

    profile = current_profile()
    args = ["--profile", profile.name] if profile.name else []
    ctx = run.make_context("run", ["query", *args])
    settings: dict[str, dict[str, Any]] = {}
    for param in run.params:
        name = param.name
        if not name or name in _NOT_SETTINGS:
            continue
        settings[name] = {
            "value": ctx.params.get(name),
            "source": _source(ctx, param, profile.sources.get(name)),
        }
    if settings["base_url"]["value"] is None:
        provider = str(settings["provider"]["value"])
        settings["base_url"] = {
            "value": default_base_url(provider),
            "source": f"default for --provider {provider}",
        }
    for name, value in profile.values.items():  # settings only a config file can set
        settings.setdefault(name, {"value": value, "source": profile.sources.get(name, "")})
    for name in ("base_url", "sub_base_url"):  # shown as everywhere: without user:password
        if settings.get(name, {}).get("value"):
            settings[name]["value"] = redact_url(str(settings[name]["value"]))
    files = [str(path) for path in profile.files]
    if as_json:
        click.echo(
            json.dumps(
                {
                    "profile": profile.name,
                    "files": files,
                    "profiles": list(profile.available),
                    "settings": settings,
                },
                default=list,
            )
        )
        return
    searched = f"{user_config_file()}, ./{PROJECT_FILE}"
    click.echo(f"config files: {', '.join(files) if files else f'none (looked for {searched})'}")
    defined = ", ".join(profile.available) or "none"
    click.echo(f"profile: {profile.name or 'none'}; defined: {defined}")
    width = max(len(name) for name in settings)
    for name, entry in settings.items():
        value = entry["value"]
        shown = "-" if value in (None, (), "") else value
        click.echo(f"  {name:<{width}}  {shown!s:<28} {entry['source']}")


def _source(ctx: click.Context, param: click.Parameter, profile_source: str | None) -> str:
    source = ctx.get_parameter_source(param.name or "")
    if source is ParameterSource.ENVIRONMENT:
        envvar = param.envvar if isinstance(param.envvar, str) else "environment"
        return f"env {envvar}"
    if source is ParameterSource.DEFAULT_MAP:
        return profile_source or "config file"
    if source is ParameterSource.COMMANDLINE:
        return "flag"
    return "default"
