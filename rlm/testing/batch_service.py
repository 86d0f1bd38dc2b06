"""The fixture server's batch services: OpenAI's Batch API and Anthropic's Message Batches.

OpenAI: ``POST /v1/files`` takes the requests as a JSONL file (multipart, purpose
``batch``), ``GET /v1/files`` lists files, ``GET /v1/files/ID/content`` reads one
(the output and error files too); ``POST /v1/batches`` creates a batch of a file,
``GET /v1/batches[/ID]`` lists or polls, ``POST /v1/batches/ID/cancel`` cancels.
Anthropic: ``POST /v1/messages/batches`` creates a batch of the requests in its
body, ``GET /v1/messages/batches[/ID]`` lists or polls, ``.../ID/cancel`` cancels,
``.../ID/results`` reads the results (JSONL).

A batch ends ``delay`` seconds (trio's clock) after it was created; meanwhile its
requests count as done in order, evenly over the delay.  Each request is answered
by the fixture server (:meth:`rlm.testing.server.FixtureServer.answer`) when the
batch ends, except those a seeded draw fails (``error_rate``: an errored result,
the same ones whatever the order).  A batch past ``expire_after`` expires: the
requests not done by then get ``expired``; a cancelled one ends at once, the rest
``cancelled``.  Newest first in lists, as the providers list them.

:class:`BatchServiceStats` counts what was submitted: ``submitted[custom_id]`` is
how many created batches held that request, so a test proves no task was sent
twice.  ``hold`` makes the first upload or create request hang for ever (after
it took effect, with ``hold_kept``): a client killed while waiting for it leaves
the provider with what a real one would have.
"""

from __future__ import annotations

import datetime
import email.parser
import email.policy
import json
import math
import random
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import trio

__all__ = ["BatchService", "BatchServiceOptions", "BatchServiceStats"]

#: status, body, content type.
Reply = tuple[int, bytes, bytes]
#: Answers one request at once: (endpoint path, JSON body, reply id) → (status, body).
Answer = Callable[[bytes, bytes, str], tuple[int, dict[str, Any]]]

_JSON = b"application/json"
_JSONL = b"application/jsonl"
_CHAT = "/v1/chat/completions"
_PREFIXES = (b"/v1/files", b"/v1/batches", b"/v1/messages/batches")


@dataclass
class BatchServiceOptions:
    """How the batch services behave (see the module docstring)."""

    delay: float = 0.0
    error_rate: float = 0.0
    expire_after: float | None = None
    max_requests: int = 100_000
    hold: Literal["upload", "create"] | None = None
    hold_kept: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        if self.delay < 0 or not 0.0 <= self.error_rate <= 1.0 or self.max_requests < 1:
            raise ValueError("delay >= 0, error_rate in [0, 1], max_requests >= 1")


@dataclass
class BatchServiceStats:
    """What the batch services were asked."""

    uploads: int = 0
    created: int = 0
    submitted: Counter[str] = field(default_factory=Counter)
    polls: int = 0
    lists: int = 0
    result_reads: int = 0
    cancels: int = 0


@dataclass
class _File:
    id: str
    filename: str
    purpose: str
    content: bytes
    created_at: int


@dataclass
class _Batch:
    id: str
    dialect: Literal["openai", "anthropic"]
    requests: list[tuple[str, bytes]]  # custom_id, JSON body
    started: float  # trio time
    created_wall: float
    input_file_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    cancelled_at: float | None = None
    invalid: list[dict[str, Any]] = field(default_factory=list)
    results: list[tuple[str, str, dict[str, Any] | None]] | None = None  # id, kind, body
    output_file_id: str | None = None
    error_file_id: str | None = None


def _json(status: int, payload: object) -> Reply:
    return status, json.dumps(payload).encode(), _JSON


def _error(status: int, message: str, anthropic: bool) -> Reply:
    if anthropic:
        return _json(status, {"type": "error", "error": {"type": "invalid_request_error",
                                                         "message": message}})
    return _json(status, {"error": {"message": message, "type": "invalid_request_error",
                                    "param": None, "code": None}})


