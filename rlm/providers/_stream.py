"""Streaming over the shared HTTP client: Server-Sent Events in, text pieces out.

The SSE framing is httpx2's own :class:`httpx2.EventSource` (derived from
httpx-sse and shipped inside httpx2).  The httpx-sse package itself does not
fit: it imports ``httpx``, and our client is httpx2, whose import name is
``httpx2``; installing httpx beside it would bring a second HTTP stack.

One attempt per call, like :func:`rlm.providers._http.post_json`.  A stream
that fails part-way raises a retryable :class:`ProviderConnectionError` (the
connection dropped, the body ended before the provider's final event, or no
byte came for ``idle_timeout`` seconds) or the status error an error event
names; the text already handed to ``on_text`` then belongs to a failed
attempt and is never part of a Completion.  The idle timeout is httpx2's read
timeout: it bounds every wait for bytes, headers included, on trio's clock.
The whole attempt, its stream read to the end, must finish within
``request_timeout``, however steadily the bytes come.
A stream is read under the same byte cap as a whole body (``max_response_bytes``):
past it, counting the events' framing as it came over the wire, the attempt fails
with a ProviderResponseError naming the setting, and no event is held past it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from typing import Any, cast

import httpx2

from rlm._spelling import setting
from rlm.errors import ProviderConnectionError, ProviderResponseError, ProviderTimeout
from rlm.providers._http import (
    BAD_SHAPE,
    ERROR_BODY_BYTES,
    JSONProvider,
    ResponseLimits,
    clean_text,
    client_timeout,
    finished_within,
    key_sent,
    read_body,
    reason,
    status_error,
    too_large,
    unreachable_error,
)
from rlm.providers.base import Completion, TextSink

__all__ = ["JSONEventReader", "StreamingJSONProvider", "stream_completion"]


class JSONEventReader:
    """One provider's reading of its stream: JSON events in, text pieces out.

    Subclasses read one decoded event in :meth:`read` (raising a ProviderError
    for an error event, setting ``finished`` at the final one) and build the
    answer in :meth:`completion`.  An event of the wrong shape is a
    ProviderResponseError naming ``what`` the stream should have carried.
    """

    what = "JSON event"

    def __init__(self, url: str) -> None:
        self.url = url
        self.finished = False
        self.parts: list[str] = []
        self.chars = 0  # in parts, together

    def feed(self, event: httpx2.ServerSentEvent) -> str:
        """The text ``event`` adds ('' for none)."""
        try:
            data = json.loads(event.data)
            if not isinstance(data, dict):
                raise TypeError("an event is not an object")
            text = self.read(event, data)
        except BAD_SHAPE as exc:
            raise ProviderResponseError(
                f"{self.url} sent a stream event that is not a {self.what}: {event.data[:200]!r}",
                url=self.url,
            ) from exc
        text = clean_text(text)
        if text:
            self.parts.append(text)
            self.chars += len(text)
        return text

    def read(self, event: httpx2.ServerSentEvent, data: dict[str, Any]) -> str:
        raise NotImplementedError

    def completion(self, response: httpx2.Response) -> Completion:
        """The whole answer, once ``finished``."""
        raise NotImplementedError


class StreamingJSONProvider(JSONProvider):
    """A JSON provider that can also stream its answers as Server-Sent Events."""

    async def post_stream(
        self,
        body: dict[str, Any],
        *,
        reader: JSONEventReader,
        on_text: TextSink,
        whole: Callable[[httpx2.Response], Completion],
    ) -> Completion:
        return await stream_completion(
            self._client,
            self.url,
            body,
            self._headers,
            reader=reader,
            on_text=on_text,
            limits=self.limits,
            whole=whole,
            target=self._target,
        )


async def stream_completion(
    client: httpx2.AsyncClient,
    url: str,
    body: dict[str, Any],
    headers: dict[str, str],
    *,
    reader: JSONEventReader,
    on_text: TextSink,
    limits: ResponseLimits,
    whole: Callable[[httpx2.Response], Completion],
    target: httpx2.URL | None = None,
) -> Completion:
    """POST ``body`` once (to ``target``, ``url`` parsed, when the caller has it) and
    read the answer as it streams, under ``limits``.

    A server that ignores the stream request and answers with one JSON body is
    read with ``whole``, and its text is passed on as a single piece.
    """
    idle_timeout, cap = limits.stream_idle_timeout, limits.max_response_bytes
    base = client.timeout
    timeout = httpx2.Timeout(
        connect=base.connect, read=idle_timeout, write=base.write, pool=base.pool
    )
    opened: list[httpx2.Response] = []  # the response, once its head came

    def so_far() -> str:
        return f"; {reader.chars} chars received, discarded"

    try:
        with finished_within(url, limits.request_timeout, so_far):
            async with client.stream(
                "POST",
                target or url,
                json=body,
                headers={**headers, "Accept": "text/event-stream"},
                timeout=timeout,
            ) as response:
                opened.append(response)
                if response.status_code >= 400:
                    failed = await read_body(response, url, ERROR_BODY_BYTES, keep_head=True)
                    raise status_error(url, failed, key_sent=key_sent(headers))
                kind = response.headers.get("content-type", "").partition(";")[0]
                if kind.strip().lower() != "text/event-stream":
                    completion = whole(await read_body(response, url, cap))
                    if completion.text:
                        await on_text(completion.text)
                    return completion
                await _read_events(response, url, reader, on_text, cap)
                return reader.completion(response)
    except httpx2.ReadTimeout as exc:
        name = setting("stream_idle_timeout")
        raise ProviderTimeout(
            f"{url} stalled: no bytes for {idle_timeout:g} s ({name}{so_far()})",
            url=url,
            limit="stream_idle_timeout",
            seconds=idle_timeout,
            brief=f"no bytes for {idle_timeout:g}s ({name})",
        ) from exc
    except httpx2.TimeoutException as exc:
        raise client_timeout(url, exc) from exc
    except httpx2.SSEError as exc:
        if opened and opened[0].num_bytes_downloaded > cap:  # one event past the cap
            raise too_large(url, cap) from exc
        raise ProviderResponseError(f"{url} sent a bad event stream: {exc}", url=url) from exc
    except httpx2.TransportError as exc:
        received = reader.chars
        what = "dropped the stream" if received else "could not be read"
        raise (None if received else unreachable_error(url, exc)) or ProviderConnectionError(
            f"{url} {what} ({reason(exc)}{so_far()})", url=url,
            brief="the stream dropped" if received else (
                "the server closed the stream" if opened else None),
        ) from exc
    except httpx2.DecodingError as exc:  # a compressed body that does not decompress
        raise ProviderResponseError(
            f"{url} sent a body that cannot be decoded: {reason(exc)}", url=url
        ) from exc


async def _read_events(
    response: httpx2.Response, url: str, reader: JSONEventReader, on_text: TextSink, cap: int
) -> None:
    """Feed ``response``'s events to ``reader`` until its final one, passing text on;
    past ``cap`` bytes (or characters of text) :func:`too_large` is raised."""
    # EventSource iterates with an async generator: close it on every exit.
    # No event may be larger than the cap (httpx2 raises SSEError past it).
    source = cast(
        AsyncGenerator[httpx2.ServerSentEvent, None],
        aiter(httpx2.EventSource(response, max_event_size=cap)),
    )
    async with aclosing(source) as events:
        async for event in events:
            # Bytes as they came over the wire, framing included; and the text kept,
            # which a compressed stream could make larger.
            if max(response.num_bytes_downloaded, reader.chars) > cap:
                raise too_large(url, cap)
            if reader.finished:
                continue  # read to the end so the connection can be reused
            text = reader.feed(event)
            if text:
                await on_text(text)
    if not reader.finished:
        raise ProviderConnectionError(
            f"{url} ended the stream before its final event "
            f"({reader.chars} chars received, discarded)",
            url=url,
            brief="the stream ended early",
        )
