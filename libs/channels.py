"""Client channels between mesh services: tracing, retries declared in the service config, and the
rule that every call carries a deadline (callers pass `timeout=`), which never outlives the deadline
of the call being served (`caller_deadline`).

A dependency that is down costs a call at most `connect_timeout_s`: a refused connection fails at
once (UNAVAILABLE), and a connection attempt that gets no HTTP/2 handshake (a frozen process, a
dropped packet) gives up after `connect_timeout_s` instead of gRPC's 20 s; a service that comes back
is reconnected within `MAX_RECONNECT_BACKOFF_MS`.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import time

import grpc
from grpc.aio import ClientCallDetails, Metadata
from opentelemetry import trace
from opentelemetry.propagate import inject
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind, Status, StatusCode

from libs.telemetry import UNTRACED_PREFIXES

MAX_MESSAGE_BYTES = 4 * 1024 * 1024
"""Largest message a mesh client sends or receives (gRPC's own default receive limit, set
explicitly, and for sending too)."""
DEFAULT_CONNECT_TIMEOUT_S = 1.0
"""Seconds a connection attempt may take before calls on it fail UNAVAILABLE."""
MAX_RECONNECT_BACKOFF_MS = 2000
"""Longest wait between reconnection attempts to a dependency that went away."""

# Retry only on UNAVAILABLE (the server never saw the call or is restarting): every RPC between mesh
# services is safe to repeat, since none of them changes state except an ingest, which is idempotent
# (re-ingesting a document id replaces its chunks). The throttle stops retrying a dependency that
# keeps failing (gRFC A6: each failure takes a token, each success gives back 0.1; no retries
# while fewer than half of the 10 tokens are left), so an outage does not triple the load on it.
# The backoffs are short (each retry waits a random time below 20 ms, then below 40 ms): a retry is
# for a server that is restarting or a connection that was just reset, and a call to a dependency
# that is really down should fail within about 100 ms, not 150 ms later.
_SERVICE_CONFIG = json.dumps(
    {
        "methodConfig": [
            {
                "name": [{}],
                "retryPolicy": {
                    "maxAttempts": 3,
                    "initialBackoff": "0.02s",
                    "maxBackoff": "0.2s",
                    "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE"],
                },
            }
        ],
        "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1},
    }
)

_caller_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "mesh_caller_deadline", default=None)


def set_caller_deadline(remaining_s: float | None) -> None:
    """Records, for the current task (the call being served), that its caller's deadline is
    `remaining_s` seconds from now (None: the caller set none). `libs.server` calls it for every
    call it serves; tasks and threads started from it inherit it."""
    _caller_deadline.set(None if remaining_s is None else time.monotonic() + remaining_s)


def caller_remaining_s() -> float | None:
    """Seconds left before the deadline of the call being served (None: no deadline), >= 0."""
    deadline = _caller_deadline.get()
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def message_limit_options(limit: int = MAX_MESSAGE_BYTES) -> list[tuple[str, int]]:
    """Channel or server options that set the send and receive limits to `limit` bytes."""
    return [("grpc.max_receive_message_length", limit), ("grpc.max_send_message_length", limit)]


class DeadlineInterceptor(grpc.aio.UnaryUnaryClientInterceptor,
                          grpc.aio.UnaryStreamClientInterceptor):
    """Shortens an outbound call's deadline to what is left of the deadline of the call being
    served, so no hop outlives its caller (a call with no timeout gets the caller's). A call made
    outside a served call keeps its own timeout."""

    @staticmethod
    def _clamped(details: ClientCallDetails) -> ClientCallDetails:
        remaining = caller_remaining_s()
        if remaining is None:
            return details
        timeout = remaining if details.timeout is None else min(details.timeout, remaining)
        return ClientCallDetails(details.method, max(timeout, 1e-3), details.metadata,
                                 details.credentials, details.wait_for_ready)

    async def intercept_unary_unary(self, continuation, client_call_details, request):
        return await continuation(self._clamped(client_call_details), request)

    async def intercept_unary_stream(self, continuation, client_call_details, request):
        return await continuation(self._clamped(client_call_details), request)


class TracingInterceptor(grpc.aio.UnaryUnaryClientInterceptor):
    """A CLIENT span per unary call but health and reflection (as on the server side), with the
    W3C trace context injected into the call's metadata.

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
        if name.startswith(UNTRACED_PREFIXES):  # health checks (the dependency watcher), reflection
            return await continuation(client_call_details, request)
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


def channel_options(connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
                    max_message_bytes: int = MAX_MESSAGE_BYTES) -> list[tuple[str, object]]:
    """The options of every mesh channel: retries (service config with a throttle), message
    limits, and the connect timeout and reconnect backoff (gRPC's connection backoff spec: an
    attempt may take max(min_reconnect_backoff, current backoff), retries wait 1x-1.6x longer each
    time up to the maximum)."""
    if connect_timeout_s <= 0:
        raise ValueError("connect_timeout_s must be positive")
    connect_ms = max(1, round(connect_timeout_s * 1e3))
    return [("grpc.service_config", _SERVICE_CONFIG),
            ("grpc.enable_retries", 1),
            *message_limit_options(max_message_bytes),
            ("grpc.min_reconnect_backoff_ms", connect_ms),
            ("grpc.initial_reconnect_backoff_ms", min(connect_ms, MAX_RECONNECT_BACKOFF_MS)),
            ("grpc.max_reconnect_backoff_ms", max(connect_ms, MAX_RECONNECT_BACKOFF_MS))]


def open_channel(target: str, tracer_provider: TracerProvider | None = None,
                 connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S) -> grpc.aio.Channel:
    """An insecure grpc.aio channel to `target` ("host:port") with tracing, retries, 4 MiB message
    limits, a connect timeout, and deadlines bounded by the served call's (`DeadlineInterceptor`).

    The trace context of the current span travels in the call's metadata, so the callee's spans join
    the caller's trace; cancelling a call cancels it on the server. Close it with
    `await channel.close()`.
    """
    return grpc.aio.insecure_channel(
        target,
        options=channel_options(connect_timeout_s),
        interceptors=[DeadlineInterceptor(), TracingInterceptor(tracer_provider)],
    )
