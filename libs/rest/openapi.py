"""An OpenAPI 3.0 document generated from the same HTTP bindings and message descriptors the front
serves, so the document cannot drift from the routes.

Schemas follow the proto3 JSON mapping the front speaks: lowerCamelCase property names, 64-bit
integers as strings, enums as their value names, well-known types in their JSON forms. Operation ids
are grpc-gateway's ("OrchestratorService_SolveProblem", then "...2" for additional bindings). A
variable over a sub-template (`{name=collections/*/documents/**}`) is written out with one path
parameter per wildcard (`/v1/collections/{collection}/documents/{document}`), as Google's
gnostic generator does, since two such templates would otherwise share the key `/v1/{name}`. Query
parameters are listed for bindings whose body is not "*" (every scalar leaf field not bound by the
path or the body, with dotted lowerCamelCase names, as protoc-gen-openapiv2 lists them). A
server-streaming operation's 200 response is `application/x-ndjson` whose every line is
protoc-gen-openapiv2's stream envelope: `{"result": <message>}` or `{"error": <google.rpc.Status>}`;
one served as Server-Sent Events (`extras.watches`) is `text/event-stream` and takes a
`Last-Event-ID` header. A method that takes JSON Lines uploads (`extras.uploads`) lists
`application/x-ndjson` and `application/jsonl` bodies beside JSON, and the query parameters that
go with them. Routes of the front's own (`extras.routes`) bring their own operation objects.
"""

from __future__ import annotations

from google.protobuf.descriptor import (
    Descriptor,
    EnumDescriptor,
    FieldDescriptor,
    ServiceDescriptor,
)

from libs.rest.bindings import HttpBinding, resolve_field_path
from libs.rest.extras import Extras
from libs.rest.jsonl import JSON_LINES_MEDIA_TYPES
from libs.rest.sse import EVENT_STREAM

_SCALARS: dict[int, dict[str, str]] = {
    FieldDescriptor.TYPE_DOUBLE: {"type": "number", "format": "double"},
    FieldDescriptor.TYPE_FLOAT: {"type": "number", "format": "float"},
    FieldDescriptor.TYPE_INT32: {"type": "integer", "format": "int32"},
    FieldDescriptor.TYPE_SINT32: {"type": "integer", "format": "int32"},
    FieldDescriptor.TYPE_SFIXED32: {"type": "integer", "format": "int32"},
    FieldDescriptor.TYPE_UINT32: {"type": "integer", "format": "int64"},
    FieldDescriptor.TYPE_FIXED32: {"type": "integer", "format": "int64"},
    FieldDescriptor.TYPE_INT64: {"type": "string", "format": "int64"},
    FieldDescriptor.TYPE_SINT64: {"type": "string", "format": "int64"},
    FieldDescriptor.TYPE_SFIXED64: {"type": "string", "format": "int64"},
    FieldDescriptor.TYPE_UINT64: {"type": "string", "format": "uint64"},
    FieldDescriptor.TYPE_FIXED64: {"type": "string", "format": "uint64"},
    FieldDescriptor.TYPE_BOOL: {"type": "boolean"},
    FieldDescriptor.TYPE_STRING: {"type": "string"},
    FieldDescriptor.TYPE_BYTES: {"type": "string", "format": "byte"},
}
_WELL_KNOWN: dict[str, dict[str, object]] = {
    "google.protobuf.Timestamp": {"type": "string", "format": "date-time"},
    "google.protobuf.Duration": {"type": "string"},
    "google.protobuf.FieldMask": {"type": "string"},
    "google.protobuf.Struct": {"type": "object", "additionalProperties": {}},
    "google.protobuf.Value": {},
    "google.protobuf.ListValue": {"type": "array", "items": {}},
    "google.protobuf.Empty": {"type": "object"},
    "google.protobuf.DoubleValue": {"type": "number", "format": "double"},
    "google.protobuf.FloatValue": {"type": "number", "format": "float"},
    "google.protobuf.Int64Value": {"type": "string", "format": "int64"},
    "google.protobuf.UInt64Value": {"type": "string", "format": "uint64"},
    "google.protobuf.Int32Value": {"type": "integer", "format": "int32"},
    "google.protobuf.UInt32Value": {"type": "integer", "format": "int64"},
    "google.protobuf.BoolValue": {"type": "boolean"},
    "google.protobuf.StringValue": {"type": "string"},
    "google.protobuf.BytesValue": {"type": "string", "format": "byte"},
    "google.protobuf.Any": {
        "type": "object",
        "properties": {"@type": {"type": "string"}},
        "additionalProperties": {},
    },
}
_STATUS_SCHEMA = {
    "type": "object",
    "description": "google.rpc.Status: the error body of every non-2xx response.",
    "properties": {
        "code": {"type": "integer", "format": "int32"},
        "message": {"type": "string"},
        "details": {"type": "array", "items": _WELL_KNOWN["google.protobuf.Any"]},
    },
}


