"""A small OTLP/HTTP trace receiver on loopback, for tests: what a collector would get.

It answers ``POST /v1/traces`` as a collector does, decodes each body with the
protobuf classes of ``opentelemetry-proto`` (which the exporter itself depends on),
and keeps every span with its resource.  It runs on a thread of the test's own and
stops when the ``with`` block ends.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.otel.otel_helpers import SpanEvent, SpanRecord

__all__ = ["Received", "otlp_receiver"]

#: A body larger than this is refused: a test's trace is far smaller.
MAX_BODY = 64 << 20


@dataclass
class Received:
    """What the receiver was sent: the raw bodies and the spans decoded from them."""

    url: str = ""
    bodies: list[bytes] = field(default_factory=list)
    spans: list[SpanRecord] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        with self.lock:
            self.bodies.append(body)
            for resource_spans in request.resource_spans:
                resource = _attributes(resource_spans.resource.attributes)
                for scope in resource_spans.scope_spans:
                    self.spans += [_span(s, resource) for s in scope.spans]


def _span(span: Any, resource: dict[str, Any]) -> SpanRecord:
    return SpanRecord(
        name=span.name, trace_id=span.trace_id, span_id=span.span_id,
        parent_id=span.parent_span_id or None, start_time=span.start_time_unix_nano,
        end_time=span.end_time_unix_nano, attributes=_attributes(span.attributes),
        events=[SpanEvent(e.name, e.time_unix_nano, _attributes(e.attributes))
                for e in span.events],
        error=span.status.message if span.status.code == 2 else None,  # STATUS_CODE_ERROR
        resource=resource)


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


@contextmanager
def otlp_receiver() -> Iterator[Received]:
    received = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if self.path != "/v1/traces" or not 0 < length <= MAX_BODY:
                self.send_error(404 if self.path != "/v1/traces" else 413)
                return
            body = self.rfile.read(length)
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            received.take(body)
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # a request log line per batch is noise in a test's output

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    received.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, name="otlp-receiver")
    thread.start()
    try:
        yield received
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
