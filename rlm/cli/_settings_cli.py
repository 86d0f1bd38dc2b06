"""The settings table as click options, and a command's settings resolved.

:func:`settings_options` gives a command one option for every setting whose
row names it (and ``--profile``); :func:`command_settings` gives the value of
every setting of the command's scopes, by the one order of precedence
(:func:`rlm._settings.resolve`): flags > environment > layers the command adds
(a task file) > profile > config files' top-level keys > the command's default.

Options carry no default of their own (``--help`` shows the table's), so a
flag given and a flag left out can always be told apart; their values are
recorded in the context, not passed to the command's function.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar, get_args, get_origin

import click
from click.core import ParameterSource

from rlm._config import SETTINGS
from rlm._profiles import Profile, load_profile
from rlm._settings import Layer, Resolved, Setting, resolve
from rlm.errors import UsageError

__all__ = [
    "command_settings", "current_profile", "given_flag", "setting_sources", "settings_options",
    "settings_params",
]

F = TypeVar("F", bound=Callable[..., Any])
_GIVEN = "rlm.settings.given"
_PROFILE = "rlm.settings.profile"
_SOURCES = "rlm.settings.sources"


def settings_options(command: str) -> Callable[[F], F]:
    """Add ``command``'s setting options (in table order) and ``--profile``."""

    def decorate(function: F) -> F:
        for decls, attrs in reversed(_option_args(command)):
            function = click.option(*decls, **attrs)(function)
        return function

    return decorate


def settings_params(command: str) -> list[click.Parameter]:
    """``command``'s setting options and ``--profile``, for a command built from a list."""
    return [click.Option(list(decls), **attrs) for decls, attrs in _option_args(command)]


def _option_args(command: str) -> list[tuple[tuple[str, ...], dict[str, Any]]]:
    options = [_setting_args(row, command) for row in SETTINGS if command in row.spec.commands]
    profile = (("--profile", "profile_name"), {
        "envvar": "RLM_PROFILE", "expose_value": False, "callback": _load_profile,
        "metavar": "NAME", "is_eager": True,
        "help": "Settings from [profiles.NAME] in rlm.toml or the user config file "
        "(see `rlm config show`) [env: RLM_PROFILE].",
    })
    return [profile, *options]


def _setting_args(row: Setting, command: str) -> tuple[tuple[str, ...], dict[str, Any]]:
    spec = row.spec
    default = _default_text(row, command)
    shown = [f"default: {default}"] if default else []
    if spec.env:
        shown.append(f"env: {spec.env}")
    help_text = spec.help + (f" [{'; '.join(shown)}]" if shown else "")
    attrs: dict[str, Any] = {"expose_value": False, "callback": _given(row), "help": help_text,
                             "default": None}
    if spec.switch is not None:
        return (row.flag, row.name), {**attrs, "is_flag": True, "flag_value": spec.switch}
    if spec.off_flag is not None:
        return (f"{row.flag}/{spec.off_flag}", row.name), attrs
    choices = get_args(row.kind) if get_origin(row.kind) is not None else ()
    if choices and all(isinstance(c, str) for c in choices) and spec.parse is None:
        kind: Any = click.Choice(choices)  # ParamType is generic in newer clicks
    else:
        kind = click.STRING
    return (row.flag, row.name), {**attrs, "type": kind, "metavar": _metavar(row)}


def _default_text(row: Setting, command: str) -> str:
    """The default as ``--help`` shows it ("" for none)."""
    value = row.default_for(command)
    if row.spec.shown is not None and command not in row.spec.defaults:
        return row.spec.shown
    if value is None or value == ():
        return ""
    if isinstance(value, bool) and row.spec.off_flag:
        return row.flag if value else row.spec.off_flag
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def _metavar(row: Setting) -> str | None:
    if row.spec.metavar:
        return row.spec.metavar
    return {int: "N", float: "NUMBER"}.get(row.kind)


def _given(row: Setting) -> Callable[[click.Context, click.Parameter, Any], None]:
    """Record a value given on the command line, read as the table's parser reads it."""

    def record(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if ctx.get_parameter_source(row.name) is not ParameterSource.COMMANDLINE:
            return
        if isinstance(value, str) and row.spec.switch is None:
            try:
                value = row.parse(value)
            except ValueError as exc:
                raise click.BadParameter(str(exc), ctx=ctx, param=param) from None
        ctx.meta.setdefault(_GIVEN, {})[row.name] = value

    return record


def _load_profile(ctx: click.Context, param: click.Parameter, name: str | None) -> None:
    try:
        ctx.meta[_PROFILE] = load_profile(name)
    except UsageError as exc:
        if name is None:  # a config file is wrong, not the --profile the user never gave
            raise click.UsageError(str(exc), ctx=ctx) from None
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


def current_profile(ctx: click.Context | None = None) -> Profile:
    """The profile the running command loaded (empty when it has no ``--profile``)."""
    ctx = ctx or click.get_current_context()
    profile = ctx.meta.get(_PROFILE)
    return profile if isinstance(profile, Profile) else Profile()


def given_flag(name: str, ctx: click.Context | None = None) -> bool:
    """Whether setting ``name`` was given on the running command's line."""
    ctx = ctx or click.get_current_context()
    return name in ctx.meta.get(_GIVEN, {})


def command_settings(
    scopes: Sequence[str],
    command: str,
    *,
    before_profile: Sequence[Layer] = (),
    stored: Layer | None = None,
    ctx: click.Context | None = None,
) -> Resolved:
    """Every setting of ``scopes`` for the running ``command``.

    ``before_profile`` are layers that win over the profile (a task file's
    settings).  With ``stored`` (a volley read back from its journal) the
    profile's own table applies on top of what was stored, and the config
    files' top-level keys do not: they applied when the volley was created,
    and must not undo a flag given then.
    """
    ctx = ctx or click.get_current_context()
    profile = current_profile(ctx)
    layers: list[Layer] = [*before_profile, (profile.chosen, profile.sources)]
    layers.append(stored if stored is not None else (profile.values, profile.sources))
    rows = [row for row in SETTINGS if row.scope in scopes and not row.spec.secret]
    resolved = resolve(rows, command, given=ctx.meta.get(_GIVEN, {}), layers=layers)
    ctx.meta.setdefault(_SOURCES, {}).update(resolved.sources)
    return resolved


def setting_sources(ctx: click.Context | None = None) -> dict[str, str]:
    """Where each setting the running command resolved came from (``flag``, ``env
    RLM_RPM``, a file...), as the last :func:`command_settings` found it."""
    ctx = ctx or click.get_current_context(silent=True)
    sources = ctx.meta.get(_SOURCES, {}) if ctx is not None else {}
    return dict(sources)
