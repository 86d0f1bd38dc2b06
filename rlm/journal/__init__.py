"""The durable journal: volleys, task claims and verdicts, and the response cache.

A journal is a SQLite file (the default, in the user's state directory) or a
PostgreSQL database (``postgresql://...``, for workers on several machines),
with one schema and the same semantics.  :func:`open_store` opens one;
:class:`JournalStore` is the blocking store; :class:`ResponseCache` replays
completions.
"""

from rlm.journal._open import default_journal_path, open_store
from rlm.journal.cache import CacheMode, ResponseCache, parse_cache_mode, request_digest
from rlm.journal.records import Owner, Recovered, Spend, TaskRow, Verdict, VolleyRow
from rlm.journal.store import JournalStore

__all__ = [
    "CacheMode",
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
