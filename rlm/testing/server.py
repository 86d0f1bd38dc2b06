"""The fixture model behind a real OpenAI-compatible HTTP endpoint (trio + h11).

For loopback tests, demos and benchmarks: ``POST /v1/chat/completions`` answers
with :func:`rlm.providers.fixture.fixture_reply` once a latency has passed since
the server read the request, slept inside the handler (so concurrent requests
overlap, and the reply is built while the latency runs), optionally behind a
bearer key, a hidden concurrency cap, a requests-per-minute limit and seeded
fault injection.  ``POST /v1/messages`` speaks Anthropic's dialect, prompt caching
by ``cache_control`` breakpoints included (billed in ``cache_read_input_tokens`` and
``cache_creation_input_tokens``).  Volley tasks report cached prompt tokens
(``usage.prompt_tokens_details.cached_tokens``) from a simulated prefix cache.
``GET /v1/models`` lists the fixture names; ``GET /stats`` reports what the
server saw (and is not counted).  OpenAI's Batch API (``/v1/files``,
``/v1/batches``) and Anthropic's Message Batches (``/v1/messages/batches``) are
served by :mod:`rlm.testing.batch_service`, answering each request as this
server would.

HTTP/1.1 keep-alive is served by h11, one task per connection inside
``trio.serve_listeners``; a client that disconnects or speaks garbage only
ends its own connection.  Cancelling the task running
:meth:`FixtureServer.serve` closes every listener and connection.
Nothing is logged per request.
"""

from __future__ import annotations

import hmac
import json
import math
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from http import HTTPStatus
from typing import Any, Literal, NamedTuple

import h11
import trio

from rlm.fixtures.draws import lognormal
from rlm.providers import fixture as scripted
from rlm.providers.base import Message
from rlm.testing.anthropic_dialect import (
    MESSAGES_PATHS,
    CacheBlock,
    DialectError,
    PromptCache,
    anthropic_message,
    cache_blocks,
    parse_anthropic,
)
from rlm.testing.batch_service import BatchService, BatchServiceOptions
from rlm.testing.stream_reply import StreamReply, anthropic_stream_reply, stream_reply

__all__ = ["FixtureServer", "FixtureServerOptions", "FixtureServerStats", "RequestHead"]

MAX_BODY_BYTES = 64 * 1024 * 1024
_CHAT_PATHS = (b"/v1/chat/completions", b"/chat/completions")
_MODEL_PATHS = (b"/v1/models", b"/models")
_MODEL_IDS = ("fixture", "fixture-batched", "fixture-sequential")
_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
_GARBAGE = b"<html><body><h1>502 Bad Gateway</h1><p>fixture garbage mode</p></body></html>"


