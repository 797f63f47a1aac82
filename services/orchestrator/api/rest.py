"""The orchestrator's REST front: the generic gateway of `libs.rest` given the orchestrator's
service descriptor, the name its own errors carry ("orchestrator-rest") and, when access control
is on, the key check made of `AccessControl`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from mesh.orchestrator.v1 import orchestrator_service_pb2
from opentelemetry.sdk.trace import TracerProvider
from starlette.applications import Starlette

from libs.in_process import InProcessServer
from libs.rest.app import build_rest_app as build_gateway
from libs.rest.settings import RestSettings
from services.orchestrator.access.control import AccessControl
from services.orchestrator.access.keycheck import KeyCheck

ORCHESTRATOR_SERVICE = orchestrator_service_pb2.DESCRIPTOR.services_by_name["OrchestratorService"]
REST_SERVICE = "orchestrator-rest"
"""The `service` in the ErrorInfo of the REST front's own errors."""


def build_rest_app(
    server: InProcessServer,
    settings: RestSettings | None = None,
    tracer_provider: TracerProvider | None = None,
    dependencies: Callable[[], list[dict[str, object]]] | None = None,
    access: AccessControl | None = None,
) -> Starlette:
    """`libs.rest.app.build_rest_app` for OrchestratorService (see there for the arguments);
    `access` checks the API key of every API request before its query or body is read.

    Raises:
        AnnotationError: an annotation that cannot be served.
    """
    settings = dataclasses.replace(settings or RestSettings(), error_service=REST_SERVICE)
    return build_gateway(server, settings, service=ORCHESTRATOR_SERVICE,
                         tracer_provider=tracer_provider, dependencies=dependencies,
                         access=KeyCheck(access) if access is not None else None)
