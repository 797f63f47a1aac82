"""OpenTelemetry tracing for every server and client of the mesh.

`setup_tracing` builds a TracerProvider whose resource carries the service name (the same word as
the service's folder, env prefix and k8s Deployment). Spans are exported over OTLP/gRPC when an
endpoint is configured (Jaeger ingests OTLP directly); the W3C trace context travels in gRPC
metadata, so one request is one trace across every service it touches.

`ServerTelemetryInterceptor` makes the SERVER span of every call and counts it in the shared RPC
metrics (`libs.metrics`), with the status the client really receives: an abort (a `MeshError`
mapped by `libs.error_mapping.ErrorMappingInterceptor`, or `context.abort`), a code set on the
context, a cancelled call. opentelemetry-instrumentation-grpc's aio server interceptor is not
used: it records `rpc.grpc.status_code=0` and no error for every abort. Health and reflection
calls make neither spans nor samples (probes every few seconds would bury the work).

Costs on the request path are kept small: spans go through a `BatchSpanProcessor` (exported from a
background thread, never on the call, in batches of at most `EXPORT_BATCH_SPANS`: the thread holds
the GIL while it encodes a batch: with the SDK's default of 512, a span-heavy loop at 400 requests/s
on the loaded 2-core machine saw p99.9 delays of 7.3 ms, with 64 spans per batch 4.1 ms; a batch is
also encoded `ENCODE_CHUNK_SPANS` spans at a time with the GIL released in between, which took the
gRPC p99 cost of tracing every request in `bench/overhead.py` from about +2.1 to +0.8-1.4 ms),
sampling is parent-based with a ratio (`trace_sample_ratio`), and with no exporter configured the
sampler is off, so spans are non-recording (the trace id still propagates and still reaches the
logs).
"""

from __future__ import annotations

import asyncio
import logging
import time

import grpc
from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased, TraceIdRatioBased
from opentelemetry.trace import SpanKind, Status, StatusCode

from libs.channels import UNTRACED_PREFIXES
from libs.interceptors import WrapOnce
from libs.metrics import RpcInstruments

log = logging.getLogger(__name__)


EXPORT_BATCH_SPANS = 64
"""Most spans one OTLP export encodes and sends (see the module docstring)."""
EXPORT_DELAY_MS = 250
"""Longest a finished span waits before its batch is exported, in ms."""
ENCODE_CHUNK_SPANS = 8
"""Spans encoded between two releases of the GIL while a batch is encoded for export (0: the
whole batch at once)."""


