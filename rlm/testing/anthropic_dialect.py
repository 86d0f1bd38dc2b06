"""The fixture server's Anthropic Messages dialect (``POST /v1/messages``).

Requests: ``system`` (a string or text blocks), ``messages`` whose content is a
string or text blocks, and optionally a forced tool (``tools`` +
``tool_choice``), which is how rlm asks for a structured answer.  Answers:
a ``message`` with a text block, or a ``tool_use`` block whose input is the
structured answer.  A text answer asked for with ``stream: true`` is streamed
as Messages events (:func:`rlm.testing.stream_reply.anthropic_stream_reply`);
a structured one is not (rlm never streams those), and gets a 400 saying so.
"""

from __future__ import annotations

import json
from typing import Any

from rlm.providers.base import Message

__all__ = ["MESSAGES_PATHS", "DialectError", "anthropic_message", "parse_anthropic"]

MESSAGES_PATHS = (b"/v1/messages", b"/messages")


class DialectError(Exception):
    """The body is not a Messages request the fixture serves (→ HTTP 400)."""


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(block.get("text", "")) for block in content
            if isinstance(block, dict) and block.get("type") == "text"
        )
    raise DialectError("message content must be a string or a list of text blocks")


def parse_anthropic(payload: dict[str, Any]) -> tuple[list[Message], dict[str, Any] | None]:
    """``(messages with the system text first, the forced tool's input schema or None)``."""
    if not isinstance(payload.get("max_tokens"), int):
        raise DialectError("max_tokens: field required")
    messages: list[Message] = []
    system = payload.get("system")
    if system:
        messages.append(Message(role="system", content=_text(system)))
    for item in payload.get("messages") or []:
        role = item.get("role") if isinstance(item, dict) else None
        if role not in ("user", "assistant"):
            raise DialectError("each message needs role 'user' or 'assistant'")
        messages.append(Message(role=role, content=_text(item.get("content"))))
    schema = None
    choice = payload.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "tool":
        tools = {t.get("name"): t for t in payload.get("tools") or [] if isinstance(t, dict)}
        tool = tools.get(choice.get("name"))
        if tool is None or not isinstance(tool.get("input_schema"), dict):
            raise DialectError("tool_choice names a tool that is not in tools")
        schema = tool["input_schema"]
        if payload.get("stream") is True:
            raise DialectError("the fixture streams text answers only, not a forced tool call")
    return messages, schema


def anthropic_message(
    text: str, *, model: str, reply_id: str, structured: bool, usage: dict[str, int]
) -> dict[str, Any]:
    """The Messages API answer: a text block, or the forced tool's ``tool_use`` block."""
    if structured:
        try:
            answer: object = json.loads(text)
        except ValueError:  # broken JSON on purpose: a tool input cannot hold it
            content: list[dict[str, object]] = [{"type": "text", "text": text}]
        else:
            content = [{"type": "tool_use", "id": f"toolu_{reply_id}", "name": "answer",
                        "input": answer}]
    else:
        content = [{"type": "text", "text": text}]
    return {
        "id": f"msg_{reply_id}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "tool_use" if content[0]["type"] == "tool_use" else "end_turn",
        "usage": {"input_tokens": usage["prompt_tokens"],
                  "output_tokens": usage["completion_tokens"]},
    }
