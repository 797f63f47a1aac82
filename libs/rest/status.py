"""gRPC status -> HTTP error response, with grpc-gateway v2's table and body.

The table is grpc-gateway's `runtime.HTTPStatusFromCode`; the body is the `google.rpc.Status` as
proto3 JSON (`code`, `message`, `details` with `@type` Any entries), as its
`DefaultHTTPErrorHandler` writes it, including `WWW-Authenticate` for UNAUTHENTICATED. A
`google.rpc.RetryInfo` detail also sets `Retry-After` (whole seconds, rounded up; grpc-gateway
leaves that to the application).
"""

from __future__ import annotations

import math

import grpc
from google.protobuf import json_format
from google.rpc import error_details_pb2, status_pb2
from starlette.responses import Response

from libs.errors import MeshError, to_status
from libs.rest.transcoding import message_to_json_value, response_json

HTTP_STATUS_FROM_CODE: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.OK: 200,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNKNOWN: 500,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.INTERNAL: 500,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DATA_LOSS: 500,
}
_CODE_BY_NUMBER = {code.value[0]: code for code in grpc.StatusCode}
JSON = "application/json"


def http_status(code_number: int) -> int:
    """HTTP status for a numeric gRPC code; an unknown code is 500, as in grpc-gateway."""
    code = _CODE_BY_NUMBER.get(code_number)
    return HTTP_STATUS_FROM_CODE.get(code, 500) if code is not None else 500


def status_json(status: status_pb2.Status) -> bytes:
    """The Status as JSON; details whose type this process cannot decode are dropped rather than
    failing the whole error response."""
    try:
        return response_json(status)
    except (TypeError, json_format.Error):
        kept = status_pb2.Status(code=status.code, message=status.message)
        for detail in status.details:
            probe = status_pb2.Status(details=[detail])
            try:
                message_to_json_value(probe)
            except (TypeError, json_format.Error):
                continue
            kept.details.append(detail)
        return response_json(kept)


def status_response(status: status_pb2.Status, headers: dict[str, str] | None = None,
                    status_code: int | None = None) -> Response:
    """The HTTP error response for a gRPC status; `status_code` overrides the HTTP status the
    table gives (405, 413, 415: statuses that no gRPC code maps to)."""
    out = dict(headers or {})
    if status.code == grpc.StatusCode.UNAUTHENTICATED.value[0]:
        out["WWW-Authenticate"] = status.message
    retry_after_s = retry_after_seconds(status)
    if retry_after_s is not None:
        out["Retry-After"] = str(retry_after_s)
    return Response(status_json(status), status_code=status_code or http_status(status.code),
                    headers=out, media_type=JSON)


def retry_after_seconds(status: status_pb2.Status) -> int | None:
    """Whole seconds (at least 1) of the status's RetryInfo detail, or None when it has none."""
    for detail in status.details:
        if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            info = error_details_pb2.RetryInfo()
            detail.Unpack(info)
            return max(1, math.ceil(info.retry_delay.ToNanoseconds() / 1e9))
    return None


def error_response(error: MeshError, service: str) -> Response:
    """The HTTP error response for an error raised by the REST front itself (routing, transcoding,
    headers, body limits), with the same `google.rpc` details the gRPC servers attach. An error
    with an `http_status` attribute (`limits.RequestRefused`) answers with that status, and one
    with `close` set closes the connection (its body was not read to the end). `service` names
    the front in the ErrorInfo (`RestSettings.error_service`)."""
    headers = {"Connection": "close"} if getattr(error, "close", False) else None
    return status_response(to_status(error, service), headers,
                           getattr(error, "http_status", None))


def code_status(code: grpc.StatusCode, message: str) -> status_pb2.Status:
    """A detail-less Status, as grpc-gateway builds for routing errors."""
    return status_pb2.Status(code=code.value[0], message=message)