@dataclass
class FixtureServerOptions:
    """How the fixture server behaves.  Fault rates are probabilities per chat request.

    One seeded draw per chat request picks at most one fault, in the order
    ``rate_429`` (immediate 429 with ``retry-after``), then, after the latency,
    ``fail_500``, ``fail_529`` and ``drop`` (close without a response).

    A request with ``"stream": true`` is answered with Server-Sent Events:
    ``chunk_chars`` characters per event, ``chunk_delay`` seconds before each
    (``model_chunk_delay`` sets it per model name, so one test can run fast and
    slow streams side by side); a request that does not stream waits for all
    its pieces' delays, then gets the whole answer.  The first ``cut_streams`` streamed replies stop
    half-way and the connection is closed, as if it had dropped.

    ``latency_sigma`` > 0 makes sub-query latencies lognormal with median
    ``sub_latency``: seeded draws (``seed``), handed out in the order requests
    arrive; each reply's id then ends with the latency it was given
    (``chatcmpl-fixture-7-0.412345s``), so a client's trace alone says what the
    server did (``rlm bench`` rebuilds its physical limit from it).

    ``max_concurrent`` (a hidden cap: requests over it get an immediate 429)
    and ``rpm`` are enforced before any fault is drawn.  ``rpm`` is a GCRA
    limit, like providers' token buckets: ``rpm_burst`` requests may arrive back
    to back, after that one per ``60/rpm`` seconds; an arrival up to 10% of that
    interval early is let through (network jitter of an evenly paced client),
    unless ``rpm_strict``: then a strict token bucket, as some providers enforce
    per second, refuses an arrival any earlier than its interval allows.
    Every 429 says ``retry-after: <retry_after>`` seconds.  With
    ``announce_rpm`` every chat reply announces the limit as providers do
    (``x-ratelimit-limit-requests``), so a client can learn it.

    Three switches make it a local server as llama.cpp's is (not refusing, but
    queueing; no usage in streams; a small context):

    - ``slots``: that many requests are worked on at once; the others wait their
      turn in arrival order (never refused), each holding its slot until its reply is
      sent.  A waiting request whose client went away still takes its turn: the
      server finds out only when it sends the reply.
    - ``stream_usage=False``: a streamed reply never carries usage, whatever
      ``stream_options`` asks.
    - ``context_limit``: a chat request whose prompt (characters / 4) has that many
      tokens or more is refused with a 400 in llama.cpp's words (its Python server's,
      as OpenAI's): "This model's maximum context length is N tokens. ...",
      ``code: context_length_exceeded``.  The output cap is not checked: the server
      shortens it to what the context has left, as llama.cpp does.
    """

    root_latency: float = 0.0
    sub_latency: float = 0.0
    chunks: int = 16
    api_key: str | None = None
    max_concurrent: int | None = None
    fail_500: float = 0.0
    fail_529: float = 0.0
    drop: float = 0.0
    rate_429: float = 0.0
    garbage: bool = False
    seed: int = 0
    chunk_chars: int = 16
    chunk_delay: float = 0.0
    model_chunk_delay: dict[str, float] = field(default_factory=dict)
    cut_streams: int = 0
    rpm: float | None = None
    rpm_burst: int = 1
    rpm_strict: bool = False
    retry_after: float = 1.0
    latency_sigma: float = 0.0
    announce_rpm: bool = False
    #: The batch services' completion delay, failures, expiry (rlm.testing.batch_service).
    batch: BatchServiceOptions = field(default_factory=BatchServiceOptions)
    slots: int | None = None
    stream_usage: bool = True
    context_limit: int | None = None

    def __post_init__(self) -> None:
        rates = (self.rate_429, self.fail_500, self.fail_529, self.drop)
        if any(not 0.0 <= rate <= 1.0 for rate in rates) or sum(rates) > 1.0:
            raise ValueError("fault rates must be in [0, 1] and sum to at most 1")
        delays = (self.root_latency, self.sub_latency, self.chunk_delay, self.latency_sigma)
        if min(delays + tuple(self.model_chunk_delay.values())) < 0:
            raise ValueError("latencies and delays must not be negative")
        if self.chunk_chars < 1 or self.cut_streams < 0:
            raise ValueError("chunk_chars must be at least 1 and cut_streams at least 0")
        if self.chunks < 1 or (self.max_concurrent is not None and self.max_concurrent < 1):
            raise ValueError("chunks and max_concurrent must be at least 1")
        if (self.rpm is not None and self.rpm <= 0) or self.rpm_burst < 1 or self.retry_after < 0:
            raise ValueError("rpm must be positive, rpm_burst at least 1, retry_after >= 0")
        if min(self.slots or 1, self.context_limit or 1) < 1:
            raise ValueError("slots and context_limit must be at least 1")


@dataclass
class FixtureServerStats:
    """What the server has seen.  ``/stats`` requests are not counted."""

    total_requests: int = 0
    connections: int = 0
    open_connections: int = 0
    by_status: dict[int, int] = field(default_factory=dict)
    dropped: int = 0
    root_requests: int = 0
    sub_requests: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    streams: int = 0
    cut_streams: int = 0
    queued: int = 0  # chat requests waiting for a slot (``slots``)
    max_queued: int = 0

    def as_json(self) -> dict[str, Any]:
        """The stats as served by ``GET /stats`` (status codes as string keys)."""
        data = asdict(self)
        data["by_status"] = {str(code): n for code, n in sorted(self.by_status.items())}
        return data


class RequestHead(NamedTuple):
    """A request's method, target and headers (lower-case names), as the server routes it."""

    method: bytes
    target: bytes
    headers: list[tuple[bytes, bytes]]


