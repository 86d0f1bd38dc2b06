"""The fixture root's scripts for sessions, host tools and structured answers.

Like the rest of the fixture model these are scripts, not intelligence: they
exist so sessions, tools and schemas are exercised offline, end to end.

- **A session's follow-up** (a later ``Query:`` message): the root answers from
  variables an earlier query left in the REPL — ``len(chunks)`` when the
  question mentions chunks, else ``answer`` — printing ``answer: X``, then ends
  with ``FINAL(X)`` (``NOT FOUND (...)`` saying why when no earlier question left
  the variable, e.g. it was cancelled mid-code); when that message holds an
  ``Answer schema:``, its code builds ``answer_data`` from X and ends with
  ``FINAL_VAR("answer_data")``.
- **A tool call** (a query ``Call NAME(ARGS)`` with NAME listed in the system
  prompt's host tools): the root calls it in code and answers with its result,
  or with the ``ToolError`` it raised.
- **A runaway model** (a query holding a fenced ````repl`` block): the root
  runs that code at every step and never answers, as a model stuck in a loop
  would, so the run's limits end it (see ``docs/bounds.md``).
- **A structured root answer** (``Answer schema: {...}`` in the first user
  message): step one's code also builds ``answer_data`` shaped by the schema
  from ``answer`` and ends with ``FINAL_VAR("answer_data")``.
- **A judge** (the system prompt is ``rlm eval``'s judge's): ``CORRECT`` when the
  ``Candidate answer:`` line equals the ``Expected answer:`` line once case,
  punctuation and spacing are set aside, ``INCORRECT`` when it does not, and
  ``UNSURE`` when the prompt has no such lines (a prompt of the user's own).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from rlm.providers.base import Message

__all__ = ["ANSWER_SCHEMA_PREFIX", "extra_reply", "is_judge_request", "judge_reply",
           "structured_tail"]

ANSWER_SCHEMA_PREFIX = "Answer schema: "
_TOOL_QUERY = re.compile(r"^Call (\w+)\((.*)\)\s*$")
_ANSWER_LINE = re.compile(r"^answer: (.+)$", re.MULTILINE)
_ERROR_LINE = re.compile(r"^(\w*Error: .+)$", re.MULTILINE)
#: A follow-up's answer when no earlier question left the variable it reads.
_NO_EARLIER = (
    "NOT FOUND (no earlier question finished its work in this session, "
    "so there is nothing to answer from: ask the question itself again)"
)
_GIVEN_CODE = re.compile(r"^```repl\n(.*?\n)```", re.MULTILINE | re.DOTALL)


_JUDGE_MARKER = "You grade answers to questions."  # prompts/rlm/prompts/judge.md
_GRADED = re.compile(r"^(Expected|Candidate) answer:(.*)$", re.MULTILINE)


def is_judge_request(messages: Sequence[Message]) -> bool:
    """A judge's request carries the judge's system prompt."""
    return any(m["role"] == "system" and _JUDGE_MARKER in m["content"] for m in messages)


def judge_reply(messages: Sequence[Message]) -> str:
    """The fixture judge's verdict on the last user message (see the module docstring)."""
    prompt = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
    lines = {kind: _plain(text) for kind, text in _GRADED.findall(prompt)}
    if len(lines) < 2:
        return "UNSURE"
    return "CORRECT" if lines["Expected"] == lines["Candidate"] else "INCORRECT"


def _plain(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.casefold()).split())


def _queries(messages: Sequence[Message]) -> list[int]:
    """Indexes of user messages that ask a query (the first one, and each follow-up)."""
    return [
        i for i, m in enumerate(messages)
        if m["role"] == "user" and any(
            line.startswith("Query:") for line in m["content"].splitlines()
        )
    ]


def _query_text(message: Message) -> str:
    lines = [line for line in message["content"].splitlines() if line.startswith("Query:")]
    return lines[-1].removeprefix("Query:").strip() if lines else ""


