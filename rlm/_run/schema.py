"""Structured data at the bridge: schemas for answers and tool arguments, and validation.

Two ways to say what shape data must have:

- a **simple spec**: a dict of field → type, where a type is a name (``"str"``,
  ``"int"``, ``"float"``, ``"bool"``, ``"list"``, ``"dict"``, ``"any"``,
  ``"list[str]"``, ``"str | None"``), a Python type (``str``, ``list[int]``), a
  nested dict (an object) or a one-element list (``[spec]``: an array of it);
- a **JSON Schema** (recognised by ``type``, ``properties``, ``items``, ``$schema``,
  ``enum``, ``const``, ``anyOf``/``oneOf``/``allOf`` or ``$ref`` at its top).

Both become a JSON Schema (:func:`normalise_schema`), checked once with the
``jsonschema`` library and used to validate values (:func:`validation_error`).
Python type hints of host tools become JSON Schemas the same way
(:func:`schema_from_hint`), so one validator checks tool arguments and answers.
``jsonschema`` is imported on first use: a run without schemas never pays for it.
"""

from __future__ import annotations

import functools
import json
import re
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "JsonSchema",
    "SchemaError",
    "is_plain_data",
    "normalise_schema",
    "parse_json_answer",
    "schema_from_hint",
    "validation_error",
]

JsonSchema = dict[str, Any]

_JSON_TYPES = {"string", "integer", "number", "boolean", "array", "object", "null"}
_SCHEMA_KEYS = {
    "properties", "items", "$schema", "enum", "const", "anyOf", "oneOf", "allOf", "$ref",
}
_NAMED: dict[str, JsonSchema] = {
    "str": {"type": "string"},
    "string": {"type": "string"},
    "int": {"type": "integer"},
    "integer": {"type": "integer"},
    "float": {"type": "number"},
    "number": {"type": "number"},
    "bool": {"type": "boolean"},
    "boolean": {"type": "boolean"},
    "list": {"type": "array"},
    "dict": {"type": "object"},
    "none": {"type": "null"},
    "null": {"type": "null"},
    "any": {},
}
_GENERIC = re.compile(r"^(list|dict)\[(.+)\]$")


class SchemaError(ValueError):
    """A schema (or a type hint) that cannot describe plain JSON data."""


def normalise_schema(spec: object) -> JsonSchema:
    """A checked JSON Schema from a simple spec or a JSON Schema; SchemaError if neither."""
    schema = _from_spec(spec, "schema")
    _check(json.dumps(schema, sort_keys=True))
    return schema


def validation_error(value: object, schema: JsonSchema) -> str | None:
    """None when ``value`` fits ``schema``; otherwise what is wrong, and where."""
    from jsonschema import Draft202012Validator

    errors = sorted(
        Draft202012Validator(schema).iter_errors(value), key=lambda e: list(e.absolute_path)
    )
    if not errors:
        return None
    first = errors[0]
    where = "".join(f"[{p!r}]" for p in first.absolute_path)
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    return f"{where + ': ' if where else ''}{first.message}{more}"


def parse_json_answer(text: str) -> object:
    """The JSON value in a model's answer: the whole text, or a fenced/embedded value.

    Raises ValueError (with the decoder's message) when there is none.
    """
    candidates = [text.strip()]
    fenced = re.search(r"```(?:json)?\s*\n(.*?)\n?```", text, re.DOTALL)
    if fenced:
        candidates.append(fenced.group(1).strip())
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    if starts:
        candidates.append(text[min(starts):].strip())
    problem = "no JSON value found"
    decoder = json.JSONDecoder()
    for candidate in candidates:
        try:
            value, end = decoder.raw_decode(candidate)
        except json.JSONDecodeError as exc:
            problem = str(exc)
            continue
        if candidate[end:].strip() in ("", "```"):
            return value
        problem = f"extra text after the JSON value at char {end}"
    raise ValueError(problem)


def is_plain_data(value: object, _depth: int = 0) -> bool:
    """True for what crosses the bridge as msgpack data: None, bool, int, float, str,
    bytes, and lists/tuples/dicts (str keys) of those, nested at most 64 deep."""
    if _depth > 64:
        return False
    if value is None or isinstance(value, bool | int | float | str | bytes):
        return True
    if isinstance(value, list | tuple):
        return all(is_plain_data(item, _depth + 1) for item in value)
    if isinstance(value, dict):
        return all(
            isinstance(k, str) and is_plain_data(v, _depth + 1) for k, v in value.items()
        )
    return False


