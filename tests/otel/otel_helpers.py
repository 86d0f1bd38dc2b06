"""Shared by the OpenTelemetry tests: spans kept in memory as plain records, and the call
tree they make."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed: "
                    "pip install -e '.[test,otel]' (CI runs these tests)")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

from rlm._otel.spans import SpanBuilder

__all__ = ["Recorder", "SpanEvent", "SpanRecord", "call_tree", "trace_call_tree"]


@dataclass(frozen=True)
class SpanEvent:
    name: str
    timestamp: int
    attributes: dict[str, Any]


@dataclass(frozen=True)
class SpanRecord:
    """One span as a collector sees it (from the SDK, or decoded from OTLP)."""

    name: str
    trace_id: int | bytes
    span_id: int | bytes
    parent_id: int | bytes | None
    start_time: int
    end_time: int
    attributes: dict[str, Any]
    events: list[SpanEvent]
    error: str | None  # the status description when the status is ERROR
    resource: dict[str, Any]
    text: str = ""  # everything the span holds, as JSON (to search)


def record_of(span: ReadableSpan) -> SpanRecord:
    context, parent = span.context, span.parent
    assert context is not None and span.start_time is not None and span.end_time is not None
    failed = span.status.status_code.name == "ERROR"
    error = (span.status.description or "") if failed else None
    return SpanRecord(
        name=span.name, trace_id=context.trace_id, span_id=context.span_id,
        parent_id=parent.span_id if parent is not None else None,
        start_time=span.start_time, end_time=span.end_time,
        attributes=dict(span.attributes or {}),
        events=[SpanEvent(e.name, e.timestamp, dict(e.attributes or {})) for e in span.events],
        error=error, resource=dict(span.resource.attributes), text=span.to_json())


class Recorder:
    """A span builder whose spans are kept in memory (the SDK's in-memory exporter)."""

    def __init__(self, *, content: bool = True, session: bool = False) -> None:
        self.exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.builder = SpanBuilder(provider.get_tracer("test"), content=content, session=session)

    def spans(self) -> list[SpanRecord]:
        self.builder.close()
        return [record_of(s) for s in self.exporter.get_finished_spans()]


def call_tree(spans: Iterable[SpanRecord]) -> dict[str, str | None]:
    """Each call span's call id → the call id of the nearest call span above it (None for
    the root): the call tree as the spans nest it."""
    spans = list(spans)
    by_id = {s.span_id: s for s in spans}
    tree: dict[str, str | None] = {}
    for span in spans:
        if span.name != "rlm.call":
            continue
        above = by_id.get(span.parent_id) if span.parent_id is not None else None
        while above is not None and above.name != "rlm.call":
            above = by_id.get(above.parent_id) if above.parent_id is not None else None
        tree[span.attributes["rlm.call_id"]] = (
            None if above is None else above.attributes["rlm.call_id"])
    return tree


def trace_call_tree(events: Iterable[dict[str, Any]]) -> dict[str, str | None]:
    """The call tree as the run's trace records it (``call_started``'s parent_id)."""
    return {e["call_id"]: e["parent_id"] for e in events if e["event"] == "call_started"}
