"""A request that does not fit the model's context window is a ContextLengthError whose
message says what to change (issue 31, item 1): a smaller output cap, a larger context on
the server, fewer characters per sub-query.  Before, it was a bare ``HTTP 400``."""

from __future__ import annotations

import json

import pytest

from rlm.errors import ContextLengthError, ProviderStatusError
from rlm.providers._http import classify_status, make_http_client
from rlm.providers.base import CompletionRequest
from rlm.providers.openai import OpenAIProvider
from tests.helpers import serving

URL = "http://127.0.0.1:8080/v1/chat/completions"


def _advice_in(message: str, *, cap: bool = True) -> None:
    assert ("lower max_tokens" in message) == cap
    assert "larger context" in message
    assert "fewer characters per sub-query" in message


async def test_the_llama_cpp_400_on_loopback_becomes_advice() -> None:
    request = CompletionRequest(
        messages=[{"role": "user", "content": "x" * 800}], model="fixture", max_tokens=4096
    )
    async with (
        serving(context_limit=100) as (url, server),
        make_http_client(max_connections=1, request_timeout=30) as client,
    ):
        with pytest.raises(ContextLengthError) as raised:
            await OpenAIProvider(client, url, None).complete(request)
    error = raised.value
    assert error.status == 400 and not error.retryable
    message = str(error)
    assert "maximum context length is 100 tokens" in message
    assert "(200 in the messages, 4096 in the completion)" in message
    _advice_in(message, cap=False)  # the prompt alone does not fit: a smaller cap cannot help
    assert server.stats.by_status == {400: 1}


@pytest.mark.parametrize(
    "body",
    [
        # vLLM: the prompt fits, the cap does not.
        {"error": {"message": "This model's maximum context length is 4096 tokens. However, "
                   "you requested 5000 tokens (1000 in the messages, 4000 in the completion). "
                   "Please reduce the length of the messages or completion.",
                   "type": "BadRequestError", "code": 400}},
        # OpenAI: the code says it, the message words it its own way.
        {"error": {"message": "This model's maximum context length is 128000 tokens. However, "
                   "your messages resulted in 130000 tokens.", "type": "invalid_request_error",
                   "code": "context_length_exceeded"}},
        {"error": {"message": "Input too long.", "code": "context_length_exceeded"}},
        # Anthropic.
        {"type": "error", "error": {
            "type": "invalid_request_error",
            "message": "prompt is too long: 210000 tokens > 200000 maximum"}},
        # llama.cpp's own server (llama-server).
        {"error": {"code": 400, "message": "the request exceeds the available context size, "
                   "try increasing it", "type": "exceed_context_size_error"}},
    ],
)
def test_each_dialects_overflow_is_recognised(body: dict[str, object]) -> None:
    text = json.dumps(body)
    detail = json.dumps(body)
    error = classify_status(URL, 400, f"{URL} answered HTTP 400: {detail}", text)
    assert isinstance(error, ContextLengthError) and not error.retryable
    _advice_in(str(error))


def test_another_400_stays_a_plain_status_error() -> None:
    text = json.dumps({"error": {"message": "model 'x' not found", "code": "model_not_found"}})
    error = classify_status(URL, 400, f"{URL} answered HTTP 400: model 'x' not found", text)
    assert type(error) is ProviderStatusError
