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

__all__ = ["setting", "settings_spelled_as"]

_NAMER: ContextVar[SettingNamer] = ContextVar("rlm_setting_namer", default=python_setting)


def setting(name: str, value: object = None) -> str:
    """``name`` (with ``value``) as the current caller spells a setting."""
    return _NAMER.get()(name, None if value is None else str(value))


@contextlib.contextmanager
def settings_spelled_as(namer: SettingNamer) -> Iterator[None]:
    """Within the block, messages name settings through ``namer``."""
    token = _NAMER.set(namer)
    try:
        yield
    finally:
        _NAMER.reset(token)