def extra_reply(messages: Sequence[Message]) -> str | None:
    """The root's reply when the conversation is a follow-up or a tool call, else None."""
    asked = _queries(messages)
    if not asked:
        return None
    latest = asked[-1]
    given = _GIVEN_CODE.search(messages[asked[0]]["content"].rpartition("Query: ")[2])
    if given is not None:
        return f"I will run the code I was given, again.\n\n```repl\n{given.group(1)}```"
    query = _query_text(messages[latest])
    since = messages[latest + 1:]
    steps = sum(1 for m in since if m["role"] == "assistant")
    tool = _TOOL_QUERY.match(query)
    system = next((m["content"] for m in messages if m["role"] == "system"), "")
    if tool and f"- `{tool.group(1)}(" in system:
        if steps == 0:
            code = f"result = {tool.group(1)}({tool.group(2)})\nprint(f\"answer: {{result}}\")\n"
            return f"I will call the host tool {tool.group(1)}.\n\n```repl\n{code}```"
        return _final_from(since)
    if len(asked) < 2:
        return None
    if steps == 0:
        name = "len(chunks)" if "chunk" in query.lower() else "answer"
        # An earlier question stopped mid-code (Ctrl-C, a limit) may have left no such
        # variable: answer that it is missing, never with a NameError.
        code = (
            f"try:\n    followed = str({name})\nexcept NameError:\n"
            f"    followed = {code_literal(_NO_EARLIER)}\n"
            "print(f\"answer: {followed}\")\n"
        )
        schema = _answer_schema(messages[latest]["content"])
        if schema is not None:  # a structured follow-up: hand the value over as data
            code += _shaped_final(schema, "followed")
        return f"The REPL still holds my earlier work.\n\n```repl\n{code}```"
    return _final_from(since)


def _final_from(since: Sequence[Message]) -> str:
    for message in reversed(since):
        if message["role"] != "user":
            continue
        error = _ERROR_LINE.search(message["content"])
        if error:
            return f"The code failed.\nFINAL({error.group(1).strip()})"
        found = _ANSWER_LINE.findall(message["content"])
        if found:
            said = "Nothing to answer from" if found[-1].strip() == _NO_EARLIER else "Found it"
            return f"{said}.\nFINAL({found[-1].strip()})"
    return "Nothing was printed.\nFINAL(NOT FOUND)"


def structured_tail(messages: Sequence[Message]) -> str:
    """Code that ends step one with ``FINAL_VAR("answer_data")`` shaped by the answer
    schema in the first user message ('' when the run wants no structured answer)."""
    first = next((m["content"] for m in messages if m["role"] == "user"), "")
    schema = _answer_schema(first)
    if schema is None:
        return ""
    return "if found:\n" + "".join(f"    {line}\n" for line in
                                    _shaped_final(schema, "answer").splitlines())


def _answer_schema(content: str) -> dict[str, Any] | None:
    """The answer schema a query message states, if any."""
    line = next(
        (x for x in content.splitlines() if x.startswith(ANSWER_SCHEMA_PREFIX)), None
    )
    try:
        schema = json.loads(line.removeprefix(ANSWER_SCHEMA_PREFIX)) if line else None
    except ValueError:
        return None
    return schema if isinstance(schema, dict) else None


def code_literal(text: str) -> str:
    """``text`` as a Python string literal that can sit inside a fenced code block: its
    backticks are written ``\\x60``, so a query or field name holding three of them
    cannot end the block early."""
    return repr(text).replace("`", "\\x60")


def _shaped_final(schema: dict[str, Any], var: str) -> str:
    """Code building ``answer_data`` shaped by ``schema`` from the str ``var``, then
    ending with ``FINAL_VAR("answer_data")``."""
    fields = []
    for name, spec in (schema.get("properties") or {}).items():
        kind = spec.get("type") if isinstance(spec, dict) else None
        value = f"(int({var}) if {var}.isdigit() else None)" if kind == "integer" else var
        fields.append(f"{code_literal(str(name))}: {value}")
    body = "{" + ", ".join(fields) + "}" if schema.get("type") == "object" else f"[{var}]"
    return f"answer_data = {body}\nFINAL_VAR(\"answer_data\")\n"
