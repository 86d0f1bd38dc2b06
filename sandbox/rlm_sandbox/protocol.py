"""Frames exchanged between the host and a sandbox process.

A frame is a 4-byte big-endian length followed by a msgpack map with a string
key ``"t"`` naming its type.  Frames travel on dedicated pipes (never the
child's stdout/stderr), and every reader enforces a size cap so a misbehaving
child cannot make the host buffer without bound.

Host → child
    ``init``      ``{"t", "context", "max_output_chars"}`` — first frame, once.  A large
                  context is sent as ``"context_fd": true`` instead, with a sealed memfd
                  passed on the context socket (``shared_context.py``).
    ``exec``      ``{"t", "id", "code", "window"}`` — run one code block; ``window``: how
                  many sub-queries it may send ahead (auto-batching; 0 or absent: none).
    ``reply``     ``{"t", "id", "ok", "value", "error", "kind"}`` — answer to a bridge frame.
    ``shutdown``  ``{"t"}`` — exit cleanly.

Child → host
    ``hardened``  ``{"t", "pid", "isolation"}`` — sent first by a sandbox forked by the
                  zygote, once its isolation layers are applied (before ``init``).
    ``ready``     ``{"t", "pid", "isolation"}`` — sent after ``init`` is applied;
                  ``isolation`` maps each layer to ``"active"`` or ``"unavailable: why"``.
    ``bridge``    ``{"t", "id", "fn", "prompts", "contexts"}`` — model code called
                  ``llm_query`` (one prompt) or ``llm_query_batched``; the child
                  blocks until the matching ``reply``.  ``fn == "budget"`` asks
                  for the remaining budget (no prompts).  Auto-batching adds three
                  (``speculation.py``): ``speculate`` sends ``prompts`` ahead as
                  speculative calls numbered ``spec``, for loop ``loop`` at source
                  line ``line`` (the reply's value: ``{"accepted": n}``, the first n
                  were sent); ``collect`` waits for speculative call ``spec[0]`` and
                  answers as ``llm_query`` would (kind ``unsent``: it was not sent, ask
                  it); ``cancel`` cancels calls ``spec`` of loop ``loop``, ``end``: the
                  loop is over (the value: ``{"cancelled": n}``, those the provider had
                  not answered yet).
                  A bridge frame too large for the frame cap (a batch of many long
                  prompts, or a loop's calls sent ahead) comes in parts: frames with
                  ``"part": true`` carry its first prompts and contexts, in order, and
                  the last frame the rest with every other field; the host joins them
                  (:func:`encode_bridge`, :func:`join_bridge`) before it checks the
                  request.  Model code never meets the cap unless one prompt alone
                  passes it.
    ``result``    ``{"t", "id", "ok", "output", "output_chars", "error", "final"}`` —
                  the outcome of one ``exec``; ``final`` is the answer string when
                  model code called ``FINAL``/``FINAL_VAR``, else ``None``.

Each frame is a TypedDict below; both sides build frames with them.  A
decoded frame is an untrusted ``dict`` until its reader has checked it: a
``bridge`` frame is checked once, by :func:`decode_bridge`, into the typed
request the host dispatches on (:data:`BridgeRequest`); its ``reply`` is built
by :func:`answer` or :func:`refusal`.
This module is imported by both sides, so it depends only on msgpack.
"""

# No ``from __future__ import annotations`` here: a TypedDict compiles each string
# annotation into a ForwardRef when it is defined, at every start of the host and of
# the zygote.
import struct
from collections.abc import Mapping, Sequence
from typing import Any, Literal, NamedTuple, NotRequired, TypedDict

import msgpack

__all__ = [
    "CHILD_FRAME_MAX_BYTES",
    "DEFAULT_MAX_FRAME_BYTES",
    "HEADER",
    "HOST_FRAME_MAX_BYTES",
    "ISOLATION_LAYERS",
    "BridgeAnswer",
    "BridgeFn",
    "BridgeFrame",
    "BridgeRequest",
    "BudgetRequest",
    "CancelRequest",
    "CollectRequest",
    "ExecFrame",
    "ExportFrame",
    "ExportedFrame",
    "FrameDecoder",
    "FrameError",
    "FrameTooLarge",
    "HardenedFrame",
    "InitFrame",
    "QueryRequest",
    "ReadyFrame",
    "ReplyFrame",
    "ReplyKind",
    "ResultFrame",
    "ShutdownFrame",
    "SpeculateRequest",
    "ToolRequest",
    "answer",
    "decode_bridge",
    "encode_bridge",
    "encode_frame",
    "join_bridge",
    "refusal",
]

