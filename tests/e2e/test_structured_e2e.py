"""llm_query(..., schema=...) end to end: real sandbox, real loopback server, both dialects."""

from __future__ import annotations

import json

import pytest

from rlm import RLM
from rlm.providers._http import make_http_client
from rlm.providers.anthropic import AnthropicProvider
from rlm.providers.base import Provider
from rlm.providers.fixture import INVALID_JSON_ALWAYS, INVALID_JSON_ONCE
from rlm.providers.openai import OpenAIProvider
from rlm.testing.provider import FunctionProvider
from tests.helpers import repl, serving

CODE = f"""
spec = {{"number": "int", "where": str}}
one = llm_query("What is the magic number?", "the magic number is 31", schema=spec)
many = llm_query_batched(
    ["What is the magic number?", "What is the magic number?\\n{INVALID_JSON_ONCE}",
     "What is the magic number?\\n{INVALID_JSON_ALWAYS}"],
    ["the magic number is 1", "the magic number is 2", "the magic number is 3"],
    schema=spec,
)
kinds = ["dict" if isinstance(x, dict) else "str" for x in many]
print(json.dumps({{"one": one, "many": many, "types": kinds}}))
"""


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
async def test_structured_sub_queries_return_validated_dicts(dialect: str) -> None:
    root = FunctionProvider.scripted([repl("import json\n" + CODE), "FINAL(done)"])
    client = make_http_client(max_connections=8, request_timeout=10)
    async with serving() as (base_url, server), client:
        sub: Provider = (
            AnthropicProvider(client, base_url.removesuffix("/v1"), "k")
            if dialect == "anthropic"
            else OpenAIProvider(client, base_url, "k")
        )
        result = await RLM(providers={"root": root, "sub": sub}).acompletion("q", "ctx")
    assert result.status == "answered"
    printed = json.loads(result.last_output or "")
    assert printed["one"] == {"number": 31, "where": "31"}
    assert printed["many"][:2] == [{"number": 1, "where": "1"}, {"number": 2, "where": "2"}]
    assert printed["types"] == ["dict", "dict", "str"]
    assert printed["many"][2].startswith("Error: the answer is not valid JSON")
    assert "even after one repair request" in printed["many"][2]
    # 1 + 3 items, plus one repair for "once" and one for "always": 6 requests.
    assert server.stats.sub_requests == 6


def test_a_bad_schema_is_an_error_model_code_can_read() -> None:
    code = "r = llm_query('What is x?', 'the x is 1', schema={'x': 'strng'})\nprint(r)"
    root = FunctionProvider.scripted([repl(code), "FINAL(done)"])
    result = RLM(providers={"root": root, "sub": root}).completion("q", "ctx")
    assert "Error: schema: schema.x: unknown type 'strng'" in (result.last_output or "")


@pytest.mark.parametrize(
    ("schema", "data"),
    [({"number": "int", "text": "str"}, {"number": 4711, "text": "4711"}), (["str"], ["4711"])],
)
def test_a_root_answer_can_be_validated_data(schema: object, data: object) -> None:
    text = "filler " * 500 + "the magic number is 4711. " + "filler " * 500
    result = RLM(provider="fixture").completion("What is the magic number?", text, schema=schema)
    assert result.status == "answered"
    assert result.data == data  # a dict, or a list, handed over with FINAL_VAR
    assert json.loads(result.answer or "") == result.data
    code = [e["code"] for e in result.trace if e["event"] == "code_executed"]
    assert 'FINAL_VAR("answer_data")' in code[-1]


def test_a_root_answer_that_does_not_fit_is_sent_back_to_the_model() -> None:
    root = FunctionProvider.scripted(['FINAL({"number": "x"})', 'FINAL({"number": 5})'])
    model = RLM(providers={"root": root, "sub": root})
    result = model.completion("q", "ctx", schema={"number": "int"})
    assert result.data == {"number": 5}
    feedback = root.root_requests()[1].messages[-1]["content"]
    assert "does not fit the schema" in feedback and "'x' is not of type 'integer'" in feedback
