"""The trace schema: JSON Schema for every event a trace holds, made from the event classes.

``rlm/data/trace-schema.json`` is generated from the event dataclasses (one source of
truth) by ``python -m rlm._trace_schema`` and shipped in the package;
``tests/api/test_trace_schema.py`` fails when it is not what this would write now.

One document describes every kind: the fields every event has, then, per kind (an
``if``/``then`` on ``event``), that kind's fields in ``$defs``.  A field without a
default is required; one with a default may be missing (a trace from before it was
added).  Kinds the document does not name, and fields it does not list, are allowed:
a newer rlm of the same schema version may add them (docs/compatibility.md).
:func:`strict_schema` forbids both; the test suite checks every trace it writes with it.

Writing refuses a change that breaks a reader of the current version (a kind or field
removed, a field retyped or made required) unless ``TRACE_SCHEMA_VERSION`` moved on.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import sys
import types
import typing
from collections.abc import Iterator
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from rlm._events import Event
from rlm._trace import CONTENT_FIELDS, TRACE_SCHEMA_VERSION

__all__ = [
    "breaking_changes",
    "check_trace",
    "event_classes",
    "load_schema",
    "schema_document",
    "strict_schema",
]

#: Where the document is shipped: ``rlm/data/`` (package data).
FILE_NAME = "trace-schema.json"
_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def event_classes() -> list[type[Event]]:
    """Every event kind rlm writes, in a stable order (the modules that define them imported)."""
    import rlm.volley.events  # noqa: F401  (the volley's kinds)

    found: dict[str, type[Event]] = {}

    def walk(cls: type[Event]) -> None:
        for sub in cls.__subclasses__():
            if sub.__module__.split(".")[0] == "rlm":  # not a test's own kinds
                found.setdefault(sub.kind, sub)
            walk(sub)

    walk(Event)
    return [found[kind] for kind in sorted(found)]


def schema_document() -> dict[str, Any]:
    """The trace schema, as ``rlm/data/trace-schema.json`` holds it."""
    common = _fields(Event)
    kinds = {cls.kind: _kind_schema(cls) for cls in event_classes()}
    kinds["trace_started"]["properties"]["schema_version"] = {"const": TRACE_SCHEMA_VERSION}
    return {
        "$schema": _DIALECT,
        "title": f"rlm trace event, schema version {TRACE_SCHEMA_VERSION}",
        "description": (
            "One line of an rlm trace (JSONL). The first line of a trace is a trace_started "
            "record naming its schema version; a trace without one is version 1. Generated "
            "from rlm's event classes; docs/events.md says what each field means."
        ),
        "x-rlm-schema-version": TRACE_SCHEMA_VERSION,
        "type": "object",
        "required": ["event", *common],
        "properties": {"event": {"type": "string"}, **common},
        "allOf": [
            {"if": {"required": ["event"], "properties": {"event": {"const": kind}}},
             "then": {"$ref": f"#/$defs/{kind}"}}
            for kind in kinds
        ],
        "$defs": kinds,
    }


def _kind_schema(cls: type[Event]) -> dict[str, Any]:
    fields = {"event": {"const": cls.kind}, **_fields(cls)}
    content = CONTENT_FIELDS.get(cls.kind, ())
    for name in content:  # --trace-content meta writes them as null
        fields[name] = _nullable(fields[name])
    required = [f.name for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    return {"type": "object", "description": _summary(cls), "required": ["event", *required],
            "properties": fields}


def _fields(cls: type[Event]) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: _type_schema(hints[f.name]) for f in dataclasses.fields(cls)}


def _summary(cls: type[Event]) -> str:
    """The class docstring's first paragraph (a dataclass without one has its signature)."""
    doc = (cls.__doc__ or "").strip()
    if not doc or doc.startswith(f"{cls.__name__}("):
        return cls.kind
    return " ".join(doc.split("\n\n")[0].split())


