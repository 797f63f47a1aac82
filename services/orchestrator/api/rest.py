"""The orchestrator's REST front: the generic gateway of `libs.rest` given the orchestrator's
service descriptors (OrchestratorService, and RunService with its watches as Server-Sent Events,
CreateBatch from a JSON Lines upload and the batch results download, OpenAI's chat completions
and models: `openai_compat`), the name its own errors
carry ("orchestrator-rest") and, when access control is on, the key check made of
`AccessControl`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from mesh.orchestrator.v1 import orchestrator_service_pb2, run_service_pb2
from opentelemetry.sdk.trace import TracerProvider
from starlette.applications import Starlette
from starlette.routing import BaseRoute

from libs.in_process import InProcessServer
from libs.rest.app import build_rest_app as build_gateway
from libs.rest.extras import Extras
from libs.rest.jsonl import LinesUpload
from libs.rest.settings import RestSettings
from libs.rest.sse import SseWatch
from services.orchestrator.access.control import AccessControl
from services.orchestrator.access.keycheck import KeyCheck
from services.orchestrator.api.openai_compat import openai_routes
from services.orchestrator.api.results import results_route

ORCHESTRATOR_SERVICE = orchestrator_service_pb2.DESCRIPTOR.services_by_name["OrchestratorService"]
RUN_SERVICE = run_service_pb2.DESCRIPTOR.services_by_name["RunService"]
REST_SERVICE = "orchestrator-rest"
"""The `service` in the ErrorInfo of the REST front's own errors."""


def build_rest_app(
    server: InProcessServer,
    settings: RestSettings | None = None,
    tracer_provider: TracerProvider | None = None,
    dependencies: Callable[[], list[dict[str, object]]] | None = None,
    access: AccessControl | None = None,
    batch_upload: LinesUpload | None = None,
    pages: tuple[BaseRoute, ...] = (),
) -> Starlette:
    """`libs.rest.app.build_rest_app` for OrchestratorService and RunService (see there for the
    arguments); `access` checks the API key of every API request before its query or body is
    read; `batch_upload` (`batch_upload()`) lets CreateBatch take a JSON Lines body, None: JSON
    only; `pages` are served before the API without a key (the web console,
    `api.console.console_routes`).

    Raises:
        AnnotationError: an annotation that cannot be served.
    """
    settings = dataclasses.replace(settings or RestSettings(), error_service=REST_SERVICE)
    extras = Extras(
        services=(RUN_SERVICE,),
        watches={f"{RUN_SERVICE.full_name}.{name}": SseWatch("sequence", "after_sequence")
                 for name in ("WatchRun", "WatchBatch")},
        uploads={f"{RUN_SERVICE.full_name}.CreateBatch": batch_upload} if batch_upload else {},
        routes=(results_route(), *openai_routes()), pages=pages)
    return build_gateway(server, settings, service=ORCHESTRATOR_SERVICE,
                         tracer_provider=tracer_provider, dependencies=dependencies,
                         access=KeyCheck(access) if access is not None else None,
                         extras=extras)


def batch_upload(max_items: int, max_bytes: int) -> LinesUpload:
    """CreateBatch's JSON Lines upload: one BatchItem per line (`{"solve": {...}}` or
    `{"answer": {...}}`), at most `max_items` items (ORCHESTRATOR_BATCH_MAX_ITEMS) in a body of
    at most `max_bytes` bytes (ORCHESTRATOR_BATCH_MAX_BYTES)."""
    return LinesUpload("items", max_items, max_bytes, "ORCHESTRATOR_BATCH_MAX_ITEMS",
                       "ORCHESTRATOR_BATCH_MAX_BYTES")
