"""``rlm config show``: every run setting, its value, and where the value came from."""

from __future__ import annotations

import json
from typing import Any

import click

from rlm._profiles import PROJECT_FILE, user_config_file
from rlm._url_userinfo import redact_url
from rlm.cli._flags import model_or_blank
from rlm.cli._settings_cli import command_settings, current_profile, settings_options
from rlm.providers.keys import default_base_url

__all__ = ["config_group"]



@click.group("config")
def config_group() -> None:
    """Config files and profiles: settings you would otherwise repeat on every run.

    rlm reads config.toml in the user config directory, then rlm.toml in the
    working directory (its keys win).  Keys are `rlm run` settings with
    underscores (base_url, model, sub_model, max_concurrent, rpm, tpm, ...;
    every one is in docs/settings.md).
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
@settings_options("config show")
def show(as_json: bool) -> None:
    """Show each setting's value and its source (flag, env, profile, default), as `rlm run`
    (and, for the session and volley settings, `rlm chat` and `rlm volley`) would see it."""
    profile = current_profile()
    resolved = command_settings(("run", "session", "volley"), "run")
    settings: dict[str, dict[str, Any]] = {
        name: {"value": value, "source": resolved.sources[name]}
        for name, value in resolved.values.items()
    }
    if resolved.sources["model"] == "default":  # the fixture's name only for the fixture
        settings["model"]["value"] = model_or_blank(str(settings["provider"]["value"]), None)
    if settings["base_url"]["value"] is None:
        provider = str(settings["provider"]["value"])
        settings["base_url"] = {
            "value": default_base_url(provider),
            "source": f"default for --provider {provider}",
        }
    for name in ("base_url", "sub_base_url", "cache_path", "journal"):  # never a password
        if settings[name]["value"]:
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
