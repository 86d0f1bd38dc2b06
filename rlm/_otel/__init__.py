"""OpenTelemetry export (``--otel``, the ``rlm[otel]`` extra): a run, a volley or a session
as one trace, made from the events the run emits anyway.

:mod:`rlm._otel.spans` turns events into spans (the one place that does);
:mod:`rlm._otel.export` owns the SDK's tracer provider and OTLP exporter.  Nothing here
is imported unless a run exports: the SDK is optional.
"""

from __future__ import annotations

import importlib.util

__all__ = ["otel_missing"]

#: What the ``otel`` extra brings: the SDK and its OTLP/HTTP exporter.
_NEEDED = ("opentelemetry.sdk.trace", "opentelemetry.exporter.otlp.proto.http.trace_exporter")


def otel_missing() -> str | None:
    """The first module of the ``otel`` extra that is not installed, or None (found, not
    imported: checking costs no import of the SDK)."""
    for name in _NEEDED:
        try:
            if importlib.util.find_spec(name) is None:
                return name
        except ModuleNotFoundError:  # a parent package is missing
            return name
    return None