@dataclass
class _Reply:
    status: int
    body: bytes
    content_type: bytes = b"application/json"
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    close: bool = False


class _BadRequest(Exception):
    """The chat request body is not what the OpenAI API accepts."""


def _json_reply(status: int, payload: object, **extra: Any) -> _Reply:
    return _Reply(status, json.dumps(payload).encode(), **extra)


def _error(status: int, message: str, kind: str, code: str | None = None, **extra: Any) -> _Reply:
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return _json_reply(status, body, **extra)


def _rate_limited(message: str, retry_after: float) -> _Reply:
    headers = [(b"retry-after", f"{retry_after:g}".encode())]
    return _error(429, message, "rate_limit_exceeded", "rate_limit_exceeded", headers=headers)


def _sent(conn: h11.Connection, event: h11.Event) -> bytes:
    """The bytes h11 produces for ``event`` (``None`` only for ConnectionClosed)."""
    return conn.send(event) or b""


@dataclass
class _Chat:
    messages: list[Message]
    model: str
    stream: bool = False
    include_usage: bool = False
    dialect: Literal["openai", "anthropic"] = "openai"
    schema: dict[str, Any] | None = None
    number: int = 0  # how many requests the server had seen when this one arrived: its id
    max_tokens: int | None = None
    blocks: list[CacheBlock] = field(default_factory=list)  # Anthropic's prompt-cache view


def _parse_chat(body: bytes, path: bytes) -> _Chat:
    """The messages, model and stream flags of a chat request; raises ``_BadRequest``."""
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _BadRequest(f"request body is not valid JSON: {exc}") from exc
    if not isinstance(payload, dict) or not isinstance(payload.get("messages"), list):
        raise _BadRequest("request body must be a JSON object with a 'messages' list")
    model = payload.get("model", "fixture")
    if not isinstance(model, str):
        raise _BadRequest("'model' must be a string")
    try:
        scripted.parse_fixture_model(model)
    except ValueError as exc:
        raise _BadRequest(str(exc)) from exc
    if path in MESSAGES_PATHS:
        try:
            said, tool_schema = parse_anthropic(payload)
            blocks = cache_blocks(payload)
        except DialectError as exc:
            raise _BadRequest(str(exc)) from exc
        return _Chat(said, model, payload.get("stream") is True, dialect="anthropic",
                     schema=tool_schema, blocks=blocks)
    messages: list[Message] = []
    for item in payload["messages"]:
        role = _ROLES.get(str(item.get("role"))) if isinstance(item, dict) else None
        content = item.get("content") if isinstance(item, dict) else None
        if isinstance(content, list):  # content parts: keep the text ones
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if role is None or not isinstance(content, str):
            raise _BadRequest("each message needs a role (system/user/assistant) and content")
        messages.append(Message(role=role, content=content))  # type: ignore[typeddict-item]
    options = payload.get("stream_options")
    usage = isinstance(options, dict) and options.get("include_usage") is True
    form = payload.get("response_format")
    schema = None
    if isinstance(form, dict) and form.get("type") == "json_schema":
        spec = form.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise _BadRequest("response_format.json_schema.schema must be an object")
    cap = payload.get("max_tokens")
    return _Chat(messages, model, payload.get("stream") is True, usage, schema=schema,
                 max_tokens=cap if isinstance(cap, int) else None)


def _chat_completion(
    model: str, text: str, usage: dict[str, int], cached: int, reply_id: str
) -> dict[str, Any]:
    """A chat completion's body (``cached``: prompt tokens read from the prefix cache)."""
    return {
        "id": reply_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": scripted.FIXTURE_FINGERPRINT,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                     "finish_reason": "stop"}],
        "usage": {**usage, "prompt_tokens_details": {"cached_tokens": cached}}
        if cached else usage,
    }


