"""Each event becomes a dict once: the trace file, ``--stream --json`` and the result's
``trace`` share that one record, and what each of them shows is what it showed when
each made its own (``Event.to_dict``)."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
import trio

from rlm import RLM
from rlm._config import TraceContent
from rlm._events import Event, EventBus
from rlm._trace import CONTENT_FIELDS, TraceWriter
from rlm.cli._live import JSONLines


@dataclass(frozen=True, kw_only=True)
class CountedEvent(Event):
    """An event that counts how often it is converted."""

    kind: ClassVar[str] = "counted"
    conversions: ClassVar[list[int]] = []
    items: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        self.conversions.append(1)
        return super().to_dict()


@pytest.mark.foreign_traces  # "counted" is this test's own kind, in no schema
async def test_the_trace_stream_json_and_result_convert_an_event_once(tmp_path: Path) -> None:
    bus = EventBus()
    writer = TraceWriter(tmp_path / "t.jsonl")
    out = io.StringIO()
    bus.add_sink(writer)
    bus.add_sink(JSONLines(out))
    CountedEvent.conversions.clear()
    stamped = bus.emit(CountedEvent(call_id="c1", items=(1, 2)))
    trace = tuple(e.trace_record() for e in bus.events)  # as the result's trace is made
    writer.close()
    assert len(CountedEvent.conversions) == 1
    assert trace == (stamped.to_dict(),)
    header, line = (tmp_path / "t.jsonl").read_text().splitlines()
    assert json.loads(header)["event"] == "trace_started"  # the file's, not the bus's
    assert json.loads(line) == json.loads(out.getvalue())
    assert json.loads(out.getvalue())["items"] == [1, 2]


def test_the_record_kept_beside_the_fields_changes_no_equality_hash_or_repr() -> None:
    event, twin = CountedEvent(call_id="c1", items=(1,)), CountedEvent(call_id="c1", items=(1,))
    shown = repr(event)
    assert event.trace_record() is event.trace_record()
    assert event == twin and hash(event) == hash(twin) and repr(event) == shown
    assert event.to_dict() is not event.trace_record()  # a copy of one's own


async def test_a_record_made_before_the_event_was_stamped_is_not_carried_over() -> None:
    bus = EventBus()
    await trio.sleep(0.01)  # so the stamp is not 0.0
    event = CountedEvent(call_id="c1")
    assert event.trace_record()["t"] == 0.0
    assert bus.emit(event).trace_record()["t"] > 0.0


@pytest.mark.parametrize("content", ["full", "meta"])
async def test_a_runs_trace_file_json_lines_and_result_trace_are_unchanged(
    tmp_path: Path, content: TraceContent
) -> None:
    seen: list[Event] = []
    out = io.StringIO()
    trace = tmp_path / "trace.jsonl"
    model = RLM(provider="fixture", trace_path=str(trace), trace_content=content,
                sinks=[seen.append, JSONLines(out)])
    result = await model.acompletion("What is the magic number?", "The magic number is 7.")
    assert result.status == "answered"
    fresh = [e.to_dict() for e in seen]  # each made on its own, as before
    # The result's trace is the records the trace and the JSON lines were written from.
    assert all(r is e.trace_record() for r, e in zip(result.trace, seen, strict=True))
    assert list(result.trace) == fresh
    roundtrip = json.loads(json.dumps(fresh, default=list))
    assert [json.loads(line) for line in out.getvalue().splitlines()] == roundtrip
    header, *written = [json.loads(line) for line in trace.read_text().splitlines()]
    assert header["event"] == "trace_started"
    if content == "meta":  # blanked in the file only, never in the result's trace
        for record in roundtrip:
            for name in CONTENT_FIELDS.get(record["event"], ()):
                if record.get(name) is not None:
                    record[name] = None
        assert any(r.get("query") for r in result.trace)
    assert written == roundtrip
