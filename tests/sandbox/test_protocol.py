"""Property tests of the frame codec shared by host and sandbox."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlm_sandbox.protocol import (
    HEADER,
    BudgetRequest,
    FrameDecoder,
    FrameError,
    FrameTooLarge,
    QueryRequest,
    ToolRequest,
    decode_bridge,
    encode_bridge,
    encode_frame,
    join_bridge,
)

scalars = (
    st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False) | st.text(max_size=40) | st.binary(max_size=40)
)
# Trees of up to 8 leaves, 4 keys a message: every kind of value, nested, at any chunk
# boundary; bigger trees cost seconds of generation (most of this file's time) and
# exercise no other decoder path.
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner,
                                                                 max_size=3),
    max_leaves=8,
)
messages = st.builds(
    lambda t, rest: {**rest, "t": t},
    st.text(max_size=10),
    st.dictionaries(st.text(max_size=10), values, max_size=4),
)


def _normalise(value: Any) -> Any:
    """msgpack has no tuples; lists come back as lists."""
    if isinstance(value, dict):
        return {k: _normalise(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normalise(v) for v in value]
    return value


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(data)) for c in cuts})
    chunks, start = [], 0
    for point in [*points, len(data)]:
        chunks.append(data[start:point])
        start = point
    return chunks


@given(st.lists(messages, min_size=1, max_size=5), st.lists(st.integers(0, 4000), max_size=12))
def test_round_trip_at_any_chunk_boundaries(batch: list[dict[str, Any]], cuts: list[int]) -> None:
    stream = b"".join(encode_frame(message) for message in batch)
    decoder = FrameDecoder()
    decoded: list[dict[str, Any]] = []
    for chunk in _split(stream, cuts):
        decoded.extend(decoder.feed(chunk))
    assert decoded == [_normalise(message) for message in batch]
    assert decoder.pending_bytes == 0


@settings(max_examples=300)
@given(st.binary(min_size=1, max_size=200))
def test_garbage_raises_frame_error_or_waits(data: bytes) -> None:
    decoder = FrameDecoder(max_bytes=1000)
    try:
        frames = decoder.feed(data)
    except FrameError:
        with pytest.raises(FrameError):  # the decoder stays broken
            decoder.feed(b"")
        return
    for frame in frames:  # whatever got through is a well-formed frame
        assert isinstance(frame, dict) and isinstance(frame["t"], str)


@given(st.binary(max_size=100))
def test_random_payloads_behind_a_valid_header(payload: bytes) -> None:
    decoder = FrameDecoder()
    try:
        frames = decoder.feed(HEADER.pack(len(payload)) + payload)
    except FrameError:
        return
    assert len(frames) == 1 and isinstance(frames[0]["t"], str)


def test_oversize_header_is_refused_before_the_payload() -> None:
    decoder = FrameDecoder(max_bytes=100)
    with pytest.raises(FrameError, match="exceeds"):
        decoder.feed(HEADER.pack(101))  # only the header: no payload was needed to refuse


@pytest.mark.parametrize("payload", [[1, 2], "text", 5, None, {"x": 1}, {"t": 3}, {1: "a"}])
def test_non_map_or_untyped_payloads_are_refused(payload: object) -> None:
    data = msgpack.packb(payload, use_bin_type=True)
    with pytest.raises(FrameError):
        FrameDecoder().feed(HEADER.pack(len(data)) + data)


def test_empty_payload_is_refused() -> None:
    with pytest.raises(FrameError):
        FrameDecoder().feed(HEADER.pack(0))


def test_encode_refuses_bad_messages() -> None:
    with pytest.raises(FrameError):
        encode_frame({"no": "type"})
    with pytest.raises(FrameError):
        encode_frame({"t": "x", "value": object()})
    with pytest.raises(FrameError, match="exceeds"):
        encode_frame({"t": "x", "blob": b"a" * 100}, max_bytes=50)


def test_partial_frame_waits_for_more() -> None:
    frame = encode_frame({"t": "exec", "id": 1, "code": "x"})
    decoder = FrameDecoder()
    assert decoder.feed(frame[:-1]) == []
    assert decoder.pending_bytes == len(frame) - 1
    assert decoder.feed(frame[-1:]) == [{"t": "exec", "id": 1, "code": "x"}]


@given(st.integers(0, 200))
def test_missing_bytes_is_what_completes_the_frame_begun(cut: int) -> None:
    frame = encode_frame({"t": "bridge", "id": 1, "prompts": ["p" * 150]})
    decoder = FrameDecoder()
    cut = min(cut, len(frame) - 1)
    decoder.feed(frame[:cut])
    # Before the whole header is in nothing is known; after it, exactly the rest.
    assert decoder.missing_bytes == (0 if cut < HEADER.size else len(frame) - cut)
    assert decoder.feed(frame[cut:]) and decoder.missing_bytes == 0


# -- bridge frames: checked once into typed requests ---------------------------------------

bridge_fields = st.fixed_dictionaries(
    {"t": st.just("bridge")},
    optional={
        "id": st.integers(min_value=-3, max_value=3) | st.text(max_size=3),
        "fn": st.sampled_from(["llm_query", "llm_query_batched", "budget", "tool", "exec"])
        | st.text(max_size=5),
        "prompts": values,
        "contexts": values,
        "schema": values,
        "tool": values,
        "arguments": values,
    },
)


@given(bridge_fields)
@settings(max_examples=300)
def test_a_bridge_frame_decodes_to_a_typed_request_or_says_what_is_wrong(
    frame: dict[str, Any],
) -> None:
    try:
        request = decode_bridge(frame)
    except FrameError as exc:
        assert str(exc)
        return
    assert isinstance(request, QueryRequest | BudgetRequest | ToolRequest)
    assert type(request.id) is int
    if isinstance(request, QueryRequest):
        assert all(isinstance(p, str) for p in request.prompts)
        assert request.contexts is None or len(request.contexts) == len(request.prompts)
        assert request.batched == (frame["fn"] == "llm_query_batched")


def test_the_frames_model_code_sends_decode_as_what_they_ask() -> None:
    query = {"t": "bridge", "id": 3, "fn": "llm_query", "prompts": ["q"], "contexts": None}
    assert decode_bridge(query) == QueryRequest(3, False, ["q"], None, None)
    batch = {**query, "fn": "llm_query_batched", "prompts": ["a", "b"], "contexts": [None, "c"],
             "schema": '{"n": "int"}'}
    assert decode_bridge(batch) == QueryRequest(3, True, ["a", "b"], [None, "c"], '{"n": "int"}')
    assert decode_bridge({"t": "bridge", "id": 4, "fn": "budget"}) == BudgetRequest(4)
    tool = {"t": "bridge", "id": 5, "fn": "tool", "tool": "lookup", "arguments": "{}"}
    assert decode_bridge(tool) == ToolRequest(5, "lookup", "{}")
    with pytest.raises(FrameError, match="contexts must be None or a list as long as prompts"):
        decode_bridge({**batch, "contexts": ["one"]})
    with pytest.raises(FrameError, match="unknown bridge function 'exec'"):
        decode_bridge({**query, "fn": "exec"})


# -- a bridge request larger than a frame: parts (issue 31 item 10) -------------------------

CAP = 2_000  # a small frame cap, so that small requests need parts


def _request(prompts: list[str], contexts: list[str | None], **extra: Any) -> dict[str, Any]:
    return {"t": "bridge", "id": 7, "fn": "llm_query_batched", "prompts": prompts,
            "contexts": contexts, **extra}


@settings(max_examples=200, deadline=None)
@given(items=st.lists(st.tuples(st.text(max_size=300), st.none() | st.text(max_size=300)),
                      max_size=60),
       schema=st.none() | st.text(max_size=200))
def test_a_request_in_parts_is_joined_back_whole(
        items: list[tuple[str, str | None]], schema: str | None) -> None:
    extra = {} if schema is None else {"schema": schema}
    request = _request([p for p, _ in items], [c for _, c in items], **extra)
    frames = encode_bridge(request, CAP)  # type: ignore[arg-type]
    assert all(len(frame) <= HEADER.size + CAP for frame in frames)
    decoded = FrameDecoder(CAP).feed(b"".join(frames))
    *parts, last = decoded
    assert all(part.get("part") is True for part in parts) and "part" not in last
    joined = join_bridge(parts, last) if parts else last
    assert joined == request
    assert decode_bridge(joined) == decode_bridge(request)


def test_a_request_that_fits_is_one_frame() -> None:
    request = _request(["a", "b"], [None, "c"])
    assert encode_bridge(request, CAP) == [encode_frame(request, CAP)]  # type: ignore[arg-type]


def test_one_prompt_larger_than_a_frame_is_refused() -> None:
    request = _request(["a", "x" * CAP, "b"], [None, None, None])
    with pytest.raises(FrameTooLarge, match="item 1"):
        encode_bridge(request, CAP)  # type: ignore[arg-type]


def test_parts_of_another_request_or_without_lists_are_not_joined() -> None:
    last = _request(["c"], [None])
    with pytest.raises(FrameError, match="different requests"):
        join_bridge([{**_request(["a"], [None]), "id": 6, "part": True}], last)
    with pytest.raises(FrameError, match="as many contexts"):
        join_bridge([{**_request(["a", "b"], [None]), "part": True}], last)
    with pytest.raises(FrameError, match="as many contexts"):
        join_bridge([{**_request(["a"], [None]), "prompts": "a", "part": True}], last)