def _iso(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).isoformat().replace(
        "+00:00", "Z")


class BatchService:
    """Both batch services, in one server's memory."""

    def __init__(self, options: BatchServiceOptions, *, answer: Answer) -> None:
        self.options = options
        self.stats = BatchServiceStats()
        self.holding = trio.Event()  # set when the held request (``hold``) arrived
        self._answer = answer
        self._files: dict[str, _File] = {}
        self._batches: dict[str, _Batch] = {}
        self._held = False
        self._numbers = 0

    def serves(self, path: bytes) -> bool:
        return path.startswith(_PREFIXES)

    def _id(self, prefix: str) -> str:
        self._numbers += 1
        return f"{prefix}{self._numbers:06d}"

    async def handle(self, head: Any, path: bytes, body: bytes) -> Reply:
        """Answer one request to a batch service (``head``: the server's RequestHead)."""
        target = head.target.decode("ascii", "replace")
        query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(target).query))
        parts = path.decode("ascii", "replace").strip("/").split("/")[1:]  # after "v1"
        anthropic = parts[:2] == ["messages", "batches"]
        method = head.method.decode()
        if anthropic:
            host = dict(head.headers).get(b"host", b"127.0.0.1").decode()
            return await self._anthropic(method, parts[2:], body, query, host)
        if parts[0] == "files":
            return await self._files_api(method, parts[1:], head, body, query)
        return await self._openai_batches(method, parts[1:], body, query)

    async def _hold(self, kind: str, effect: Callable[[], Reply]) -> Reply:
        """Take effect and answer, or (the first ``hold`` request) hang for ever."""
        if self.options.hold != kind or self._held:
            return effect()
        self._held = True
        if self.options.hold_kept:
            effect()
        self.holding.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    # -- OpenAI: files ------------------------------------------------------------

    async def _files_api(self, method: str, rest: list[str], head: Any, body: bytes,
                         query: dict[str, str]) -> Reply:
        if method == "POST" and not rest:
            kind = dict(head.headers).get(b"content-type", b"")
            try:
                parts = _multipart(kind, body)
                purpose = parts["purpose"][1].decode()
                name, content = parts["file"]
            except (KeyError, ValueError, UnicodeDecodeError) as exc:
                return _error(400, f"a multipart upload with purpose and file is needed: {exc}",
                              False)
            return await self._hold("upload", lambda: self._upload(name or "", purpose, content))
        if method == "GET" and not rest:
            self.stats.lists += 1
            found = [f for f in self._files.values()
                     if query.get("purpose") in (None, f.purpose)]
            return self._page([self._file_object(f) for f in reversed(found)], query, "after")
        if method == "GET" and len(rest) == 2 and rest[1] == "content":
            for batch in self._batches.values():  # an output file exists once its batch ended
                self._status(batch)
            file = self._files.get(rest[0])
            if file is None:
                return _error(404, f"no such file: {rest[0]}", False)
            self.stats.result_reads += 1
            return 200, file.content, _JSONL
        return _error(404, f"no such endpoint: {method} /v1/files/{'/'.join(rest)}", False)

    def _upload(self, name: str, purpose: str, content: bytes) -> Reply:
        self.stats.uploads += 1
        file = _File(self._id("file-"), name, purpose, content, int(time.time()))
        self._files[file.id] = file
        return _json(200, self._file_object(file))

    @staticmethod
    def _file_object(file: _File) -> dict[str, Any]:
        return {"id": file.id, "object": "file", "bytes": len(file.content),
                "created_at": file.created_at, "filename": file.filename,
                "purpose": file.purpose}

    def _page(self, items: list[dict[str, Any]], query: dict[str, str], cursor: str) -> Reply:
        """A list page, newest first, after the item ``query[cursor]`` names."""
        if query.get(cursor):
            ids = [item["id"] for item in items]
            items = items[ids.index(query[cursor]) + 1:] if query[cursor] in ids else []
        limit = int(query.get("limit", 20))
        page = items[:limit]
        return _json(200, {"object": "list", "data": page, "has_more": len(items) > limit,
                           "first_id": page[0]["id"] if page else None,
                           "last_id": page[-1]["id"] if page else None})

    # -- OpenAI: batches ----------------------------------------------------------

    async def _openai_batches(self, method: str, rest: list[str], body: bytes,
                              query: dict[str, str]) -> Reply:
        if method == "POST" and not rest:
            return await self._hold("create", lambda: self._create_openai(body))
        if method == "GET" and not rest:
            self.stats.lists += 1
            return self._page([self._openai_object(b) for b in reversed(self._openai())], query,
                              "after")
        batch = self._batches.get(rest[0]) if rest else None
        if batch is None or batch.dialect != "openai":
            return _error(404, f"no such batch: {'/'.join(rest)}", False)
        if method == "GET" and len(rest) == 1:
            self.stats.polls += 1
            return _json(200, self._openai_object(batch))
        if method == "POST" and rest[1:] == ["cancel"]:
            return _json(200, self._cancel(batch, "cancelling"))
        return _error(404, f"no such endpoint: {method} /v1/batches/{'/'.join(rest)}", False)

    def _openai(self) -> list[_Batch]:
        return [b for b in self._batches.values() if b.dialect == "openai"]

    def _create_openai(self, body: bytes) -> Reply:
        try:
            asked = json.loads(body)
            file = self._files[asked["input_file_id"]]
        except (ValueError, KeyError, TypeError):
            return _error(400, "input_file_id must name an uploaded file", False)
        if asked.get("endpoint") != _CHAT or asked.get("completion_window") != "24h":
            return _error(400, f"endpoint must be {_CHAT} and completion_window 24h", False)
        requests: list[tuple[str, bytes]] = []
        invalid: list[dict[str, Any]] = []
        for number, line in enumerate(file.content.splitlines(), 1):
            try:
                item = json.loads(line)
                assert item["method"] == "POST" and item["url"] == _CHAT
                requests.append((str(item["custom_id"]), json.dumps(item["body"]).encode()))
            except (ValueError, KeyError, TypeError, AssertionError):
                invalid.append({"code": "invalid_request", "line": number,
                                "message": "each line needs custom_id, method POST, url and body"})
        batch = self._new(requests, "openai", invalid)
        batch.input_file_id, batch.metadata = file.id, dict(asked.get("metadata") or {})
        return _json(200, self._openai_object(batch))

    def _openai_object(self, batch: _Batch) -> dict[str, Any]:
        status, done = self._status(batch)
        if batch.results is None:  # in progress: the requests done so far
            failed = sum(self._fails(cid) for cid, _ in batch.requests[:done])
            succeeded = done - failed
        else:  # ended: every request that did not succeed failed (errored, expired...)
            succeeded = sum(kind == "succeeded" for _, kind, _ in batch.results)
            failed = len(batch.requests) - succeeded
        return {
            "id": batch.id, "object": "batch", "endpoint": _CHAT,
            "errors": {"object": "list", "data": batch.invalid} if batch.invalid else None,
            "input_file_id": batch.input_file_id, "completion_window": "24h",
            "status": status, "output_file_id": batch.output_file_id,
            "error_file_id": batch.error_file_id, "created_at": int(batch.created_wall),
            "metadata": batch.metadata,
            "request_counts": {"total": len(batch.requests), "completed": succeeded,
                               "failed": failed},
        }

    # -- Anthropic -----------------------------------------------------------------

    async def _anthropic(self, method: str, rest: list[str], body: bytes,
                         query: dict[str, str], host: str) -> Reply:
        if method == "POST" and not rest:
            return await self._hold("create", lambda: self._create_anthropic(body, host))
        if method == "GET" and not rest:
            self.stats.lists += 1
            mine = [b for b in self._batches.values() if b.dialect == "anthropic"]
            objects = [self._anthropic_object(b, host) for b in reversed(mine)]
            return self._page(objects, query, "after_id")
        batch = self._batches.get(rest[0]) if rest else None
        if batch is None or batch.dialect != "anthropic":
            return _error(404, f"no such message batch: {'/'.join(rest)}", True)
        if method == "GET" and len(rest) == 1:
            self.stats.polls += 1
            return _json(200, self._anthropic_object(batch, host))
        if method == "POST" and rest[1:] == ["cancel"]:
            self._cancel(batch, "canceling")
            return _json(200, {**self._anthropic_object(batch, host),
                               "processing_status": "canceling"})
        if method == "GET" and rest[1:] == ["results"]:
            self._status(batch)
            if batch.results is None:
                return _error(400, "the batch has not ended: its results are not ready", True)
            self.stats.result_reads += 1
            return 200, self._anthropic_results(batch), _JSONL
        return _error(404, f"no such endpoint: {method} /v1/messages/batches", True)

    def _create_anthropic(self, body: bytes, host: str) -> Reply:
        try:
            asked = json.loads(body)
            requests = [(str(r["custom_id"]), json.dumps(r["params"]).encode())
                        for r in asked["requests"]]
        except (ValueError, KeyError, TypeError):
            return _error(400, "requests: a list of {custom_id, params} is needed", True)
        ids = [cid for cid, _ in requests]
        if len(set(ids)) != len(ids):
            return _error(400, "custom_id must be unique within a batch", True)
        batch = self._new(requests, "anthropic", [])
        return _json(200, self._anthropic_object(batch, host))

    def _anthropic_object(self, batch: _Batch, host: str) -> dict[str, Any]:
        _, done = self._status(batch)
        ended = batch.results is not None
        kinds = Counter(kind for _, kind, _ in batch.results or [])
        if not ended:
            failed = sum(self._fails(cid) for cid, _ in batch.requests[:done])
            kinds = Counter({"succeeded": done - failed, "errored": failed})
        return {
            "id": batch.id, "type": "message_batch",
            "processing_status": "ended" if ended else "in_progress",
            "request_counts": {"processing": 0 if ended else len(batch.requests) - done,
                               "succeeded": kinds["succeeded"], "errored": kinds["errored"],
                               "canceled": kinds["cancelled"], "expired": kinds["expired"]},
            "ended_at": None, "created_at": _iso(batch.created_wall),
            "expires_at": _iso(batch.created_wall + 86_400), "cancel_initiated_at": None,
            "results_url": f"http://{host}/v1/messages/batches/{batch.id}/results"
            if ended else None,
        }

    def _anthropic_results(self, batch: _Batch) -> bytes:
        lines = []
        for cid, kind, reply in batch.results or []:
            if kind == "succeeded":
                result: dict[str, Any] = {"type": "succeeded", "message": reply}
            elif kind == "errored":
                error = (reply or {}).get("error", {})
                message = error.get("message", "") if isinstance(error, dict) else str(error)
                result = {"type": "errored", "error": {"type": "error", "error": {
                    "type": "invalid_request_error", "message": message}}}
            else:
                result = {"type": "canceled" if kind == "cancelled" else "expired"}
            lines.append(json.dumps({"custom_id": cid, "result": result}))
        return ("\n".join(lines) + "\n").encode() if lines else b""

    # -- both ------------------------------------------------------------------------

    def _new(self, requests: list[tuple[str, bytes]], dialect: Literal["openai", "anthropic"],
             invalid: list[dict[str, Any]]) -> _Batch:
        if len(requests) > self.options.max_requests:
            invalid = [{"code": "too_many_requests", "line": None, "message":
                        f"a batch holds at most {self.options.max_requests} requests"}]
        prefix = "batch_" if dialect == "openai" else "msgbatch_"
        batch = _Batch(self._id(prefix), dialect, requests, trio.current_time(), time.time(),
                       invalid=invalid)
        self._batches[batch.id] = batch
        if not invalid:
            self.stats.created += 1
            self.stats.submitted.update(cid for cid, _ in requests)
        return batch

    def _cancel(self, batch: _Batch, word: str) -> dict[str, Any]:
        self.stats.cancels += 1
        if batch.results is None and batch.cancelled_at is None:
            batch.cancelled_at = trio.current_time()
        return {"id": batch.id, "status": word}

    def _fails(self, custom_id: str) -> bool:
        draw = random.Random(f"{self.options.seed}-{custom_id}").random()
        return draw < self.options.error_rate

    def _status(self, batch: _Batch) -> tuple[str, int]:
        """The batch's OpenAI status word now, and how many of its requests are done
        (in order); an ended batch's results are made the first time it is seen ended."""
        opts, now = self.options, trio.current_time()
        total = len(batch.requests)
        if batch.invalid:
            return "failed", 0

        def done_by(moment: float) -> int:
            elapsed = moment - batch.started
            return total if opts.delay <= 0 else min(total, math.floor(total * elapsed /
                                                                       opts.delay))

        end, why = batch.started + opts.delay, "completed"
        if opts.expire_after is not None and opts.expire_after < opts.delay:
            end, why = batch.started + opts.expire_after, "expired"
        if batch.cancelled_at is not None and batch.cancelled_at < end:
            end, why = batch.cancelled_at, "cancelled"
        if now < end and batch.results is None:
            return "in_progress", done_by(now)
        done = done_by(end) if why != "completed" else total
        if batch.results is None:
            self._finish(batch, done, why)
        return why, done

    def _finish(self, batch: _Batch, done: int, why: str) -> None:
        """Answer the requests done, mark the rest ``why``; OpenAI's output files."""
        path = b"/v1/chat/completions" if batch.dialect == "openai" else b"/v1/messages"
        results: list[tuple[str, str, dict[str, Any] | None]] = []
        for number, (cid, body) in enumerate(batch.requests):
            if number >= done:
                results.append((cid, "cancelled" if why == "cancelled" else "expired", None))
                continue
            if self._fails(cid):
                reply: dict[str, Any] = {"error": {"message": "the fixture failed this request "
                                                   "(error_rate)", "type": "server_error"}}
                results.append((cid, "errored", reply))
                continue
            status, reply = self._answer(path, body, f"{batch.id}-{number}")
            results.append((cid, "succeeded" if status == 200 else "errored", reply))
        batch.results = results
        if batch.dialect == "openai":
            self._output_files(batch)

    def _output_files(self, batch: _Batch) -> None:
        out: list[str] = []
        err: list[str] = []
        for number, (cid, kind, reply) in enumerate(batch.results or []):
            line: dict[str, Any] = {"id": f"batch_req_{batch.id}_{number}", "custom_id": cid,
                                    "response": None, "error": None}
            if kind in ("succeeded", "errored"):
                line["response"] = {"status_code": 200 if kind == "succeeded" else 400,
                                    "request_id": f"req_{number}", "body": reply}
            else:
                code = "batch_cancelled" if kind == "cancelled" else "batch_expired"
                line["error"] = {"code": code, "message": f"This request was not run: the "
                                                          f"batch was {kind}."}
            (out if kind == "succeeded" else err).append(json.dumps(line))
        for lines, attr in ((out, "output_file_id"), (err, "error_file_id")):
            if lines:
                file = _File(self._id("file-"), f"{batch.id}_{attr}.jsonl", "batch_output",
                             ("\n".join(lines) + "\n").encode(), int(time.time()))
                self._files[file.id] = file
                setattr(batch, attr, file.id)


def _multipart(content_type: bytes, body: bytes) -> dict[str, tuple[str | None, bytes]]:
    """The parts of a multipart/form-data body, by name: (file name, content)."""
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + content_type + b"\r\n\r\n" + body
    )
    if not message.is_multipart():
        raise ValueError("the body is not multipart/form-data")
    parts: dict[str, tuple[str | None, bytes]] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if isinstance(name, str) and isinstance(payload, bytes):
            parts[name] = (part.get_filename(), payload)
    return parts
