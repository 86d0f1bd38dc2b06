"""The response cache: a completion stored under a digest of the request that asked for it.

The digest covers what decides the answer: the provider (its name and
endpoint), the model, the messages and every sampling parameter of the
request.  It leaves out what only schedules or labels a request (lane, call
id, depth, the parent call and volley task that streamed text is attributed
to, prompt-cache hints), so the same question asked from another place in the
call tree is the same entry, and a replay never depends on how call ids were
numbered.  ``rlm run --cache PATH`` and a volley's
journal use it; the gate consults it in one place, before the provider.

Modes: ``read-write`` answers from the cache and stores new answers;
``read-only`` answers from it but never writes; ``refresh`` never answers from
it and overwrites what it sends.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any, Literal, get_args

from rlm._spelling import setting
from rlm.errors import JournalError, UsageError
from rlm.journal._open import is_postgres, open_store
from rlm.journal._threads import GroupCommit, RunSync, thread_run_sync
from rlm.journal.store import JournalStore
from rlm.providers.base import Completion, CompletionRequest, Provider

__all__ = ["CacheMode", "ResponseCache", "open_cache_store", "parse_cache_mode", "request_digest"]

CacheMode = Literal["read-write", "read-only", "refresh"]

#: CompletionRequest fields that never change the answer (never sent to the provider,
#: or, for ``cache_*``, only hints where the provider may cache the prompt: the key
#: differs from run to run).
_NOT_IN_DIGEST = frozenset({
    "lane", "call_id", "depth", "parent_id", "task", "task_title", "cache_prefix",
    "cache_end", "cache_key",
})


def parse_cache_mode(value: str) -> CacheMode:
    for mode in get_args(CacheMode):
        if value == mode:
            return mode  # type: ignore[no-any-return]
    raise UsageError(f"--cache-mode must be read-write, read-only or refresh, got {value!r}")


def open_cache_store(path: str, mode: CacheMode) -> JournalStore:
    """The journal a run's cache lives in (``cache_path``, ``rlm run --cache``).

    ``read-only`` replays and never stores, so it never makes a new journal
    either: a mistyped path would otherwise replay nothing and send (and pay
    for) every request.  Errors name the cache's own setting.
    """
    if not path.strip():
        raise UsageError(
            f"{setting('cache_path')} is empty: give a journal file path (e.g. cache.sqlite3) "
            f"or a postgresql:// URL, or leave {setting('cache_path')} out to run without a cache"
        )
    if mode == "read-only" and not is_postgres(path) and not Path(path).expanduser().exists():
        raise UsageError(
            f"{setting('cache_path', path)}: no such cache; {setting('cache_mode', mode)} "
            "replays an existing one and never makes one (check the path, or leave out "
            f"{setting('cache_mode')} to start it)"
        )
    try:
        return open_store(path)
    except JournalError as exc:  # its message names --journal, the volley's flag
        raise JournalError(str(exc).replace("--journal", setting("cache_path"))) from exc


def provider_identity(provider: Provider) -> str:
    """The provider's name and, for HTTP providers, its endpoint."""
    url = getattr(provider, "url", None)
    return f"{provider.name} {url}" if isinstance(url, str) else provider.name


def request_digest(provider: str, request: CompletionRequest) -> str:
    fields = {
        name: value
        for name, value in dataclasses.asdict(request).items()
        if name not in _NOT_IN_DIGEST
    }
    text = json.dumps({"provider": provider, **fields}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _encode(completion: Completion) -> str:
    return json.dumps(dataclasses.asdict(completion), ensure_ascii=False, default=str)


def _decode(text: str) -> Completion:
    data: dict[str, Any] = json.loads(text)
    return Completion(**data)


class ResponseCache:
    """Looks up and stores completions in a journal's ``responses`` table."""

    def __init__(
        self,
        store: JournalStore,
        mode: CacheMode = "read-write",
        *,
        run_sync: RunSync = thread_run_sync,
    ) -> None:
        self.store = store
        self.mode = mode
        self._run_sync = run_sync
        self._writes: GroupCommit[tuple[str, str, str, str]] = GroupCommit(store.cache, run_sync)

    async def get(self, provider: Provider, request: CompletionRequest) -> Completion | None:
        """The stored answer to ``request``, or None (always None in ``refresh`` mode)."""
        if self.mode == "refresh":
            return None
        digest = request_digest(provider_identity(provider), request)
        text = await self._run_sync(self.store.cached, digest)
        return None if text is None else _decode(text)

    async def put(
        self, provider: Provider, request: CompletionRequest, completion: Completion
    ) -> None:
        """Store ``completion`` durably (nothing in ``read-only`` mode)."""
        if self.mode == "read-only":
            return
        identity = provider_identity(provider)
        entry = (request_digest(identity, request), identity, request.model, _encode(completion))
        await self._writes.write(entry)
