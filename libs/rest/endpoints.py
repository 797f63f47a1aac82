"""The REST front's own endpoints: /health, /ready (the service's health and its dependencies'),
/openapi.json and /metrics."""

from __future__ import annotations

from collections.abc import Callable

import grpc
from google.protobuf.descriptor import ServiceDescriptor
from grpc_health.v1 import health_pb2
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from libs.in_process import CallFailed, InProcessServer
from libs.rest.settings import RestSettings
from libs.rest.status import code_status, status_response

HEALTH_CHECK = "/grpc.health.v1.Health/Check"


class Endpoints:
    """The handlers of the front's own paths (see the `app` module docstring)."""

    def __init__(self, server: InProcessServer, service: ServiceDescriptor,
                 settings: RestSettings, document: dict,
                 dependencies: Callable[[], list[dict[str, object]]] | None) -> None:
        self._server = server
        self._service = service
        self._settings = settings
        self._document = document
        self._dependencies = dependencies

    async def health(self, _: Request) -> Response:
        """200 while the process runs."""
        return JSONResponse({"status": "SERVING"})

    async def ready(self, _: Request) -> Response:
        """The service's health (503 unless SERVING) and the dependencies' states."""
        status_name, reason = await self._own_status()
        body: dict[str, object] = {"status": status_name}
        if self._dependencies is not None:
            body["dependencies"] = self._dependencies()
        if status_name == "SERVING":
            return JSONResponse(body)
        body.update(code=grpc.StatusCode.UNAVAILABLE.value[0],
                    message=f"{self._service.full_name}: {reason}", details=[])
        return JSONResponse(body, status_code=503)

    async def openapi(self, _: Request) -> Response:
        """The OpenAPI document of the service's bindings."""
        return JSONResponse(self._document)

    async def metrics(self, _: Request) -> Response:
        """The process's Prometheus registry, or 404 when metrics are off."""
        if not self._settings.metrics:
            return status_response(code_status(
                grpc.StatusCode.NOT_FOUND,
                "metrics are off: set ORCHESTRATOR_METRICS_PORT (0 or a port) to turn them on"))
        return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)

    async def _own_status(self) -> tuple[str, str]:
        """The service's own health: (ServingStatus name, why it is not SERVING)."""
        call = self._server.unary_unary(HEALTH_CHECK, health_pb2.HealthCheckRequest(
            service=self._service.full_name), self._settings.ready_timeout_s)
        try:
            reply = await call
        except CallFailed as error:
            return "UNKNOWN", f"health check failed: {error}"
        status_name = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
        return status_name, status_name
