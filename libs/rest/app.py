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
from collections.abc import AsyncIterator, Callable
from typing import Protocol

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import Message
from google.rpc import status_pb2
from opentelemetry import propagate, trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind, StatusCode
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from libs.errors import MeshError, to_status
from libs.in_process import CallFailed, InProcessServer
from libs.rest.bindings import HttpBinding, Routable, Router, RouteStatus, service_bindings
from libs.rest.endpoints import Endpoints
from libs.rest.extras import Caller, Extras, FrontRoute
from libs.rest.jsonl import LinesUpload, is_json_lines, name_lines
from libs.rest.limits import check_json_depth, check_media_type, check_query, read_body
from libs.rest.metadata import (
    credential_metadata,
    request_metadata,
    response_headers,
    timeout_seconds,
)
from libs.rest.middleware import GetOnly, http_exception, middleware, unexpected_exception
from libs.rest.offload import BodyDecoder
from libs.rest.openapi import openapi_document
from libs.rest.settings import RestSettings
from libs.rest.sse import SseStream, SseWatch, apply_last_event_id, first_read
from libs.rest.status import (
    JSON,
    code_status,
    error_response,
    status_response,
)
from libs.rest.streaming import NdjsonStream, cancel_on_disconnect, wait_for_disconnect
from libs.rest.transcoding import apply_path_and_query, apply_query, response_json

