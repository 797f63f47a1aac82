"""docs/reference/rest.md: the orchestrator's REST front from the OpenAPI document it serves.

The document is the one `GET /openapi.json` returns: the front is built here (with the default
settings and no gRPC server behind it) and asked in-process, so no network is used and the page
cannot differ from what a running front serves."""

from __future__ import annotations

import json

from scripts.docs_gen.md import GENERATED, anchor, cell, code, table

_METHODS = ("get", "post", "put", "patch", "delete")
_PACKAGE = "mesh.orchestrator.v1"


def document() -> dict:
    """The OpenAPI document of the orchestrator's REST front, as it serves it."""
    from starlette.testclient import TestClient

    from services.orchestrator.api import rest
    from services.orchestrator.settings import OrchestratorSettings

    settings = OrchestratorSettings()
    upload = rest.batch_upload(settings.batch_max_items, settings.batch_max_bytes)
    app = rest.build_rest_app(None, batch_upload=upload)
    with TestClient(app, base_url="http://localhost") as client:
        reply = client.get("/openapi.json")
        reply.raise_for_status()
        return reply.json()


def _schema_name(schema: dict | None) -> str:
    if not schema:
        return ""
    if "$ref" in schema:
        return code(schema["$ref"].rsplit("/", 1)[-1])
    if schema.get("type") == "array":
        return "array of " + _schema_name(schema.get("items"))
    return code(schema.get("type", "object"))


def _body(operation: dict) -> str:
    content = operation.get("requestBody", {}).get("content", {})
    return "<br>".join(f"{code(media)}: {_schema_name(item.get('schema'))}"
                       for media, item in content.items()) or "none"


def _response(operation: dict) -> str:
    content = operation.get("responses", {}).get("200", {}).get("content", {})
    return "<br>".join(f"{code(media)}: {_schema_name(item.get('schema'))}"
                       for media, item in content.items()) or "none"


def _parameters(operation: dict) -> str:
    return ", ".join(f"{code(p['name'])} ({p['in']})" for p in operation.get("parameters", [])
                     ) or "none"


def _what(operation: dict) -> str:
    """The front's own summary, else a link to the gRPC method the operation calls."""
    if operation.get("summary"):
        return cell(operation["summary"])
    service, _, method = operation.get("operationId", "").partition("_")
    method = method.rstrip("0123456789")
    full = f"{_PACKAGE}.{service}.{method}"
    return f"[{code(service + '.' + method)}](grpc.md#{anchor(full)})"


def page() -> str:
    """The whole page."""
    doc = document()
    rows = []
    for path, item in doc["paths"].items():
        for method in _METHODS:
            if method in item:
                op = item[method]
                rows.append([code(f"{method.upper()} {path}"), code(op.get("operationId", "")),
                             _parameters(op), _body(op), _response(op),
                             _what(op)])
    out = [GENERATED.format(source="the REST front's OpenAPI document (libs/rest/openapi.py)"),
           "", "# REST API", "",
           "The orchestrator's REST front, generated from the same `google.api.http` annotations "
           "it serves, with grpc-gateway's semantics: JSON bodies in the proto3 JSON mapping "
           "(lowerCamelCase names, 64-bit integers as strings, enums by name), query parameters "
           "for the fields the path and body do not bind, gRPC status codes mapped to HTTP "
           "statuses, and every error a `google.rpc.Status` body. A body must be sent with "
           "`Content-Type: application/json` (415 otherwise). A running front serves this document "
           "at `/openapi.json`; each operation's fields are described in the "
           "[gRPC API](grpc.md).", "",
           "Besides the API: `GET /health` (200 while the process runs), `GET /ready` (the "
           "orchestrator's state and each dependency's), `GET /metrics` (Prometheus text) and "
           "`GET /openapi.json`.", "", "## Operations", "",
           table(["method and path", "operation", "parameters", "request body", "200 response",
                  "what it does"], rows), "",
           "## The OpenAPI document", "", "```json",
           json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False), "```", ""]
    return "\n".join(out)
