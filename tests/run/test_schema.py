"""Schemas for structured answers and tool arguments: specs, hints, validation, parsing."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlm._run.schema import (
    SchemaError,
    is_plain_data,
    normalise_schema,
    parse_json_answer,
    schema_from_hint,
    validation_error,
)


def test_a_simple_spec_becomes_a_strict_object_schema() -> None:
    schema = normalise_schema({"name": "str", "age": int, "tags": ["str"], "score": "float|None"})
    assert validation_error({"name": "a", "age": 3, "tags": ["x"], "score": None}, schema) is None
    assert validation_error({"name": "a", "age": 3, "tags": [], "score": 0.5}, schema) is None
    assert "'age' is a required property" in (validation_error({"name": "a"}, schema) or "")
    assert "['age']: '3' is not of type 'integer'" in (
        validation_error({"name": "a", "age": "3", "tags": [], "score": 1}, schema) or ""
    )
    assert "Additional properties" in (
        validation_error({"name": "a", "age": 3, "tags": [], "score": 1, "x": 1}, schema) or ""
    )


def test_json_schemas_pass_through_and_are_checked() -> None:
    schema = {"type": "array", "items": {"type": "integer"}}
    assert normalise_schema(schema) == schema
    assert validation_error([1, 2], schema) is None
    assert validation_error([1, "2"], schema) == "[1]: '2' is not of type 'integer'"
    with pytest.raises(SchemaError, match="not a valid JSON Schema"):
        normalise_schema({"type": "array", "items": {"type": "integre"}})


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"x": "strng"}, r"schema.x: unknown type 'strng'"),
        ({"x": ["str", "int"]}, "exactly one item spec"),
        ({1: "str"}, "field names must be str"),
        ({"x": "dict[int, str]"}, "dict keys must be str"),
        ({"x": object()}, "cannot cross the bridge"),
    ],
)
def test_bad_specs_say_what_is_wrong(spec: object, message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        normalise_schema(spec)


def test_type_hints_become_schemas() -> None:
    assert schema_from_hint(list[int] | None) == {
        "anyOf": [{"type": "array", "items": {"type": "integer"}}, {"type": "null"}]
    }
    pair = schema_from_hint(tuple[int, str])
    assert validation_error([1, "a"], pair) is None
    assert validation_error([1, "a", 2], pair) is not None
    assert validation_error({"a": 1.5}, schema_from_hint(dict[str, float])) is None
    with pytest.raises(SchemaError, match="dict keys must be str"):
        schema_from_hint(dict[int, str])
    with pytest.raises(SchemaError, match="cannot cross the bridge"):
        schema_from_hint(set[int])


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1}',
        'Sure:\n```json\n{"a": 1}\n```',
        '```\n{"a": 1}\n```',
        'The answer is {"a": 1}',
    ],
)
def test_json_is_found_in_what_models_write(text: str) -> None:
    assert parse_json_answer(text) == {"a": 1}


@pytest.mark.parametrize("text", ["no json here", '{"a": 1', '{"a": 1} and more words'])
def test_text_without_one_clean_json_value_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_json_answer(text)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(json_values, st.sampled_from(["{}", "```json\n{}\n```", "Answer: {}"]))
def test_any_json_object_or_array_round_trips_through_model_text(
    value: object, template: str
) -> None:
    wrapped = {"v": value}
    assert parse_json_answer(template.replace("{}", json.dumps(wrapped))) == wrapped
    assert is_plain_data(wrapped)


def test_plain_data_excludes_objects_and_non_str_keys() -> None:
    assert is_plain_data([1, 2.5, "x", b"y", None, True, (1, 2), {"k": [1]}])
    assert not is_plain_data({1: "x"})
    assert not is_plain_data([object()])
    deep: list[object] = []
    for _ in range(100):
        deep = [deep]
    assert not is_plain_data(deep)
