"""The one `serve()` every service uses: grpc.aio server, health that follows readiness, reflection,
tracing, the error-mapping interceptor, and a graceful drain on SIGTERM.

Order (as in grpc/grpc examples/python/health_checking): create the server, add servicers,
health starts NOT_SERVING, bind, start, run the service's `ready()` hook (compile kernels, load
models, open stores), then SERVING; on SIGTERM or SIGINT health goes NOT_SERVING and in-flight
calls get `drain_grace_s` seconds to finish.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection
from grpc_status import rpc_status
from opentelemetry.instrumentation.grpc import aio_server_interceptor
from opentelemetry.sdk.trace import TracerProvider

from libs.errors import MeshError, to_status
from libs.settings import ServiceSettings
from libs.telemetry import current_trace_id, setup_tracing

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Servicer:
    """A servicer and how to register it.

    `add_to_server` is the generated `add_XServicer_to_server`; `service_name` the full proto name,
    e.g. "mesh.mcts.v1.MctsService"."""

    add_to_server: Callable[[Any, grpc.aio.Server], None]
    servicer: object
    service_name: str


class ErrorMappingInterceptor(grpc.aio.ServerInterceptor):
    """Maps `MeshError` to its status code with `google.rpc` details; any other exception becomes
    INTERNAL with the trace id and no stack trace (the stack trace goes to the service's log)."""

    def __init__(self, service: str) -> None:
        self._service = service

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(
                self._wrap_unary(handler.unary_unary, method),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_unary:
            return grpc.stream_unary_rpc_method_handler(
                self._wrap_unary(handler.stream_unary, method),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(
                self._wrap_stream(handler.unary_stream, method),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return grpc.stream_stream_rpc_method_handler(
            self._wrap_stream(handler.stream_stream, method),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    async def _abort(self, context: grpc.aio.ServicerContext, error: Exception, method: str):
        if isinstance(error, MeshError):
            status = to_status(error, self._service)
            log.info("%s -> %s: %s", method, error.code.name, error.message)
        else:
            trace_id = current_trace_id()
            log.exception("%s failed (trace %s)", method, trace_id)
            status = to_status(
                MeshError(f"internal error in {self._service}; trace id {trace_id or 'none'}"),
                self._service,
            )
        await context.abort_with_status(rpc_status.to_status(status))

    def _wrap_unary(self, behaviour, method: str):
        async def wrapped(request, context):
            try:
                return await behaviour(request, context)
            except (asyncio.CancelledError, grpc.aio.AbortError):
                raise
            except Exception as error:  # noqa: BLE001 - the one place errors become statuses
                await self._abort(context, error, method)

        return wrapped

    def _wrap_stream(self, behaviour, method: str):
        async def wrapped(request, context):
            try:
                async for response in behaviour(request, context):
                    yield response
            except (asyncio.CancelledError, grpc.aio.AbortError):
                raise
            except Exception as error:  # noqa: BLE001
                await self._abort(context, error, method)

        return wrapped


class RunningServer:
    """A started server: `port` is the bound port, `stop()` drains and stops it."""

    def __init__(self, name: str, server: grpc.aio.Server, health: HealthServicer, port: int,
                 service_names: list[str]) -> None:
        self.name = name
        self.server = server
        self.health = health
        self.port = port
        self.service_names = service_names

    async def set_serving(self, serving: bool) -> None:
        status = (health_pb2.HealthCheckResponse.SERVING if serving
                  else health_pb2.HealthCheckResponse.NOT_SERVING)
        for service in ["", *self.service_names]:
            await self.health.set(service, status)

    async def stop(self, grace_s: float | None = 5.0) -> None:
        """Health goes NOT_SERVING, then in-flight calls get `grace_s` seconds to finish."""
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace_s)


async def start_server(
    name: str,
    settings: ServiceSettings,
    servicers: list[Servicer],
    ready: Callable[[], Awaitable[None]] | None = None,
    tracer_provider: TracerProvider | None = None,
) -> RunningServer:
    """Creates, binds and starts a service; health reports SERVING once `ready()` has returned.

    Args:
        name: the service's word ("mcts", "neural", ...), used in logs and error details.
        settings: host and port (port 0 binds a free port).
        servicers: what to serve.
        ready: awaited after the server starts and before SERVING: load models, compile kernels.
        tracer_provider: the provider for server spans; None uses the process's global provider.
    Raises:
        RuntimeError: the port could not be bound.
    """
    server = grpc.aio.server(
        interceptors=[aio_server_interceptor(tracer_provider=tracer_provider),
                      ErrorMappingInterceptor(name)],
        options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                 ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                 ("grpc.so_reuseport", 0)],
    )
    for item in servicers:
        item.add_to_server(item.servicer, server)
    health = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    service_names = [item.service_name for item in servicers]
    reflection.enable_server_reflection(
        [*service_names, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
         reflection.SERVICE_NAME],
        server,
    )
    port = server.add_insecure_port(f"{settings.host}:{settings.port}")
    if port == 0:
        raise RuntimeError(f"{name}: could not bind {settings.host}:{settings.port}")
    running = RunningServer(name, server, health, port, service_names)
    await running.set_serving(False)
    await server.start()
    log.info("%s listening on %s:%d (not serving until ready)", name, settings.host, port)
    if ready is not None:
        try:
            await ready()
        except BaseException:
            await server.stop(None)  # a failed start leaves no server for the garbage collector
            raise
    await running.set_serving(True)
    log.info("%s ready: SERVING", name)
    return running


ExtraStarter = Callable[[ServiceSettings, RunningServer],
                       Awaitable[tuple[dict[str, int], Callable[[], Awaitable[None]]]]]


async def serve(
    name: str,
    settings: ServiceSettings,
    servicers: list[Servicer],
    ready: Callable[[], Awaitable[None]] | None = None,
    on_listening: Callable[[dict[str, int]], None] | None = None,
    start_extra: ExtraStarter | None = None,
) -> None:
    """Runs a service until SIGTERM or SIGINT, then drains for `settings.drain_grace_s` seconds.

    Args:
        start_extra: starts a front that lives beside the gRPC server in the same process (the
            orchestrator's REST front); returns its ports by name and a coroutine that stops it.
        on_listening: called once everything is SERVING with the bound ports, {"grpc": port, ...}
            (the launcher learns the ports chosen for port 0 this way).
    """
    running = await start_server(name, settings, servicers, ready)
    ports = {"grpc": running.port}
    stop_extra = None
    if start_extra is not None:
        extra_ports, stop_extra = await start_extra(settings, running)
        ports.update(extra_ports)
    if on_listening is not None:
        on_listening(ports)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("%s: draining for %.1f s", name, settings.drain_grace_s)
    if stop_extra is not None:
        await stop_extra()
    await running.stop(settings.drain_grace_s)


def run_service(name: str, settings: ServiceSettings, run: Callable[[], Awaitable[None]]) -> None:
    """The body of every service's `main()`: logs the settings (secrets masked), sets up tracing,
    runs the service's coroutine (which calls `serve`) to the end, then flushes spans."""
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log.info("%s settings: %s", name, settings.masked())
    provider = setup_tracing(name, settings.otel_exporter_otlp_endpoint)
    try:
        asyncio.run(run())
    finally:
        provider.shutdown()
