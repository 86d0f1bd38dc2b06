"""OpenAI's Batch API: the requests uploaded as a JSONL file, then a batch created of it.

``POST {base}/files`` (multipart, purpose ``batch``) uploads the file, named by the
batch's label; ``POST {base}/batches`` creates the batch (endpoint
``/v1/chat/completions``, window 24 h, the label in its metadata); ``GET
{base}/batches/ID`` polls it; its results are the JSONL ``output_file_id`` (the
answers) and ``error_file_id`` (requests that failed, expired or were cancelled),
read from ``GET {base}/files/ID/content``.  A batch holds at most 50,000 requests
and 200 MB.  Uploads and batches are found again by listing (``GET {base}/files``,
``GET {base}/batches``, newest first): the file by its name and size, the batch by
its input file.
"""

from __future__ import annotations

import json
from contextlib import aclosing
from typing import Any, BinaryIO

import httpx2

from rlm.errors import ProviderError
from rlm.providers._http import BAD_SHAPE, ResponseLimits, count_tokens
from rlm.providers.base import CompletionRequest
from rlm.providers.batch import (
    Accept,
    BatchHTTP,
    BatchOutcome,
    BatchState,
    encode_body,
)
from rlm.providers.openai import OpenAIProvider

__all__ = ["OpenAIBatches"]

_ENDPOINT = "/v1/chat/completions"
_ENDED = frozenset({"completed", "failed", "expired", "cancelled"})
_MARGIN = 3600.0  # how much older than the search's start a batch may look (clock skew)


class OpenAIBatches:
    """OpenAI's Batch API at ``base_url`` (``https://api.openai.com/v1``)."""

    name = "openai"
    needs_upload = True
    max_requests = 50_000
    max_bytes = 200 * 1024 * 1024
    head = b""
    separator = b"\n"
    tail = b"\n"

    def __init__(self, client: httpx2.AsyncClient, base_url: str, api_key: str | None, *,
                 limits: ResponseLimits | None = None) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = BatchHTTP(client, base_url, headers, limits)
        self._provider = OpenAIProvider(client, base_url, api_key, limits=limits)

    def body(self, request: CompletionRequest) -> bytes:
        return encode_body(self._provider.request_body(request))

    def item(self, custom_id: str, body: bytes) -> bytes:
        return (b'{"custom_id":' + encode_body(custom_id) + b',"method":"POST","url":'
                + encode_body(_ENDPOINT) + b',"body":' + body + b"}")

    async def find_upload(self, label: str, size: int) -> str | None:
        name = f"{label}.jsonl"
        listing = self._http.listed("/files", {"purpose": "batch", "limit": 10_000})
        async with aclosing(listing) as files:
            async for file in files:
                if file.get("filename") == name and file.get("bytes") == size:
                    return str(file["id"])
        return None

    async def upload(self, label: str, file: BinaryIO, size: int) -> str:
        answer = await self._http.call(
            "POST", "/files", data={"purpose": "batch"},
            files={"file": (f"{label}.jsonl", file, "application/jsonl")},
        )
        return self._field(answer, "id", "/files")

    async def find(self, label: str, file_id: str | None, since: float,
                   count: int) -> BatchState | None:
        async with aclosing(self._http.listed("/batches", {"limit": 100})) as batches:
            async for batch in batches:
                if batch.get("input_file_id") == file_id and file_id is not None:
                    return self._state(batch)
                created = batch.get("created_at")
                if isinstance(created, int | float) and created < since - _MARGIN:
                    return None  # older than the batch looked for could be
        return None

    async def create(self, label: str, file_id: str | None, file: BinaryIO,
                     size: int) -> BatchState:
        if file_id is None:
            raise ValueError("an OpenAI batch is created from an uploaded file")
        body = {"input_file_id": file_id, "endpoint": _ENDPOINT, "completion_window": "24h",
                "metadata": {"rlm_batch": label}}
        return self._state(await self._http.call("POST", "/batches", json=body))

    async def get(self, batch_id: str) -> BatchState:
        return self._state(await self._http.call("GET", f"/batches/{batch_id}"))

    async def cancel(self, batch_id: str) -> BatchState:
        return self._state(await self._http.call("POST", f"/batches/{batch_id}/cancel"))

    async def results(self, state: BatchState, accept: Accept, chunk: int = 500) -> None:
        for key in ("output_file_id", "error_file_id"):
            file_id = state.output.get(key)
            if not file_id:
                continue
            await self._http.outcomes(f"/files/{file_id}/content", self._outcome, accept, chunk)

    # -- reading answers --------------------------------------------------------------

    def _state(self, batch: Any) -> BatchState:
        try:
            status = str(batch["status"])
            counts = batch.get("request_counts") or {}
            errors = (batch.get("errors") or {}).get("data") or []
            output = {k: str(batch[k]) for k in ("output_file_id", "error_file_id")
                      if batch.get(k)}
            created = batch.get("created_at")
            return BatchState(
                id=str(batch["id"]), status=status, ended=status in _ENDED,
                total=count_tokens(counts.get("total")),
                succeeded=count_tokens(counts.get("completed")),
                failed=count_tokens(counts.get("failed")), output=output,
                error="; ".join(str(e.get("message", e)) for e in errors) or None
                if status == "failed" else None,
                created_at=float(created) if isinstance(created, int | float) else None,
            )
        except BAD_SHAPE as exc:
            raise self._bad("/batches", batch) from exc

    def _outcome(self, line: bytes, path: str) -> BatchOutcome:
        """One line of an output or error file."""
        try:
            item = json.loads(line)
            custom_id = str(item["custom_id"])
            response, error = item.get("response"), item.get("error")
        except BAD_SHAPE as exc:
            raise self._bad(path, line[:200]) from exc
        if isinstance(error, dict):  # not run: expired, cancelled, refused
            return BatchOutcome(custom_id, error=f"{error.get('code')}: {error.get('message')}")
        status = response.get("status_code") if isinstance(response, dict) else None
        body = response.get("body") if isinstance(response, dict) else None
        if status != 200 or not isinstance(body, dict):
            said = (body or {}).get("error") if isinstance(body, dict) else None
            message = said.get("message") if isinstance(said, dict) else said
            return BatchOutcome(custom_id, error=f"HTTP {status}: {message or 'no answer'}")
        reply = httpx2.Response(200, content=encode_body(body),
                                headers={"content-type": "application/json"})
        try:
            return BatchOutcome(custom_id, completion=self._provider.parse_reply(reply))
        except ProviderError as exc:
            return BatchOutcome(custom_id, error=str(exc))

    def _field(self, answer: Any, key: str, path: str) -> str:
        if not isinstance(answer, dict) or not isinstance(answer.get(key), str):
            raise self._bad(path, answer)
        return str(answer[key])

    def _bad(self, path: str, what: object) -> ProviderError:
        return self._http.bad(path, what, "OpenAI's batch API")
