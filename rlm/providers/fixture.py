"""The built-in fixture model: a scripted stand-in for a language model.

It is **not** a language model.  It exists so that demos, tests and benchmarks
exercise the whole runtime (sandbox, gate, fan-out) deterministically and
offline.  Two roles, told apart by the conversation alone:

- **root** (some system message contains ``llm_query_batched``, i.e. the RLM
  system prompt): a stateless script that derives its step from the
  conversation.  Step 1 writes real REPL code that chunks ``context`` and asks
  a sub-model about every chunk (batched or sequential, from the model name);
  later steps end the call with a ``FINAL(...)`` line.
- **volley task** (the system message is the volley prompt): a question
  ``What is the <key>?`` is answered from the shared context like a
  sub-query; any other task gets a deterministic acknowledgement naming it.
  A :class:`PrefixCache` reports the shared prefix as cached input once a
  request with the same prefix has completed, as providers' prompt caches do.
- **judge** (``rlm eval``'s judge prompt): grades a candidate answer against
  the expected one (see ``_fixture_extras``).
- **sub** (anything else): finds ``the <key> is <value>`` in the text it is
  given, where the key comes from a first line ``What is the <key>?``.

Model names: ``fixture`` / ``fixture-batched`` (batched fan-out),
``fixture-sequential`` (one ``llm_query`` after another), each with an optional
``:N`` suffix for the number of chunks (``fixture:32``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import trio

from rlm.errors import ProviderConnectionError, ProviderStatusError, SettingError
from rlm.providers._fixture_extras import (
    code_literal,
    extra_reply,
    is_judge_request,
    judge_reply,
    structured_tail,
)
from rlm.providers.base import Completion, CompletionRequest, Message, TextSink

__all__ = [
    "FIXTURE_FINGERPRINT",
    "NOT_FOUND",
    "FixtureModel",
    "FixtureProvider",
    "PrefixCache",
    "answered_by",
    "estimate_tokens",
    "fixture_reply",
    "is_fixture_answer",
    "is_root_request",
    "is_volley_request",
    "parse_fixture_model",
    "root_reply",
    "step_one_code",
    "stream_pieces",
    "sub_reply",
    "volley_reply",
]

NOT_FOUND = "NOT FOUND"
#: The ``system_fingerprint`` of every fixture answer, in-process or served over HTTP: the
#: field OpenAI-compatible replies already carry, so no provider needs to know about fixtures.
FIXTURE_FINGERPRINT = "rlm-fixture"
MAX_ROOT_STEPS = 3  # after this many assistant replies the root always answers
_ROOT_MARKER = "llm_query_batched"
_VOLLEY_MARKER = "one task of a volley"  # in prompts/rlm/prompts/volley.md
_QUESTION_RE = re.compile(r"^\s*what\s+(?:is|was|are)\s+(?:the\s+)?(.+?)[\s?.!]*$", re.IGNORECASE)
_ERROR_RE = re.compile(
    r"Traceback \(most recent call last\)|^\s*\w*(?:Error|Exception)\b", re.MULTILINE
)
_ANSWER_LINE_RE = re.compile(r"^answer: (.+)$", re.MULTILINE)
_TRAILING_PUNCTUATION = ".,;:!?\"')]}>"


@dataclass(frozen=True, slots=True)
class FixtureModel:
    """What a fixture model name asks for: the fan-out style and the chunk count."""

    variant: Literal["batched", "sequential"]
    chunks: int


@functools.lru_cache(maxsize=64)
def parse_fixture_model(model: str, default_chunks: int = 16) -> FixtureModel:
    """Parse ``fixture[-batched|-sequential][:N]``.

    Names that do not mention ``sequential`` are batched, so any model name
    works.  Raises ``ValueError`` when the ``:N`` suffix is not a positive int.
    Remembered per name (the record is immutable): it is asked once or twice per
    request, on the loop a benchmark measures (in-process) or on the same cores
    (the fixture server).
    """
    name, colon, suffix = model.strip().rpartition(":")
    if not colon:
        name, suffix = suffix, ""
    chunks = default_chunks
    if suffix:
        if not suffix.isdigit() or int(suffix) < 1:
            raise ValueError(f"bad chunk count {suffix!r} in model {model!r}; use e.g. fixture:16")
        chunks = int(suffix)
    if chunks < 1:
        raise ValueError(f"chunks must be at least 1 (got {chunks})")
    variant: Literal["batched", "sequential"] = (
        "sequential" if "sequential" in name.lower() else "batched"
    )
    return FixtureModel(variant=variant, chunks=chunks)


def estimate_tokens(text: str) -> int:
    """The fixture's token count: one token per four characters, rounded up."""
    return math.ceil(len(text) / 4)


