"""Client channels between mesh services: tracing, retries declared in the service config, and the
rule that every call carries a deadline (callers pass `timeout=`), which never outlives the deadline
of the call being served (`caller_deadline`).

A dependency that is down costs a call at most `connect_timeout_s`: a refused connection fails at
once (UNAVAILABLE), and a connection attempt that gets no HTTP/2 handshake (a frozen process, a
dropped packet) gives up after `connect_timeout_s` instead of gRPC's 20 s; a service that comes back
is reconnected within `MAX_RECONNECT_BACKOFF_MS`.

A dependency that freezes on an open connection (SIGSTOP, a wedged host: the kernel keeps the TCP
connection, nothing answers) is found by gRPC's HTTP/2 keepalive (`Keepalive`, gRPC's
doc/keepalive.md): a ping unanswered for `Keepalive.timeout_s` closes the connection, its calls
fail UNAVAILABLE, and new calls fail once a reconnection attempt has had its `connect_timeout_s`,
instead of each waiting for its deadline. Servers accept these pings (`keepalive_server_options`).

A channel carries the mesh's credential (`libs.mesh_auth`, `open_channel(auth=...)`): over mutual
TLS when the settings name certificates, and the mesh token in the metadata of every call when one
is set (added by `MeshChannel` itself: call credentials need a secure channel, and an interceptor
would cost a task per call).
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import grpc
from opentelemetry import trace
from opentelemetry.propagate import inject
from opentelemetry.trace import SpanKind, Status, StatusCode

from libs.mesh_auth import channel_credentials, tls_channel_options, token_metadata
from libs.settings import (
    DEFAULT_KEEPALIVE_TIME_S,
    DEFAULT_KEEPALIVE_TIMEOUT_S,
    MIN_KEEPALIVE_TIME_S,
    ChannelSettings,
    MeshAuth,
)

if TYPE_CHECKING:  # the SDK is not needed to make calls (the CLI imports this module)
    from opentelemetry.sdk.trace import TracerProvider

UNTRACED_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")
"""Methods that get no span and no metric samples (probes every few seconds would bury the work)."""

MAX_MESSAGE_BYTES = 4 * 1024 * 1024
"""Largest message a mesh client sends or receives (gRPC's own default receive limit, set
explicitly, and for sending too)."""
DEFAULT_CONNECT_TIMEOUT_S = 1.0
"""Seconds a connection attempt may take before calls on it fail UNAVAILABLE."""
MAX_RECONNECT_BACKOFF_MS = 2000
"""Longest wait between reconnection attempts to a dependency that went away."""
INITIAL_RECONNECT_BACKOFF_MS = 100
"""Wait before the first reconnection attempt (then 1.6 times longer each, up to the maximum): a
dependency that starts beside its caller (the whole mesh started at once) is reached within about
a tenth of a second of listening, not a second. Each attempt still gets the connect timeout."""
SERVER_MIN_PING_INTERVAL_MS = round(MIN_KEEPALIVE_TIME_S * 1e3 / 2)
"""Shortest interval, in ms, between two pings a server accepts from a client that sends no data:
half the shortest client interval, so that a ping delayed on a busy machine and the next one on
time are not a strike (see `keepalive_server_options`)."""
SERVER_MAX_PING_STRIKES = 2
"""Pings closer than `SERVER_MIN_PING_INTERVAL_MS` a server tolerates (between two of its own data
frames) before it closes the connection with GOAWAY "too_many_pings" (gRPC's default)."""

# Retry only on UNAVAILABLE (the server never saw the call or is restarting): every RPC between mesh
# services is safe to repeat, since none of them changes state except an ingest, which is idempotent
# (re-ingesting a document id replaces its chunks). The throttle stops retrying a dependency that
# keeps failing (gRFC A6: each failure takes a token, each success gives back 0.1; no retries
# while fewer than half of the 10 tokens are left), so an outage does not triple the load on it.
# The backoffs are short (each retry waits a random time below 5 ms, then below 10 ms): a retry is
# for a connection that was just reset (a pod going away behind a Service: the retry reconnects),
# and a call to a dependency that is really down should fail at once. A killed service is back
# after the supervisor's 0.5 s backoff at the soonest, so longer waits (20 / 40 ms before) only
# delayed the clean error (kill -9 to first error: 52-148 ms with them).
_SERVICE_CONFIG = json.dumps(
    {
        "methodConfig": [
            {
                "name": [{}],
                "retryPolicy": {
                    "maxAttempts": 3,
                    "initialBackoff": "0.005s",
                    "maxBackoff": "0.05s",
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


def _clamped_timeout(timeout: float | None) -> float | None:
    """`timeout` (seconds, None: none) shortened to what is left of the served call's deadline."""
    remaining = caller_remaining_s()
    if remaining is None:
        return timeout
    return max(remaining if timeout is None else min(timeout, remaining), 1e-3)


class _UnaryUnary:
    """A unary multicallable with the mesh's rules applied on the call: the deadline clamped to
    the served call's (`caller_remaining_s`), and a CLIENT span (but for health and reflection)
    whose W3C trace context is put in the call's metadata.

    This is what a pair of client interceptors would do, without them: grpc.aio runs interceptors
    in a task of their own per call, about 60-90 us of CPU per call on this machine (an echo
    client's 210 -> 300 us per call), and the orchestrator makes two or three calls per request.
    The span ends when the call is done, so `call.cancel()` (a caller that goes away) reaches the
    server and stops its work; a span that is not recording (not sampled) waits for nothing.
    """

    def __init__(self, inner: grpc.aio.UnaryUnaryMultiCallable, method: str,
                 tracer: trace.Tracer, auth: tuple[tuple[str, str], ...] = ()) -> None:
        self._inner = inner
        self._tracer = tracer
        self._auth = auth
        name = method.decode() if isinstance(method, bytes) else method
        self._name = name.lstrip("/")
        self._traced = not name.startswith(UNTRACED_PREFIXES)
        service, _, rpc = self._name.partition("/")
        self._attributes = {"rpc.system": "grpc", "rpc.service": service, "rpc.method": rpc}

    def __call__(self, request, *, timeout=None, metadata=None, credentials=None,
                 wait_for_ready=None, compression=None):
        timeout = _clamped_timeout(timeout)
        if self._auth:
            metadata = (*tuple(metadata or ()), *self._auth)
        if not self._traced:  # health checks (the dependency watcher), reflection
            return self._inner(request, timeout=timeout, metadata=metadata,
                               credentials=credentials, wait_for_ready=wait_for_ready,
                               compression=compression)
        span = self._tracer.start_span(self._name, kind=SpanKind.CLIENT,
                                       attributes=self._attributes)
        carrier: dict[str, str] = {}
        inject(carrier, context=trace.set_span_in_context(span))
        metadata = (*tuple(metadata or ()), *carrier.items())
        try:
            call = self._inner(request, timeout=timeout, metadata=metadata,
                               credentials=credentials, wait_for_ready=wait_for_ready,
                               compression=compression)
        except BaseException as error:
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, type(error).__name__))
            span.end()
            raise
        if span.is_recording():
            call.add_done_callback(lambda done: asyncio.ensure_future(_end_span(span, done)))
        return call


class _UnaryStream:
    """A server-streaming multicallable whose deadline is clamped like `_UnaryUnary`'s, with the
    mesh token in its metadata."""

    def __init__(self, inner: grpc.aio.UnaryStreamMultiCallable,
                 auth: tuple[tuple[str, str], ...] = ()) -> None:
        self._inner = inner
        self._auth = auth

    def __call__(self, request, *, timeout=None, metadata=None, **kwargs):
        if self._auth:
            metadata = (*tuple(metadata or ()), *self._auth)
        return self._inner(request, timeout=_clamped_timeout(timeout), metadata=metadata,
                           **kwargs)


class _StreamRequest:
    """A client-streaming multicallable (stream-unary or stream-stream) with the mesh token in
    its metadata; its deadline is the caller's own (these calls outlive no served call)."""

    def __init__(self, inner, auth: tuple[tuple[str, str], ...]) -> None:
        self._inner = inner
        self._auth = auth

    def __call__(self, request_iterator=None, *, metadata=None, **kwargs):
        metadata = (*tuple(metadata or ()), *self._auth)
        return self._inner(request_iterator, metadata=metadata, **kwargs)


async def _end_span(span, call) -> None:
    try:
        code = await call.code()
        span.set_attribute("rpc.grpc.status_code", code.value[0])
        if code != grpc.StatusCode.OK:
            span.set_status(Status(StatusCode.ERROR, f"{code.name}: {await call.details()}"))
    finally:
        span.end()


class MeshChannel:
    """A grpc.aio channel whose unary-unary and unary-stream calls follow the mesh's rules
    (`_UnaryUnary`, `_UnaryStream`), and whose every call carries the mesh token when it has one
    (`token`); generated stubs take it as they take a channel. Everything else (`close`,
    `get_state`, `channel_ready`) is the channel's own.
    """

    def __init__(self, channel: grpc.aio.Channel, tracer: trace.Tracer,
                 token: str | None = None) -> None:
        self._channel = channel
        self._tracer = tracer
        self._auth = token_metadata(token)

    def unary_unary(self, method, request_serializer=None, response_deserializer=None,
                    **kwargs) -> _UnaryUnary:
        inner = self._channel.unary_unary(method, request_serializer, response_deserializer,
                                          **kwargs)
        return _UnaryUnary(inner, method, self._tracer, self._auth)

    def unary_stream(self, method, request_serializer=None, response_deserializer=None,
                     **kwargs) -> _UnaryStream:
        return _UnaryStream(self._channel.unary_stream(method, request_serializer,
                                                       response_deserializer, **kwargs),
                            self._auth)

    def stream_unary(self, method, request_serializer=None, response_deserializer=None,
                     **kwargs):
        inner = self._channel.stream_unary(method, request_serializer, response_deserializer,
                                           **kwargs)
        return _StreamRequest(inner, self._auth) if self._auth else inner

    def stream_stream(self, method, request_serializer=None, response_deserializer=None,
                      **kwargs):
        inner = self._channel.stream_stream(method, request_serializer, response_deserializer,
                                            **kwargs)
        return _StreamRequest(inner, self._auth) if self._auth else inner

    def __getattr__(self, name: str):
        return getattr(self._channel, name)

    async def __aenter__(self) -> MeshChannel:
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self._channel.close(None)


@dataclass(frozen=True)
class Keepalive:
    """gRPC's HTTP/2 keepalive on a mesh channel (grpc/grpc doc/keepalive.md): a PING every
    `time_s` seconds on each connection, with calls in flight or not, and the connection closed
    when one is not acknowledged within `timeout_s` seconds (its calls fail UNAVAILABLE, and are
    retried on a new connection if they had no answer yet).

    A frozen peer is thus found `time_s` to `time_s + timeout_s` seconds after it froze (1-3 s with
    the defaults); a call to it then costs at most the channel's connect timeout (the reconnection
    to a port that accepts TCP but never answers HTTP/2), then nothing while the channel is in
    TRANSIENT_FAILURE. Why these values:
    - `time_s` 1 s is gRPC core's floor (`MIN_KEEPALIVE_TIME_S`); a ping is 17 bytes each way, and
      it is acknowledged by gRPC core's threads, not the service's event loop (a server whose loop
      was blocked for 5 s still acknowledged them, and its call completed).
    - `timeout_s` 2 s: a false alarm closes a healthy connection with every call on it, so the
      timeout is twice the 1 s that the connect timeout already allows a healthy peer's handshake,
      many times a loaded 2-core machine's scheduling delays (tens of ms), while the detection (at
      most 3 s) stays below every agent deadline of the orchestrator (5-60 s).
    - pings without calls (`grpc.keepalive_permit_without_calls`) let an idle channel find the
      freeze before the next request does, so that request fails at once instead of after 1-3 s;
      `grpc.http2.max_pings_without_data` 0 keeps pinging through a long call that sends nothing
      (a 30 s search) instead of stopping after gRPC's default of 2 pings.
    - `grpc.http2.ping_timeout_ms` (every ping's, BDP probes' too) is set to `timeout_s` as well:
      with grpcio 1.85.1 the keepalive timeout alone did not close the connection, an unanswered
      keepalive ping waited for that general ping timeout, 1 min by default (measured: a call in
      flight to a frozen server failed 60 s after the freeze, and 3.7 s with it set).
    Servers must allow the pings (`keepalive_server_options`), or they answer GOAWAY
    "too_many_pings" after 2 of them within 5 min of no data (gRPC's default policy).
    Raises ValueError when `time_s` is below `MIN_KEEPALIVE_TIME_S` or `timeout_s` is not positive.
    """

    time_s: float = DEFAULT_KEEPALIVE_TIME_S
    timeout_s: float = DEFAULT_KEEPALIVE_TIMEOUT_S

    def __post_init__(self) -> None:
        if self.time_s < MIN_KEEPALIVE_TIME_S:
            raise ValueError(f"keepalive time must be at least {MIN_KEEPALIVE_TIME_S} s")
        if self.timeout_s <= 0:
            raise ValueError("keepalive timeout must be positive")

    @classmethod
    def of(cls, settings: ChannelSettings) -> Keepalive:
        """The keepalive that a service's settings ask for (`keepalive_time_s`, `_timeout_s`)."""
        return cls(settings.keepalive_time_s, settings.keepalive_timeout_s)

    def options(self) -> list[tuple[str, int]]:
        """The channel options that turn it on (gRPC channel arguments, in ms)."""
        timeout_ms = max(1, round(self.timeout_s * 1e3))
        return [("grpc.keepalive_time_ms", round(self.time_s * 1e3)),
                ("grpc.keepalive_timeout_ms", timeout_ms),
                ("grpc.http2.ping_timeout_ms", timeout_ms),
                ("grpc.keepalive_permit_without_calls", 1),
                ("grpc.http2.max_pings_without_data", 0)]


def keepalive_server_options() -> list[tuple[str, int]]:
    """Server options that accept every mesh client's keepalive pings (`Keepalive`): pings with no
    call in flight, and pings `SERVER_MIN_PING_INTERVAL_MS` apart while the server sends no data
    (gRPC's default: 5 min, then GOAWAY "too_many_pings" after `SERVER_MAX_PING_STRIKES` strikes,
    which would close a healthy connection in the middle of a long call). The strikes stay, so
    a client that pings faster than any mesh channel can is still cut off."""
    return [("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_ping_interval_without_data_ms", SERVER_MIN_PING_INTERVAL_MS),
            ("grpc.http2.max_ping_strikes", SERVER_MAX_PING_STRIKES)]


def channel_options(connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
                    max_message_bytes: int = MAX_MESSAGE_BYTES,
                    keepalive: Keepalive = Keepalive(),
                    extra: list[tuple[str, object]] | None = None) -> list[tuple[str, object]]:
    """The options of every mesh channel: retries (service config with a throttle), message
    limits, keepalive pings (`Keepalive`), and the connect timeout (seconds) and reconnect
    backoff (gRPC's connection backoff spec: an attempt may take max(min_reconnect_backoff,
    current backoff), retries wait 1x-1.6x longer each time up to the maximum); `extra` options
    come last (the TLS server name, `libs.mesh_auth.tls_channel_options`)."""
    if connect_timeout_s <= 0:
        raise ValueError("connect_timeout_s must be positive")
    connect_ms = max(1, round(connect_timeout_s * 1e3))
    return [("grpc.service_config", _SERVICE_CONFIG),
            ("grpc.enable_retries", 1),
            *message_limit_options(max_message_bytes),
            ("grpc.min_reconnect_backoff_ms", connect_ms),
            ("grpc.initial_reconnect_backoff_ms", INITIAL_RECONNECT_BACKOFF_MS),
            ("grpc.max_reconnect_backoff_ms", max(connect_ms, MAX_RECONNECT_BACKOFF_MS)),
            *keepalive.options(), *(extra or ())]


def open_channel(target: str, tracer_provider: TracerProvider | None = None,
                 connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
                 keepalive: Keepalive = Keepalive(), auth: MeshAuth | None = None) -> MeshChannel:
    """A grpc.aio channel to `target` ("host:port") with tracing, retries, 4 MiB message
    limits, a connect timeout (seconds), keepalive pings that find a frozen peer (`Keepalive`),
    deadlines bounded by the served call's (`MeshChannel`), and the mesh's credential (`auth`:
    mutual TLS with `auth.tls`, the token in every call's metadata with `auth.token`; None or
    neither: a plain channel, for a backend that authenticates no one).

    The trace context of the current span travels in the call's metadata, so the callee's spans join
    the caller's trace; cancelling a call cancels it on the server. Close it with
    `await channel.close()`.
    """
    auth = auth or MeshAuth()
    if auth.tls is None:
        channel = grpc.aio.insecure_channel(
            target, options=channel_options(connect_timeout_s, keepalive=keepalive))
    else:
        channel = grpc.aio.secure_channel(
            target, channel_credentials(auth.tls),
            options=channel_options(connect_timeout_s, keepalive=keepalive,
                                    extra=tls_channel_options(auth.tls)))
    return MeshChannel(channel, trace.get_tracer("mcts_mesh.channels",
                                                 tracer_provider=tracer_provider), auth.token)