HEADER = struct.Struct(">I")

#: Frames larger than this are refused unless a reader is given a larger cap.
DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024
#: Child → host frames: what the host reads per frame (the child never sends more).
CHILD_FRAME_MAX_BYTES = DEFAULT_MAX_FRAME_BYTES
#: Host → child frames may be this large: ``init`` carries the whole context when it is small
#: enough to go inline, and a ``reply`` carries a whole batch of answers.
HOST_FRAME_MAX_BYTES = 1 << 30

#: The child's isolation layers, in the order ``isolation.harden`` applies them: the keys
#: of a ``hardened``/``ready`` frame's ``isolation`` map.  Here, not in isolation.py, so
#: that the host reads them without importing ctypes, Landlock and seccomp.
ISOLATION_LAYERS = (
    "fds", "netns", "rlimits", "uid", "no-new-privs", "parent-death-signal", "landlock", "seccomp",
)

# -- host → child ------------------------------------------------------------------------


class InitFrame(TypedDict):
    t: Literal["init"]
    max_output_chars: int
    context: NotRequired[str | list[str]]
    context_fd: NotRequired[Literal[True]]
    #: Host tools model code may call by name (each becomes a function in the namespace).
    tools: NotRequired[list[str]]
    #: FINAL_VAR of a dict or list answers its JSON (the run asked for structured data).
    answer_json: NotRequired[bool]


class ExportFrame(TypedDict):
    """Ask for the namespace's plain-data variables (a session being saved)."""

    t: Literal["export"]
    id: int


class ExecFrame(TypedDict):
    t: Literal["exec"]
    id: int
    code: str
    #: This execution's FINAL_VAR of a dict or list answers its JSON, as ``init``'s flag
    #: does for every execution: a session's sandbox outlives its queries, and only some
    #: of them ask for structured data.
    answer_json: NotRequired[bool]
    #: Speculative sub-queries this execution may have outstanding (auto-batching).
    window: NotRequired[int]


#: ``usage``: the request was refused as malformed; ``budget``: the run's budget is spent
#: (model code sees BudgetExceeded); ``tool``: a host tool failed (model code sees
#: ToolError); ``unsent``: a speculative call that was never sent (the sandbox asks it
#: normally); empty when ``ok``.
ReplyKind = Literal["", "usage", "budget", "tool", "unsent"]


class BridgeAnswer(TypedDict):
    """The host's answer to one bridge frame (a ``reply`` frame without ``t`` and ``id``)."""

    ok: bool
    value: str | list[str] | dict[str, Any] | None
    error: str
    kind: ReplyKind


class ReplyFrame(BridgeAnswer):
    t: Literal["reply"]
    id: int


class ShutdownFrame(TypedDict):
    t: Literal["shutdown"]


# -- child → host ------------------------------------------------------------------------


class HardenedFrame(TypedDict):
    t: Literal["hardened"]
    pid: int
    isolation: dict[str, str]


class ReadyFrame(TypedDict):
    t: Literal["ready"]
    pid: int
    isolation: NotRequired[dict[str, str]]


BridgeFn = Literal["llm_query", "llm_query_batched", "budget", "tool", "speculate", "collect",
                   "cancel"]


class BridgeFrame(TypedDict):
    t: Literal["bridge"]
    id: int
    fn: BridgeFn
    prompts: list[str]
    contexts: list[str | None]
    #: JSON text of a schema spec: the answers must be structured data.  The reply's
    #: value is then JSON text of ``[{"value": v} | {"error": why}, ...]``.
    schema: NotRequired[str]
    #: ``fn == "tool"``: the tool's name and JSON text of ``{"args", "kwargs"}``; the
    #: reply's value is JSON text of the result.
    tool: NotRequired[str]
    arguments: NotRequired[str]
    #: Auto-batching (``speculate``, ``collect``, ``cancel``): speculative call ids, the
    #: loop they belong to, its source line, and whether the loop is over.
    spec: NotRequired[list[int]]
    loop: NotRequired[int]
    line: NotRequired[int]
    end: NotRequired[bool]
    #: More of this request's prompts and contexts follow in the next frame.
    part: NotRequired[bool]