def is_root_request(messages: Sequence[Message]) -> bool:
    """A root step carries the RLM system prompt; a sub-query does not."""
    return any(m["role"] == "system" and _ROOT_MARKER in m["content"] for m in messages)


def is_volley_request(messages: Sequence[Message]) -> bool:
    """A volley task carries the volley system prompt."""
    return any(m["role"] == "system" and _VOLLEY_MARKER in m["content"] for m in messages)


def volley_reply(messages: Sequence[Message]) -> str:
    """A volley task's answer: ``What is the <key>?`` from the shared context, else an ack."""
    users = [m["content"] for m in messages if m["role"] == "user"]
    task = users[-1] if users else ""
    shared = "\n".join(users[:-1])
    first_line = task.strip().partition("\n")[0]
    if _QUESTION_RE.match(first_line):
        return sub_reply(f"{first_line}\n{shared or task}")
    words = len(task.split())
    return (
        f"Done: {first_line[:200]} ({words:,} word{'' if words == 1 else 's'} of task, "
        f"{len(shared):,} chars of shared context)"
    )


class PrefixCache:
    """A provider's automatic prompt cache, simulated for volley requests.

    A request's prefix (every message but the last) counts as cached input when
    a request with the same prefix has *completed* before it arrived, and the
    prefix is at least ``min_tokens`` long.  So a volley that warms the cache
    with one task first reads it on every later task, and one that fans out at
    once misses on its whole first wave — as with real providers.
    """

    def __init__(self, *, min_tokens: int = 1024, capacity: int = 256) -> None:
        self.min_tokens = min_tokens
        self._capacity = capacity
        self._written: OrderedDict[bytes, None] = OrderedDict()

    def _key(self, messages: Sequence[Message]) -> tuple[bytes, int] | None:
        """The prefix's digest and tokens, or None when it cannot be cached."""
        if len(messages) < 2 or not is_volley_request(messages):
            return None
        prefix = list(messages[:-1])
        tokens = math.ceil(sum(len(m["content"]) for m in prefix) / 4)
        if tokens < self.min_tokens:
            return None
        return hashlib.blake2b(json.dumps(prefix).encode(), digest_size=16).digest(), tokens

    def lookup(self, messages: Sequence[Message]) -> int:
        """Cached input tokens for a request arriving now (0 on a miss)."""
        found = self._key(messages)
        if found is None or found[0] not in self._written:
            return 0
        self._written.move_to_end(found[0])
        return found[1]

    def write(self, messages: Sequence[Message]) -> None:
        """Remember a completed request's prefix."""
        found = self._key(messages)
        if found is not None:
            self._written[found[0]] = None
            self._written.move_to_end(found[0])
            while len(self._written) > self._capacity:
                self._written.popitem(last=False)


def sub_reply(prompt: str) -> str:
    """Answer ``What is the <key>?`` (first line) from the rest of ``prompt``."""
    first_line, _, rest = prompt.strip().partition("\n")
    match = _QUESTION_RE.match(first_line)
    if match is None:
        return NOT_FOUND
    key = match.group(1).strip()
    if key.lower().startswith("the "):
        key = key[4:].strip()
    if not key:
        return NOT_FOUND
    _, marker, text = rest.partition("Text:\n")
    if not marker:
        text = rest
    if not _may_mention(text, key.split()):
        return NOT_FOUND
    words = r"\s+".join(re.escape(word) for word in key.split())
    for found in re.finditer(rf"\bthe\s+{words}\s+is\s+(\S+)", text, re.IGNORECASE):
        value = found.group(1).rstrip(_TRAILING_PUNCTUATION)
        if value:
            return value
    return NOT_FOUND


def _may_mention(text: str, words: list[str]) -> bool:
    """False only when ``text`` cannot hold the key: its longest ASCII word is missing
    from the case-folded text.  The case-insensitive search over a whole chunk is slow,
    a benchmark's fixture model answers on the measured run's loop, and most chunks
    hold no key.  (``ı`` folds to itself, yet ``re.IGNORECASE`` matches it to ``i``.)
    """
    word = max(words, key=len).casefold()
    return not word.isascii() or word in text.casefold().replace("ı", "i")


