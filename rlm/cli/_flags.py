"""Settings as the CLI spells them: errors from the API name flags, not parameters.

:class:`rlm.errors.SettingError` messages mark each setting; here they are
spelled as the command's own option (``max_depth`` → ``--max-depth``,
``prices_path`` → ``--prices``), with its environment variable when it has one.
A usage error names a setting whose value came from elsewhere as where it came
from (``RLM_MAX_CONCURRENT``, ``"max_concurrent" in tasks.json``): that is what
the person must change.
"""

from __future__ import annotations

from collections.abc import Mapping

import click

from rlm._config import SETTINGS
from rlm.cli._settings_cli import setting_sources
from rlm.errors import SettingError, SettingNamer

__all__ = ["cli_setting", "flag_namer", "model_or_blank", "usage_message"]


def flag_namer(command: click.Command, sources: Mapping[str, str] | None = None) -> SettingNamer:
    """Spell a setting as ``command``'s option for it (``--base-url URL (or set RLM_BASE_URL)``),
    or, named without a value, as the place ``sources`` says its value came from."""
    options = {p.name: p for p in command.params if isinstance(p, click.Option)}

    def spell(name: str, value: str | None) -> str:
        source = _from_source(name, (sources or {}).get(name, "flag"))
        if value is None and source is not None:
            return source
        option = options.get(name)
        flag = option.opts[-1] if option is not None else "--" + name.replace("_", "-")
        if value is None:
            return flag
        text = f"{flag} {value}"
        row = next((row for row in SETTINGS if row.name == name), None)
        if option is not None and row is not None and row.spec.env:
            text += f" (or set {row.spec.env})"
        return text

    return spell


def _from_source(name: str, source: str) -> str | None:
    """Setting ``name`` as where its value came from: its environment variable, or its key
    in a file (a task file, a config file and profile); None when the flag is what to
    name (given as one, the default, or stored with a volley: a resume takes the flag)."""
    if source in ("flag", "default", "") or source.startswith("stored "):
        return None
    if source.startswith("env "):
        return source.removeprefix("env ")
    return f'"{name}" in {source}'


def usage_message(exc: Exception, command: click.Command) -> str:
    """The message of ``exc`` for this command's user."""
    message = (exc.spelled(flag_namer(command, setting_sources()))
               if isinstance(exc, SettingError) else str(exc))
    if taken := _flag_taken_as_argument(command):
        # Only `--` lets a flag through as an argument (`rlm volley -- list --provider x`):
        # a message that says "use --provider" must not leave the user puzzled.
        flag, argument = taken
        message += (
            f" ({flag} came after `--`, so it was taken as {argument}, not as a flag: "
            "put flags before `--`)"
        )
    return message


def _flag_taken_as_argument(command: click.Command) -> tuple[str, str] | None:
    """The first argument of the running ``command`` spelled as one of its flags, and
    how it was taken (``one of the tasks``), or None."""
    ctx = click.get_current_context(silent=True)
    if ctx is None or ctx.command is not command:
        return None
    flags = {f for p in command.params if isinstance(p, click.Option) for f in p.opts}
    for param in command.params:
        if isinstance(param, click.Argument):
            value = ctx.params.get(param.name or "")
            for word in value if isinstance(value, tuple) else (value,):
                if isinstance(word, str) and word.split("=", 1)[0] in flags:
                    many = param.nargs != 1
                    return word, f"one of the {param.name}" if many else f"the {param.name}"
    return None


def model_or_blank(provider: str, model: str | None) -> str:
    """``--model`` as given; without it the fixture's own name, else "" (the endpoint
    check then says which flag to pass, where ``None`` would be a type error about None)."""
    return model or ("fixture" if provider == "fixture" else "")


def cli_setting(name: str, value: str | None) -> str:
    """A setting as ``rlm run`` spells it: how runtime messages name limits in any command."""
    from rlm.cli.run_cmd import run  # only when a message names a setting

    return flag_namer(run)(name, value)