def openapi_document(service: ServiceDescriptor, bindings: list[HttpBinding],
                     extras: Extras | None = None) -> dict:
    """The OpenAPI 3.0.3 document for `bindings` of `service` and `extras` (a JSON-ready dict)."""
    extras = extras or Extras()
    schemas = _Schemas()
    paths: dict[str, dict[str, object]] = {}
    for binding in bindings:
        path = paths.setdefault(binding.template.openapi_path(), {})
        operation = _operation(binding, schemas)
        name = binding.method.full_name
        if name in extras.watches:
            _serve_as_events(operation)
        if name in extras.uploads and binding.body:
            _take_uploads(operation, binding, extras.uploads[name].field, schemas)
        path[binding.http_method.lower()] = operation
    for route in extras.routes:
        paths.setdefault(route.template.openapi_path(), {})[route.http_method.lower()] = \
            dict(route.operation)
    components = dict(sorted(schemas.components.items()))
    components["google.rpc.Status"] = _STATUS_SCHEMA
    return {
        "openapi": "3.0.3",
        "info": {"title": service.full_name, "version": service.file.package.rsplit(".", 1)[-1]},
        "paths": paths,
        "components": {"schemas": components},
    }


def _operation(binding: HttpBinding, schemas: _Schemas) -> dict[str, object]:
    request = binding.method.input_type
    path_fields = {variable.field_path for variable in binding.template.variables}
    parameters: list[dict[str, object]] = []
    for name, variable in binding.template.openapi_parameters():
        field = resolve_field_path(request, variable.field_path)
        parameter: dict[str, object] = {"name": name, "in": "path", "required": True,
                                        "schema": schemas.field(field)}
        if name != variable.name:
            parameter["description"] = (f"A segment of `{variable.name}` (the path "
                                        f"{binding.template.template}).")
        parameters.append(parameter)
    if binding.body != "*":
        excluded = path_fields | ({(binding.body,)} if binding.body else set())
        parameters.extend(_query_parameters(request, (), excluded, schemas, set()))
    if binding.method.server_streaming:
        envelope = {
            "type": "object",
            "title": f"Stream result of {binding.method.output_type.full_name}",
            "description": "One line of the newline-delimited JSON stream.",
            "properties": {"result": _response_schema(binding, schemas),
                           "error": {"$ref": "#/components/schemas/google.rpc.Status"}},
        }
        success = {"application/x-ndjson": {"schema": envelope}}
    else:
        success = {"application/json": {"schema": _response_schema(binding, schemas)}}
    operation: dict[str, object] = {
        "operationId": binding.operation_id,
        "tags": [binding.method.containing_service.name],
        "parameters": parameters,
        "responses": {
            "200": {"description": ("A stream of responses, one JSON object per line."
                                     if binding.method.server_streaming
                                     else "A successful response."),
                    "content": success},
            "default": {"description": "An error: a google.rpc.Status.",
                        "content": {"application/json": {
                            "schema": {"$ref": "#/components/schemas/google.rpc.Status"}}}},
        },
    }
    if binding.body:
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": _body_schema(binding, schemas)}},
        }
    return operation


def _serve_as_events(operation: dict) -> None:
    """A server-streaming operation served as Server-Sent Events (see `sse`)."""
    operation["parameters"].append({
        "name": "Last-Event-ID", "in": "header", "required": False,
        "schema": {"type": "string", "format": "int64"},
        "description": "The id of the last event received: only later events are sent "
                       "(browsers send it when they reconnect)."})
    operation["responses"]["200"] = {
        "description": "Server-Sent Events: each message as `data:` (proto3 JSON) with its "
                       "sequence as `id:`; comment lines as heartbeats; a last `event: end` "
                       "when the watched resource is finished, or `event: error` with a "
                       "google.rpc.Status.",
        "content": {EVENT_STREAM: {"schema": {"type": "string"}}}}


