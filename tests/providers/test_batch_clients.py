"""The batch services' clients against httpx2.MockTransport: a batch request is the live
request's very bytes, the calls' shapes, finding what a stopped process left, reading
results, and errors translated without the key."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import httpx2
import pytest

from rlm.errors import AuthenticationError, ProviderError, ProviderResponseError
from rlm.providers._http import ResponseLimits, make_http_client
from rlm.providers.anthropic import AnthropicProvider
from rlm.providers.base import CompletionRequest
from rlm.providers.batch import BatchOutcome, BatchService, BatchState
from rlm.providers.batch_anthropic import AnthropicBatches
from rlm.providers.batch_openai import OpenAIBatches
from rlm.providers.openai import OpenAIProvider
from rlm.volley.layout import RequestLayout
from rlm.volley.records import VolleyTask

Handler = Callable[[httpx2.Request], httpx2.Response]
KEY = "sk-secret-batch-key"


def _client(handler: Handler) -> httpx2.AsyncClient:
    return make_http_client(max_connections=2, request_timeout=10,
                            transport=httpx2.MockTransport(handler))


def _request() -> CompletionRequest:
    layout = RequestLayout(["a long shared context " * 300], model="m", max_tokens=64)
    return layout.request(VolleyTask(7, "What is it?"), "t7")


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_a_batch_request_is_the_live_request_byte_for_byte(kind: str) -> None:
    posted: list[bytes] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        posted.append(request.content)
        return httpx2.Response(500)

    client = _client(handler)
    live: OpenAIProvider | AnthropicProvider
    batches: BatchService
    if kind == "openai":
        live, batches = OpenAIProvider(client, "http://x/v1", KEY), OpenAIBatches(
            client, "http://x/v1", KEY)
    else:
        live, batches = AnthropicProvider(client, "http://x", KEY), AnthropicBatches(
            client, "http://x", KEY)
    with pytest.raises(ProviderError):
        await live.complete(_request())
    body = batches.body(_request())
    assert body == posted[0]
    item = json.loads(batches.item("v1-t7", body))
    assert item["custom_id"] == "v1-t7"
    if kind == "anthropic":  # the shared prefix marked for the provider's cache
        assert "cache_control" in json.dumps(item["params"])
    else:
        assert item["url"] == "/v1/chat/completions" and item["method"] == "POST"


async def test_openai_uploads_a_named_file_and_creates_a_batch_of_it() -> None:
    seen: list[httpx2.Request] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        if request.url.path == "/v1/files":
            return httpx2.Response(200, json={"id": "file-1", "filename": "x", "bytes": 3})
        return httpx2.Response(200, json={"id": "batch_1", "status": "validating",
                                          "request_counts": {"total": 0}})

    batches = OpenAIBatches(_client(handler), "http://x/v1", KEY)
    assert await batches.upload("rlm-v1-b1", io.BytesIO(b"{}\n"), 3) == "file-1"
    state = await batches.create("rlm-v1-b1", "file-1", io.BytesIO(b""), 3)
    assert state == BatchState("batch_1", "validating", False, 0)
    upload, create = seen
    assert upload.headers["content-type"].startswith("multipart/form-data; boundary=")
    assert b'filename="rlm-v1-b1.jsonl"' in upload.content and b"batch" in upload.content
    assert json.loads(create.content) == {
        "input_file_id": "file-1", "endpoint": "/v1/chat/completions",
        "completion_window": "24h", "metadata": {"rlm_batch": "rlm-v1-b1"}}
    assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in seen)


async def test_openai_finds_an_upload_and_a_batch_by_paging_through_the_listings() -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        after = request.url.params.get("after")
        if request.url.path == "/v1/files":
            page = [{"id": "file-9", "filename": "other.jsonl", "bytes": 5}] if not after \
                else [{"id": "file-2", "filename": "rlm-v1-b1.jsonl", "bytes": 40}]
            return httpx2.Response(200, json={"data": page, "has_more": not after})
        page = [{"id": "batch_9", "status": "completed", "input_file_id": "file-9",
                 "created_at": 2000}] if not after else [
            {"id": "batch_2", "status": "in_progress", "input_file_id": "file-2",
             "created_at": 1000, "request_counts": {"total": 4, "completed": 1}}]
        return httpx2.Response(200, json={"data": page, "has_more": not after})

    batches = OpenAIBatches(_client(handler), "http://x/v1", KEY)
    assert await batches.find_upload("rlm-v1-b1", 40) == "file-2"
    assert await batches.find_upload("rlm-v1-b1", 41) is None  # not the same file
    found = await batches.find("rlm-v1-b1", "file-2", since=1000, count=4)
    assert found is not None and found.id == "batch_2" and found.succeeded == 1
    assert await batches.find("rlm-v1-b1", "file-3", since=9000, count=4) is None


async def test_openai_results_are_answers_and_the_reasons_of_the_rest() -> None:
    answer = {"model": "m", "choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}],
              "usage": {"prompt_tokens": 10, "completion_tokens": 2,
                        "prompt_tokens_details": {"cached_tokens": 8}}}
    files: dict[str, list[dict[str, Any]]] = {
        "out": [{"custom_id": "v-t1", "response": {"status_code": 200, "body": answer}}],
        "err": [{"custom_id": "v-t2", "response": None,
                 "error": {"code": "batch_expired", "message": "not run in time"}},
                {"custom_id": "v-t3", "response": {"status_code": 400, "body": {
                    "error": {"message": "bad model"}}}}],
    }

    def handler(request: httpx2.Request) -> httpx2.Response:
        name = request.url.path.split("/")[3]
        return httpx2.Response(200, text="\n".join(json.dumps(x) for x in files[name]))

    batches = OpenAIBatches(_client(handler), "http://x/v1", KEY)
    got: list[BatchOutcome] = []

    async def accept(outcomes: list[BatchOutcome]) -> None:
        got.extend(outcomes)

    state = BatchState("b", "completed", True, 3, output={"output_file_id": "out",
                                                           "error_file_id": "err"})
    await batches.results(state, accept, chunk=2)
    first = got[0].completion
    assert first is not None and first.text == "hi" and first.metadata["cached_tokens"] == 8
    assert [o.error for o in got[1:]] == ["batch_expired: not run in time", "HTTP 400: bad model"]


async def test_anthropic_finds_a_batch_of_the_same_size_made_since_the_create() -> None:
    listed = [
        {"id": "msgbatch_3", "processing_status": "in_progress", "created_at":
         "2030-01-01T00:10:00Z", "request_counts": {"processing": 9}},
        {"id": "msgbatch_2", "processing_status": "in_progress", "created_at":
         "2030-01-01T00:05:00Z", "request_counts": {"processing": 5, "succeeded": 2}},
        {"id": "msgbatch_1", "processing_status": "ended", "created_at":
         "2029-01-01T00:00:00Z", "request_counts": {"succeeded": 7}},
    ]

    def handler(request: httpx2.Request) -> httpx2.Response:
        assert request.url.path == "/v1/messages/batches"
        assert request.headers["x-api-key"] == KEY
        return httpx2.Response(200, json={"data": listed, "has_more": False})

    batches = AnthropicBatches(_client(handler), "http://x", KEY)
    since = 1893456300.0  # 2030-01-01T00:05:00Z
    found = await batches.find("label", None, since, 7)
    assert found is not None and found.id == "msgbatch_2" and found.processing == 5
    assert await batches.find("label", None, since, 6) is None  # msgbatch_1 is too old


async def test_the_key_goes_to_no_other_host_and_a_long_result_line_is_refused() -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, content=b'{"custom_id": "' + b"x" * (70 << 10) + b'"}\n')

    limits = ResponseLimits(max_response_bytes=64 << 10)
    batches = AnthropicBatches(_client(handler), "http://x", KEY, limits=limits)

    async def accept(outcomes: list[BatchOutcome]) -> None:
        raise AssertionError("nothing is accepted")

    elsewhere = BatchState("b", "ended", True, 1,
                           output={"results_url": "http://evil.test/results"})
    with pytest.raises(ProviderError, match="not on the base URL's host") as refused:
        await batches.results(elsewhere, accept)
    assert KEY not in str(refused.value)
    here = BatchState("b", "ended", True, 1, output={"results_url": "http://x/r"})
    with pytest.raises(ProviderResponseError, match="max_response_bytes"):
        await batches.results(here, accept)


async def test_a_refused_key_is_an_authentication_error_that_never_shows_it() -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(401, json={"error": {"message": f"bad key {KEY[:5]}..."}})

    for batches in (OpenAIBatches(_client(handler), "http://x/v1", KEY),
                    AnthropicBatches(_client(handler), "http://x", KEY)):
        with pytest.raises(AuthenticationError) as refused:
            await batches.get("b1")
        assert KEY not in str(refused.value) and "http://x/v1/" in str(refused.value)

