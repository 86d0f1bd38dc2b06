"""One OpenTelemetry trace per run, volley or session, exported over OTLP/HTTP.

:class:`Telemetry` holds a tracer provider of its own (never the process's global
one), whose batch processor hands finished spans to the SDK's own OTLP/HTTP exporter
on the SDK's worker thread.  Where they go is the SDK's standard configuration:
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT`` (default
``http://localhost:4318``), ``OTEL_EXPORTER_OTLP_HEADERS``, ``..._TIMEOUT``,
``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_BSP_*``.  Closing it
flushes what is left, off the trio thread, and is bounded by the exporter's timeout.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import trio

from rlm import __version__

if TYPE_CHECKING:  # the SDK is an extra: imported only when a run exports
    from opentelemetry.sdk.trace.export import SpanExporter

__all__ = ["Telemetry"]

#: Characters of one attribute value unless the user set a limit (the standard
#: OTEL_*ATTRIBUTE_VALUE_LENGTH_LIMIT variables): a reply or a code output is kept
#: whole up to this, so one span never carries a context-sized value.
_ATTRIBUTE_LENGTH = 16_384
_LENGTH_VARIABLES = ("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT")


class Telemetry:
    """The spans of one run, volley or session, and the exporter that sends them.

    ``exporter`` replaces the OTLP/HTTP exporter (a test's in-memory one);
    ``session`` makes one ``rlm.session`` span the parent of every run.
    """

    def __init__(self, *, content: bool, session: bool = False,
                 exporter: SpanExporter | None = None) -> None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import SpanLimits, TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        from rlm._otel.spans import SpanBuilder

        if exporter is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter()  # its endpoint, headers and timeout: OTEL_* variables
        attributes: dict[str, str] = {"service.version": __version__}
        if not os.environ.get("OTEL_SERVICE_NAME"):
            attributes["service.name"] = "rlm"
        limit = None if any(os.environ.get(v) for v in _LENGTH_VARIABLES) else _ATTRIBUTE_LENGTH
        self._provider = TracerProvider(resource=Resource.create(attributes),
                                        span_limits=SpanLimits(max_span_attribute_length=limit))
        self._provider.add_span_processor(BatchSpanProcessor(exporter))
        self.spans = SpanBuilder(self._provider.get_tracer("rlm", __version__),
                                 content=content, session=session)

    async def aclose(self) -> None:
        """End the spans still open and send everything left; cancellation waits for it
        (the exporter's own timeout bounds the wait)."""
        self.spans.close()
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self._provider.shutdown)