class QueryRequest(NamedTuple):
    """A checked ``bridge`` frame of ``llm_query`` (one prompt) or ``llm_query_batched``."""

    id: int
    batched: bool
    prompts: list[str]
    #: One per prompt (None: the prompt alone), or None for none at all.
    contexts: list[str | None] | None
    #: JSON text of a schema spec (structured answers), or None.
    schema: str | None


class BudgetRequest(NamedTuple):
    """A checked ``bridge`` frame of ``budget()``."""

    id: int


class ToolRequest(NamedTuple):
    """A checked ``bridge`` frame of a host tool call: its name and JSON arguments."""

    id: int
    tool: str
    arguments: str


class SpeculateRequest(NamedTuple):
    """A checked ``speculate`` frame: sub-queries a loop will ask, to send ahead."""

    id: int
    loop: int
    line: int
    #: The speculative calls' ids, one per prompt.
    spec: list[int]
    prompts: list[str]
    contexts: list[str | None]
    schema: str | None


class CollectRequest(NamedTuple):
    """A checked ``collect`` frame: model code asked what speculative call ``spec`` asks."""

    id: int
    spec: int


class CancelRequest(NamedTuple):
    """A checked ``cancel`` frame: speculative calls no longer needed; ``end``: the loop
    that offered them is over."""

    id: int
    loop: int
    spec: list[int]
    end: bool


#: A bridge frame once its reader has checked it: what the host dispatches on.
BridgeRequest = (QueryRequest | BudgetRequest | ToolRequest | SpeculateRequest | CollectRequest
                 | CancelRequest)


def decode_bridge(frame: Mapping[str, Any]) -> BridgeRequest:
    """The typed request in a ``bridge`` frame, or FrameError saying what is wrong with it.

    The frame came from model code's sandbox: nothing in it is trusted before this.
    """
    request_id, fn = frame.get("id"), frame.get("fn")
    if type(request_id) is not int:
        raise FrameError("a bridge frame needs an int id")
    if fn == "budget":
        return BudgetRequest(request_id)
    if fn == "tool":
        tool, arguments = frame.get("tool"), frame.get("arguments")
        if not isinstance(tool, str) or not isinstance(arguments, str):
            raise FrameError("a tool call needs a tool name and JSON arguments")
        return ToolRequest(request_id, tool, arguments)
    if fn in ("speculate", "collect", "cancel"):
        return _decode_speculation(request_id, fn, frame)
    if fn not in ("llm_query", "llm_query_batched"):
        raise FrameError(f"unknown bridge function {fn!r}")
    prompts, contexts, schema = frame.get("prompts"), frame.get("contexts"), frame.get("schema")
    if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
        raise FrameError("prompts must be a list of str")
    if contexts is not None:
        if not isinstance(contexts, list) or len(contexts) != len(prompts):
            raise FrameError("contexts must be None or a list as long as prompts")
        if not all(c is None or isinstance(c, str) for c in contexts):
            raise FrameError("each context must be a str or None")
    if schema is not None and not isinstance(schema, str):
        raise FrameError("a schema must be JSON text")
    return QueryRequest(request_id, fn == "llm_query_batched", prompts, contexts, schema)


