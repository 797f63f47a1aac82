"""A REST front for a gRPC service: a Starlette app generated at start-up from the `google.api.http`
annotations of a gRPC service, calling the service in-process like grpc-gateway v2's
`RegisterXHandlerServer`: through `libs.in_process.InProcessServer`, so every call passes the gRPC
server's own interceptors (access control, admission, tracing and metrics, error mapping) with no
loopback connection.

Routes: every annotated unary RPC's bindings (see `bindings`, `transcoding`, `metadata`, `status`
for the exact rules), plus `/health` (200 while the process runs), `/ready` (below),
`/metrics` (Prometheus text format, the process's registry) and `/openapi.json` (generated from the
same annotations).

Server-streaming RPCs are served as grpc-gateway serves them (`streaming`): newline-delimited
JSON, one `{"result": <message>}` line per message, sent as it arrives (Content-Type
`application/x-ndjson`, where grpc-gateway says `application/json` though the body is not one JSON
document); an error after the first message is
a last `{"error": <google.rpc.Status>}` line (the HTTP status, 200, is already sent), never a silent
end. An error before the first message is an ordinary error response (its HTTP status and a
`google.rpc.Status` body), as for a unary call.

Order of checks: nothing heavier than a bounded, linear look at the request runs before the API
key is checked, and validation answers come after it.
1. The HTTP protocol (`protocol`) bounds the head: target and headers at most `max_head_bytes`
   (414 / 431), at most `max_headers` headers (431), complete within `head_timeout_s` (408);
   httptools refuses a target of 64 KiB or more.
2. Host and Origin (`origins`): a Host not allowed is 421 (DNS rebinding), an Origin that is not
   the request's own nor allowed is 403 (cross-site requests; CORS allowed origins are allowed).
3. Routing on the path: 404, or 405 with `Allow`.
4. The key, from the `x-api-key` / `Authorization` headers alone (`AccessControl.authenticate`, no
   admission or rate-limit effect): missing or invalid is 401, the query and body unread (a
   connection whose announced body is over 64 KiB, or chunked, is closed).
5. The query string: over `max_query_bytes` is 414, over `max_query_parameters` is 400 (naming
   `query`), before it is decoded; map keys (`field[key]`) are split in one scan.
6. `Grpc-Timeout`, headers to metadata; the body: `application/json` only (415), read up to
   `max_body_bytes` (413), JSON nested deeper than `max_json_depth` refused (400) before parsing;
   a body of `offload_body_bytes` or more is decoded in a worker process (`offload`), never on
   the event loop the gRPC server shares; then path variables and query parameters (400 naming
   the field).
7. The in-process call: the gRPC server's interceptors (access control again: admission, rate
   limits; tracing, metrics, error mapping) and the handler.

Facing browsers and proxies (`limits`): a binding with a body takes only `application/json` (415
otherwise, so a cross-site "simple" POST is never executed); the body is read up to
`max_body_bytes` (413 before reading more, the connection closed); JSON nested deeper than
`max_json_depth` is refused (400) before it is parsed; CORS is off unless `cors_allowed_origins`
names origins (Starlette's CORSMiddleware answers their preflights); every error body, routing
errors (404, 405 with `Allow`), refusals of the head, Host and Origin, and unexpected failures
(500) included, is a `google.rpc.Status`.
A `Grpc-Timeout` is capped at `max_deadline_s`. Every accepted connection has TCP_NODELAY: the
listening socket is created with protocol IPPROTO_TCP, so asyncio's transports set the option on
each accepted socket (it does so only for sockets whose protocol is IPPROTO_TCP); without it a
response written in two parts (headers, body) waits for the client's delayed ACK (~40 ms) on a
kept-alive connection. uvicorn parses HTTP with httptools (a dependency; its pure-Python h11
parser, used when httptools is absent, cost about 0.2 ms more per request in `bench/rest_cost.py`'s
setting).

`/ready` answers 200 while the server's health service (asked in-process) reports the service
SERVING, else 503;
the body is the same either way: `{"status": ..., "dependencies": [...]}` with each dependency's
last known state (name, service, state SERVING / NOT_SERVING / UNKNOWN, detail, for_s) when the app
was given a dependency view, plus `code` and `message` (a `google.rpc.Status`'s fields) on a 503.
A dependency that is down does not make it 503: the orchestrator still answers what its in-process
agents can (the exact checker, the puzzle solver) and says which agents failed.

Tracing: a W3C `traceparent` on the HTTP request is extracted and the REST span is its child; the
REST span's context travels in the call's metadata, so the server span the interceptors make is the
REST span's child. A client that disconnects cancels its call (grpc-gateway cancels the call's
context the same way); a call's deadline is its `Grpc-Timeout` (or the default) and cancels the
handler when it passes (504).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

import grpc
import uvicorn
from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import Message
from google.rpc import status_pb2
from grpc_health.v1 import health_pb2
from opentelemetry import propagate, trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from libs.errors import MeshError
from libs.in_process import CallFailed, InProcessServer
from libs.rest.bindings import HttpBinding, Router, RouteStatus, service_bindings
from libs.rest.limits import check_media_type, check_query, read_body
from libs.rest.metadata import (
    credential_metadata,
    request_metadata,
    response_headers,
    timeout_seconds,
)
from libs.rest.offload import BodyDecoder
from libs.rest.openapi import openapi_document
from libs.rest.origins import HostOriginGuard, default_allowed_hosts
from libs.rest.protocol import bounded_protocol
from libs.rest.status import (
    JSON,
    code_status,
    error_response,
    status_response,
)
from libs.rest.streaming import NdjsonStream, cancel_on_disconnect
from libs.rest.transcoding import apply_path_and_query, response_json

log = logging.getLogger(__name__)

HEALTH_CHECK = "/grpc.health.v1.Health/Check"


@dataclass(frozen=True)
class RestSettings:
    """Settings of a REST front (the orchestrator's main fills them from its settings).

    Attributes:
        host: interface to bind.
        port: HTTP port; 0 binds a free port (tests).
        default_deadline_s: deadline of a call when the request has no Grpc-Timeout header.
        ready_timeout_s: deadline of the health check behind /ready.
        metrics: serve the process's Prometheus registry at /metrics (the orchestrator's metrics
            are on); when False /metrics answers 404 saying they are off.
        max_deadline_s: a longer Grpc-Timeout is cut to this many seconds (gRPC allows up to
            99999999 hours, which no call needs and which overflows a deadline).
        max_body_bytes: largest request body read; a larger one is answered 413.
        max_json_depth: deepest nesting of JSON arrays and objects accepted in a body (400
            beyond).
        cors_allowed_origins: origins ("https://app.example") whose browsers may call the API
            cross-site; "*" allows any; empty (the default) turns CORS off.
        cors_max_age_s: how long a browser may cache a preflight's answer, in seconds.
        max_query_bytes: longest query string accepted (414 beyond, not parsed).
        max_query_parameters: most `&`-separated query parameters accepted (400 beyond).
        max_head_bytes: most bytes of request target and headers together (414 or 431 beyond,
            answered by the HTTP protocol before the request reaches the app).
        max_headers: most headers of a request (431 beyond).
        head_timeout_s: a request head not complete this many seconds after its first byte (or
            after the connection opened) is answered 408; a connection silent so long is closed.
        allowed_hosts: Host names answered ("*.example.com" its subdomains, "*" any); None: the
            loopback names when `host` is loopback, any otherwise (see `origins`).
        allowed_origins: origins whose cross-site requests are served besides same-origin ones
            and `cors_allowed_origins`; others are refused 403.
        offload_body_bytes: bodies of at least this many bytes are decoded in worker processes,
            off the event loop (see `offload`).
        body_workers: worker processes for those bodies (started on the first one).
        error_service: the `service` the front's own errors name in their ErrorInfo
            ("orchestrator-rest" for the orchestrator's).
    """

    host: str = "127.0.0.1"
    port: int = 8080
    default_deadline_s: float = 30.0
    ready_timeout_s: float = 2.0
    metrics: bool = False
    max_deadline_s: float = 3600.0
    max_body_bytes: int = 4 * 1024 * 1024
    max_json_depth: int = 64
    cors_allowed_origins: tuple[str, ...] = field(default_factory=tuple)
    cors_max_age_s: int = 600
    max_query_bytes: int = 8 * 1024
    max_query_parameters: int = 64
    max_head_bytes: int = 128 * 1024
    max_headers: int = 100
    head_timeout_s: float = 10.0
    allowed_hosts: tuple[str, ...] | None = None
    allowed_origins: tuple[str, ...] = field(default_factory=tuple)
    offload_body_bytes: int = 16 * 1024
    body_workers: int = 2
    error_service: str = "rest"


class Authenticator(Protocol):
    """What checks a caller's credential from its credential metadata (`metadata.
    credential_metadata`: Authorization, X-Api-Key): None when it may call, else the refusal's
    `google.rpc.Status` (missing or invalid key), with no other effect. The orchestrator's is
    `services.orchestrator.access.keycheck.KeyCheck`."""

    def refuse(self, metadata: list[tuple[str, str | bytes]]) -> status_pb2.Status | None: ...


_UNREAD_BODY_BYTES = 64 * 1024
"""A refused request announcing a larger body (or a chunked one) has its connection closed rather
than its body read and discarded."""


class _Gateway:
    """The ASGI endpoint behind every path that is not /health, /ready or /openapi.json."""

    def __init__(self, server: InProcessServer, service: ServiceDescriptor,
                 bindings: list[HttpBinding], settings: RestSettings,
                 tracer: trace.Tracer, access: Authenticator | None,
                 decoder: BodyDecoder) -> None:
        self._server = server
        self._router = Router(bindings)
        self._settings = settings
        self._tracer = tracer
        self._access = access
        self._decoder = decoder
        self._request_classes = {
            method.full_name: message_factory.GetMessageClass(method.input_type)
            for method in service.methods
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        route = self._router.match(request.method, scope["path"])
        # A FOUND match always carries its binding and path values; the others never do.
        if route.binding is not None and route.path_values is not None:
            response = await self._forward(request, receive, route.binding, route.path_values)
        elif route.status is RouteStatus.METHOD_NOT_ALLOWED:
            response = status_response(
                code_status(grpc.StatusCode.UNIMPLEMENTED, "Method Not Allowed"),
                {"Allow": ", ".join(route.allowed)}, status_code=405)
        else:
            response = status_response(code_status(grpc.StatusCode.NOT_FOUND, "Not Found"))
        await response(scope, receive, send)

    async def _forward(self, request: Request, receive: Receive, binding: HttpBinding,
                       path_values: dict[str, str]) -> Response | NdjsonStream:
        parent = propagate.extract(dict(request.headers))
        span = self._tracer.start_span(
            f"{binding.http_method} {binding.template.template}", context=parent,
            kind=SpanKind.SERVER,
            attributes={"http.request.method": binding.http_method,
                        "http.route": binding.template.template,
                        "url.path": request.url.path,
                        "rpc.method": binding.rpc_path})
        stream: NdjsonStream | None = None
        try:
            with trace.use_span(span, end_on_exit=False):
                response = await self._transcode_and_call(request, receive, binding, path_values)
            span.set_attribute("http.response.status_code", response.status_code)
            if response.status_code >= 500:
                span.set_status(StatusCode.ERROR)
            if isinstance(response, NdjsonStream):
                stream, response.span = response, span  # the stream ends the span
            return response
        finally:
            if stream is None:
                span.end()

    async def _transcode_and_call(self, request: Request, receive: Receive, binding: HttpBinding,
                                  path_values: dict[str, str]) -> Response | NdjsonStream:
        refusal = self._refuse_unauthenticated(request)
        if refusal is not None:
            return refusal
        try:
            check_query(request.scope.get("query_string", b""), self._settings.max_query_bytes,
                        self._settings.max_query_parameters)
            timeout = self._timeout(request.headers.get("grpc-timeout"))
            metadata = request_metadata(
                request.headers.items(), request.headers.get("host"),
                request.client.host if request.client else None)
            message = await self._build_request(request, binding, path_values)
        except MeshError as error:
            return error_response(error, self._settings.error_service)
        metadata = _with_trace_context(metadata)
        peer = _peer(request)
        if binding.method.server_streaming:
            return await self._open_stream(binding, message, timeout, metadata, peer, receive)
        call = self._server.unary_unary(binding.rpc_path, message, timeout, metadata, peer)
        watcher = cancel_on_disconnect(call, receive)
        try:
            reply = await call
        except asyncio.CancelledError:
            if not watcher.done():
                raise
            return status_response(code_status(grpc.StatusCode.CANCELLED,
                                               "the HTTP client went away"))
        except CallFailed as error:
            return status_response(error.status, response_headers(error.initial_metadata))
        finally:
            watcher.cancel()
        return Response(response_json(reply, binding.response_body), status_code=200,
                        headers=response_headers(call.initial_metadata()), media_type=JSON)

    def _refuse_unauthenticated(self, request: Request) -> Response | None:
        """The 401 for a missing or invalid key (when the app was given access control), from
        the credential headers alone, before the query or the body is looked at; None otherwise.
        The in-process call's interceptor still decides the call (admission, limits)."""
        if self._access is None:
            return None
        refusal = self._access.refuse(credential_metadata(request.headers.items()))
        if refusal is None:
            return None
        headers = request.headers
        declared = headers.get("content-length", "0").strip()
        unread = "transfer-encoding" in headers or not declared.isdigit() \
            or int(declared) > _UNREAD_BODY_BYTES
        return status_response(refusal,
                               {"Connection": "close"} if unread else None)

    async def _build_request(self, request: Request, binding: HttpBinding,
                             path_values: dict[str, str]) -> Message:
        """The request message: the body (when the binding takes one) decoded, on the loop or
        in a worker process (`offload`), then the path variables and the query.

        Raises:
            MeshError: a refused body (415, 413, 400) or a bad field (400), naming it.
        """
        message = self._request_classes[binding.method.full_name]()
        if binding.body:
            check_media_type(request.headers.get("content-type"))
            body = await read_body(request, self._settings.max_body_bytes)
            if body.strip():
                message = await self._decoder.decode(message, binding.body, body)
        apply_path_and_query(binding, message, path_values, request.url.query)
        return message

    def _timeout(self, header: str | None) -> float:
        """The call's deadline in seconds: the Grpc-Timeout header's, capped at
        `max_deadline_s`, or the default deadline when there is none (or it is zero, which
        grpc-gateway reads as "none"; the mesh wants one).

        Raises:
            InvalidArgument: a malformed Grpc-Timeout.
        """
        timeout = timeout_seconds(header) if header else self._settings.default_deadline_s
        if timeout <= 0:
            timeout = self._settings.default_deadline_s
        return min(timeout, self._settings.max_deadline_s)

    async def _open_stream(self, binding: HttpBinding, message: Message, timeout: float,
                           metadata: list, peer: str, receive: Receive
                           ) -> Response | NdjsonStream:
        """Starts a server-streaming call and waits for its first message: an error before it is
        an ordinary error response; otherwise the stream of NDJSON lines."""
        try:
            call = await self._server.unary_stream(binding.rpc_path, message, timeout, metadata,
                                                   peer)
        except CallFailed as error:
            return status_response(error.status, response_headers(error.initial_metadata))
        watcher = cancel_on_disconnect(call, receive)
        try:
            first = await call.read()
        except asyncio.CancelledError:
            if not watcher.done():
                raise
            return status_response(code_status(grpc.StatusCode.CANCELLED,
                                               "the HTTP client went away"))
        except CallFailed as error:
            call.cancel()
            return status_response(error.status, response_headers(error.initial_metadata))
        finally:
            watcher.cancel()
        headers = response_headers(call.initial_metadata())
        return NdjsonStream(call, first, binding.response_body, headers)


def _peer(request: Request) -> str:
    """The HTTP client in gRPC's peer form ("ipv4:10.0.0.1:51234"); "" when unknown."""
    if request.client is None:
        return ""
    host, port = request.client
    return f"ipv6:[{host}]:{port}" if ":" in host else f"ipv4:{host}:{port}"


def _with_trace_context(metadata: list) -> list:
    """`metadata` plus the W3C trace context of the current (REST) span, when it is recording, so
    the server span the interceptors make is its child."""
    if not trace.get_current_span().is_recording():
        return metadata
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return metadata + list(carrier.items())


def build_rest_app(
    server: InProcessServer,
    settings: RestSettings | None = None,
    *,
    service: ServiceDescriptor,
    tracer_provider: TracerProvider | None = None,
    dependencies: Callable[[], list[dict[str, object]]] | None = None,
    access: Authenticator | None = None,
) -> Starlette:
    """The REST front for `service`, calling it through `server` (the gRPC server's
    `RunningServer.in_process`: its handlers and interceptors, in this process).

    Args:
        server: what serves `service` (and grpc.health.v1, asked by /ready).
        settings: deadlines and limits; None uses the defaults.
        service: the annotated service descriptor.
        tracer_provider: provider for the REST spans; None uses the process's global provider.
        dependencies: the dependencies' last known states, listed by /ready (the orchestrator
            passes `DependencyWatcher.report`); None lists none.
        access: checks the API key of every API request before its query or body is read
            (the orchestrator passes its `access.keycheck.KeyCheck`); None leaves the key to the
            in-process call's interceptor alone.
    Raises:
        AnnotationError: an annotation that cannot be served (checked here, at start-up).
    """
    settings = settings or RestSettings()
    bindings = service_bindings(service)
    tracer = trace.get_tracer(__name__, tracer_provider=tracer_provider)
    decoder = BodyDecoder(settings.offload_body_bytes, settings.max_json_depth,
                          settings.body_workers)
    gateway = _Gateway(server, service, bindings, settings, tracer, access, decoder)
    document = openapi_document(service, bindings)

    async def health(_: Request) -> Response:
        return JSONResponse({"status": "SERVING"})

    async def own_status() -> tuple[str, str]:
        """The service's own health: (ServingStatus name, why it is not SERVING)."""
        call = server.unary_unary(HEALTH_CHECK, health_pb2.HealthCheckRequest(
            service=service.full_name), settings.ready_timeout_s)
        try:
            reply = await call
        except CallFailed as error:
            return "UNKNOWN", f"health check failed: {error}"
        status_name = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
        return status_name, status_name

    async def ready(_: Request) -> Response:
        status_name, reason = await own_status()
        body: dict[str, object] = {"status": status_name}
        if dependencies is not None:
            body["dependencies"] = dependencies()
        if status_name == "SERVING":
            return JSONResponse(body)
        body.update(code=grpc.StatusCode.UNAVAILABLE.value[0],
                    message=f"{service.full_name}: {reason}", details=[])
        return JSONResponse(body, status_code=503)

    async def openapi(_: Request) -> Response:
        return JSONResponse(document)

    async def metrics(_: Request) -> Response:
        if not settings.metrics:
            return status_response(code_status(
                grpc.StatusCode.NOT_FOUND,
                "metrics are off: set ORCHESTRATOR_METRICS_PORT (0 or a port) to turn them on"))
        return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)

    routes = [
        Route("/health", _GetOnly(health)),
        Route("/ready", _GetOnly(ready)),
        Route("/openapi.json", _GetOnly(openapi)),
        Route("/metrics", _GetOnly(metrics)),
        Route("/{path:path}", gateway),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            decoder.close()

    app = Starlette(routes=routes, middleware=_middleware(settings, bindings), lifespan=lifespan,
                    exception_handlers={HTTPException: _http_exception,
                                        Exception: _unexpected_exception})
    app.state.rest_settings = settings
    return app


def _middleware(settings: RestSettings, bindings: list[HttpBinding]) -> list[Middleware]:
    """The Host/Origin guard, outermost, then CORS when origins are configured."""
    allowed_hosts = settings.allowed_hosts
    if allowed_hosts is None:
        allowed_hosts = default_allowed_hosts(settings.host)
    middleware = [Middleware(HostOriginGuard, allowed_hosts=allowed_hosts,
                             allowed_origins=settings.allowed_origins
                             + settings.cors_allowed_origins,
                             error_service=settings.error_service)]
    if settings.cors_allowed_origins:
        middleware.append(Middleware(
            _StatusCorsMiddleware, allow_origins=list(settings.cors_allowed_origins),
            allow_methods=sorted({b.http_method for b in bindings} | {"GET"}),
            allow_headers=list(CORS_ALLOWED_HEADERS), expose_headers=list(CORS_EXPOSED_HEADERS),
            max_age=settings.cors_max_age_s))
    return middleware


class _GetOnly:
    """An ASGI app serving `endpoint` for GET and HEAD; 405 with `Allow` and a google.rpc.Status
    body for any other method (a Starlette route limited to GET would let other methods fall
    through to the gateway's catch-all, a 404)."""

    def __init__(self, endpoint: Callable[[Request], Awaitable[Response]]) -> None:
        self._endpoint = endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        if request.method in ("GET", "HEAD"):
            response = await self._endpoint(request)
        else:
            response = status_response(
                code_status(grpc.StatusCode.UNIMPLEMENTED, "Method Not Allowed"),
                {"Allow": "GET, HEAD"}, status_code=405)
        await response(scope, receive, send)


CORS_ALLOWED_HEADERS = ("Content-Type", "Authorization", "X-Api-Key", "Grpc-Timeout",
                        "Traceparent", "Tracestate")
"""Request headers a browser may send cross-site (when CORS is on)."""
CORS_EXPOSED_HEADERS = ("Retry-After", "Grpc-Metadata-X-Served-By")
"""Response headers a cross-site script may read besides the CORS-safelisted ones."""


class _StatusCorsMiddleware(CORSMiddleware):
    """Starlette's CORSMiddleware, whose refused preflight (a plain-text 400) becomes a 403 with a
    `google.rpc.Status` body (PERMISSION_DENIED) like every other error of the front."""

    def preflight_response(self, request_headers) -> Response:  # type: ignore[no-untyped-def]
        response = super().preflight_response(request_headers)
        if response.status_code < 400:
            return response
        headers = {key: value for key, value in response.headers.items()
                   if key.lower() not in ("content-length", "content-type")}
        reason = bytes(response.body).decode("utf-8", "replace")
        return status_response(
            code_status(grpc.StatusCode.PERMISSION_DENIED, f"CORS preflight refused: {reason}"),
            headers, status_code=403)


async def _http_exception(_: Request, error: Exception) -> Response:
    """Starlette's own HTTP errors (405 on /health, /ready, /openapi.json) as google.rpc.Status.

    Raises:
        TypeError: `error` is not an HTTPException (the handler is registered for that type only).
    """
    if not isinstance(error, HTTPException):
        raise TypeError(f"the HTTPException handler got a {type(error).__name__}")
    codes = {404: grpc.StatusCode.NOT_FOUND, 405: grpc.StatusCode.UNIMPLEMENTED}
    code = codes.get(error.status_code, grpc.StatusCode.INVALID_ARGUMENT)
    return status_response(code_status(code, str(error.detail)), dict(error.headers or {}),
                           status_code=error.status_code)


async def _unexpected_exception(request: Request, error: Exception) -> Response:
    """A bug: logged with its traceback, answered 500 INTERNAL without it."""
    log.error("REST %s %s failed", request.method, request.url.path, exc_info=error)
    return status_response(code_status(grpc.StatusCode.INTERNAL,
                                       "internal error in the REST front"))


class _EmbeddedServer(uvicorn.Server):
    """uvicorn without its own signal handling: the process that embeds it owns SIGTERM/SIGINT."""

    def capture_signals(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()


class RunningRest:
    """A started REST server: `port` is the bound port, `stop()` drains and stops it."""

    def __init__(self, server: uvicorn.Server, task: asyncio.Task[None], port: int) -> None:
        self.port = port
        self._server = server
        self._task = task

    def connection_sockets(self) -> list[socket.socket]:
        """The sockets of the connections open now (their options can be read; for tests and
        diagnostics)."""
        sockets = []
        for connection in list(self._server.server_state.connections):
            transport = getattr(connection, "transport", None)
            sock = transport.get_extra_info("socket") if transport is not None else None
            if sock is not None:
                sockets.append(sock)
        return sockets

    async def stop(self) -> None:
        """Stops accepting and lets in-flight requests finish."""
        self._server.should_exit = True
        await self._task


async def serve_rest(app: Starlette, host: str, port: int, drain_grace_s: float = 5.0
                     ) -> RunningRest:
    """Starts `app` on uvicorn at host:port (0 binds a free port) and returns once it listens.

    `RunningRest.stop()` gives in-flight requests `drain_grace_s` seconds before cancelling them.

    Raises:
        RuntimeError: the server did not start (port taken, app start-up failed).
    """
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY on accepted sockets only when their protocol
    # says TCP (accepted sockets inherit the listening socket's), see the module docstring.
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM,
                         socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise RuntimeError(f"REST: could not bind {host}:{port}: {error}") from error
    bound_port = sock.getsockname()[1]
    # log_config=None: uvicorn's records propagate to the root handler (the service's JSON lines).
    settings = getattr(app.state, "rest_settings", None) or RestSettings()
    config = uvicorn.Config(app, lifespan="on", log_level="warning", access_log=False,
                            log_config=None,
                            http=bounded_protocol(settings.max_head_bytes, settings.max_headers,
                                                  settings.head_timeout_s,
                                                  settings.error_service),
                            timeout_graceful_shutdown=drain_grace_s)
    server = _EmbeddedServer(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            sock.close()
            error = task.exception() if not task.cancelled() else None
            raise RuntimeError(f"REST: server on {host}:{bound_port} failed to start") from error
        await asyncio.sleep(0.01)
    log.info("REST front listening on http://%s:%d", host, bound_port)
    return RunningRest(server, task, bound_port)
