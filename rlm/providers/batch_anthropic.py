"""Anthropic's Message Batches: the requests sent in the create request itself.

``POST {base}/v1/messages/batches`` with ``{"requests": [{"custom_id", "params"}...]}``
creates the batch (streamed from disk: up to 256 MB, 100,000 requests);
``GET .../batches/ID`` polls it until ``processing_status`` is ``ended``; its
``results_url`` is a JSONL file of results (``succeeded`` with the message,
``errored``, ``canceled``, ``expired``).  The key is sent to a results URL only on
the base URL's own host.  A batch whose create request may have reached
Anthropic is found again by listing (``GET .../batches``, newest first): one of
the same number of requests created since the request was sent (Anthropic keeps no
label on a batch; a result whose ``custom_id`` is not the volley's is ignored).
"""

from __future__ import annotations

import datetime
import json
from contextlib import aclosing
from typing import Any, BinaryIO

import httpx2

from rlm.errors import ProviderError
from rlm.providers._http import BAD_SHAPE, ResponseLimits, count_tokens
from rlm.providers.anthropic import API_VERSION, AnthropicProvider
from rlm.providers.base import CompletionRequest
from rlm.providers.batch import (
    Accept,
    BatchHTTP,
    BatchOutcome,
    BatchState,
    encode_body,
    file_chunks,
)

__all__ = ["AnthropicBatches"]

_MARGIN = 300.0  # how much earlier than the create request a batch may say it was made
_COUNTS = ("processing", "succeeded", "errored", "canceled", "expired")


class AnthropicBatches:
    """Anthropic's Message Batches at ``base_url`` (``https://api.anthropic.com``)."""

    name = "anthropic"
    needs_upload = False
    max_requests = 100_000
    max_bytes = 256 * 1000 * 1000
    head = b'{"requests":['
    separator = b","
    tail = b"]}"

    def __init__(self, client: httpx2.AsyncClient, base_url: str, api_key: str | None, *,
                 limits: ResponseLimits | None = None) -> None:
        headers = {"anthropic-version": API_VERSION, **({"x-api-key": api_key} if api_key
                                                        else {})}
        has_v1 = httpx2.URL(base_url).path.rstrip("/").endswith("/v1")
        self._path = "/messages/batches" if has_v1 else "/v1/messages/batches"
        self._http = BatchHTTP(client, base_url, headers, limits)
        self._provider = AnthropicProvider(client, base_url, api_key, limits=limits)

    def body(self, request: CompletionRequest) -> bytes:
        return encode_body(self._provider.request_body(request))

    def item(self, custom_id: str, body: bytes) -> bytes:
        return b'{"custom_id":' + encode_body(custom_id) + b',"params":' + body + b"}"

    async def find_upload(self, label: str, size: int) -> str | None:
        return None  # nothing is uploaded: the requests travel in the create request

    async def upload(self, label: str, file: BinaryIO, size: int) -> str:
        raise ValueError("Anthropic's batches are created with their requests: no upload")

    async def find(self, label: str, file_id: str | None, since: float,
                   count: int) -> BatchState | None:
        async with aclosing(self._http.listed(self._path, {"limit": 100}, "after_id")) as found:
            async for batch in found:
                state = self._state(batch)
                if state.created_at is not None and state.created_at < since - _MARGIN:
                    return None  # older than the one looked for could be
                if state.total == count:
                    return state
        return None

    async def create(self, label: str, file_id: str | None, file: BinaryIO,
                     size: int) -> BatchState:
        answer = await self._http.call(
            "POST", self._path, content=file_chunks(file),
            headers={"content-type": "application/json", "content-length": str(size)},
        )
        return self._state(answer)

    async def get(self, batch_id: str) -> BatchState:
        return self._state(await self._http.call("GET", f"{self._path}/{batch_id}"))

    async def cancel(self, batch_id: str) -> BatchState:
        return self._state(await self._http.call("POST", f"{self._path}/{batch_id}/cancel"))

    async def results(self, state: BatchState, accept: Accept, chunk: int = 500) -> None:
        url = state.output.get("results_url")
        if url and not self._http.same_origin(url):
            raise ProviderError(
                f"the batch's results URL {url} is not on the base URL's host: the key is "
                "not sent there; check the base URL", url=url)
        where, absolute = (url, True) if url else (f"{self._path}/{state.id}/results", False)
        await self._http.outcomes(where, self._outcome, accept, chunk, absolute=absolute)

    def _state(self, batch: Any) -> BatchState:
        try:
            status = str(batch["processing_status"])
            counts = {k: count_tokens((batch.get("request_counts") or {}).get(k))
                      for k in _COUNTS}
            url = batch.get("results_url")
            return BatchState(
                id=str(batch["id"]), status=status, ended=status == "ended",
                total=sum(counts.values()), succeeded=counts["succeeded"],
                failed=counts["errored"] + counts["canceled"] + counts["expired"],
                output={"results_url": url} if isinstance(url, str) else {},
                created_at=_epoch(batch.get("created_at")),
            )
        except BAD_SHAPE as exc:
            raise self._http.bad(self._path, batch, "Anthropic's Message Batches") from exc

    def _outcome(self, line: bytes, where: str) -> BatchOutcome:
        """One line of a batch's results."""
        try:
            item = json.loads(line)
            custom_id, result = str(item["custom_id"]), item["result"]
            kind = str(result["type"])
        except BAD_SHAPE as exc:
            raise self._http.bad(where, line[:200], "a Message Batches result") from exc
        if kind == "succeeded" and isinstance(result.get("message"), dict):
            reply = httpx2.Response(200, content=encode_body(result["message"]),
                                    headers={"content-type": "application/json"})
            try:
                return BatchOutcome(custom_id, completion=self._provider.parse_reply(reply))
            except ProviderError as exc:
                return BatchOutcome(custom_id, error=str(exc))
        if kind == "errored":
            error = (result.get("error") or {}).get("error") or result.get("error") or {}
            said = f"{error.get('type')}: {error.get('message')}" if isinstance(error, dict) \
                else str(error)
            return BatchOutcome(custom_id, error=f"errored: {said}")
        reasons = {"canceled": "cancelled: the batch was cancelled before this request ran",
                   "expired": "expired: the batch's 24 h window ended before this request ran"}
        return BatchOutcome(custom_id, error=reasons.get(kind, f"{kind}: no answer"))


def _epoch(text: object) -> float | None:
    """An RFC 3339 time as epoch seconds (None when it is not one)."""
    if not isinstance(text, str):
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
