"""The one `serve()` every service uses: grpc.aio server, health that follows readiness, reflection,
tracing, the error-mapping interceptor, and a graceful drain on SIGTERM.

Order (as in grpc/grpc examples/python/health_checking): create the server, add servicers,
health starts NOT_SERVING, bind, start, run the service's `ready()` hook (compile kernels, load
models, open stores), then SERVING; on SIGTERM or SIGINT health goes NOT_SERVING and in-flight
calls get `drain_grace_s` seconds to finish.

While it runs, a service's readiness `probe` (when it has one) is evaluated every
`health_interval_s` seconds in a background task, never on a request's path: health for "" and
every served name follows it (SERVING while it returns None, NOT_SERVING with the reason logged
once it returns a reason, raises, or gives no answer within `health_timeout_s`).

A backend (every service but the orchestrator, whose public API checks API keys) authenticates its
callers as `libs.mesh_auth` says: mutual TLS when the settings name certificates, else the mesh
token on every call but health; with neither it serves only on a loopback address (with a warning)
unless `mesh_allow_unauthenticated` is set.

`RunningServer.in_process` calls the served methods from the same process through the same
interceptors (`libs.in_process`: the orchestrator's REST front uses it instead of a loopback
channel).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from opentelemetry.sdk.trace import TracerProvider

from libs.channels import keepalive_server_options, message_limit_options
from libs.error_mapping import ErrorMappingInterceptor
from libs.health_metrics import watch_health
from libs.in_process import InProcessServer, RecordingServer
from libs.logs import setup_logging
from libs.mesh_auth import MeshTokenInterceptor, backend_auth, server_credentials
from libs.metrics import start_metrics_server
from libs.reflection import enable_server_reflection
from libs.settings import MeshAuth, ServiceSettings
from libs.telemetry import ServerTelemetryInterceptor, setup_tracing

log = logging.getLogger(__name__)

Probe = Callable[[], Awaitable[str | None]]
"""A readiness probe: returns None while the service can answer requests, else the reason it
cannot (one line, logged when health changes). It must be cheap (no model call, no paid API call):
it runs every `health_interval_s` seconds."""

MAX_MESSAGE_BYTES = 4 * 1024 * 1024
"""Largest request or response a service takes or sends (gRPC's default receive limit, explicit)."""
MAX_METADATA_BYTES = 16 * 1024

LIVENESS = "liveness"
"""Health service name that is SERVING from start-up until the drain, whatever the readiness: a
check of it fails only when the process does not answer at all (a wedged event loop), which is what
a Kubernetes liveness probe must restart; readiness probes check "" instead."""


class BindError(RuntimeError):
    """The gRPC port could not be bound; the message names the service, the address and why, e.g.
    "mcts: cannot bind 127.0.0.1:50052: address already in use"."""


def _bind(server: grpc.aio.Server, name: str, host: str, port: int,
          credentials: grpc.ServerCredentials | None = None) -> int:
    """Binds `server` to host:port (TLS with `credentials`) and returns the port; raises
    BindError saying why not.

    gRPC only says that binding failed; binding a plain socket the same way (SO_REUSEADDR, as
    gRPC does) recovers the operating system's reason.
    """
    address = f"{host}:{port}"
    try:
        bound = (server.add_insecure_port(address) if credentials is None
                 else server.add_secure_port(address, credentials))
    except RuntimeError:
        bound = 0
    if bound:
        return bound
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    reason = "gRPC could not bind it"
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            reason = (error.strerror or str(error)).lower()
    raise BindError(f"{name}: cannot bind {address}: {reason}")


@dataclass(frozen=True)
class Servicer:
    """A servicer and how to register it.

    `add_to_server` is the generated `add_XServicer_to_server`; `service_name` the full proto name,
    e.g. "mesh.mcts.v1.MctsService"."""

    add_to_server: Callable[[Any, grpc.aio.Server], None]
    servicer: object
    service_name: str


class RunningServer:
    """A started server: `port` is the bound port, `stop()` drains and stops it, `in_process`
    calls its methods (health's included) from this process through its interceptors (the
    orchestrator's REST front)."""

    def __init__(self, name: str, server: grpc.aio.Server, health: HealthServicer, port: int,
                 service_names: list[str], in_process: InProcessServer) -> None:
        self.name = name
        self.server = server
        self.health = health
        self.port = port
        self.service_names = service_names
        self.in_process = in_process
        self.readiness: ReadinessLoop | None = None

    async def set_serving(self, serving: bool) -> None:
        status = (health_pb2.HealthCheckResponse.SERVING if serving
                  else health_pb2.HealthCheckResponse.NOT_SERVING)
        for service in ["", *self.service_names]:
            await self.health.set(service, status)

    async def stop(self, grace_s: float | None = 5.0) -> None:
        """Health goes NOT_SERVING, then in-flight calls get `grace_s` seconds to finish."""
        if self.readiness is not None:
            await self.readiness.stop()
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace_s)


