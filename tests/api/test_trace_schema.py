"""The trace schema: generated from the event classes, shipped, written first, and enforced.

Every trace starts with a ``trace_started`` header naming its schema version; the schema
(rlm/data/trace-schema.json) is what ``python -m rlm._trace_schema`` makes from the event
classes; the suite's own traces are checked against it (tests/trace_schema_check.py),
and that check fails a test whose trace does not match.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from rlm import RLM
from rlm._trace import TRACE_SCHEMA_VERSION, schema_version_of
from rlm._trace_schema import (
    FILE_NAME,
    breaking_changes,
    check_trace,
    load_schema,
    render,
    schema_document,
)
from rlm.view import parse_trace

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "rlm" / "data" / FILE_NAME


def test_the_shipped_schema_is_what_the_event_classes_make() -> None:
    assert SHIPPED.read_text(encoding="utf-8") == render(schema_document()), (
        "rlm/data/trace-schema.json is stale: run `python -m rlm._trace_schema` and commit it")
    assert load_schema() == schema_document()  # and the package reads that file


def test_a_trace_starts_with_its_schema_version_and_matches_the_schema(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    result = RLM(provider="fixture", trace_path=str(path)).completion(
        "What is the magic number?", "filler. " * 50 + "The magic number is 12.")
    assert result.answer == "12"
    lines = path.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    assert header["event"] == "trace_started"
    assert header["schema_version"] == TRACE_SCHEMA_VERSION == 2
    assert schema_version_of(header) == 2
    assert json.loads(lines[1])["event"] == "run_started"
    assert check_trace("\n".join(lines) + "\n", strict=True) == []
    # The run's own trace holds its events, not the file's header.
    assert result.trace[0]["event"] == "run_started"


def test_readers_take_a_trace_without_a_header_as_version_1() -> None:
    assert schema_version_of({"event": "run_started", "t": 0.0}) == 1
    assert schema_version_of(None) == 1
    assert schema_version_of({"event": "trace_started", "schema_version": "2"}) == 1
    first = '{"event": "call_started", "t": 0, "call_id": "root", "parent_id": null, ' \
            '"depth": 0, "query": "q", "model": "m", "context_chars": 1}\n'
    assert parse_trace(first).schema_version == 1
    loaded = parse_trace('{"event": "trace_started", "t": 0.0, "call_id": "", '
                         '"parent_id": null, "depth": 0, "schema_version": 2, '
                         '"rlm_version": "0.1.0"}\n' + first)
    assert loaded.schema_version == 2
    assert [e["event"] for e in loaded.events] == ["call_started"]  # the header is not shown
    assert not any("schema" in n for n in loaded.notices())


def test_a_trace_of_a_newer_schema_is_shown_with_a_notice() -> None:
    newer = parse_trace('{"event": "trace_started", "t": 0.0, "call_id": "", '
                        '"parent_id": null, "depth": 0, "schema_version": 9, '
                        '"rlm_version": "9.0"}\n{"event": "call_started", "t": 0, '
                        '"call_id": "root", "parent_id": null, "depth": 0, "query": "q", '
                        '"model": "m", "context_chars": 1, "mood": "new"}\n')
    assert newer.schema_version == 9 and len(newer.events) == 1
    assert any("schema version 9" in n and "upgrade" in n for n in newer.notices())


def test_a_mismatch_is_named_by_line_and_field() -> None:
    good = ('{"event": "sandbox_exited", "t": 1.5, "call_id": "root", "parent_id": null, '
            '"depth": 0, "pid": 7, "returncode": null, "reason": "closed"}')
    assert check_trace(good + "\n", strict=True) == []
    bad = good.replace('"pid": 7', '"pid": "7"')
    assert check_trace(good + "\n" + bad + "\n") == [
        "line 2 (sandbox_exited): pid: '7' is not of type 'integer'"]
    extra = good.replace('"pid": 7', '"pid": 7, "colour": "red"')
    assert check_trace(extra) == []  # a newer rlm may add a field: readers allow it
    assert "'colour' was unexpected" in check_trace(extra, strict=True)[0]  # rlm itself may not
    unknown = good.replace("sandbox_exited", "sandbox_exploded")
    assert check_trace(unknown) == []
    assert check_trace(unknown, strict=True) == [
        "line 1: event kind 'sandbox_exploded' is not in the schema"]
    assert check_trace(good + "\n" + good[:30]) == []  # a cut last line is a killed run


def test_only_additive_changes_keep_the_version() -> None:
    old = schema_document()
    new = copy.deepcopy(old)
    new["$defs"]["sandbox_exited"]["properties"]["signal"] = {"type": "integer"}
    new["$defs"]["warp_drive"] = {"properties": {}, "required": ["event", "factor"]}
    assert breaking_changes(old, new) == []
    new["$defs"]["sandbox_exited"]["required"].append("signal")
    del new["$defs"]["sandbox_exited"]["properties"]["reason"]
    new["$defs"]["sandbox_exited"]["properties"]["pid"] = {"type": "string"}
    del new["$defs"]["sandbox_memory_wait"]
    assert breaking_changes(old, new) == [
        "sandbox_exited.pid changed type", "sandbox_exited.reason removed",
        "sandbox_exited.signal added without a default", "event kind sandbox_memory_wait removed"]


INNER_TESTS = '''
from rlm._events import CallStarted
from rlm._trace import TraceWriter
import pytest


def write(path, context_chars):
    writer = TraceWriter(path)
    writer(CallStarted(call_id="root", query="q", model="m", context_chars=context_chars))
    writer.close()


def test_a_good_trace(tmp_path):
    write(tmp_path / "good.jsonl", 5)


def test_a_bad_trace(tmp_path):
    write(tmp_path / "bad.jsonl", "five")


@pytest.mark.foreign_traces
def test_a_bad_trace_on_purpose(tmp_path):
    write(tmp_path / "foreign.jsonl", "five")
'''


@pytest.mark.foreign_traces  # the inner session's bad trace is under this test's folder
def test_the_suite_check_fails_a_test_whose_trace_does_not_match(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(pytester.path / "state"))
    pytester.makepyfile(test_inner=INNER_TESTS)
    result = pytester.runpytest_inprocess("-p", "tests.trace_schema_check", "-p", "no:xdist",
                                          "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines([
        "*ERROR at teardown of test_a_bad_trace*",
        "*bad.jsonl: line 2 (call_started): context_chars: 'five' is not of type 'integer'*",
    ])
    assert "foreign.jsonl" not in result.stdout.str()