def _decode_speculation(request_id: int, fn: str, frame: Mapping[str, Any]
                        ) -> SpeculateRequest | CollectRequest | CancelRequest:
    spec, loop = frame.get("spec"), frame.get("loop", 0)
    if not isinstance(spec, list) or not all(type(s) is int for s in spec) or type(
            loop) is not int:
        raise FrameError(f"a {fn} frame needs int speculative call ids and an int loop")
    if fn == "collect":
        if len(spec) != 1:
            raise FrameError("a collect frame names one speculative call")
        return CollectRequest(request_id, spec[0])
    if fn == "cancel":
        end = frame.get("end", False)
        if not isinstance(end, bool):
            raise FrameError("a cancel frame's end must be a bool")
        return CancelRequest(request_id, loop, spec, end)
    query = decode_bridge({"id": request_id, "fn": "llm_query_batched",
                           "prompts": frame.get("prompts"), "contexts": frame.get("contexts"),
                           "schema": frame.get("schema")})
    line = frame.get("line", 0)
    assert isinstance(query, QueryRequest)
    if len(spec) != len(query.prompts) or type(line) is not int:
        raise FrameError("a speculate frame needs one id per prompt and an int line")
    return SpeculateRequest(request_id, loop, line, spec, query.prompts,
                            query.contexts or [None] * len(spec), query.schema)


def answer(value: str | list[str] | dict[str, Any]) -> BridgeAnswer:
    """A bridge request answered."""
    return {"ok": True, "value": value, "error": "", "kind": ""}


def refusal(error: str, kind: ReplyKind) -> BridgeAnswer:
    """A bridge request refused: model code sees ``error`` (raised as ``kind`` says)."""
    return {"ok": False, "value": None, "error": error, "kind": kind}


class ExportedFrame(TypedDict):
    """The answer to ``export``: JSON text of ``{name: tagged value}`` (``plaindata.py``)
    and the names of variables that are not plain data."""

    t: Literal["exported"]
    id: int
    data: str
    skipped: list[str]


class ResultFrame(TypedDict):
    t: Literal["result"]
    id: int
    ok: bool
    output: str
    output_chars: int
    error: str | None
    final: str | None


class FrameError(Exception):
    """A frame could not be encoded or decoded (oversize, not msgpack, not a typed map)."""


