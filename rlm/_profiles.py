"""Config files and named profiles: settings people would otherwise repeat on every command.

Two files are read, when they exist: the user's (``config.toml`` in
``click.get_app_dir("rlm")``, e.g. ``~/.config/rlm/config.toml``) and then
``rlm.toml`` in the working directory, whose keys win.  Keys are
:class:`rlm.RunConfig` field names (dashes or underscores); top-level keys
apply to every run, ``[profiles.NAME]`` tables only when that profile is
chosen (``--profile NAME`` or ``RLM_PROFILE``)::

    # rlm.toml
    max_iterations = 12

    [profiles.fast-local]
    base_url = "http://127.0.0.1:8000/v1"
    model = "qwen2.5-7b-instruct"
    max_concurrent = 16
    rpm = 600

Precedence, highest first: command-line flags, environment variables
(``RLM_MODEL``, ``RLM_BASE_URL``, ``RLM_PROVIDER``), the chosen profile, the
files' top-level keys, the built-in defaults.  API keys never live here: they
are read from the environment only.  Other commands (``rlm volley``) reuse
:func:`load_profile` for the same keys, provider limits included.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from rlm._config import RunConfig
from rlm.errors import UsageError

__all__ = ["PROJECT_FILE", "Profile", "config_files", "load_profile", "user_config_file"]

PROJECT_FILE = "rlm.toml"
_SECRET_KEYS = frozenset({"api_key"})


@dataclass(frozen=True, slots=True)
class Profile:
    """Settings from config files, by RunConfig field name, and where each came from."""

    name: str | None = None
    values: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    files: tuple[Path, ...] = ()
    available: tuple[str, ...] = ()
    #: The chosen profile's own settings, without the files' top-level keys.
    chosen: dict[str, Any] = field(default_factory=dict)


def user_config_file() -> Path:
    """``config.toml`` in the user's config directory (XDG_CONFIG_HOME is honoured)."""
    return Path(click.get_app_dir("rlm")) / "config.toml"


def config_files(cwd: Path | None = None, user_file: Path | None = None) -> list[Path]:
    """Existing config files, lowest precedence first."""
    candidates = [user_file or user_config_file(), (cwd or Path.cwd()) / PROJECT_FILE]
    return [path for path in candidates if path.is_file()]


def load_profile(
    name: str | None = None, *, cwd: Path | None = None, user_file: Path | None = None
) -> Profile:
    """The merged settings of every config file, with profile ``name`` applied on top.

    ``cwd`` and ``user_file`` replace the working directory and the user's
    config file (for tests, and for tools that look elsewhere).

    Raises :class:`UsageError` naming the file for a syntax error, an unknown
    key, a value of the wrong type, an API key, or a profile no file defines.
    """
    files = config_files(cwd, user_file)
    base: dict[str, Any] = {}
    chosen: dict[str, Any] = {}
    sources: dict[str, str] = {}
    available: list[str] = []
    for path in files:
        data = _read(path)
        profiles = data.pop("profiles", {})
        if not isinstance(profiles, dict):
            raise UsageError(f"{path}: 'profiles' must be a table of [profiles.NAME] tables")
        top = _settings(data, path, "")
        base.update(top)
        sources.update(dict.fromkeys(top, str(path)))
        for profile_name, table in profiles.items():
            where = f"[profiles.{profile_name}]"
            if not isinstance(table, dict):
                raise UsageError(f"{path}: {where} must be a table of settings")
            settings = _settings(table, path, where + " ")
            available.append(profile_name)
            if profile_name == name:
                chosen.update(settings)
                sources.update(dict.fromkeys(settings, f"{path} {where}"))
    if name is not None and name not in available:
        raise UsageError(_no_such_profile(name, files, available))
    return Profile(
        name=name,
        values={**base, **chosen},
        sources=sources,
        files=tuple(files),
        available=tuple(dict.fromkeys(available)),
        chosen=chosen,
    )


def _no_such_profile(name: str, files: list[Path], available: list[str]) -> str:
    if not files:
        return (
            f"no profile {name!r}: no config file found; create {PROJECT_FILE} here or "
            f"{user_config_file()} with a [profiles.{name}] table (see `rlm config --help`)"
        )
    where = ", ".join(str(path) for path in files)
    known = ", ".join(sorted(set(available))) or "none"
    return f"no profile {name!r} in {where}; profiles defined there: {known}"


def _read(path: Path) -> dict[str, Any]:
    import tomllib  # only when a config file exists: most runs have none

    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path} is not valid TOML: {exc}; fix or remove it") from exc
    except OSError as exc:
        raise UsageError(f"cannot read config file {path}: {exc.strerror}") from exc


def _settings(table: dict[str, Any], path: Path, where: str) -> dict[str, Any]:
    """``table``'s keys checked against RunConfig's fields and their types."""
    hints = typing.get_type_hints(RunConfig)
    known = {f.name for f in dataclasses.fields(RunConfig)} - _SECRET_KEYS
    settings: dict[str, Any] = {}
    for raw_key, value in table.items():
        key = raw_key.replace("-", "_")
        if key in _SECRET_KEYS:
            raise UsageError(
                f"{path}: {where}{raw_key}: API keys do not belong in config files; "
                "set RLM_API_KEY (or OPENAI_API_KEY / ANTHROPIC_API_KEY) in the environment"
            )
        if key not in known:
            import difflib

            close = difflib.get_close_matches(key, sorted(known), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise UsageError(f"{path}: {where}unknown setting {raw_key!r}{hint}")
        settings[key] = _checked(value, hints[key], f"{path}: {where}{raw_key}")
    return settings


def _checked(value: Any, hint: Any, where: str) -> Any:
    """``value`` if it fits the field's type (an int where a float goes is fine)."""
    origin = typing.get_origin(hint)
    options = typing.get_args(hint) if origin in (typing.Union, types.UnionType) else (hint,)
    if type(None) in options and value == "none":  # TOML has no null: "none" lifts a limit
        return None
    for option in options:
        if option is type(None):
            continue
        if typing.get_origin(option) is typing.Literal:
            if value in typing.get_args(option):
                return value
        elif typing.get_origin(option) is tuple:
            if isinstance(value, str):
                return tuple(part.strip() for part in value.split(",") if part.strip())
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                return tuple(value)
        elif option is float and isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        elif isinstance(value, option) and (option is not int or not isinstance(value, bool)):
            return value  # str, bool, or an int that is not a bool
    wanted = " or ".join(_type_name(option) for option in options if option is not type(None))
    raise UsageError(f"{where} must be {wanted}, got {value!r}")


def _type_name(option: Any) -> str:
    if typing.get_origin(option) is typing.Literal:
        return "one of " + ", ".join(repr(v) for v in typing.get_args(option))
    if typing.get_origin(option) is tuple:
        return "a list of strings"
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(
        option, str(option)
    )
