"""Config files and named profiles: settings people would otherwise repeat on every command.

Two files are read, when they exist: the user's (``config.toml`` in
``click.get_app_dir("rlm")``, e.g. ``~/.config/rlm/config.toml``) and then
``rlm.toml`` in the working directory, whose keys win.  Keys are
settings of the table (``rlm/_config.py``; dashes or underscores); top-level keys
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

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from rlm._config import SETTINGS
from rlm._settings import from_file
from rlm.errors import UsageError

__all__ = ["PROJECT_FILE", "Profile", "config_files", "load_profile", "user_config_file"]

PROJECT_FILE = "rlm.toml"


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
    except RecursionError:  # arrays nested thousands deep: the parser recurses
        raise UsageError(f"{path} nests arrays or tables too deeply; fix or remove it") from None
    except OSError as exc:
        raise UsageError(f"cannot read config file {path}: {exc.strerror}") from exc


def _settings(table: dict[str, Any], path: Path, where: str) -> dict[str, Any]:
    """``table``'s keys checked against the settings table, their values read as it says."""
    rows = {row.name: row for row in SETTINGS}
    settings: dict[str, Any] = {}
    for raw_key, value in table.items():
        key = raw_key.replace("-", "_")
        row = rows.get(key)
        if row is not None and row.spec.secret:
            raise UsageError(
                f"{path}: {where}{raw_key}: API keys do not belong in config files; "
                "set RLM_API_KEY (or OPENAI_API_KEY / ANTHROPIC_API_KEY) in the environment"
            )
        if row is None:
            import difflib

            known = sorted(name for name, r in rows.items() if not r.spec.secret)
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise UsageError(f"{path}: {where}unknown setting {raw_key!r}{hint}")
        settings[key] = from_file(row, value, f"{path}: {where}{raw_key}")
    return settings
