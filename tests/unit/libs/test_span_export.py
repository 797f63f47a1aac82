"""The OTLP exporter's chunked encoding (GIL released between chunks) loses and reorders no span."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from libs import telemetry


def _spans(count: int):
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("test")
    for index in range(count):
        with tracer.start_as_current_span(f"span {index}", attributes={"index": index}):
            pass
    return memory.get_finished_spans()


def test_a_batch_is_encoded_in_chunks_into_one_request_holding_every_span():
    exporter = telemetry._otlp_exporter("http://127.0.0.1:1", insecure=True)
    for count in (1, telemetry.ENCODE_CHUNK_SPANS, 3 * telemetry.ENCODE_CHUNK_SPANS + 5):
        spans = _spans(count)
        request = exporter._translate_data(spans)
        encoded = [span for resource in request.resource_spans
                   for scope in resource.scope_spans for span in scope.spans]
        assert [span.name for span in encoded] == [span.name for span in spans]
        assert [span.span_id for span in encoded] == \
            [span.context.span_id.to_bytes(8, "big") for span in spans]
        chunks = -(-count // telemetry.ENCODE_CHUNK_SPANS)
        assert len(request.resource_spans) == chunks
    exporter.shutdown()
