"""OpenTelemetry tracing for every server and client of the mesh.

`setup_tracing` builds a TracerProvider whose resource carries the service name (the same word as
the service's folder, env prefix and k8s Deployment). Spans are exported over OTLP/gRPC when an
endpoint is configured (Jaeger ingests OTLP directly); the W3C trace context travels in gRPC
metadata, so one request is one trace across every service it touches.
"""

from __future__ import annotations

import logging

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

log = logging.getLogger(__name__)


def setup_tracing(
    service_name: str,
    otlp_endpoint: str | None,
    exporter: SpanExporter | None = None,
    set_global: bool = True,
) -> TracerProvider:
    """Creates the service's TracerProvider.

    Args:
        service_name: `service.name` of every span, e.g. "orchestrator".
        otlp_endpoint: OTLP/gRPC collector address such as "http://127.0.0.1:4317"; None exports
            nothing.
        exporter: an extra exporter (tests pass an in-memory one).
        set_global: install it as the process's global provider (one service per process); tests
            that run several services in one process pass False and hand the provider over.
    Returns:
        The provider; call `shutdown()` on it to flush spans before exit.
    """
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    if otlp_endpoint:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        endpoint = otlp_endpoint
        insecure = not endpoint.startswith("https://")
        provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, insecure=insecure),
                               schedule_delay_millis=500)
        )
        log.info("tracing: exporting spans of %s over OTLP to %s", service_name, endpoint)
    if exporter is not None:
        provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=100))
    if set_global:
        trace.set_tracer_provider(provider)
    return provider


def current_trace_id() -> str:
    """The current span's trace id as 32 hex digits, or "" outside a span."""
    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else ""
