"""Domain errors shared by every service, and the one table that maps them to gRPC status codes.

Cores and servicers raise these; `libs.server` installs
`libs.error_mapping.ErrorMappingInterceptor`, which turns them into a gRPC status with `google.rpc`
details (BadRequest field violations, ErrorInfo). Nothing else in the code base chooses a status
code.
"""

from __future__ import annotations

import re

import grpc
from google.rpc import code_pb2, error_details_pb2, status_pb2

ERROR_DOMAIN = "mcts-mesh"


class MeshError(Exception):
    """Base of the domain errors. `code` is the gRPC status code it maps to."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL
    reason: str = "INTERNAL"
    failed_service: str | None = None
    """The mesh service whose failure this is, when it is a dependency's ("mcts", "llm")."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgument(MeshError):
    """A request field is malformed or out of range.

    `field` is the proto field path, e.g. "query" or "connect_four.moves"."""

    code = grpc.StatusCode.INVALID_ARGUMENT
    reason = "INVALID_ARGUMENT"

    def __init__(self, field: str, description: str) -> None:
        super().__init__(f"{field}: {description}")
        self.field = field
        self.description = description


class NotFound(MeshError):
    code = grpc.StatusCode.NOT_FOUND
    reason = "NOT_FOUND"


class FailedPrecondition(MeshError):
    code = grpc.StatusCode.FAILED_PRECONDITION
    reason = "FAILED_PRECONDITION"


class Unavailable(MeshError):
    """A dependency is down or not ready; the caller may retry."""

    code = grpc.StatusCode.UNAVAILABLE
    reason = "UNAVAILABLE"


class DeadlineExceeded(MeshError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED
    reason = "DEADLINE_EXCEEDED"


class ResourceExhausted(MeshError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED
    reason = "RESOURCE_EXHAUSTED"


class Unimplemented(MeshError):
    """The request is valid but asks for something not built yet; the message says what."""

    code = grpc.StatusCode.UNIMPLEMENTED
    reason = "UNIMPLEMENTED"


def to_status(error: MeshError, service: str) -> status_pb2.Status:
    """The `google.rpc.Status` for a domain error, with BadRequest or ErrorInfo details."""
    status = status_pb2.Status(code=error.code.value[0], message=error.message)
    if isinstance(error, InvalidArgument):
        detail = error_details_pb2.BadRequest(
            field_violations=[
                error_details_pb2.BadRequest.FieldViolation(
                    field=error.field, description=error.description
                )
            ]
        )
    else:
        metadata = {"service": service}
        if error.failed_service:
            metadata["failed_service"] = error.failed_service
        detail = error_details_pb2.ErrorInfo(
            reason=error.reason, domain=ERROR_DOMAIN, metadata=metadata
        )
    status.details.add().Pack(detail)
    return status


def status_from_rpc_error(error: grpc.aio.AioRpcError) -> status_pb2.Status:
    """The `google.rpc.Status` a downstream call failed with (with the server's details, if any)."""
    from grpc_status import rpc_status

    status = rpc_status.from_call(error)
    if status is None:
        status = status_pb2.Status(code=error.code().value[0], message=error.details() or "")
    return status


_ADDRESS = re.compile(r"\b(?:ipv4|ipv6|unix|unix-abstract|dns):\S+|\[[0-9a-fA-F:.%]+\](?::\d+)?"
                      r"|\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b")
_TRANSPORT_DETAIL = {
    grpc.StatusCode.UNAVAILABLE: "not reachable",
    grpc.StatusCode.DEADLINE_EXCEEDED: "no answer before the deadline",
    grpc.StatusCode.CANCELLED: "the call was cancelled",
}


def failure_detail(error: grpc.aio.AioRpcError) -> str:
    """What a failed call to a mesh service says, safe to show a client: the service's own message
    when it answered with a status of ours (it carries `google.rpc` details) or with a code the
    transport does not produce; for UNAVAILABLE, DEADLINE_EXCEEDED and CANCELLED without our
    details only what the code means, since gRPC's own messages name the peer's address ("failed
    to connect to all addresses; ... ipv4:10.0.0.7:50052"). Any address left is masked."""
    code = error.code()
    ours = False
    try:
        from grpc_status import rpc_status

        ours = rpc_status.from_call(error) is not None
    except ValueError:  # a status whose code or message disagree with the call's
        ours = False
    if ours or code not in _TRANSPORT_DETAIL:
        detail = error.details() or ""
    else:
        detail = _TRANSPORT_DETAIL[code]
    detail = _ADDRESS.sub("<address>", detail)
    return detail or code.name


def propagate(error: grpc.aio.AioRpcError, dependency: str) -> MeshError:
    """Turns a failed call to another mesh service into the domain error this service raises.

    UNAVAILABLE and DEADLINE_EXCEEDED pass through (the dependency is down, or time ran out);
    INVALID_ARGUMENT passes through with its field; anything else becomes UNAVAILABLE, because the
    caller's request was fine and a dependency failed it.
    """
    mapped = _propagated(error, dependency)
    mapped.failed_service = dependency
    return mapped


def _propagated(error: grpc.aio.AioRpcError, dependency: str) -> MeshError:
    code = error.code()
    detail = failure_detail(error)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return DeadlineExceeded(f"{dependency}: {detail}")
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        status = status_from_rpc_error(error)
        for any_detail in status.details:
            bad = error_details_pb2.BadRequest()
            if any_detail.Unpack(bad) and bad.field_violations:
                violation = bad.field_violations[0]
                return InvalidArgument(violation.field, violation.description)
        return InvalidArgument("request", f"{dependency}: {detail}")
    if code == grpc.StatusCode.NOT_FOUND:
        return NotFound(f"{dependency}: {detail}")
    return Unavailable(f"{dependency} failed: {code.name}: {detail}")


CODE_NAMES = {value: name for name, value in code_pb2.Code.items()}
