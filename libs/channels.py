"""Client channels between mesh services: tracing, retries declared in the service config, and the
rule that every call carries a deadline (callers pass `timeout=`)."""

from __future__ import annotations

import asyncio
import json

import grpc
from grpc.aio import ClientCallDetails, Metadata
from opentelemetry import trace
from opentelemetry.propagate import inject
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind, Status, StatusCode

# Retry only on UNAVAILABLE (the server never saw the call or is restarting): every RPC between mesh
# services is safe to repeat, since none of them changes state except an ingest, which is idempotent
# (re-ingesting a document id replaces its chunks).
_SERVICE_CONFIG = json.dumps(
    {
        "methodConfig": [
            {
                "name": [{}],
                "retryPolicy": {
                    "maxAttempts": 3,
                    "initialBackoff": "0.05s",
                    "maxBackoff": "0.5s",
                    "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE"],
                },
            }
        ]
    }
)


class TracingInterceptor(grpc.aio.UnaryUnaryClientInterceptor):
    """A CLIENT span per unary call, with the W3C trace context injected into the call's metadata.

    Unlike opentelemetry-instrumentation-grpc's aio client interceptor, which awaits the call's
    status inside the interceptor, this one returns the call at once and ends the span when the call
    is done, so `call.cancel()` (a caller that goes away) reaches the server and stops its work.
    """

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        self._tracer = trace.get_tracer("mcts_mesh.channels", tracer_provider=tracer_provider)

    async def intercept_unary_unary(self, continuation, client_call_details, request):
        # grpc passes the method as bytes (grpc/grpc#31092) and wants bytes back.
        method = client_call_details.method
        name = method.decode() if isinstance(method, bytes) else method
        service, _, rpc = name.lstrip("/").partition("/")
        span = self._tracer.start_span(
            name.lstrip("/"), kind=SpanKind.CLIENT,
            attributes={"rpc.system": "grpc", "rpc.service": service, "rpc.method": rpc},
        )
        metadata = Metadata(*tuple(client_call_details.metadata or ()))
        carrier: dict[str, str] = {}
        inject(carrier, context=trace.set_span_in_context(span))
        for key, value in carrier.items():
            metadata.add(key, value)
        details = ClientCallDetails(method, client_call_details.timeout, metadata,
                                    client_call_details.credentials,
                                    client_call_details.wait_for_ready)
        try:
            call = await continuation(details, request)
        except BaseException as error:
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, type(error).__name__))
            span.end()
            raise

        def done(finished) -> None:
            asyncio.ensure_future(_end_span(span, finished))

        call.add_done_callback(done)
        return call


async def _end_span(span, call) -> None:
    try:
        code = await call.code()
        span.set_attribute("rpc.grpc.status_code", code.value[0])
        if code != grpc.StatusCode.OK:
            span.set_status(Status(StatusCode.ERROR, f"{code.name}: {await call.details()}"))
    finally:
        span.end()


def open_channel(target: str, tracer_provider: TracerProvider | None = None) -> grpc.aio.Channel:
    """An insecure grpc.aio channel to `target` ("host:port") with tracing and retries.

    The trace context of the current span travels in the call's metadata, so the callee's spans join
    the caller's trace; cancelling a call cancels it on the server. Close it with
    `await channel.close()`.
    """
    return grpc.aio.insecure_channel(
        target,
        options=[("grpc.service_config", _SERVICE_CONFIG),
                 ("grpc.enable_retries", 1),
                 ("grpc.max_receive_message_length", 64 * 1024 * 1024)],
        interceptors=[TracingInterceptor(tracer_provider)],
    )
