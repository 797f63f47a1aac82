"""The orchestrator's REST front: a Starlette app generated at start-up from the `google.api.http`
annotations of a gRPC service, forwarding each call to the gRPC server like grpc-gateway v2's
reverse proxy.

Routes: every annotated unary RPC's bindings (see `bindings`, `transcoding`, `metadata`, `status`
for the exact rules), plus `/health` (200 while the process runs), `/ready` (200 only while the gRPC
server's health service reports the service SERVING, else 503 with a `google.rpc.Status` body),
`/metrics` (Prometheus text format, the process's registry) and `/openapi.json` (generated from the
same annotations).

Tracing: a W3C `traceparent` on the HTTP request is extracted and the REST span is its child; the
channel's OpenTelemetry interceptor then carries the trace to the gRPC server. A client that
disconnects cancels its gRPC call (grpc-gateway cancels the call's context the same way).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import uvicorn
from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor
from grpc_health.v1 import health_pb2, health_pb2_grpc
from mesh.orchestrator.v1 import orchestrator_service_pb2
from opentelemetry import propagate, trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from libs.channels import open_channel
from libs.errors import MeshError, status_from_rpc_error
from services.orchestrator.rest.bindings import HttpBinding, Router, RouteStatus, service_bindings
from services.orchestrator.rest.metadata import (
    request_metadata,
    response_headers,
    timeout_seconds,
)
from services.orchestrator.rest.openapi import openapi_document
from services.orchestrator.rest.status import (
    JSON,
    code_status,
    error_response,
    status_response,
)
from services.orchestrator.rest.transcoding import build_request, response_json

log = logging.getLogger(__name__)

ORCHESTRATOR_SERVICE = orchestrator_service_pb2.DESCRIPTOR.services_by_name["OrchestratorService"]


@dataclass(frozen=True)
class RestSettings:
    """Settings of the REST front (the launcher fills them from OrchestratorSettings).

    Attributes:
        host: interface to bind.
        port: HTTP port; 0 binds a free port (tests).
        default_deadline_s: deadline of a forwarded call when the request has no Grpc-Timeout
            header.
        ready_timeout_s: deadline of the health check behind /ready.
        metrics: serve the process's Prometheus registry at /metrics (the orchestrator's metrics
            are on); when False /metrics answers 404 saying they are off.
    """

    host: str = "127.0.0.1"
    port: int = 8080
    default_deadline_s: float = 30.0
    ready_timeout_s: float = 2.0
    metrics: bool = False


class _Gateway:
    """The ASGI endpoint behind every path that is not /health, /ready or /openapi.json."""

    def __init__(self, service: ServiceDescriptor, bindings: list[HttpBinding],
                 settings: RestSettings, tracer: trace.Tracer) -> None:
        self._router = Router(bindings)
        self._settings = settings
        self._tracer = tracer
        self._request_classes = {
            method.full_name: message_factory.GetMessageClass(method.input_type)
            for method in service.methods
        }
        self._response_classes = {
            method.full_name: message_factory.GetMessageClass(method.output_type)
            for method in service.methods
        }
        self.channel: grpc.aio.Channel | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        route = self._router.match(request.method, scope["path"])
        if route.status is RouteStatus.NOT_FOUND:
            response = status_response(code_status(grpc.StatusCode.NOT_FOUND, "Not Found"))
        elif route.status is RouteStatus.METHOD_NOT_ALLOWED:
            response = status_response(
                code_status(grpc.StatusCode.UNIMPLEMENTED, "Method Not Allowed"))
        else:
            assert route.binding is not None and route.path_values is not None
            response = await self._forward(request, receive, route.binding, route.path_values)
        await response(scope, receive, send)

    async def _forward(self, request: Request, receive: Receive, binding: HttpBinding,
                       path_values: dict[str, str]) -> Response:
        parent = propagate.extract(dict(request.headers))
        with self._tracer.start_as_current_span(
            f"{binding.http_method} {binding.template.template}", context=parent,
            kind=SpanKind.SERVER,
            attributes={"http.request.method": binding.http_method,
                        "http.route": binding.template.template,
                        "url.path": request.url.path,
                        "rpc.method": binding.rpc_path},
        ) as span:
            response = await self._transcode_and_call(request, receive, binding, path_values)
            span.set_attribute("http.response.status_code", response.status_code)
            if response.status_code >= 500:
                span.set_status(StatusCode.ERROR)
            return response

    async def _transcode_and_call(self, request: Request, receive: Receive, binding: HttpBinding,
                                  path_values: dict[str, str]) -> Response:
        method = binding.method.full_name
        try:
            timeout_header = request.headers.get("grpc-timeout")
            timeout = (timeout_seconds(timeout_header) if timeout_header
                       else self._settings.default_deadline_s)
            if timeout <= 0:  # grpc-gateway reads a zero timeout as "none"; the mesh wants one
                timeout = self._settings.default_deadline_s
            metadata = request_metadata(
                request.headers.items(), request.headers.get("host"),
                request.client.host if request.client else None)
            body = await request.body()
            message = build_request(binding, self._request_classes[method], body, path_values,
                                    request.url.query)
        except MeshError as error:
            return error_response(error)
        if self.channel is None:
            return status_response(code_status(grpc.StatusCode.UNAVAILABLE,
                                               "the REST front has no channel (not started)"))
        callable_ = self.channel.unary_unary(
            binding.rpc_path,
            request_serializer=lambda item: item.SerializeToString(),
            response_deserializer=self._response_classes[method].FromString,
        )
        call = callable_(message, timeout=timeout, metadata=metadata)
        client_gone = await _cancel_on_disconnect(call, receive)
        try:
            reply = await call
        except asyncio.CancelledError:
            if not client_gone:
                raise
            return status_response(code_status(grpc.StatusCode.CANCELLED,
                                               "the HTTP client went away"))
        except grpc.aio.AioRpcError as error:
            headers = response_headers(error.initial_metadata())
            return status_response(status_from_rpc_error(error), headers)
        headers = response_headers(await call.initial_metadata())
        return Response(response_json(reply, binding.response_body), status_code=200,
                        headers=headers, media_type=JSON)


async def _cancel_on_disconnect(call: grpc.aio.UnaryUnaryCall, receive: Receive) -> bool:
    """Waits for the call to end; cancels it if the HTTP client disconnects first. Returns whether
    the client disconnected."""

    async def finished() -> None:
        with contextlib.suppress(grpc.aio.AioRpcError, asyncio.CancelledError):
            await call

    waiters = {asyncio.ensure_future(finished()),
               disconnect := asyncio.ensure_future(_wait_for_disconnect(receive))}
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
    if disconnect.done() and not disconnect.cancelled() and not call.done():
        call.cancel()
        return True
    return False


async def _wait_for_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


def build_rest_app(
    channel_target: str,
    settings: RestSettings | None = None,
    service: ServiceDescriptor = ORCHESTRATOR_SERVICE,
    tracer_provider: TracerProvider | None = None,
) -> Starlette:
    """The REST front for `service`, forwarding to the gRPC server at `channel_target`.

    The channel (libs.channels.open_channel: tracing, retries on UNAVAILABLE) opens when the app
    starts (ASGI lifespan) and closes when it stops.

    Args:
        channel_target: "host:port" of the gRPC server.
        settings: deadlines; None uses the defaults.
        service: the annotated service descriptor.
        tracer_provider: provider for the REST spans and the channel's client spans; None uses the
            process's global provider.
    Raises:
        AnnotationError: an annotation that cannot be served (checked here, at start-up).
    """
    settings = settings or RestSettings()
    bindings = service_bindings(service)
    tracer = trace.get_tracer(__name__, tracer_provider=tracer_provider)
    gateway = _Gateway(service, bindings, settings, tracer)
    document = openapi_document(service, bindings)

    async def health(_: Request) -> Response:
        return JSONResponse({"status": "SERVING"})

    async def ready(_: Request) -> Response:
        if gateway.channel is None:
            return status_response(code_status(grpc.StatusCode.UNAVAILABLE, "not started"))
        stub = health_pb2_grpc.HealthStub(gateway.channel)
        try:
            reply = await stub.Check(health_pb2.HealthCheckRequest(service=service.full_name),
                                     timeout=settings.ready_timeout_s)
        except grpc.aio.AioRpcError as error:
            reason = f"{error.code().name}: {error.details()}"
            return status_response(code_status(
                grpc.StatusCode.UNAVAILABLE, f"{service.full_name}: health check failed: {reason}"))
        if reply.status != health_pb2.HealthCheckResponse.SERVING:
            status_name = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
            return status_response(code_status(grpc.StatusCode.UNAVAILABLE,
                                               f"{service.full_name}: {status_name}"))
        return JSONResponse({"status": "SERVING"})

    async def openapi(_: Request) -> Response:
        return JSONResponse(document)

    async def metrics(_: Request) -> Response:
        if not settings.metrics:
            return status_response(code_status(
                grpc.StatusCode.NOT_FOUND,
                "metrics are off: set ORCHESTRATOR_METRICS_PORT (0 or a port) to turn them on"))
        return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        gateway.channel = open_channel(channel_target, tracer_provider=tracer_provider)
        try:
            yield
        finally:
            channel, gateway.channel = gateway.channel, None
            await channel.close()

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/ready", ready, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/{path:path}", gateway),
    ]
    return Starlette(routes=routes, lifespan=lifespan)


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

    async def stop(self) -> None:
        """Stops accepting, lets in-flight requests finish, runs the app's shutdown (closes the
        channel)."""
        self._server.should_exit = True
        await self._task


async def serve_rest(app: Starlette, host: str, port: int, drain_grace_s: float = 5.0
                     ) -> RunningRest:
    """Starts `app` on uvicorn at host:port (0 binds a free port) and returns once it listens.

    `RunningRest.stop()` gives in-flight requests `drain_grace_s` seconds before cancelling them.

    Raises:
        RuntimeError: the server did not start (port taken, app start-up failed).
    """
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise RuntimeError(f"REST: could not bind {host}:{port}: {error}") from error
    bound_port = sock.getsockname()[1]
    # log_config=None: uvicorn's records propagate to the root handler (the service's JSON lines).
    config = uvicorn.Config(app, lifespan="on", log_level="warning", access_log=False,
                            log_config=None,
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