def schema_from_hint(hint: object) -> JsonSchema:
    """The JSON Schema of a Python type hint; SchemaError for a type that is not plain data."""
    if hint is Any or hint is typing.Any or hint is object:
        return {}
    if hint is None or hint is type(None):
        return {"type": "null"}
    if hint is bool:
        return {"type": "boolean"}
    if hint is int:
        return {"type": "integer"}
    if hint is float:
        return {"type": "number"}
    if hint is str:
        return {"type": "string"}
    if hint in (list, tuple):
        return {"type": "array"}
    if hint is dict:
        return {"type": "object"}
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [schema_from_hint(arg) for arg in args]}
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin is list or origin is Sequence:
        return {"type": "array", "items": schema_from_hint(args[0])} if args else {"type": "array"}
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": schema_from_hint(args[0])}
        return {
            "type": "array",
            "prefixItems": [schema_from_hint(arg) for arg in args],
            "minItems": len(args),
            "maxItems": len(args),
        }
    if origin is dict or origin is Mapping:
        if args and args[0] is not str:
            raise SchemaError(f"{_hint_name(hint)}: dict keys must be str to cross as data")
        value = schema_from_hint(args[1]) if args else {}
        return {"type": "object", "additionalProperties": value}
    raise SchemaError(
        f"{_hint_name(hint)} cannot cross the bridge: only plain data does (str, int, float, "
        "bool, None, and lists, tuples and str-keyed dicts of those)"
    )


# -- internals ------------------------------------------------------------------------


def _from_spec(spec: object, where: str) -> JsonSchema:
    if isinstance(spec, Mapping):
        if _looks_like_json_schema(spec):
            return dict(spec)
        properties = {}
        for name, field in spec.items():
            if not isinstance(name, str):
                raise SchemaError(f"{where}: field names must be str, got {name!r}")
            properties[name] = _from_spec(field, f"{where}.{name}")
        return {
            "type": "object",
            "properties": properties,
            "required": list(properties),
            "additionalProperties": False,
        }
    if isinstance(spec, list):
        if len(spec) != 1:
            raise SchemaError(f"{where}: a list spec holds exactly one item spec, like [\"str\"]")
        return {"type": "array", "items": _from_spec(spec[0], f"{where}[]")}
    if isinstance(spec, str):
        return _from_name(spec, where)
    try:
        return schema_from_hint(spec)
    except SchemaError as exc:
        raise SchemaError(f"{where}: {exc}") from None


def _from_name(name: str, where: str) -> JsonSchema:
    text = name.strip()
    if "|" in text:
        return {"anyOf": [_from_name(part, where) for part in text.split("|")]}
    known = _NAMED.get(text.lower())
    if known is not None:
        return dict(known)
    generic = _GENERIC.match(text)
    if generic:
        kind, inner = generic.groups()
        if kind == "list":
            return {"type": "array", "items": _from_name(inner, where)}
        key, _, value = inner.partition(",")
        if value and key.strip().lower() not in ("str", "string"):
            raise SchemaError(f"{where}: dict keys must be str, got {name!r}")
        return {"type": "object", "additionalProperties": _from_name(value or key, where)}
    allowed = ", ".join(sorted(_NAMED))
    raise SchemaError(
        f"{where}: unknown type {name!r}; use one of {allowed}, list[T], dict[str, T]"
    )


def _looks_like_json_schema(spec: Mapping[Any, Any]) -> bool:
    if _SCHEMA_KEYS & set(spec):
        return True
    kind = spec.get("type")
    return kind in _JSON_TYPES or (
        isinstance(kind, list) and all(isinstance(k, str) and k in _JSON_TYPES for k in kind)
    )


@functools.lru_cache(maxsize=256)
def _check(schema_json: str) -> None:
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError as JsonSchemaError

    try:
        Draft202012Validator.check_schema(json.loads(schema_json))
    except JsonSchemaError as exc:
        raise SchemaError(f"not a valid JSON Schema: {exc.message}") from None


def _hint_name(hint: object) -> str:
    return getattr(hint, "__name__", None) or repr(hint)