def _type_schema(hint: Any) -> dict[str, Any]:
    """JSON Schema for one field's annotation (the few shapes events use)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        return _union([_type_schema(a) for a in args])
    if origin is list:
        return {"type": "array", "items": _type_schema(args[0])}
    if origin is dict or hint is dict:
        return {"type": "object"}
    simple = {str: "string", bool: "boolean", int: "integer", float: "number",
              type(None): "null"}
    if hint in simple:
        return {"type": simple[hint]}
    raise TypeError(f"no JSON Schema for an event field of type {hint!r}: add it here")


def _union(options: list[dict[str, Any]]) -> dict[str, Any]:
    """``{"type": [...]}`` when every option is a plain type, else ``anyOf``."""
    if all(list(o) == ["type"] for o in options):
        names: list[str] = []
        for o in options:
            names += o["type"] if isinstance(o["type"], list) else [o["type"]]
        return {"type": names}
    return {"anyOf": options}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema``, or null (a content field that ``--trace-content meta`` blanked)."""
    options = schema.get("anyOf", [schema])
    if any("null" in (o.get("type"), *o.get("type", [])) for o in options):
        return schema
    return _union([*options, {"type": "null"}])


@cache
def load_schema() -> dict[str, Any]:
    """The published schema, as shipped in the package."""
    text = resources.files("rlm").joinpath("data", FILE_NAME).read_text(encoding="utf-8")
    document: dict[str, Any] = json.loads(text)
    return document


def strict_schema(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` that allows no kind and no field it does not name: what rlm itself
    writes must be declared (the test suite checks every trace it writes with it)."""
    strict = copy.deepcopy(document)
    strict["properties"]["event"] = {"enum": sorted(strict["$defs"])}
    for kind in strict["$defs"].values():
        kind["additionalProperties"] = False
    return strict


@cache
def _validators(strict: bool) -> tuple[dict[str, Any], Any]:
    """A validator per kind (its ``$defs`` entry: what the document's ``if``/``then``
    picks, without testing every kind's ``if`` on each record), and the whole
    document's for a record of no kind it names."""
    from jsonschema import Draft202012Validator  # only readers that check pay for it

    document = load_schema()
    if strict:
        document = strict_schema(document)
    kinds = {kind: Draft202012Validator(schema) for kind, schema in document["$defs"].items()}
    return kinds, Draft202012Validator(document)


def check_trace(text: str, *, strict: bool = False) -> list[str]:
    """What in a trace's JSONL ``text`` does not match the published schema, a line each
    (``line N (kind): message``); empty when all of it does.  A last line cut short (a
    run still writing, or killed) is not a mismatch."""
    problems = []
    lines = text.split("\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            if number < len(lines):
                problems.append(f"line {number}: not JSON")
            continue
        kind = record.get("event") if isinstance(record, dict) else None
        kinds, whole = _validators(strict)
        if strict and isinstance(kind, str) and kind not in kinds:
            problems.append(f"line {number}: event kind {kind!r} is not in the schema")
            continue
        validator = kinds.get(kind, whole) if isinstance(kind, str) else whole
        for error in validator.iter_errors(record):
            where = "/".join(str(p) for p in error.absolute_path) or "record"
            problems.append(f"line {number} ({kind}): {where}: {error.message}")
    return problems


def breaking_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What in ``new`` a reader of ``old``'s version would trip on: kinds or fields removed,
    fields retyped, fields made required.  New kinds and new optional fields are not."""
    return list(_breaks(old.get("$defs", {}), new.get("$defs", {})))


def _breaks(old: dict[str, Any], new: dict[str, Any]) -> Iterator[str]:
    for kind, was in old.items():
        now = new.get(kind)
        if now is None:
            yield f"event kind {kind} removed"
            continue
        for name, shape in was["properties"].items():
            if name not in now["properties"]:
                yield f"{kind}.{name} removed"
            elif now["properties"][name] != shape and kind != "trace_started":
                yield f"{kind}.{name} changed type"
        for name in sorted(set(now["required"]) - set(was["required"])):
            # A trace written before the change lacks the field: it would no longer match.
            how = "made required" if name in was["properties"] else "added without a default"
            yield f"{kind}.{name} {how}"


def render(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=1, ensure_ascii=False) + "\n"


def main(root: Path) -> int:
    """Write the schema into ``root``'s rlm/data; refuse a breaking change within a version."""
    path = root / "rlm" / "data" / FILE_NAME
    new = schema_document()
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        old = {}
    if old.get("x-rlm-schema-version") == TRACE_SCHEMA_VERSION:
        breaks = breaking_changes(old, new)
        if breaks:
            print(f"Error: the events changed in a way a reader of trace schema version "
                  f"{TRACE_SCHEMA_VERSION} would trip on ({'; '.join(breaks)}): raise "
                  "TRACE_SCHEMA_VERSION in rlm/_trace.py and say what changed in "
                  "docs/compatibility.md, or give the change a default", file=sys.stderr)
            return 1
    path.write_text(render(new), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]))
