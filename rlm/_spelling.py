"""Settings named in runtime messages as the caller spells them.

A limit's message says which setting to raise.  The Python API calls it
``max_llm_calls`` (``max_llm_calls=None`` lifts it); ``rlm run`` calls it
``--max-llm-calls`` (``--max-llm-calls none``).  Messages are built where the
limit is met, deep in a run, so the spelling travels as a context variable:
Python by default, flags while a CLI command runs (``rlm.cli`` sets it around
the command; trio tasks and worker threads inherit it).  Errors raised before
a run (:class:`rlm.errors.SettingError`) carry markers instead and are spelled
when shown.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

from rlm.errors import SettingNamer, python_setting

__all__ = ["give_key", "key_source", "python_spelled", "setting", "settings_spelled_as"]

_NAMER: ContextVar[SettingNamer] = ContextVar("rlm_setting_namer", default=python_setting)


def setting(name: str, value: object = None) -> str:
    """``name`` (with ``value``) as the current caller spells a setting."""
    return _NAMER.get()(name, None if value is None else str(value))


def python_spelled() -> bool:
    """Whether messages now name settings as the Python API does (not inside a CLI command)."""
    return _NAMER.get() is python_setting


def key_source(variables: tuple[str, str] | None = None) -> str:
    """Where the caller's API key comes from: ``api_key`` from Python; from the command
    line (which never takes a key as an argument) the environment ``variables``, the
    generic one first (all three when the provider is not known)."""
    if python_spelled():
        return "api_key"
    if variables is None:
        return "RLM_API_KEY (or OPENAI_API_KEY / ANTHROPIC_API_KEY)"
    return f"{variables[0]} (or {variables[1]})"


def give_key(variables: tuple[str, str] | None = None) -> str:
    """How the caller gives a key: ``pass api_key=...`` or ``set RLM_API_KEY ...``."""
    if python_spelled():
        return "pass the key to RLM(api_key=KEY)"
    return f"set {key_source(variables)} in the environment"


@contextlib.contextmanager
def settings_spelled_as(namer: SettingNamer) -> Iterator[None]:
    """Within the block, messages name settings through ``namer``."""
    token = _NAMER.set(namer)
    try:
        yield
    finally:
        _NAMER.reset(token)
