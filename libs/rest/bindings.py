"""HTTP bindings read from the `google.api.http` options of a service's methods, and the router that
picks one for a request, with grpc-gateway v2's `ServeMux` rules.

Routing rules (grpc-gateway `runtime/mux.go`): bindings are tried per HTTP method, the one
registered last first (its `Handle` prepends); a template with a verb matches only when the last
path component ends in ":" + verb; a last component that is exactly ":" + verb is a 404. When no
binding of the request's method matches but one of another method does, the answer is "method not
allowed": HTTP 405 with an `Allow` header listing the methods that do match and a
`google.rpc.Status` body with code UNIMPLEMENTED (grpc-gateway's default routing error handler
answers 501 there; the front behaves like grpc-gateway with a custom routing error handler, as
browsers and proxies expect 405, e.g. for an OPTIONS preflight when CORS is off). Otherwise 404.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from google.api import annotations_pb2, http_pb2
from google.protobuf.descriptor import (
    Descriptor,
    FieldDescriptor,
    MethodDescriptor,
    ServiceDescriptor,
)

from libs.rest.path_template import PathTemplate, parse_template


class AnnotationError(ValueError):
    """A `google.api.http` rule that cannot be served: a bad template, a body or path variable that
    names no field, a path variable on a repeated or message field, or a body on GET."""


@dataclass(frozen=True)
class HttpBinding:
    """One HTTP binding of one unary RPC.

    `body` is "" (no body: every field not in the path comes from query parameters), "*" (the JSON
    body is the request message; query parameters are ignored) or a top-level field name (the body
    is that field; the rest come from query parameters). `index` is 0 for the rule itself and
    1, 2, ... for its additional bindings.
    """

    method: MethodDescriptor
    http_method: str
    template: PathTemplate
    body: str
    response_body: str
    index: int

    @property
    def rpc_path(self) -> str:
        """The gRPC method path, e.g. "/mesh.orchestrator.v1.OrchestratorService/SolveProblem"."""
        return f"/{self.method.containing_service.full_name}/{self.method.name}"

    @property
    def operation_id(self) -> str:
        """grpc-gateway's OpenAPI operation id: "Service_Method", then "Service_Method2", ..."""
        base = f"{self.method.containing_service.name}_{self.method.name}"
        return base if self.index == 0 else f"{base}{self.index + 1}"


def service_bindings(service: ServiceDescriptor) -> list[HttpBinding]:
    """Every HTTP binding of the service's unary methods, in declaration order.

    Server-streaming methods are served as newline-delimited JSON (`app`); client- and
    bidirectional-streaming methods are not served over REST (no binding; not built).

    Raises:
        AnnotationError: a rule that grpc-gateway's generator would reject.
    """
    bindings: list[HttpBinding] = []
    for method in service.methods:
        options = method.GetOptions()
        if not options.HasExtension(annotations_pb2.http):
            continue
        if method.client_streaming:
            continue
        rule = options.Extensions[annotations_pb2.http]
        rules = [rule, *rule.additional_bindings]
        for index, item in enumerate(rules):
            bindings.append(_binding(method, item, index))
    return bindings


def _binding(method: MethodDescriptor, rule: http_pb2.HttpRule, index: int) -> HttpBinding:
    kind = rule.WhichOneof("pattern")
    where = f"{method.full_name} binding {index}"
    if kind is None:
        raise AnnotationError(f"{where}: no pattern")
    if kind == "custom":
        http_method, template_text = rule.custom.kind.upper(), rule.custom.path
    else:
        http_method, template_text = kind.upper(), getattr(rule, kind)
    if index > 0 and rule.additional_bindings:
        raise AnnotationError(f"{where}: additional bindings may not nest")
    try:
        template = parse_template(template_text)
    except ValueError as error:
        raise AnnotationError(f"{where}: {error}") from error
    request = method.input_type
    for variable in template.variables:
        field = resolve_field_path(request, variable.field_path)
        if field is None:
            raise AnnotationError(f"{where}: path variable {variable.name} names no field")
        if field.is_repeated or field.type == FieldDescriptor.TYPE_MESSAGE:
            raise AnnotationError(f"{where}: path variable {variable.name} is not a scalar field")
    if rule.body and rule.body != "*" and rule.body not in request.fields_by_name:
        raise AnnotationError(f"{where}: body {rule.body!r} names no field")
    if rule.body and http_method == "GET":
        raise AnnotationError(f"{where}: a GET binding may not have a body")
    if rule.response_body and rule.response_body not in method.output_type.fields_by_name:
        raise AnnotationError(f"{where}: response_body {rule.response_body!r} names no field")
    return HttpBinding(method, http_method, template, rule.body, rule.response_body, index)


def resolve_field_path(message: Descriptor, field_path: tuple[str, ...]) -> FieldDescriptor | None:
    """The field that a dotted proto-name path reaches through singular message fields, or None."""
    field: FieldDescriptor | None = None
    for position, name in enumerate(field_path):
        field = message.fields_by_name.get(name)
        if field is None:
            return None
        if position < len(field_path) - 1:
            if field.type != FieldDescriptor.TYPE_MESSAGE or field.is_repeated:
                return None
            message = field.message_type
    return field


class Routable(Protocol):
    """What the router picks: an `HttpBinding`, or a route of the front's own
    (`extras.FrontRoute`)."""

    @property
    def http_method(self) -> str: ...

    @property
    def template(self) -> PathTemplate: ...


class RouteStatus(Enum):
    FOUND = 200
    NOT_FOUND = 404
    METHOD_NOT_ALLOWED = 405


@dataclass(frozen=True)
class RouteMatch:
    status: RouteStatus
    binding: Routable | None = None
    path_values: dict[str, str] | None = None
    allowed: tuple[str, ...] = ()
    """For METHOD_NOT_ALLOWED: the HTTP methods that have a binding for the path."""


class Router:
    """Picks the binding for an (HTTP method, decoded path) pair as grpc-gateway's ServeMux does."""

    def __init__(self, bindings: Sequence[Routable]) -> None:
        self._by_method: dict[str, list[Routable]] = {}
        for binding in bindings:
            self._by_method.setdefault(binding.http_method, []).insert(0, binding)

    def match(self, http_method: str, path: str) -> RouteMatch:
        """The binding and its path variables' values, or why none matched."""
        if not path.startswith("/"):
            return RouteMatch(RouteStatus.NOT_FOUND)
        components = path[1:].split("/")
        for binding in self._by_method.get(http_method, []):
            split = _split_verb(components, binding.template.verb)
            if split is None:
                return RouteMatch(RouteStatus.NOT_FOUND)
            values = binding.template.match(*split)
            if values is not None:
                return RouteMatch(RouteStatus.FOUND, binding, values)
        allowed: list[str] = []
        for method, bindings in self._by_method.items():
            if method == http_method:
                continue
            for binding in bindings:
                split = _split_verb(components, binding.template.verb)
                if split is not None and binding.template.match(*split) is not None:
                    allowed.append(method)
                    break
        if allowed:
            return RouteMatch(RouteStatus.METHOD_NOT_ALLOWED, allowed=tuple(sorted(allowed)))
        return RouteMatch(RouteStatus.NOT_FOUND)


def _split_verb(components: list[str], verb: str) -> tuple[list[str], str] | None:
    """(components, verb) with ":" + verb cut off the last component when it ends so; None when the
    last component is exactly ":" + verb (grpc-gateway answers 404 there)."""
    last = components[-1]
    if not verb or not last.endswith(":" + verb):
        return components, ""
    cut = len(last) - len(verb) - 1
    if cut == 0:
        return None
    return [*components[:-1], last[:cut]], verb