class ReadinessLoop:
    """Evaluates a service's `Probe` every `interval_s` seconds and sets its health to follow it.

    At most one probe runs at a time: one still running after `timeout_s` counts as "not ready"
    (a wedged store or lock) and is awaited again on the next round instead of starting another.
    """

    def __init__(self, running: RunningServer, probe: Probe, interval_s: float,
                 timeout_s: float) -> None:
        self._running = running
        self._probe = probe
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self._pending: asyncio.Future[str | None] | None = None
        self._task: asyncio.Task[None] | None = None
        self.reason: str | None = None
        """Why the last evaluation found the service not ready; None when it was ready."""

    async def evaluate(self) -> str | None:
        """Runs (or keeps waiting for) the probe; returns its reason, None when ready."""
        if self._pending is None:
            self._pending = asyncio.ensure_future(self._probe())
        done, _ = await asyncio.wait({self._pending}, timeout=self._timeout_s)
        if not done:
            return f"readiness probe gave no answer in {self._timeout_s:.1f} s"
        finished, self._pending = self._pending, None
        try:
            return finished.result()
        except Exception as error:  # noqa: BLE001 - a failing probe is a reason, not a crash
            return f"readiness probe failed: {type(error).__name__}: {error}"

    async def apply(self, reason: str | None) -> None:
        """Sets health for "" and every served name; logs when the service changes state."""
        name = self._running.name
        if (reason is None) != (self.reason is None):
            if reason is None:
                log.info("%s: SERVING again", name)
            else:
                log.warning("%s: NOT_SERVING: %s", name, reason)
        self.reason = reason
        await self._running.set_serving(reason is None)

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name=f"{self._running.name}-readiness")

    async def stop(self) -> None:
        for task in (self._task, self._pending):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self._task = self._pending = None

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            await self.apply(await self.evaluate())


async def start_server(
    name: str,
    settings: ServiceSettings,
    servicers: list[Servicer],
    ready: Callable[[], Awaitable[None]] | None = None,
    tracer_provider: TracerProvider | None = None,
    probe: Probe | None = None,
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    public: bool = False,
) -> RunningServer:
    """Creates, binds and starts a service; health reports SERVING once `ready()` has returned
    (and, with a `probe`, while the probe says ready).

    Args:
        name: the service's word ("mcts", "neural", ...), used in logs and error details.
        settings: host and port (port 0 binds a free port); `health_interval_s` and
            `health_timeout_s` pace the probe.
        servicers: what to serve.
        ready: awaited after the server starts and before SERVING: load models, compile kernels.
        tracer_provider: the provider for server spans; None uses the process's global provider.
        Metrics of every call are recorded when `settings.metrics_port` is not -1.
        probe: re-evaluated every `settings.health_interval_s` seconds after `ready()` (see
            `Probe`); None keeps the service SERVING from `ready()` until it stops.
        interceptors: the service's own, run inside tracing and error mapping (the
            orchestrator's access control).
        public: the mesh's public front (the orchestrator): no mesh authentication of callers
            (its `interceptors` check API keys). Else a backend: mutual TLS or the mesh token
            (`libs.mesh_auth.backend_auth`).
    Raises:
        BindError: the port could not be bound (the message names the address and why).
        ValueError: a backend without mesh authentication on a non-loopback address, or a mesh
            credential file that cannot be read.
    """
    chain = [ServerTelemetryInterceptor(tracer_provider, metrics=settings.metrics_port >= 0),
             ErrorMappingInterceptor(name), *interceptors]
    auth = MeshAuth() if public else backend_auth(name, settings)
    # The token is checked first, before spans, parsing or any servicer code; in-process calls
    # (the orchestrator's REST front) come from inside the process and skip it.
    outer = [MeshTokenInterceptor(auth.token, name)] if auth.token is not None else []
    server = _grpc_server([*outer, *chain])
    recording, health, service_names = await _add_services(server, name, servicers)
    port = _bind(server, name, settings.host, settings.port,
                 None if auth.tls is None else server_credentials(auth.tls))
    running = RunningServer(name, server, health, port, service_names, InProcessServer(
        recording.handlers, chain, MAX_MESSAGE_BYTES, MAX_METADATA_BYTES))
    await running.set_serving(False)
    await server.start()
    log.info("%s listening on %s:%d (%s; not serving until ready)", name, settings.host, port,
             "public" if public else "mutual TLS" if auth.tls else
             "mesh token" if auth.token else "no mesh authentication")
    if ready is not None:
        try:
            await ready()
        except BaseException:
            await server.stop(None)  # a failed start leaves no server for the garbage collector
            raise
    await _start_serving(running, probe, settings)
    return running