log = logging.getLogger(__name__)
_Stream = NdjsonStream | SseStream


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

    def __init__(self, server: InProcessServer, services: list[ServiceDescriptor],
                 bindings: list[HttpBinding], settings: RestSettings,
                 tracer: trace.Tracer, access: Authenticator | None,
                 decoder: BodyDecoder, extras: Extras) -> None:
        self._server = server
        self._router = Router([*bindings, *extras.routes])
        self._settings = settings
        self._tracer = tracer
        self._access = access
        self._decoder = decoder
        self._extras = extras
        self.closing = asyncio.Event()
        """Set when the server stops: SSE watches end at once (their clients resume)."""
        self._request_classes = {
            method.full_name: message_factory.GetMessageClass(method.input_type)
            for service in services for method in service.methods
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

    async def _forward(self, request: Request, receive: Receive, binding: Routable,
                       path_values: dict[str, str]) -> Response | _Stream:
        parent = propagate.extract(dict(request.headers))
        span = self._tracer.start_span(
            f"{binding.http_method} {binding.template.template}", context=parent,
            kind=SpanKind.SERVER,
            attributes={"http.request.method": binding.http_method,
                        "http.route": binding.template.template,
                        "url.path": request.url.path,
                        "rpc.method": binding.rpc_path})
        stream: _Stream | None = None
        try:
            with trace.use_span(span, end_on_exit=False):
                response = await self._transcode_and_call(request, receive, binding, path_values)
            span.set_attribute("http.response.status_code", response.status_code)
            if response.status_code >= 500:
                span.set_status(StatusCode.ERROR)
            if isinstance(response, NdjsonStream | SseStream):
                stream, response.span = response, span  # the stream ends the span
            return response
        finally:
            if stream is None:
                span.end()

    async def _transcode_and_call(self, request: Request, receive: Receive, binding: Routable,
                                  path_values: dict[str, str]) -> Response | _Stream:
        refusal = self._refuse_unauthenticated(request, binding)
        if refusal is not None:
            return refusal
        watch = self._extras.watches.get(binding.method.full_name) \
            if isinstance(binding, HttpBinding) else None
        try:
            check_query(request.scope.get("query_string", b""), self._settings.max_query_bytes,
                        self._settings.max_query_parameters)
            timeout = self._timeout(request.headers.get("grpc-timeout"), watch is not None)
            metadata = request_metadata(
                request.headers.items(), request.headers.get("host"),
                request.client.host if request.client else None)
            if isinstance(binding, FrontRoute):
                return await self._own_route(request, receive, binding, path_values, metadata,
                                             timeout)
            message, lines = await self._build_request(request, binding, path_values, watch)
        except MeshError as error:
            if isinstance(binding, FrontRoute) and binding.error_body is not None:
                return _route_error(binding, to_status(error, self._settings.error_service),
                                    {"Connection": "close"} if getattr(error, "close", False)
                                    else None, getattr(error, "http_status", None))
            return error_response(error, self._settings.error_service)
        except CallFailed as error:  # a route's own call
            return _route_error(binding, error.status, response_headers(error.initial_metadata))
        metadata = _with_trace_context(metadata)
        peer = _peer(request)
        if binding.method.server_streaming:
            return await self._open_stream(binding, message, timeout, metadata, peer, receive,
                                           watch)
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
            status = error.status if lines is None else name_lines(
                error.status, self._extras.uploads[binding.method.full_name].field, lines)
            return status_response(status, response_headers(error.initial_metadata))
        finally:
            watcher.cancel()
        return Response(response_json(reply, binding.response_body), status_code=200,
                        headers=response_headers(call.initial_metadata()), media_type=JSON)

    def _keyless(self, binding: Routable) -> bool:
        """True when `binding` is a route that serves an unknown key as no key
        (`FrontRoute.unknown_key_as_none`) and a call without a key may be made here."""
        return isinstance(binding, FrontRoute) and binding.unknown_key_as_none \
            and self._access is not None and self._access.refuse([]) is None

    async def _own_route(self, request: Request, receive: Receive, binding: FrontRoute,
                         path_values: dict[str, str], metadata: list, timeout: float
                         ) -> Response:
        """A route of the front's own: its body read (when it takes one) within the limits,
        then its handler, cancelled if the HTTP client leaves before it returns.

        Raises:
            MeshError: a refused body (415, 413, 400).
            CallFailed: a call of the handler failed.
        """
        if self._keyless(binding) and self._access.refuse(  # type: ignore[union-attr]
                credential_metadata(request.headers.items())) is not None:
            metadata = [(name, value) for name, value in metadata
                        if name.removesuffix("-bin") not in ("authorization", "x-api-key")]
        body = b""
        if binding.body:
            check_media_type(request.headers.get("content-type"))
            body = await read_body(request, self._settings.max_body_bytes)
            check_json_depth(body, self._settings.max_json_depth)
        caller = Caller(self._server, _with_trace_context(metadata), timeout, _peer(request),
                        body)
        handler = asyncio.ensure_future(binding.handler(caller, path_values, request.url.query))
        left = asyncio.ensure_future(wait_for_disconnect(receive))
        try:
            await asyncio.wait({handler, left}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            left.cancel()
            if not handler.done():
                handler.cancel()
        if not handler.done() or handler.cancelled():
            return _route_error(binding, code_status(grpc.StatusCode.CANCELLED,
                                                     "the HTTP client went away"))
        return handler.result()

    def _refuse_unauthenticated(self, request: Request, binding: Routable) -> Response | None:
        """The 401 for a missing or invalid key (when the app was given access control), from
        the credential headers alone, before the query or the body is looked at; None otherwise.
        The in-process call's interceptor still decides the call (admission, limits)."""
        if self._access is None:
            return None
        refusal = self._access.refuse(credential_metadata(request.headers.items()))
        if refusal is None or self._keyless(binding):
            return None
        headers = request.headers
        declared = headers.get("content-length", "0").strip()
        unread = "transfer-encoding" in headers or not declared.isdigit() \
            or int(declared) > _UNREAD_BODY_BYTES
        return _route_error(binding, refusal, {"Connection": "close"} if unread else None)

    async def _build_request(self, request: Request, binding: HttpBinding,
                             path_values: dict[str, str], watch: SseWatch | None
                             ) -> tuple[Message, list[int] | None]:
        """The request message: the body (when the binding takes one) decoded, on the loop or
        in a worker process (`offload`), then the path variables and the query (and, for an SSE
        watch, `Last-Event-ID`); with the line number of each item of a JSON Lines upload
        (`jsonl`; None for any other request).

        Raises:
            MeshError: a refused body (415, 413, 400) or a bad field (400), naming it.
        """
        message = self._request_classes[binding.method.full_name]()
        upload = self._extras.uploads.get(binding.method.full_name)
        content_type = request.headers.get("content-type")
        if binding.body and upload is not None and is_json_lines(content_type):
            return await self._upload(request, binding, path_values, message, upload)
        if binding.body:
            check_media_type(content_type)
            body = await read_body(request, self._settings.max_body_bytes)
            if body.strip():
                message = await self._decoder.decode(message, binding.body, body)
        apply_path_and_query(binding, message, path_values, request.url.query)
        if watch is not None:
            apply_last_event_id(message, watch, request.headers)
        return message, None

    async def _upload(self, request: Request, binding: HttpBinding, path_values: dict[str, str],
                      message: Message, upload: LinesUpload) -> tuple[Message, list[int]]:
        """A JSON Lines body decoded into `upload.field`, then the path and (whatever the
        binding's body) the query's other fields.

        Raises:
            MeshError: over the upload's size (413) or item limit (400), a bad line (400).
        """
        body = await read_body(request, upload.max_bytes, upload.bytes_limit)
        message, lines = await self._decoder.decode_lines(message, upload, body)
        apply_path_and_query(binding, message, path_values, "")
        skip = [tuple(name.split(".")) for name in path_values] + [(upload.field,)]
        apply_query(message, request.url.query, skip)
        return message, lines

    def _timeout(self, header: str | None, watch: bool = False) -> float:
        """The call's deadline in seconds: the Grpc-Timeout header's, capped at
        `max_deadline_s`, or the default deadline when there is none (or it is zero, which
        grpc-gateway reads as "none"; the mesh wants one): `max_deadline_s` for an SSE watch,
        which a browser's EventSource cannot give a header and which resumes when it passes.

        Raises:
            InvalidArgument: a malformed Grpc-Timeout.
        """
        default = self._settings.max_deadline_s if watch else self._settings.default_deadline_s
        timeout = timeout_seconds(header) if header else default
        if timeout <= 0:
            timeout = default
        return min(timeout, self._settings.max_deadline_s)

    async def _open_stream(self, binding: HttpBinding, message: Message, timeout: float,
                           metadata: list, peer: str, receive: Receive, watch: SseWatch | None
                           ) -> Response | _Stream:
        """Starts a server-streaming call and waits for its first message (an SSE watch: at most
        `sse_first_event_wait_s`): an error before it is an ordinary error response; otherwise
        the stream of NDJSON lines, or of SSE events."""
        try:
            call = await self._server.unary_stream(binding.rpc_path, message, timeout, metadata,
                                                   peer)
        except CallFailed as error:
            return status_response(error.status, response_headers(error.initial_metadata))
        watcher = cancel_on_disconnect(call, receive)
        try:
            if watch is not None:
                read = await first_read(call, self._settings.sse_first_event_wait_s)
                return SseStream(call, read, watch, response_headers(call.initial_metadata()),
                                 self._settings.sse_heartbeat_s, self.closing)
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


def _route_error(binding: Routable, status: status_pb2.Status,
                 headers: dict[str, str] | None = None, status_code: int | None = None
                 ) -> Response:
    """The error response for `status`: in the route's own form when it has one (a
    `FrontRoute.error_body`), else a `google.rpc.Status` (`status_response`)."""
    response = status_response(status, headers, status_code)
    if isinstance(binding, FrontRoute) and binding.error_body is not None:
        kept = {name: value for name, value in response.headers.items()
                if name.lower() not in ("content-length", "content-type")}
        return binding.error_body(status, response.status_code, kept)
    return response


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
    extras: Extras | None = None,
) -> Starlette:
    """The REST front for `service` (and `extras`), calling it through `server` (the gRPC
    server's `RunningServer.in_process`: its handlers and interceptors, in this process).

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
        extras: more services, SSE watches, JSON Lines uploads and routes of the front's own
            (see `extras`); None: only `service`'s bindings.
    Raises:
        AnnotationError: an annotation that cannot be served (checked here, at start-up).
    """
    settings = settings or RestSettings()
    extras = extras or Extras()
    services = [service, *extras.services]
    bindings = [binding for item in services for binding in service_bindings(item)]
    tracer = trace.get_tracer(__name__, tracer_provider=tracer_provider)
    decoder = BodyDecoder(settings.offload_body_bytes, settings.max_json_depth,
                          settings.body_workers)
    gateway = _Gateway(server, services, bindings, settings, tracer, access, decoder, extras)
    endpoints = Endpoints(server, service, settings,
                          openapi_document(service, bindings, extras), dependencies)
    routes = [
        Route("/health", GetOnly(endpoints.health)),
        Route("/ready", GetOnly(endpoints.ready)),
        Route("/openapi.json", GetOnly(endpoints.openapi)),
        Route("/metrics", GetOnly(endpoints.metrics)),
        *extras.pages,
        Route("/{path:path}", gateway),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            decoder.close()

    app = Starlette(routes=routes, middleware=middleware(settings, [*bindings, *extras.routes]),
                    lifespan=lifespan, exception_handlers={HTTPException: http_exception,
                                                           Exception: unexpected_exception})
    app.state.rest_settings = settings
    app.state.rest_closing = gateway.closing
    return app
