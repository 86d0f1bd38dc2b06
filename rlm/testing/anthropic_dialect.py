"""The fixture server's Anthropic Messages dialect (``POST /v1/messages``).

Requests: ``system`` (a string or text blocks), ``messages`` whose content is a
string or text blocks, and optionally a forced tool (``tools`` +
``tool_choice``), which is how rlm asks for a structured answer.  Answers:
a ``message`` with a text block, or a ``tool_use`` block whose input is the
structured answer.  A text answer asked for with ``stream: true`` is streamed
as Messages events (:func:`rlm.testing.stream_reply.anthropic_stream_reply`);
a structured one is not (rlm never streams those), and gets a 400 saying so.

Prompt caching is served as the API bills it (:class:`PromptCache`): blocks
marked with ``cache_control`` are breakpoints (at most 4); the longest prefix
written before, ending at a breakpoint or up to 20 blocks before one, is read
(``cache_read_input_tokens``), what lies between it and the last breakpoint is
written (``cache_creation_input_tokens``), and only the rest is ``input_tokens``.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import OrderedDict
from typing import Any, NamedTuple

from rlm.providers.base import Message

__all__ = [
    "MESSAGES_PATHS", "CacheBlock", "DialectError", "PromptCache", "anthropic_message",
    "cache_blocks", "cached_usage", "parse_anthropic",
]

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


class CacheBlock(NamedTuple):
    """One content block as the prompt cache sees it: its role, text, and breakpoint."""

    role: str
    text: str
    marked: bool


#: Breakpoints one request may mark, and how far before one a cached prefix is looked for.
MAX_BREAKPOINTS = 4
LOOKBACK_BLOCKS = 20


def cache_blocks(payload: dict[str, Any]) -> list[CacheBlock]:
    """The request's blocks in the cache's order (system, then messages); a string
    content is one block.  Raises DialectError past :data:`MAX_BREAKPOINTS`."""
    blocks: list[CacheBlock] = []
    system = payload.get("system")
    sources = [("system", system)] if system else []
    sources += [(str(m.get("role")), m.get("content")) for m in payload.get("messages") or []
                if isinstance(m, dict)]
    for role, content in sources:
        parts = content if isinstance(content, list) else [{"type": "text", "text": content}]
        for part in parts:
            if isinstance(part, dict) and part.get("type") == "text":
                marked = isinstance(part.get("cache_control"), dict)
                blocks.append(CacheBlock(role, str(part.get("text", "")), marked))
    found = sum(b.marked for b in blocks)
    if found > MAX_BREAKPOINTS:
        raise DialectError(
            f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {found}."
        )
    return blocks


class PromptCache:
    """Anthropic's prompt cache for one server: prefixes written at breakpoints.

    Tokens are characters / 4 (rounded up) at each block boundary, as the fixture
    counts a prompt, so read + written + input is the prompt's tokens.  A prefix
    shorter than ``min_tokens`` is never written.  Entries do not expire (the API's
    live five minutes from their last use: longer than any test).
    """

    def __init__(self, *, min_tokens: int = 1024, capacity: int = 1024) -> None:
        self.min_tokens = min_tokens
        self._capacity = capacity
        self._written: OrderedDict[bytes, None] = OrderedDict()

    @staticmethod
    def _prefixes(model: str, blocks: list[CacheBlock]) -> tuple[list[bytes], list[int]]:
        """Every prefix's digest and tokens, by its length in blocks (0 to all)."""
        digest = hashlib.blake2b(model.encode(), digest_size=16)
        digests, tokens, chars = [digest.digest()], [0], 0
        for block in blocks:
            digest.update(json.dumps([block.role, block.text]).encode())
            chars += len(block.text)
            digests.append(digest.copy().digest())
            tokens.append(math.ceil(chars / 4))
        return digests, tokens

    def usage(self, model: str, blocks: list[CacheBlock]) -> tuple[int, int]:
        """``(read, written)`` tokens of a request arriving now."""
        digests, tokens = self._prefixes(model, blocks)
        ends = [i + 1 for i, block in enumerate(blocks) if block.marked]
        read_at = 0
        for end in ends:
            for length in range(end, max(0, end - LOOKBACK_BLOCKS), -1):
                if digests[length] in self._written:
                    read_at = max(read_at, length)
                    break
        written_to = max((e for e in ends if tokens[e] >= self.min_tokens), default=0)
        read = tokens[read_at]
        return read, max(0, tokens[written_to] - read)

    def write(self, model: str, blocks: list[CacheBlock]) -> None:
        """Keep the prefix at each breakpoint (long enough to be cached)."""
        digests, tokens = self._prefixes(model, blocks)
        for i, block in enumerate(blocks):
            if block.marked and tokens[i + 1] >= self.min_tokens:
                self._written[digests[i + 1]] = None
                self._written.move_to_end(digests[i + 1])
        while len(self._written) > self._capacity:
            self._written.popitem(last=False)


def cached_usage(usage: dict[str, int]) -> dict[str, int]:
    """The Messages API's ``usage`` of a reply: input apart from cache reads and writes."""
    read = usage.get("cache_read_input_tokens", 0)
    written = usage.get("cache_creation_input_tokens", 0)
    return {
        "input_tokens": max(0, usage["prompt_tokens"] - read - written),
        "cache_creation_input_tokens": written,
        "cache_read_input_tokens": read,
        "output_tokens": usage["completion_tokens"],
    }


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
        "usage": cached_usage(usage),
    }
