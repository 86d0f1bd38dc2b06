"""The fixture server's streamed answers: OpenAI ``chat.completion.chunk`` events,
or Anthropic Messages events (``message_start`` … ``message_stop``).

A streamed reply is a list of SSE events sent one by one with a delay before
each text piece, so loopback tests see text arrive at a known pace.  A reply
marked ``cut`` stops half-way through its text and the server closes the
connection, as a dropped connection would look to the client.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from rlm.providers.fixture import FIXTURE_FINGERPRINT, stream_pieces
from rlm.testing.anthropic_dialect import cached_usage

__all__ = ["StreamReply", "anthropic_stream_reply", "stream_reply"]


@dataclass
class StreamReply:
    """SSE events to send (``delays[i]`` seconds before ``events[i]``); cut ones stop early."""

    events: list[bytes]
    delays: list[float]
    cut: bool = False
    status: int = 200


def _event(payload: object) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def stream_reply(
    text: str,
    *,
    model: str,
    reply_id: str,
    usage: dict[str, int] | None,
    chunk_chars: int,
    chunk_delay: float,
    cut: bool,
) -> StreamReply:
    """The events of one streamed answer of ``text`` (``usage`` last when asked for)."""
    base: dict[str, Any] = {
        "id": reply_id,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": FIXTURE_FINGERPRINT,
    }

    def chunk(delta: dict[str, str], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return _event({**base, "choices": [choice]})

    pieces = stream_pieces(text, chunk_chars)
    if cut:
        pieces = pieces[: len(pieces) // 2]
    events = [chunk({"role": "assistant", "content": ""})]
    delays = [0.0]
    for piece in pieces:
        events.append(chunk({"content": piece}))
        delays.append(chunk_delay)
    if cut:
        return StreamReply(events, delays, cut=True)
    events.append(chunk({}, "stop"))
    if usage is not None:
        events.append(_event({**base, "choices": [], "usage": usage}))
    events.append(b"data: [DONE]\n\n")
    delays.extend([0.0] * (len(events) - len(delays)))
    return StreamReply(events, delays)


def _named(kind: str, payload: dict[str, Any]) -> bytes:
    return f"event: {kind}\n".encode() + _event({"type": kind, **payload})


def anthropic_stream_reply(
    text: str,
    *,
    model: str,
    reply_id: str,
    usage: dict[str, int],
    chunk_chars: int,
    chunk_delay: float,
    cut: bool,
) -> StreamReply:
    """The Messages streaming events of one text answer (a cut one stops half-way)."""
    start: dict[str, Any] = {
        "id": f"msg_{reply_id}", "type": "message", "role": "assistant", "model": model,
        "content": [], "stop_reason": None,
        "usage": {**cached_usage(usage), "output_tokens": 1},
    }
    events = [
        _named("message_start", {"message": start}),
        _named("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        _named("ping", {}),
    ]
    pieces = stream_pieces(text, chunk_chars)
    if cut:
        pieces = pieces[: len(pieces) // 2]
    delays = [0.0] * len(events)
    for piece in pieces:
        events.append(_named("content_block_delta",
                             {"index": 0, "delta": {"type": "text_delta", "text": piece}}))
        delays.append(chunk_delay)
    if cut:
        return StreamReply(events, delays, cut=True)
    events += [
        _named("content_block_stop", {"index": 0}),
        _named("message_delta", {"delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                 "usage": {"output_tokens": usage["completion_tokens"]}}),
        _named("message_stop", {}),
    ]
    delays.extend([0.0] * (len(events) - len(delays)))
    return StreamReply(events, delays)