def _otlp_exporter(endpoint: str, insecure: bool) -> SpanExporter:
    """opentelemetry's OTLP/gRPC span exporter, encoding a batch `ENCODE_CHUNK_SPANS` spans at a
    time with a GIL release (`time.sleep(0)`) between chunks: encoding is pure Python, about
    15-25 us per span here, so a batch of 64 held the GIL for 1-1.5 ms, and a request arriving
    meanwhile waited that long. The chunks' requests are merged into one export call (one
    `ResourceSpans` per chunk, as OTLP allows)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    class YieldingOTLPSpanExporter(OTLPSpanExporter):
        def _translate_data(self, data):
            if ENCODE_CHUNK_SPANS <= 0 or len(data) <= ENCODE_CHUNK_SPANS:
                return encode_spans(data)
            request = encode_spans(data[:ENCODE_CHUNK_SPANS])
            for start in range(ENCODE_CHUNK_SPANS, len(data), ENCODE_CHUNK_SPANS):
                time.sleep(0)
                request.MergeFrom(encode_spans(data[start:start + ENCODE_CHUNK_SPANS]))
            return request

    return YieldingOTLPSpanExporter(endpoint=endpoint, insecure=insecure)


def setup_tracing(
    service_name: str,
    otlp_endpoint: str | None,
    exporter: SpanExporter | None = None,
    set_global: bool = True,
    sample_ratio: float = 1.0,
) -> TracerProvider:
    """Creates the service's TracerProvider.

    Args:
        service_name: `service.name` of every span, e.g. "orchestrator".
        otlp_endpoint: OTLP/gRPC collector address such as "http://127.0.0.1:4317"; None exports
            nothing.
        exporter: an extra exporter (tests pass an in-memory one).
        set_global: install it as the process's global provider (one service per process); tests
            that run several services in one process pass False and hand the provider over.
        sample_ratio: share of new traces recorded (0..1); a call whose caller sampled it is
            recorded whatever the ratio (parent-based), so a trace is never cut in half.
    Returns:
        The provider; call `shutdown()` on it to flush spans before exit.
    """
    exporting = bool(otlp_endpoint) or exporter is not None
    sampler = ParentBased(TraceIdRatioBased(sample_ratio)) if exporting else ALWAYS_OFF
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}),
                              sampler=sampler)
    if otlp_endpoint:
        endpoint = otlp_endpoint
        insecure = not endpoint.startswith("https://")
        provider.add_span_processor(
            BatchSpanProcessor(_otlp_exporter(endpoint, insecure),
                               schedule_delay_millis=EXPORT_DELAY_MS,
                               max_export_batch_size=EXPORT_BATCH_SPANS)
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




def set_work_attributes(attributes: dict[str, object]) -> None:
    """Adds the work's attributes to the current span, e.g. {"mesh.problem.kind": "connect_four",
    "mesh.mcts.simulations": 5000}. None values are skipped; free when the span is not recording
    (not sampled, or no exporter)."""
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attributes({k: v for k, v in attributes.items() if v is not None})


class ServerTelemetryInterceptor(grpc.aio.ServerInterceptor):
    """A SERVER span and the RPC metrics for every call but health and reflection.

    Put it first in the server's interceptors, so that it sees the status the inner error mapping
    produces. The span is the current span while the servicer runs (its `set_work_attributes` and
    child spans land in it), its parent is the caller's span from the W3C `traceparent` metadata.
    A non-OK code sets the span status to ERROR with the status message as its description.
    """

    def __init__(self, tracer_provider: TracerProvider | None = None, metrics: bool = True) -> None:
        self._tracer = trace.get_tracer("mcts_mesh.server", tracer_provider=tracer_provider)
        self._metrics = metrics
        self._instruments: dict[str, RpcInstruments] = {}
        self._handlers = WrapOnce(self._wrap)

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or method.startswith(UNTRACED_PREFIXES):
            return handler
        return self._handlers.wrapped(handler, method)

    def _wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        instruments = None
        if self._metrics:
            instruments = self._instruments.get(method)
            if instruments is None:
                instruments = self._instruments[method] = RpcInstruments(method)
        call = _Call(self._tracer, method, instruments)
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(
                call.wrap_unary(handler.unary_unary),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)
        if handler.stream_unary:
            return grpc.stream_unary_rpc_method_handler(
                call.wrap_unary(handler.stream_unary),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(
                call.wrap_stream(handler.unary_stream),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)
        return grpc.stream_stream_rpc_method_handler(
            call.wrap_stream(handler.stream_stream),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer)


class _Call:
    """Span and metrics around one method's behaviour (one object per method and server; the
    span and the start time of a call live in its wrapper's frame)."""

    def __init__(self, tracer: trace.Tracer, method: str,
                 instruments: RpcInstruments | None) -> None:
        self._tracer = tracer
        self._name = method.lstrip("/")
        service, _, rpc = self._name.partition("/")
        self._attributes = {"rpc.system": "grpc", "rpc.service": service, "rpc.method": rpc}
        self._instruments = instruments

    def _start(self, context: grpc.aio.ServicerContext):
        carrier = {key: value for key, value in (context.invocation_metadata() or ())
                   if isinstance(value, str)}
        span = self._tracer.start_span(self._name, context=propagate.extract(carrier),
                                       kind=SpanKind.SERVER, attributes=self._attributes)
        if self._instruments is not None:
            self._instruments.in_flight.inc()
        return span, time.perf_counter()

    def _finish(self, span, started: float, context: grpc.aio.ServicerContext,
                error: BaseException | None) -> None:
        code, message = _status_of(context, error)
        if self._instruments is not None:
            self._instruments.in_flight.dec()
            self._instruments.finished(code.name, time.perf_counter() - started)
        if span.is_recording():
            span.set_attribute("rpc.grpc.status_code", code.value[0])
            if code is not grpc.StatusCode.OK:
                span.set_status(Status(StatusCode.ERROR, f"{code.name}: {message}"))
        span.end()

    def wrap_unary(self, behaviour):
        async def wrapped(request, context):
            span, started = self._start(context)
            error = None
            try:
                with trace.use_span(span, end_on_exit=False, record_exception=False,
                                    set_status_on_exception=False):
                    return await behaviour(request, context)
            except BaseException as caught:
                error = caught
                raise
            finally:
                self._finish(span, started, context, error)

        return wrapped

    def wrap_stream(self, behaviour):
        async def wrapped(request, context):
            span, started = self._start(context)
            error = None
            try:
                with trace.use_span(span, end_on_exit=False, record_exception=False,
                                    set_status_on_exception=False):
                    async for response in behaviour(request, context):
                        yield response
            except BaseException as caught:
                error = caught
                raise
            finally:
                self._finish(span, started, context, error)

        return wrapped


def _status_of(context: grpc.aio.ServicerContext,
               error: BaseException | None) -> tuple[grpc.StatusCode, str]:
    """The status the client receives: the aborted or set code, CANCELLED or DEADLINE_EXCEEDED for
    a call the client gave up on, UNKNOWN for an exception that escaped every mapping."""
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return code, context.details() or ""
    if isinstance(error, asyncio.CancelledError):
        remaining = context.time_remaining()
        if remaining is not None and remaining <= 0:
            return grpc.StatusCode.DEADLINE_EXCEEDED, "the deadline passed"
        return grpc.StatusCode.CANCELLED, "the client cancelled the call"
    if error is not None:
        return grpc.StatusCode.UNKNOWN, f"{type(error).__name__}"
    return grpc.StatusCode.OK, ""

