"""The settings table (rlm/_config.py): each setting declared once, and every route to it.

Each setting is one row; from it come the dataclasses, every command's options,
RLM's keyword arguments, config-file keys, the precedence and docs/settings.md.
These tests walk the table, so a setting added to it is checked through every
route without a line here.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import click
import pytest

from rlm import RLM
from rlm._config import SETTINGS, RunConfig, SessionOptions, VolleyOptions
from rlm._settings import Setting, resolve, settings_of
from rlm._settings_gen import settings_doc, types_module
from rlm.cli import main
from rlm.cli._settings_cli import command_settings
from rlm.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = ("run", "chat", "mcp", "volley", "volley create", "volley work", "volley list",
            "volley show", "volley cancel", "volley watch", "eval", "eval show",
            "eval compare")
RUN_ROWS = settings_of(RunConfig)


def _command(path: str) -> click.Command:
    command: click.Command = main
    ctx = click.Context(main)
    for word in path.split():
        assert isinstance(command, click.Group)
        found = command.get_command(ctx, word)
        assert found is not None, path
        command = found
    if isinstance(command, click.Group):  # `rlm volley` runs its default command
        command = command.get_command(ctx, "run") or command
    return command


def _sample(row: Setting) -> Any:
    """A valid value of ``row`` other than its default."""
    kind = row.kind
    options = [o for o in (get_args(kind) if get_origin(kind) is not None and
                           get_origin(kind) is not Literal and get_origin(kind) is not tuple
                           else (kind,)) if o is not type(None)]
    kind = options[0]
    special: dict[str, Any] = {
        "model": "some-model", "require_isolation": ("fds",), "sandbox_memory": 1 << 30,
        "max_history_chars": 5_000, "stale_timeout": 90.0, "root_permits": 2,
        "base_url": "http://127.0.0.1:9/v1", "sub_base_url": "http://127.0.0.1:9/v2",
    }
    if row.name in special:
        return special[row.name]
    if kind is bool:
        return not row.default
    if get_origin(kind) is Literal:
        return next(c for c in get_args(kind) if c != row.default)
    if kind is int:
        return 3 if row.default in (None, 1, 20) else row.default + 1
    if kind is float:
        return 7.0 if row.default is None else row.default * 2
    return "value"


def _text(row: Setting, value: Any) -> list[str]:
    """``value`` on the command line."""
    if isinstance(value, bool):
        return [row.flag if value else str(row.spec.off_flag)]
    if row.spec.switch is not None:
        return [row.flag]
    if isinstance(value, tuple):
        return [row.flag, ",".join(value)]
    return [row.flag, str(value)]


def _resolved(path: str, args: list[str], scopes: tuple[str, ...]) -> dict[str, Any]:
    command = _command(path)
    extra = ["ID"] if path in ("volley work", "volley cancel") else ["q"] if path == "run" else []
    ctx = command.make_context(path, [*extra, *args])
    with ctx:
        return command_settings(scopes, path, ctx=ctx).values


def test_the_generated_files_are_what_the_table_makes_now() -> None:
    """`python -m rlm._settings_gen` rewrites both; a table change without it fails here."""
    assert (ROOT / "rlm" / "_settings_types.py").read_text(encoding="utf-8") == types_module()
    assert (ROOT / "docs" / "settings.md").read_text(encoding="utf-8") == settings_doc()


def test_each_setting_is_declared_once_with_a_row() -> None:
    names = [row.name for row in SETTINGS]
    assert len(names) == len(set(names))
    for row in SETTINGS:
        assert row.spec.help.strip(), row.name
        flags = [row.flag, *([row.spec.off_flag] if row.spec.off_flag else [])]
        assert all(flag.startswith("--") for flag in flags)


@pytest.mark.parametrize("path", COMMANDS)
def test_every_command_offers_exactly_the_settings_its_rows_name(path: str) -> None:
    command = _command(path)
    names = {row.name for row in SETTINGS}
    offered = {p.name for p in command.params if p.name in names}
    assert offered == {row.name for row in SETTINGS if path in row.spec.commands}
    helped = command.get_help(click.Context(command))
    for row in SETTINGS:
        if path in row.spec.commands:
            assert row.flag in helped, (path, row.name)


@pytest.mark.parametrize("row", [r for r in RUN_ROWS if not r.spec.secret], ids=lambda r: r.name)
def test_each_run_setting_reaches_the_config_from_python_a_flag_a_file_and_the_env(
    row: Setting, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    value = _sample(row)
    assert value != row.default
    prices = tmp_path / "prices.json"
    prices.write_text('{"some-model": {"input": 1e-6, "output": 2e-6}}')
    if row.name == "prices_path":
        value = str(prices)
    # Python: a keyword of RLM(...).
    arguments = {"provider": "fixture", row.name: value}
    if row.name == "sub_base_url":  # the fixture root with a real sub-model: named
        arguments["sub_model"] = "some-model"
    if arguments["provider"] != "fixture":
        arguments.setdefault("model", "some-model")
    assert getattr(RLM(**arguments).config, row.name) == value
    # A flag of every command that offers it.
    monkeypatch.chdir(tmp_path)
    for path in row.spec.commands:
        scopes = ("run", "session") if path == "chat" else ("run", "volley")
        assert _resolved(path, _text(row, value), scopes)[row.name] == value, path
    # A config file's top-level key, and a profile's.
    shown = list(value) if isinstance(value, tuple) else value
    toml = f"{row.name} = {_toml(shown)}\n[profiles.p]\n{row.name} = {_toml(shown)}\n"
    (tmp_path / "rlm.toml").write_text(toml)
    assert _resolved("run", [], ("run",))[row.name] == value
    assert _resolved("run", ["--profile", "p"], ("run",))[row.name] == value
    (tmp_path / "rlm.toml").unlink()
    # Its environment variable, where it has one.
    if row.spec.env:
        text = str(value).lower() if isinstance(value, bool) else _text(row, value)[-1]
        monkeypatch.setenv(row.spec.env, text)
        assert _resolved("run", [], ("run",))[row.name] == value


def test_session_and_volley_settings_reach_their_options_from_python() -> None:
    for cls in (SessionOptions, VolleyOptions):
        for row in settings_of(cls):
            value = _sample(row)
            assert getattr(cls(**{row.name: value}).validate(), row.name) == value


def test_precedence_is_flags_then_env_then_each_layer_then_the_default() -> None:
    rows = [r for r in RUN_ROWS if r.name in ("model", "max_depth", "rpm", "burst")]
    resolved = resolve(
        rows, "run", given={"model": "from-flag"},
        environ={"RLM_MODEL": "from-env"},
        layers=[({"max_depth": 3, "model": "from-profile"}, "profile"),
                ({"max_depth": 4, "rpm": 60.0}, {"max_depth": "top", "rpm": "top-file"})],
    )
    assert resolved.values == {"model": "from-flag", "max_depth": 3, "rpm": 60.0, "burst": 1}
    assert resolved.sources == {"model": "flag", "max_depth": "profile", "rpm": "top-file",
                                "burst": "default"}
    env_wins = resolve(rows, "run", given={}, environ={"RLM_MODEL": "from-env"},
                       layers=[({"model": "from-profile"}, "profile")])
    assert (env_wins.values["model"], env_wins.sources["model"]) == ("from-env", "env RLM_MODEL")


def test_a_bad_environment_value_names_the_variable() -> None:
    rows = [r for r in SETTINGS if r.name == "provider"]
    with pytest.raises(UsageError, match=r"RLM_PROVIDER='gemini': 'gemini' is not one of"):
        resolve(rows, "run", given={}, environ={"RLM_PROVIDER": "gemini"})


def test_a_command_has_its_own_default_where_its_row_says_so() -> None:
    row = next(r for r in SETTINGS if r.name == "max_concurrent")
    assert (row.default_for("run"), row.default_for("volley")) == (8, 16)
    assert "[default: 16]" in _command("volley").get_help(click.Context(_command("volley")))


def test_rlm_keyword_arguments_are_typed_from_the_table() -> None:
    from rlm._settings_types import RunSettings

    hints = typing.get_type_hints(RunSettings)
    assert set(hints) == {row.name for row in RUN_ROWS}
    assert hints == {row.name: row.kind for row in RUN_ROWS}


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return repr(value)