def encode_frame(message: Mapping[str, Any], max_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> bytes:
    """Encode ``message`` as one length-prefixed frame.

    Raises FrameError when the message has no string ``"t"`` key, holds a value
    msgpack cannot encode, or encodes to more than ``max_bytes``.
    """
    if not isinstance(message.get("t"), str):
        raise FrameError("a frame must be a map with a string 't' key")
    try:
        payload: bytes = msgpack.packb(message, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise FrameError(f"cannot encode frame: {exc}") from exc
    if len(payload) > max_bytes:
        raise FrameTooLarge(f"frame of {len(payload)} bytes exceeds the {max_bytes}-byte cap")
    return HEADER.pack(len(payload)) + payload


class FrameTooLarge(FrameError):
    """A message encodes to more bytes than the frame cap allows."""


def encode_bridge(message: BridgeFrame, max_bytes: int = CHILD_FRAME_MAX_BYTES) -> list[bytes]:
    """``message`` as one frame, or, when its prompts and contexts do not fit in one, as
    parts: ``"part": true`` frames with its first items, in order, then the last frame
    with the rest and every other field (see :func:`join_bridge`).

    Raises FrameTooLarge when one prompt with its context alone exceeds ``max_bytes``,
    FrameError when the message cannot be encoded at all.
    """
    try:
        return [encode_frame(message, max_bytes)]
    except FrameTooLarge:
        pass
    prompts, contexts = message["prompts"], message["contexts"]
    rest = {k: v for k, v in message.items() if k not in ("prompts", "contexts")}
    # What every frame costs besides its items (the last frame's fields are the most).
    room = max_bytes - len(encode_frame({**rest, "prompts": [], "contexts": [],
                                         "part": True}, max_bytes)) - _ARRAY_HEADERS
    frames: list[bytes] = []
    start, size = 0, 0
    for index, (prompt, context) in enumerate(zip(prompts, contexts, strict=True)):
        cost = _packed_str_bytes(prompt) + (1 if context is None else _packed_str_bytes(context))
        if cost > room:
            raise FrameTooLarge(f"one prompt of the request (item {index}) with its context "
                                f"takes {cost} bytes, more than a frame may hold ({max_bytes})")
        if size + cost > room:
            frames.append(encode_frame({"t": "bridge", "id": message["id"], "fn": message["fn"],
                                        "prompts": prompts[start:index],
                                        "contexts": contexts[start:index], "part": True},
                                       max_bytes))
            start, size = index, 0
        size += cost
    frames.append(encode_frame({**rest, "prompts": prompts[start:],
                                "contexts": contexts[start:]}, max_bytes))
    return frames


#: The most two msgpack array headers take (the prompts' and the contexts').
_ARRAY_HEADERS = 10


def _packed_str_bytes(text: str) -> int:
    """The most bytes msgpack takes for ``text``: a header of up to 5 bytes, then UTF-8."""
    return 5 + (len(text) if text.isascii() else len(text.encode()))


def join_bridge(parts: Sequence[Mapping[str, Any]], last: Mapping[str, Any]) -> dict[str, Any]:
    """The ``bridge`` frame whose parts (``"part": true`` frames, in order) came before
    ``last``: its prompts and contexts joined, every other field ``last``'s.  Checked as
    far as joining needs (lists, the same id and function); :func:`decode_bridge` checks
    the rest.  The host's per-execution byte cap bounds how many parts can come."""
    prompts: list[Any] = []
    contexts: list[Any] = []
    for frame in (*parts, last):
        if frame.get("id") != last.get("id") or frame.get("fn") != last.get("fn"):
            raise FrameError("the parts of a bridge request name different requests")
        part_prompts, part_contexts = frame.get("prompts"), frame.get("contexts")
        if not isinstance(part_prompts, list) or not isinstance(part_contexts, list) or len(
                part_prompts) != len(part_contexts):
            raise FrameError("each part of a bridge request needs as many contexts as prompts")
        prompts += part_prompts
        contexts += part_contexts
    return {**last, "prompts": prompts, "contexts": contexts}


class FrameDecoder:
    """Incremental decoder: feed bytes as they arrive, get whole frames back.

    The length header is checked against ``max_bytes`` before any payload is
    buffered, so an oversize frame is refused after 4 bytes, not after it has
    been read.  After a FrameError the decoder is unusable (the stream has lost
    its framing); the reader must drop the connection.
    """

    def __init__(self, max_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.max_bytes = max_bytes
        self._buffer = bytearray()
        self._broken = False

    @property
    def pending_bytes(self) -> int:
        """Bytes received that do not yet form a whole frame."""
        return len(self._buffer)

    @property
    def missing_bytes(self) -> int:
        """Bytes still to come for the frame begun (0 before its header is in), so a
        reader can take a large frame in one read instead of many small ones."""
        if len(self._buffer) < HEADER.size:
            return 0
        size: int = HEADER.unpack_from(self._buffer)[0]
        return max(0, HEADER.size + size - len(self._buffer))

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        """Add ``data`` and return every frame it completes, in order."""
        if self._broken:
            raise FrameError("decoder already failed; the stream has lost its framing")
        self._buffer += data
        frames: list[dict[str, Any]] = []
        try:
            while len(self._buffer) >= HEADER.size:
                (size,) = HEADER.unpack_from(self._buffer)
                if size > self.max_bytes:
                    raise FrameError(
                        f"frame of {size} bytes exceeds the {self.max_bytes}-byte cap"
                    )
                end = HEADER.size + size
                if len(self._buffer) < end:
                    break
                payload = bytes(self._buffer[HEADER.size:end])
                del self._buffer[:end]
                frames.append(_decode_payload(payload))
        except FrameError:
            self._broken = True
            raise
        return frames


#: Arrays and maps one frame may hold.  Real frames hold a handful; a frame of
#: nested empty arrays would otherwise decode 16 MiB into over a GiB of objects.
MAX_CONTAINERS = 1024


def _decode_payload(payload: bytes) -> dict[str, Any]:
    containers = 0

    def count(obj: Any) -> Any:
        nonlocal containers
        containers += 1
        if containers > MAX_CONTAINERS:
            raise FrameError(f"frame holds more than {MAX_CONTAINERS} arrays and maps")
        return obj

    try:
        message = msgpack.unpackb(
            payload, raw=False, strict_map_key=True, list_hook=count, object_hook=count
        )
    except FrameError:
        raise
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise FrameError(f"frame is not valid msgpack: {exc}") from exc
    if not isinstance(message, dict) or not isinstance(message.get("t"), str):
        raise FrameError("frame is not a map with a string 't' key")
    return message