class FixtureServer:
    """An OpenAI-compatible server for the fixture model.  See the module docstring."""

    def __init__(
        self,
        options: FixtureServerOptions | None = None,
        *,
        sleep: Callable[[float], Awaitable[None]] = trio.sleep,
    ) -> None:
        """``sleep`` waits out each latency: ``trio.sleep`` (virtual time in tests), or
        :func:`rlm.bench.timer.precise_sleep` when it is measured (``rlm fixture-server``)."""
        self.options = options or FixtureServerOptions()
        self._sleep = sleep
        self.stats = FixtureServerStats()
        self._random = random.Random(self.options.seed)
        self._latencies = random.Random(f"latency-{self.options.seed}")  # apart from faults
        self._cache = scripted.PrefixCache()
        self._prompt_cache = PromptCache()  # the Anthropic dialect's, by breakpoints
        self._rpm_tat = -math.inf  # GCRA: the theoretical arrival time of the next request
        self.batches = BatchService(self.options.batch, answer=self.answer)
        # Fair (first come, first served), as a local server's queue is.
        slots = self.options.slots
        self._slots = trio.Semaphore(slots) if slots is not None else None

    async def serve(self, host: str = "127.0.0.1", port: int = 0, *,
                    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen on ``host:port`` (0 = any free port) and serve until cancelled.

        Reports the bound port through ``task_status.started(port)``.  Raises
        ``OSError`` (before starting) when the address cannot be bound.
        """
        listeners = await trio.open_tcp_listeners(port, host=host)
        await self.serve_listeners(listeners, task_status=task_status)

    async def serve_listeners(self, listeners: Sequence[trio.SocketListener], *,
                              task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve on already-bound listeners until cancelled; reports the first port."""
        task_status.started(int(listeners[0].socket.getsockname()[1]))
        await trio.serve_listeners(self._handle_connection, list(listeners))

    async def _handle_connection(self, stream: trio.abc.Stream) -> None:
        self.stats.connections += 1
        self.stats.open_connections += 1
        try:
            await self._serve_connection(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError):
            # The client went away or broke HTTP mid-exchange: only this connection ends.
            return
        finally:
            self.stats.open_connections -= 1
            await trio.aclose_forcefully(stream)

    async def _serve_connection(self, stream: trio.abc.Stream) -> None:
        """Answer the connection's requests in turn until it closes."""
        conn = h11.Connection(h11.SERVER)
        while True:
            try:
                request = await self._read_request(conn, stream)
            except h11.RemoteProtocolError as exc:
                await self._send(conn, stream, _error(400, str(exc), "invalid_request_error",
                                                      close=True))
                return
            if request is None:
                return
            head, body = request
            if len(body) > MAX_BODY_BYTES:
                msg = f"request body is larger than {MAX_BODY_BYTES} bytes"
                await self._send(conn, stream, _error(413, msg, "payload_too_large", close=True))
                return
            async with self._slot(head):
                reply = await self._dispatch(head, body)
                if reply is None:  # fault injection: drop the connection without a response
                    return
                if isinstance(reply, StreamReply):
                    if not await self._send_stream(conn, stream, reply):
                        return  # a cut stream: close the connection mid-body
                else:
                    await self._send(conn, stream, reply)
            if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                return
            conn.start_next_cycle()

    @asynccontextmanager
    async def _slot(self, head: RequestHead) -> AsyncIterator[None]:
        """Hold one of the ``slots`` (waiting in turn for it) while a chat request is
        answered, its reply sent; other requests and a server without slots go at once."""
        path = head.target.split(b"?", 1)[0]
        if self._slots is None or (path not in _CHAT_PATHS and path not in MESSAGES_PATHS):
            yield
            return
        stats = self.stats
        stats.queued += 1
        stats.max_queued = max(stats.max_queued, stats.queued)
        try:
            await self._slots.acquire()
        finally:
            stats.queued -= 1
        try:
            yield
        finally:
            self._slots.release()

    async def _read_request(
        self, conn: h11.Connection, stream: trio.abc.Stream
    ) -> tuple[RequestHead, bytes] | None:
        """The next request and its body, or ``None`` when the client closed."""
        head: RequestHead | None = None
        body = bytearray()
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                if conn.they_are_waiting_for_100_continue:  # e.g. curl with a big body
                    go_on = h11.InformationalResponse(status_code=100, headers=[])
                    await stream.send_all(_sent(conn, go_on))
                conn.receive_data(bytes(await stream.receive_some(65536)))
            elif isinstance(event, h11.Request):
                head = RequestHead(event.method, event.target, list(event.headers))
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > MAX_BODY_BYTES:  # stop reading; the caller answers 413
                    break
            elif isinstance(event, h11.EndOfMessage):
                break
            else:  # ConnectionClosed, or PAUSED after a protocol switch we never accept
                return None
        if head is None:
            return None
        return head, bytes(body)

    async def _send(self, conn: h11.Connection, stream: trio.abc.Stream, reply: _Reply) -> None:
        """Send ``reply`` whole."""
        await stream.send_all(
            _sent(conn, self._response_head(reply)) + _sent(conn, h11.Data(data=reply.body))
            + _sent(conn, h11.EndOfMessage())
        )

    @staticmethod
    def _response_head(reply: _Reply) -> h11.Response:
        """The h11 event of ``reply``'s status line and headers."""
        headers = [
            (b"content-type", reply.content_type),
            (b"content-length", str(len(reply.body)).encode()),
            (b"server", b"rlm-fixture"),
            *reply.headers,
        ]
        if reply.close:
            headers.append((b"connection", b"close"))
        # Every status sent here is standard except Anthropic's 529.
        reason = b"Overloaded" if reply.status == 529 else HTTPStatus(reply.status).phrase.encode()
        return h11.Response(status_code=reply.status, headers=headers, reason=reason)

    async def _send_stream(
        self, conn: h11.Connection, stream: trio.abc.Stream, reply: StreamReply
    ) -> bool:
        """Send the events one by one (chunked); False when the reply was cut."""
        headers = [
            (b"content-type", b"text/event-stream"),
            (b"cache-control", b"no-cache"),
            (b"server", b"rlm-fixture"),
        ]
        await stream.send_all(_sent(conn, h11.Response(status_code=200, headers=headers)))
        for delay, event in zip(reply.delays, reply.events, strict=True):
            await trio.sleep(delay)
            await stream.send_all(_sent(conn, h11.Data(data=event)))
        if reply.cut:
            return False
        await stream.send_all(_sent(conn, h11.EndOfMessage()))
        return conn.our_state is h11.DONE and conn.their_state is h11.DONE

    async def _dispatch(self, head: RequestHead, body: bytes) -> _Reply | StreamReply | None:
        path = head.target.split(b"?", 1)[0]
        if path == b"/stats" and head.method == b"GET":
            return _json_reply(200, self.stats.as_json())
        self.stats.total_requests += 1
        reply = await self._route(head, path, body)
        if reply is None:
            self.stats.dropped += 1
        else:
            self.stats.by_status[reply.status] = self.stats.by_status.get(reply.status, 0) + 1
        return reply

    async def _route(
        self, head: RequestHead, path: bytes, body: bytes
    ) -> _Reply | StreamReply | None:
        if self.batches.serves(path):
            if not self._authorized(head):
                return _error(401, "Incorrect API key provided.", "invalid_request_error",
                              "invalid_api_key")
            status, payload, kind = await self.batches.handle(head, path, body)
            return _Reply(status, payload, content_type=kind)
        if path not in _CHAT_PATHS and path not in _MODEL_PATHS and path not in MESSAGES_PATHS:
            return _error(404, f"no such endpoint: {path.decode(errors='replace')}",
                          "invalid_request_error", "not_found")
        expected = b"GET" if path in _MODEL_PATHS else b"POST"
        if head.method != expected:
            return _error(405, f"use {expected.decode()} here", "invalid_request_error",
                          headers=[(b"allow", expected)])
        if not self._authorized(head):
            return _error(401, "Incorrect API key provided.", "invalid_request_error",
                          "invalid_api_key")
        if path in _MODEL_PATHS:
            models = [{"id": m, "object": "model", "created": 0, "owned_by": "rlm-fixture"}
                      for m in _MODEL_IDS]
            return _json_reply(200, {"object": "list", "data": models})
        try:
            chat = _parse_chat(body, path)
        except _BadRequest as exc:
            return _error(400, str(exc), "invalid_request_error")
        # Read now, not once the latency is over: by then requests in flight together
        # would all read the same count and share a reply id (streamed or not).
        chat.number = self.stats.total_requests
        if (overflow := self._past_context(chat)) is not None:
            return overflow
        cap = self.options.max_concurrent
        if cap is not None and self.stats.in_flight >= cap:
            return _rate_limited(f"more than {cap} requests in flight", self.options.retry_after)
        if not self._within_rpm():
            refused = _rate_limited(f"more than {self.options.rpm:g} requests per minute",
                                    self.options.retry_after)
            refused.headers += self._announced()
            return refused
        self.stats.in_flight += 1
        self.stats.max_in_flight = max(self.stats.max_in_flight, self.stats.in_flight)
        try:
            return await self._complete(chat)
        finally:
            self.stats.in_flight -= 1

    def _past_context(self, chat: _Chat) -> _Reply | None:
        """llama.cpp's 400 when the prompt does not fit ``context_limit`` (else None)."""
        limit = self.options.context_limit
        prompt = math.ceil(sum(len(m["content"]) for m in chat.messages) / 4)
        if limit is None or prompt < limit:
            return None
        cap = chat.max_tokens or 0
        return _error(
            400, f"This model's maximum context length is {limit} tokens. However, you "
            f"requested {prompt + cap} tokens ({prompt} in the messages, {cap or None} in the "
            "completion). Please reduce the length of the messages or completion.",
            "invalid_request_error", "context_length_exceeded",
        )

    def _within_rpm(self) -> bool:
        """GCRA: admit the request and charge it, or refuse it (see the options)."""
        rpm = self.options.rpm
        if rpm is None:
            return True
        interval = 60.0 / rpm
        now = trio.current_time()
        jitter = 0.0 if self.options.rpm_strict else 0.1 * interval
        tolerance = (self.options.rpm_burst - 1) * interval + jitter
        if now < self._rpm_tat - tolerance:
            return False
        self._rpm_tat = max(self._rpm_tat, now) + interval
        return True

    def _authorized(self, head: RequestHead) -> bool:
        if self.options.api_key is None:
            return True
        headers = dict(head.headers)
        if b"x-api-key" in headers:  # the Anthropic dialect's header
            return hmac.compare_digest(headers[b"x-api-key"], self.options.api_key.encode())
        expected = f"Bearer {self.options.api_key}".encode()
        return hmac.compare_digest(headers.get(b"authorization", b""), expected)

    async def _complete(self, chat: _Chat) -> _Reply | StreamReply | None:
        opts = self.options
        messages, model = chat.messages, chat.model
        draw = self._random.random()
        if draw < opts.rate_429:
            return _rate_limited("Rate limit reached (fixture fault injection).", opts.retry_after)
        draw -= opts.rate_429
        fault = ("500" if draw < opts.fail_500
                 else "529" if draw - opts.fail_500 < opts.fail_529
                 else "drop" if draw - opts.fail_500 - opts.fail_529 < opts.drop else None)
        root = scripted.is_root_request(messages)
        # The latency counts from now, the request read, and the fixture model answers
        # while it runs, as a provider's does: building the reply does not add to it.
        # (The model name was checked when the request was parsed.)
        latency = self._latency(root)
        deadline = trio.current_time() + latency
        cached = self._cache.lookup(messages)
        text = scripted.fixture_reply(messages, model, opts.chunks, chat.schema)
        usage = self._usage(messages, text)
        if chat.dialect == "anthropic":
            read, written = self._prompt_cache.usage(model, chat.blocks)
            usage.update(cache_read_input_tokens=read, cache_creation_input_tokens=written)
        ready = self._ready_reply(chat, fault, text, usage, cached, latency)
        await self._sleep(max(0.0, deadline - trio.current_time()))
        if fault == "drop":
            return None
        if fault is not None or opts.garbage:
            return ready
        self._cache.write(messages)
        self._prompt_cache.write(model, chat.blocks)
        if root:
            self.stats.root_requests += 1
        else:
            self.stats.sub_requests += 1
        chunk_delay = opts.model_chunk_delay.get(model, opts.chunk_delay)
        if not chat.stream:
            if chunk_delay > 0:  # generated at that pace, sent whole
                # (With no delay there is nothing to wait for: a sleep(0) would only cost
                # a turn of the loop per request.)
                await trio.sleep(chunk_delay * len(scripted.stream_pieces(text, opts.chunk_chars)))
            return ready
        self.stats.streams += 1
        cut = self.stats.cut_streams < opts.cut_streams
        self.stats.cut_streams += cut
        if chat.dialect == "anthropic":
            return anthropic_stream_reply(
                text, model=model, reply_id=f"fixture-{chat.number}", usage=usage,
                chunk_chars=opts.chunk_chars, chunk_delay=chunk_delay, cut=cut,
            )
        return stream_reply(
            text, model=model, reply_id=f"chatcmpl-fixture-{chat.number}",
            usage=usage if chat.include_usage and opts.stream_usage else None,
            chunk_chars=opts.chunk_chars,
            chunk_delay=chunk_delay, cut=cut,
        )

    def _latency(self, root: bool) -> float:
        """This request's latency: the option's, or the next seeded lognormal draw."""
        opts = self.options
        if root:
            return opts.root_latency
        if opts.latency_sigma > 0:
            return round(lognormal(self._latencies, opts.sub_latency, opts.latency_sigma), 6)
        return opts.sub_latency

    @staticmethod
    def _usage(messages: list[Message], text: str) -> dict[str, int]:
        prompt_tokens = math.ceil(sum(len(m["content"]) for m in messages) / 4)
        completion_tokens = scripted.estimate_tokens(text)
        return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens}

    def _ready_reply(self, chat: _Chat, fault: str | None, text: str, usage: dict[str, int],
                     cached: int, latency: float) -> _Reply | None:
        """The whole reply, when it is sent in one piece once the latency is over: a
        fault's, garbage, or the answer (``None``: a dropped connection, or a stream)."""
        if fault == "500":
            return _error(500, "The server had an error (fixture fault injection).",
                          "server_error")
        if fault == "529":
            return _error(529, "Overloaded (fixture fault injection).", "overloaded_error")
        if fault == "drop":
            return None
        if self.options.garbage:
            return _Reply(200, _GARBAGE, content_type=b"text/html; charset=utf-8")
        if chat.stream:
            return None
        # A reply's id is the number of requests seen when it arrived (chat.number).
        if chat.dialect == "anthropic":
            return _json_reply(200, anthropic_message(
                text, model=chat.model, reply_id=f"fixture-{chat.number}",
                structured=chat.schema is not None, usage=usage,
            ))
        reply_id = f"chatcmpl-fixture-{chat.number}"
        if self.options.latency_sigma > 0:  # drawn: named, for the client's trace
            reply_id += f"-{latency:.6f}s"
        return _json_reply(200, _chat_completion(chat.model, text, usage, cached, reply_id),
                           headers=self._announced())

    def answer(self, path: bytes, body: bytes, reply_id: str) -> tuple[int, dict[str, Any]]:
        """One chat request (``path``: its endpoint, ``body``: its JSON) answered at once,
        with no latency and no fault: a batch request's answer (the batch service's).

        A request the endpoint would refuse gets its 400 body."""
        try:
            chat = _parse_chat(body, path)
        except _BadRequest as exc:
            return 400, {"error": {"message": str(exc), "type": "invalid_request_error",
                                   "param": None, "code": None}}
        cached = self._cache.lookup(chat.messages)
        text = scripted.fixture_reply(chat.messages, chat.model, self.options.chunks, chat.schema)
        usage = self._usage(chat.messages, text)
        self._cache.write(chat.messages)
        if chat.dialect == "anthropic":
            return 200, anthropic_message(text, model=chat.model, reply_id=reply_id,
                                          structured=chat.schema is not None, usage=usage)
        return 200, _chat_completion(chat.model, text, usage, cached, reply_id)

    def _announced(self) -> list[tuple[bytes, bytes]]:
        """The rate limit a reply announces (``announce_rpm``), as providers' headers say it."""
        rpm = self.options.rpm
        if rpm is None or not self.options.announce_rpm:
            return []
        # What the bucket would let through now, back to back (GCRA: see _within_rpm).
        interval = 60.0 / rpm
        room = trio.current_time() + (self.options.rpm_burst - 1) * interval - self._rpm_tat
        remaining = max(0, min(self.options.rpm_burst, math.floor(room / interval) + 1))
        return [(b"x-ratelimit-limit-requests", f"{rpm:g}".encode()),
                (b"x-ratelimit-remaining-requests", str(remaining).encode())]