def _grpc_server(interceptors: Sequence[grpc.aio.ServerInterceptor]) -> grpc.aio.Server:
    return grpc.aio.server(
        interceptors=interceptors,
        options=[*message_limit_options(MAX_MESSAGE_BYTES),
                 *keepalive_server_options(),  # the mesh channels' pings, once a second
                 ("grpc.so_reuseport", 0),
                 # Read metadata up to gRPC's hard limit instead of refusing 8-16 KiB at random
                 # (the soft limit), so that an oversized API key gets a clear UNAUTHENTICATED.
                 ("grpc.max_metadata_size", MAX_METADATA_BYTES),
                 ("grpc.absolute_max_metadata_size", MAX_METADATA_BYTES)],
    )


async def _add_services(server: grpc.aio.Server, name: str, servicers: list[Servicer]
                        ) -> tuple[RecordingServer, HealthServicer, list[str]]:
    """Registers `servicers`, health (liveness SERVING) and reflection on `server`."""
    recording = RecordingServer(server)
    for item in servicers:
        item.add_to_server(item.servicer, recording)
    health = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, recording)
    watch_health(name, health)
    service_names = [item.service_name for item in servicers]
    enable_server_reflection(
        [*service_names, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name], server)
    await health.set(LIVENESS, health_pb2.HealthCheckResponse.SERVING)
    return recording, health, service_names


async def _start_serving(running: RunningServer, probe: Probe | None,
                         settings: ServiceSettings) -> None:
    """SERVING now (no probe), or as the probe says from now on."""
    if probe is None:
        await running.set_serving(True)
        log.info("%s ready: SERVING", running.name)
        return
    running.readiness = ReadinessLoop(running, probe, settings.health_interval_s,
                                      settings.health_timeout_s)
    await running.readiness.apply(await running.readiness.evaluate())
    if running.readiness.reason is None:
        log.info("%s ready: SERVING", running.name)
    running.readiness.start()


ExtraStarter = Callable[[ServiceSettings, RunningServer],
                       Awaitable[tuple[dict[str, int], Callable[[], Awaitable[None]]]]]


async def serve(
    name: str,
    settings: ServiceSettings,
    servicers: list[Servicer],
    ready: Callable[[], Awaitable[None]] | None = None,
    on_listening: Callable[[dict[str, int]], None] | None = None,
    start_extra: ExtraStarter | None = None,
    probe: Probe | None = None,
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    public: bool = False,
) -> None:
    """Runs a service until SIGTERM or SIGINT, then drains for `settings.drain_grace_s` seconds.

    Args:
        start_extra: starts a front that lives beside the gRPC server in the same process (the
            orchestrator's REST front); returns its ports by name and a coroutine that stops it.
        on_listening: called once everything is SERVING with the bound ports, {"grpc": port, ...}
            (the launcher learns the ports chosen for port 0 this way); "metrics" is there unless
            `settings.metrics_port` is -1.
        probe: the service's readiness probe (see `start_server`).
        public: the orchestrator's public front (see `start_server`).
    """
    metrics = start_metrics_server(name, settings.host, settings.metrics_port)
    running = await start_server(name, settings, servicers, ready, probe=probe,
                                 interceptors=interceptors, public=public)
    ports = {"grpc": running.port}
    if metrics is not None:
        ports["metrics"] = metrics.port
    stop_extra = None
    if start_extra is not None:
        extra_ports, stop_extra = await start_extra(settings, running)
        ports.update(extra_ports)
    # What start-up made (modules, models, stubs: ~10^5 objects) lives as long as the process:
    # moved out of the collector's reach, a full collection no longer walks it (about 100 ms of
    # the orchestrator's event loop, during which even health checks wait). `mcts-mesh serve`
    # starts with the collector off (imports run faster): it is on from here.
    gc.collect()
    gc.freeze()
    gc.enable()
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
    if metrics is not None:
        metrics.stop()


def run_service(name: str, settings: ServiceSettings, run: Callable[[], Awaitable[None]]) -> None:
    """The body of every service's `main()`: sets up logging (`settings.log_format`), logs the
    settings (secrets masked), sets up tracing, runs the service's coroutine (which calls `serve`)
    to the end, then flushes spans."""
    setup_logging(name, settings.log_format)
    log.info("%s settings: %s", name, settings.masked())
    provider = setup_tracing(name, settings.otel_exporter_otlp_endpoint,
                             sample_ratio=settings.trace_sample_ratio)
    try:
        asyncio.run(run())
    finally:
        provider.shutdown()