def _query_of(messages: Sequence[Message]) -> str:
    """The question: the last ``Query:`` line of the first user message."""
    first_user = next((m["content"] for m in messages if m["role"] == "user"), "")
    lines = [line.strip() for line in first_user.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("Query:"):
            return line.removeprefix("Query:").strip()
    return lines[-1] if lines else ""


_CHUNKING = """\
question = {question}
docs = context if isinstance(context, list) else [context]
total = 0
for doc in docs:
    total = total + len(doc)
overlap = 200
step = (total + {chunks} - 1) // {chunks}
if step < 1:
    step = 1
chunks = []
for doc in docs:
    stop = len(doc)
    if stop < 1:
        stop = 1
    for start in range(0, stop, step):
        chunks.append(doc[start:start + step + overlap])
prompts = []
for chunk in chunks:
    prompts.append(f"{{question}}\\nAnswer with the value only, or NOT FOUND.\\n\\nText:\\n{{chunk}}")
"""  # noqa: E501 (the generated line is long)

_BATCHED = "answers = llm_query_batched(prompts)\n"
_SEQUENTIAL = "answers = []\nfor p in prompts:\n    answers.append(llm_query(p))\n"

_COLLECT = """\
found = []
for a in answers:
    a = str(a).strip()
    if a and not a.upper().startswith("NOT FOUND") and not a.startswith("Error:"):
        found.append(a)
print(f"{len(chunks)} chunks, {len(found)} hits")
# A chunk that ends inside the sentence sees only the value's start ("85" of
# "8599796"); the overlapping next chunk sees it whole, so drop such prefixes.
whole = []
for a in found:
    cut = False
    for b in found:
        if len(b) > len(a) and b.startswith(a):
            cut = True
    if not cut:
        whole.append(a)
if whole:
    answer = collections.Counter(whole).most_common(1)[0][0]
    FINAL_VAR("answer")
"""

_PROBE = """\
answer = "NOT FOUND"
for i in range(len(prompts)):
    a = str(llm_query(prompts[i])).strip()
    if a and not a.upper().startswith("NOT FOUND") and not a.startswith("Error:"):
        answer = a
        # This chunk may end inside the value; the next one overlaps it whole.
        if i + 1 < len(prompts):
            b = str(llm_query(prompts[i + 1])).strip()
            if len(b) > len(a) and b.startswith(a):
                answer = b
        break
print(f"answer: {answer}")
"""


def step_one_code(question: str, model: FixtureModel) -> str:
    """The REPL code of the root's first step (without the fence)."""
    fan_out = _BATCHED if model.variant == "batched" else _SEQUENTIAL
    chunking = _CHUNKING.format(question=code_literal(question), chunks=model.chunks)
    return "import collections\n\n" + chunking + fan_out + _COLLECT


def _probe_code(question: str, model: FixtureModel) -> str:
    """A simpler retry after step 1 failed: sequential, first hit wins, prints it."""
    return _CHUNKING.format(question=code_literal(question), chunks=model.chunks) + _PROBE


def _best_answer(messages: Sequence[Message]) -> str:
    """The last ``answer: X`` a probe printed, else NOT FOUND."""
    for message in reversed(messages):
        if message["role"] == "user":
            answers = _ANSWER_LINE_RE.findall(message["content"])
            if answers:
                return str(answers[-1]).strip()
    return NOT_FOUND


def _repl(code: str) -> str:
    return f"```repl\n{code}```"


def root_reply(messages: Sequence[Message], model: FixtureModel) -> str:
    """The scripted root's next reply, derived from the conversation alone."""
    extra = extra_reply(messages)  # a session's follow-up, or a host tool call
    if extra is not None:
        return extra
    question = _query_of(messages)
    steps = sum(1 for m in messages if m["role"] == "assistant")
    if steps == 0:
        how = "in one batch" if model.variant == "batched" else "one chunk at a time"
        return (
            "The context is too long to read at once, so I will split it into about "
            f"{model.chunks} overlapping chunks and ask a sub-model about each, {how}.\n\n"
            + _repl(step_one_code(question, model) + structured_tail(messages))
            + "\n\nThe code prints how many chunks had a value and answers with the most "
            "common one; if none did, I will look again."
        )
    last_user = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
    asks_final = "final answer" in last_user.lower()
    if steps == 1 and not asks_final and _ERROR_RE.search(last_user):
        return (
            "The code failed, so I will retry with a simpler sequential probe.\n\n"
            + _repl(_probe_code(question, model))
        )
    answer = _best_answer(messages[1:])
    if answer == NOT_FOUND:
        return f"The search found no answer.\nFINAL({NOT_FOUND})"
    return f"The probe found the answer.\nFINAL({answer})"


def fixture_reply(
    messages: Sequence[Message],
    model: str,
    chunks: int = 16,
    schema: Mapping[str, Any] | None = None,
) -> str:
    """The fixture model's reply to ``messages`` (root or sub by the rule above).

    With a ``schema`` (a structured-answer request) a sub-query answers JSON
    (:func:`structured_reply`).  Raises ``ValueError`` for a malformed ``:N``
    suffix in ``model``.
    """
    parsed = parse_fixture_model(model, chunks)
    if is_root_request(messages):
        return root_reply(messages, parsed)
    if is_judge_request(messages):
        return judge_reply(messages)
    if schema is not None:  # the question is the first user message, before any repair
        first = next((m["content"] for m in messages if m["role"] == "user"), "")
        return structured_reply(first, schema, repairing=_is_repair(messages))
    if is_volley_request(messages):
        return volley_reply(messages)
    prompt = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
    return sub_reply(prompt)


#: Put in a prompt, these make the structured fixture answer broken JSON:
#: once (a repair request then gets valid JSON), or every time.
INVALID_JSON_ONCE = "[fixture: invalid json once]"
INVALID_JSON_ALWAYS = "[fixture: invalid json always]"


def structured_reply(prompt: str, schema: Mapping[str, Any], *, repairing: bool = False) -> str:
    """A JSON answer shaped by ``schema``: every string/number field of an object
    (or the items of an array) holds what :func:`sub_reply` finds in ``prompt``,
    as an integer when the schema asks for one and the value is digits."""
    if INVALID_JSON_ALWAYS in prompt or (INVALID_JSON_ONCE in prompt and not repairing):
        return '{"value": oops'
    found = sub_reply(prompt)
    return json.dumps(_shaped(found, schema))


def _shaped(found: str, schema: Mapping[str, Any]) -> object:
    kinds = schema.get("type")
    kind = kinds[0] if isinstance(kinds, list) and kinds else kinds
    if kind == "object" or "properties" in schema:
        properties = schema.get("properties") or {}
        return {name: _shaped(found, sub) for name, sub in properties.items()
                if isinstance(sub, Mapping)}
    if kind == "array":
        items = schema.get("items")
        return [_shaped(found, items if isinstance(items, Mapping) else {})]
    if kind in ("integer", "number"):
        return int(found) if found.isdigit() else None
    if kind == "boolean":
        return found != NOT_FOUND
    return found


def _is_repair(messages: Sequence[Message]) -> bool:
    """A repair request carries the earlier (invalid) answer as an assistant message."""
    return any(m["role"] == "assistant" for m in messages)


def is_fixture_answer(metadata: Mapping[str, object]) -> bool:
    """Whether a completion's metadata says the fixture model wrote it."""
    return metadata.get("system_fingerprint") == FIXTURE_FINGERPRINT


def answered_by(provider: str, metadata: Mapping[str, object]) -> str:
    """Who wrote an answer: ``fixture`` when its metadata says the fixture model did
    (served by the fixture server, it came through an ``openai`` provider), else the
    provider's name."""
    return FixtureProvider.name if is_fixture_answer(metadata) else provider


def stream_pieces(text: str, chunk_chars: int) -> list[str]:
    """``text`` cut into the pieces a fixture stream sends (``chunk_chars`` each)."""
    return [text[i : i + chunk_chars] for i in range(0, len(text), chunk_chars)]


@dataclass(frozen=True, slots=True)
class FixtureOptions:
    """The fixture provider's pace: its own record (``FixtureProvider.options``), never a
    run setting.

    Root steps take ``root_latency`` s, sub-queries and volley tasks ``sub_latency``
    s, and a reply comes in pieces of ``chunk_chars`` characters, ``chunk_delay`` s
    apart.  ``FixtureProvider.paced(options)`` makes the provider; a paced run is
    ``RLM(provider="fixture", providers=FixtureProvider(sub_latency=0.5))``.
    """

    root_latency: float = 0.0
    sub_latency: float = 0.0
    chunk_chars: int = 16
    chunk_delay: float = 0.0

    def __post_init__(self) -> None:
        if min(self.root_latency, self.sub_latency, self.chunk_delay) < 0:
            raise SettingError("<fixture>: the fixture model's latencies and chunk delay must "
                               "not be negative")
        if self.chunk_chars < 1:
            raise SettingError(f"<fixture>: chunk_chars must be a positive integer, got "
                               f"{self.chunk_chars}")



#: Where these options used to live: run settings named ``fixture_*``.  Volley journals and
#: saved sessions written then still hold them.
LEGACY_SETTINGS = {
    "fixture_root_latency": "root_latency",
    "fixture_sub_latency": "sub_latency",
    "fixture_chunk_chars": "chunk_chars",
    "fixture_chunk_delay": "chunk_delay",
}


def pop_legacy_options(settings: dict[str, Any]) -> FixtureOptions | None:
    """Take the old ``fixture_*`` keys out of stored ``settings``: their FixtureOptions, if any."""
    found = {new: settings.pop(old) for old, new in LEGACY_SETTINGS.items() if old in settings}
    return FixtureOptions(**found) if found else None


class FixtureProvider:
    """The fixture model in-process, with a latency slept on trio's clock.

    Root steps sleep ``root_latency`` and sub-queries and volley tasks
    ``sub_latency`` seconds (told apart by the messages, not by
    ``request.lane``), so under a mock clock a run takes exactly the virtual
    time its critical path implies.  Cancellation during the sleep abandons
    the request, as with a real socket.  Volley tasks report cached input
    tokens from a :class:`PrefixCache`.  The reply is generated at
    ``chunk_delay`` seconds per ``chunk_chars`` characters: streamed, each
    piece arrives after its delay; read whole, the answer comes after all of
    them (a slow model is slow either way).  The first ``cut_streams``
    streams fail half-way, as a dropped connection would.
    """

    name = "fixture"

    def __init__(
        self,
        *,
        root_latency: float = 0.0,
        sub_latency: float = 0.0,
        chunks: int = 16,
        chunk_chars: int = 16,
        chunk_delay: float = 0.0,
        cut_streams: int = 0,
    ) -> None:
        if root_latency < 0 or sub_latency < 0 or chunk_delay < 0:
            raise ValueError("latencies and delays must not be negative")
        if chunks < 1 or chunk_chars < 1:
            raise ValueError(f"chunks and chunk_chars must be at least 1 (got {chunks})")
        self.root_latency = root_latency
        self.sub_latency = sub_latency
        self.chunks = chunks
        self.chunk_chars = chunk_chars
        self.chunk_delay = chunk_delay
        self.cuts_left = cut_streams
        self.cache = PrefixCache()

    @classmethod
    def paced(cls, options: FixtureOptions | None = None) -> FixtureProvider:
        """The fixture model at ``options``' pace (its defaults: no latency)."""
        options = options or FixtureOptions()
        return cls(root_latency=options.root_latency, sub_latency=options.sub_latency,
                   chunk_chars=options.chunk_chars, chunk_delay=options.chunk_delay)

    @property
    def options(self) -> FixtureOptions:
        """This provider's pace, as a record that can be stored and read back."""
        return FixtureOptions(root_latency=self.root_latency, sub_latency=self.sub_latency,
                              chunk_chars=self.chunk_chars, chunk_delay=self.chunk_delay)

    async def complete(self, request: CompletionRequest) -> Completion:
        completion = await self._first_token(request)
        await trio.sleep(self.chunk_delay * len(stream_pieces(completion.text, self.chunk_chars)))
        return completion

    async def _first_token(self, request: CompletionRequest) -> Completion:
        root = is_root_request(request.messages)
        cached = self.cache.lookup(request.messages)
        await trio.sleep(self.root_latency if root else self.sub_latency)
        self.cache.write(request.messages)
        return self._reply(request, cached)

    async def stream(self, request: CompletionRequest, on_text: TextSink) -> Completion:
        completion = await self._first_token(request)
        pieces = stream_pieces(completion.text, self.chunk_chars)
        cut_at = len(pieces) // 2 if self.cuts_left > 0 and pieces else None
        self.cuts_left -= cut_at is not None
        for index, piece in enumerate(pieces):
            if index == cut_at:
                raise ProviderConnectionError("fixture: the stream was cut (cut_streams)")
            await trio.sleep(self.chunk_delay)
            await on_text(piece)
        return completion

    def _reply(self, request: CompletionRequest, cached: int = 0) -> Completion:
        try:
            text = fixture_reply(
                request.messages, request.model, self.chunks, request.response_schema
            )
        except ValueError as exc:
            raise ProviderStatusError(str(exc), url="fixture:", status=400) from exc
        prompt_chars = sum(len(m["content"]) for m in request.messages)
        return Completion(
            text=text,
            model=request.model,
            input_tokens=math.ceil(prompt_chars / 4),
            output_tokens=estimate_tokens(text),
            finish_reason="stop",
            metadata={
                "system_fingerprint": FIXTURE_FINGERPRINT,
                **({"cached_tokens": cached} if cached else {}),
            },
        )

    async def aclose(self) -> None:
        """Nothing to release."""
