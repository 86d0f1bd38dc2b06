"""Structured answers in the providers' dialects.

OpenAI's ``response_format: json_schema`` and Anthropic's forced tool call both
need an *object* at the schema's root, so any other schema (an array, a
string...) is wrapped as ``{"value": ...}`` on the way out and unwrapped from
the answer on the way back: the completion's text is always the JSON of the
value the caller's schema describes.  Structured answers are not streamed
(a tool call's JSON arrives as partial fragments, not text).
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["ANSWER_TOOL", "object_schema", "unwrap_answer"]

#: The tool name (Anthropic) and schema name (OpenAI) a structured answer goes under.
ANSWER_TOOL = "answer"
_WRAP_KEY = "value"


def object_schema(schema: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """``(schema with an object root, whether it was wrapped)``."""
    if schema.get("type") == "object":
        return schema, False
    wrapped = {
        "type": "object",
        "properties": {_WRAP_KEY: schema},
        "required": [_WRAP_KEY],
        "additionalProperties": False,
    }
    return wrapped, True


def unwrap_answer(text: str, wrapped: bool) -> str:
    """The answer's JSON text without the wrapper (text that is not JSON is kept as is,
    for the caller's validation to report)."""
    if not wrapped:
        return text
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if isinstance(value, dict) and _WRAP_KEY in value:
        return json.dumps(value[_WRAP_KEY])
    return text
