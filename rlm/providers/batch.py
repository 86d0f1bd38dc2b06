"""What the providers' batch services share: their records, their protocol, their HTTP.

A batch service (:mod:`rlm.providers.batch_openai`, :mod:`rlm.providers.batch_anthropic`)
takes many requests at once and answers them within a day at about half the live
price.  A volley sends its tasks through one (``--batch-api``, :mod:`rlm.volley.batch`):
each request is the very body the live provider would post (its
``request_body``), carrying the task's id as its ``custom_id``; the results are
parsed by the live provider too (its ``parse_reply``), so a batch answer is the
same :class:`~rlm.providers.base.Completion` a live one is.

Every call is one attempt, through the run's HTTP client, with the key in a header
only; errors are :mod:`rlm.errors` types naming the URL (never the key).  Retrying,
and finding at the provider what a stopped process may have left there before
sending anything again, is the volley's (a create that timed out may have
created the batch).  Results are read as a stream of lines, each held to
``max_response_bytes``, never the whole file.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Protocol

import httpx2

from rlm.errors import ProviderError
from rlm.providers._http import (
    BAD_SHAPE,
    ERROR_BODY_BYTES,
    JSONProvider,
    ResponseLimits,
    endpoint_url,
    key_sent,
    read_body,
    send_once,
    status_error,
    too_large,
    translated_errors,
)
from rlm.providers.base import Completion, CompletionRequest

__all__ = [
    "BatchHTTP",
    "BatchOutcome",
    "BatchService",
    "BatchState",
    "encode_body",
    "file_chunks",
]

_PAGES = 50  # pages of a listing looked through when finding an upload or a batch again

#: Receives the outcomes of a batch's results a chunk at a time (and commits them).
Accept = Callable[[list["BatchOutcome"]], Awaitable[None]]


def encode_body(body: object) -> bytes:
    """``body`` as the bytes the live provider posts it (httpx2's JSON encoding)."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


@dataclass(frozen=True)
class BatchState:
    """A provider batch as the provider last described it.

    ``status`` is the provider's own word; ``ended`` whether it will change no more;
    ``succeeded``/``failed`` count its requests so far (failed: errored, expired or
    cancelled); ``output`` says where its results are; ``error`` why the whole batch
    failed (a request file the provider refused), when it did.
    """

    id: str
    status: str
    ended: bool
    total: int
    succeeded: int = 0
    failed: int = 0
    output: Mapping[str, str] = field(default_factory=dict)
    error: str | None = None
    created_at: float | None = None  # epoch seconds, as the provider says

    @property
    def processing(self) -> int:
        return max(0, self.total - self.succeeded - self.failed)

    def counts(self) -> dict[str, int]:
        return {"total": self.total, "succeeded": self.succeeded, "failed": self.failed,
                "processing": self.processing}


@dataclass(frozen=True)
class BatchOutcome:
    """One request's result: its completion, or the provider's reason it has none."""

    custom_id: str
    completion: Completion | None = None
    error: str | None = None


class BatchService(Protocol):
    """One provider's batch service (see the module docstring).

    A batch is sent as one file of ``head`` + items joined by ``separator`` + ``tail``
    (at most ``max_requests`` items and ``max_bytes`` bytes): uploaded first when
    ``needs_upload`` (``upload`` returns its id), then created.
    """

    name: str
    needs_upload: bool
    max_requests: int
    max_bytes: int
    head: bytes
    separator: bytes
    tail: bytes

    def body(self, request: CompletionRequest) -> bytes:
        """The live provider's body for ``request``, encoded."""
        ...

    def item(self, custom_id: str, body: bytes) -> bytes:
        """One request of a batch file."""
        ...

    async def find_upload(self, label: str, size: int) -> str | None:
        """The id of an upload named ``label`` of ``size`` bytes, if the provider has one."""
        ...

    async def upload(self, label: str, file: BinaryIO, size: int) -> str:
        """Upload the batch file (named ``label``); its id."""
        ...

    async def find(self, label: str, file_id: str | None, since: float,
                   count: int) -> BatchState | None:
        """A batch created from ``file_id`` (or, with no upload, one of ``count`` requests
        created since ``since``, epoch seconds), if the provider has one."""
        ...

    async def create(self, label: str, file_id: str | None, file: BinaryIO,
                     size: int) -> BatchState:
        """Create the batch (of the upload ``file_id``, or of ``file``'s requests)."""
        ...

    async def get(self, batch_id: str) -> BatchState: ...

    async def cancel(self, batch_id: str) -> BatchState: ...

    async def results(self, state: BatchState, accept: Accept, chunk: int = 500) -> None:
        """Read an ended batch's results, handing them to ``accept`` ``chunk`` at a time."""
        ...


class BatchHTTP(JSONProvider):
    """A batch service's HTTP calls under one base URL: the run's client, its headers (the
    key; ``user:password@`` in the URL as Basic auth, as every provider sends it) and its
    response limits."""

    name = "batch"

    def __init__(self, client: httpx2.AsyncClient, base_url: str, headers: dict[str, str],
                 limits: ResponseLimits | None = None) -> None:
        super().__init__(client, base_url, headers, limits)
        # httpx2 sets each body's own Content-Type (JSON, multipart with its boundary).
        self._sent = {k: v for k, v in self._headers.items() if k != "Content-Type"}

    def where(self, path: str) -> tuple[httpx2.URL, str]:
        """``path`` under the base URL: where to send, and how errors name it."""
        return httpx2.URL(endpoint_url(str(self._target), path)), endpoint_url(self.url, path)

    def same_origin(self, url: str) -> bool:
        """Whether ``url`` (one the provider gave, as a results URL) is on the base URL's
        scheme, host and port: only there is the key sent."""
        given, base = httpx2.URL(url), self._target
        return (given.scheme, given.host, given.port) == (base.scheme, base.host, base.port)

    async def call(self, method: str, path: str, **content: Any) -> Any:
        """One call to ``path`` (httpx2 ``content``: json, files, data, params); its JSON."""
        target, shown = self.where(path)
        headers = {**self._sent, **content.pop("headers", {})}
        response = await send_once(self._client, method, shown, headers, limits=self.limits,
                                   target=target, **content)
        try:
            return response.json()
        except BAD_SHAPE as exc:
            raise ProviderError(
                f"{shown} answered with something that is not JSON: {response.text[:200]!r}",
                url=shown,
            ) from exc

    async def lines(self, path: str, *, absolute: bool = False) -> AsyncGenerator[bytes]:
        """The lines of ``path``'s body (or of the URL ``path``, ``absolute``), each at most
        ``max_response_bytes``, as they come."""
        target, shown = (httpx2.URL(path), path) if absolute else self.where(path)
        cap = self.limits.max_response_bytes
        async with self._opened(target, shown) as streamed:
            buffer = bytearray()
            with translated_errors(shown):
                async for chunk in streamed.aiter_bytes():
                    buffer += chunk
                    while (end := buffer.find(b"\n")) >= 0:
                        if end > cap:
                            raise too_large(shown, cap)
                        line = bytes(buffer[:end])
                        del buffer[: end + 1]
                        if line.strip():
                            yield line
                    if len(buffer) > cap:
                        raise too_large(shown, cap)
            if buffer.strip():
                yield bytes(buffer)

    async def listed(self, path: str, params: Mapping[str, Any],
                     cursor: str = "after") -> AsyncGenerator[dict[str, Any]]:
        """The items of a listing at ``path``, page after page (newest first, as both
        providers list), up to ``_PAGES`` pages; ``cursor`` is the parameter that asks for
        the page after an item's id."""
        after: str | None = None
        for _ in range(_PAGES):
            page = await self.call("GET", path, params={**params, **({cursor: after} if after
                                                                     else {})})
            items = page.get("data") if isinstance(page, dict) else None
            if not isinstance(items, list):
                raise self.bad(path, page, "a listing")
            for item in items:
                if isinstance(item, dict):
                    yield item
            if not page.get("has_more") or not items or not isinstance(items[-1], dict):
                return
            after = str(items[-1].get("id"))

    def bad(self, path: str, what: object, shape: str) -> ProviderError:
        """The error for an answer at ``path`` that is not ``shape``."""
        _, shown = self.where(path)
        return ProviderError(f"{shown} answered with something that is not {shape}: "
                             f"{str(what)[:200]!r}", url=shown)

    async def outcomes(self, path: str, parse: Callable[[bytes, str], BatchOutcome],
                       accept: Accept, chunk: int, *, absolute: bool = False) -> None:
        """Hand the outcomes ``parse`` reads from the lines of ``path`` to ``accept``,
        ``chunk`` at a time (the last chunk may be shorter)."""
        outcomes: list[BatchOutcome] = []
        async with aclosing(self.lines(path, absolute=absolute)) as lines:
            async for line in lines:
                outcomes.append(parse(line, path))
                if len(outcomes) >= chunk:
                    await accept(outcomes)
                    outcomes = []
        if outcomes:
            await accept(outcomes)

    @asynccontextmanager
    async def _opened(self, target: httpx2.URL, shown: str) -> AsyncIterator[httpx2.Response]:
        with translated_errors(shown):
            async with self._client.stream("GET", target, headers=self._sent) as streamed:
                if streamed.status_code >= 400:
                    failed = await read_body(streamed, shown, ERROR_BODY_BYTES, keep_head=True)
                    raise status_error(shown, failed, key_sent=key_sent(self._sent))
                yield streamed


async def file_chunks(file: BinaryIO, size: int = 1 << 16) -> AsyncIterator[bytes]:
    """``file`` from where it is, ``size`` bytes at a time (a request body streamed from
    disk, never held whole)."""
    while data := file.read(size):
        yield data