def _take_uploads(operation: dict, binding: HttpBinding, field: str, schemas: _Schemas) -> None:
    """A create operation that also takes a JSON Lines body of `field`'s elements."""
    item = binding.method.input_type.fields_by_name[field].message_type
    content = operation["requestBody"]["content"]
    for media_type in JSON_LINES_MEDIA_TYPES:
        content[media_type] = {"schema": {
            "type": "string",
            "description": f"JSON Lines: one {item.full_name} per line, as proto3 JSON "
                           f"({schemas.message(item)['$ref']}); the other fields from the "
                           "query."}}
    path_fields = {variable.field_path for variable in binding.template.variables}
    if binding.body == "*":
        operation["parameters"].extend(_query_parameters(
            binding.method.input_type, (), path_fields | {(field,)}, schemas, set()))


def _body_schema(binding: HttpBinding, schemas: _Schemas) -> dict[str, object]:
    request = binding.method.input_type
    if binding.body != "*":
        return schemas.field(request.fields_by_name[binding.body])
    top_level_path_fields = {variable.field_path[0] for variable in binding.template.variables
                             if len(variable.field_path) == 1}
    if not top_level_path_fields:
        return schemas.message(request)
    properties = {field.json_name: schemas.field(field) for field in request.fields
                  if field.name not in top_level_path_fields}
    return {"type": "object", "properties": properties}


def _response_schema(binding: HttpBinding, schemas: _Schemas) -> dict[str, object]:
    response = binding.method.output_type
    if binding.response_body:
        return schemas.field(response.fields_by_name[binding.response_body])
    return schemas.message(response)


def _query_parameters(message: Descriptor, prefix: tuple[FieldDescriptor, ...],
                      excluded: set[tuple[str, ...]], schemas: _Schemas,
                      visiting: set[str]) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for field in message.fields:
        path = (*prefix, field)
        if tuple(item.name for item in path) in excluded:
            continue
        is_message = field.type == FieldDescriptor.TYPE_MESSAGE
        if is_message and field.message_type.full_name not in _WELL_KNOWN:
            if field.is_repeated or field.message_type.full_name in visiting:
                continue
            out.extend(_query_parameters(field.message_type, path, excluded, schemas,
                                         visiting | {message.full_name}))
            continue
        schema = schemas.field(field)
        parameter: dict[str, object] = {
            "name": ".".join(item.json_name for item in path), "in": "query", "required": False,
            "schema": schema,
        }
        if field.is_repeated:
            parameter.update(style="form", explode=True)
        out.append(parameter)
    return out


class _Schemas:
    """Collects component schemas for the messages and enums the operations reach."""

    def __init__(self) -> None:
        self.components: dict[str, dict[str, object]] = {}

    def message(self, descriptor: Descriptor) -> dict[str, object]:
        if descriptor.full_name in _WELL_KNOWN:
            return dict(_WELL_KNOWN[descriptor.full_name])
        if descriptor.full_name not in self.components:
            # Registered before its fields, so a recursive field refers to it instead of recursing.
            self.components[descriptor.full_name] = {}
            properties = {field.json_name: self.field(field) for field in descriptor.fields}
            self.components[descriptor.full_name] = {"type": "object", "properties": properties}
        return {"$ref": f"#/components/schemas/{descriptor.full_name}"}

    def enum(self, descriptor: EnumDescriptor) -> dict[str, object]:
        if descriptor.full_name not in self.components:
            self.components[descriptor.full_name] = {
                "type": "string", "enum": [value.name for value in descriptor.values],
            }
        return {"$ref": f"#/components/schemas/{descriptor.full_name}"}

    def field(self, field: FieldDescriptor) -> dict[str, object]:
        if field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.GetOptions().map_entry:
            value = field.message_type.fields_by_name["value"]
            return {"type": "object", "additionalProperties": self.field(value)}
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            item = self.message(field.message_type)
        elif field.type == FieldDescriptor.TYPE_ENUM:
            item = self.enum(field.enum_type)
        else:
            item = dict(_SCALARS[field.type])
        return {"type": "array", "items": item} if field.is_repeated else item
