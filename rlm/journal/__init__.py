"""The durable journal: volleys, task claims and verdicts, and the response cache.

A journal is a SQLite file (the default, in the user's state directory) or a
PostgreSQL database (``postgresql://...``, for workers on several machines),
with one schema and the same semantics.  :func:`open_store` opens one;
:class:`JournalStore` is the blocking store; :class:`ResponseCache` replays
completions.

The cache's names are imported on first use (PEP 562): they bring trio and the
providers, which ``rlm volley list``/``show`` never need.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from rlm.journal._open import default_journal_path, open_store
from rlm.journal.records import HolderTally, Owner, Recovered, Spend, TaskRow, Verdict, VolleyRow
from rlm.journal.store import JournalStore

if TYPE_CHECKING:
    from rlm.journal.cache import CacheMode, ResponseCache, parse_cache_mode, request_digest

__all__ = [
    "CacheMode",
    "HolderTally",
    "JournalStore",
    "Owner",
    "Recovered",
    "ResponseCache",
    "Spend",
    "TaskRow",
    "Verdict",
    "VolleyRow",
    "default_journal_path",
    "open_store",
    "parse_cache_mode",
    "request_digest",
]

_LAZY = {"CacheMode", "ResponseCache", "parse_cache_mode", "request_digest"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'rlm.journal' has no attribute {name!r}")
    value = getattr(importlib.import_module("rlm.journal.cache"), name)
    globals()[name] = value  # later reads skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
