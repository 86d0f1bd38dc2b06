"""``--profile NAME``: config-file settings become the defaults of a command's options.

The option is eager, so the chosen profile is loaded before any other option
takes its value; its settings go into click's ``default_map``, which click
consults after the command line and the environment and before an option's
own default.  That is the documented precedence: flags > env > profile >
defaults.  Settings that are not options of the command (``request_timeout``)
are kept in the context and merged by :func:`profile_only_settings`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from rlm._profiles import Profile, load_profile
from rlm.errors import UsageError

__all__ = ["current_profile", "profile_only_settings", "profile_option"]

F = TypeVar("F", bound=Callable[..., Any])
_META_KEY = "rlm.profile"


def _load(ctx: click.Context, _: click.Parameter, name: str | None) -> str | None:
    try:
        profile = load_profile(name)
    except UsageError as exc:
        if name is None:  # a config file is wrong, not the --profile the user never gave
            raise click.UsageError(str(exc), ctx=ctx) from None
        raise click.BadParameter(str(exc), ctx=ctx, param_hint="'--profile'") from None
    ctx.meta[_META_KEY] = profile
    options = {p.name for p in ctx.command.params if p.name}
    ctx.default_map = {
        **(ctx.default_map or {}),
        **{key: _as_option(value) for key, value in profile.values.items() if key in options},
    }
    return name


def _as_option(value: Any) -> Any:
    """The command-line form of a setting (a layer list is written ``a,b``)."""
    return ",".join(value) if isinstance(value, tuple) else value


def profile_option(command: F) -> F:
    """Add ``--profile NAME`` (env ``RLM_PROFILE``) to a command."""
    return click.option(
        "--profile",
        "profile_name",
        envvar="RLM_PROFILE",
        is_eager=True,
        expose_value=False,
        callback=_load,
        metavar="NAME",
        help="Settings from [profiles.NAME] in rlm.toml or the user config file "
        "(see `rlm config show`) [env: RLM_PROFILE].",
    )(command)


def current_profile() -> Profile:
    """The profile the current command loaded (empty when it has no --profile option)."""
    profile = click.get_current_context().meta.get(_META_KEY)
    return profile if isinstance(profile, Profile) else Profile()


def profile_only_settings() -> dict[str, Any]:
    """Profile settings that no option of the current command carries."""
    ctx = click.get_current_context()
    options = {p.name for p in ctx.command.params if p.name}
    return {k: v for k, v in current_profile().values.items() if k not in options}
